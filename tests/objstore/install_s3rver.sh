#!/usr/bin/env bash
# Installs s3rver (an independent S3 server from the npm registry) for the objstore tests
# into /var/cache/clio-test/npm (override with CLIO_S3RVER_PREFIX). Idempotent.
set -euo pipefail
VERSION=3.7.1
PREFIX=${CLIO_S3RVER_PREFIX:-/var/cache/clio-test/npm}
BIN="$PREFIX/node_modules/.bin/s3rver"
if [[ -x "$BIN" ]] && grep -q "\"version\": \"$VERSION\"" "$PREFIX/node_modules/s3rver/package.json" 2>/dev/null; then
  echo "install_s3rver: s3rver $VERSION present in $PREFIX"
  exit 0
fi
command -v npm >/dev/null || { echo "install_s3rver: npm is missing (apt-get install npm)" >&2; exit 1; }
mkdir -p "$PREFIX"
npm install --no-audit --no-fund --loglevel=error --prefix "$PREFIX" "s3rver@$VERSION" >/dev/null
echo "install_s3rver: installed s3rver $VERSION into $PREFIX"
