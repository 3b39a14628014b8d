#!/usr/bin/env bash
# Starts s3rver on 127.0.0.1 for the objstore tests and writes its port to a file.
#   run_s3rver.sh --port-file FILE --dir DATA_DIR
# Credentials are s3rver's fixed S3RVER / S3RVER. Path-style only (--no-vhost-buckets).
# Node 20 needs the legacy OpenSSL provider for s3rver's MD5-based code paths.
set -euo pipefail
port_file="" dir=""
while (($#)); do
  case "$1" in
    --port-file) port_file=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "run_s3rver: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -n "$port_file" && -n "$dir" ]] || { echo "usage: run_s3rver.sh --port-file F --dir D" >&2; exit 2; }
BIN=${CLIO_S3RVER_PREFIX:-/var/cache/clio-test/npm}/node_modules/.bin/s3rver
if [[ ! -x "$BIN" ]]; then
  echo "run_s3rver: s3rver is not installed at $BIN (run tests/objstore/install_s3rver.sh)" >&2
  exit 1
fi
mkdir -p "$dir"
# A free port, chosen here so it can be written before s3rver starts; the test then waits
# until the port answers.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo "$port" > "$port_file.tmp" && mv "$port_file.tmp" "$port_file"
export NODE_OPTIONS=--openssl-legacy-provider
exec "$BIN" --directory "$dir" --address 127.0.0.1 --port "$port" --silent --no-vhost-buckets
