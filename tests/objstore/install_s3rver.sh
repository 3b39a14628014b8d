#!/usr/bin/env bash
# Installs s3rver (an independent S3 server from the npm registry) for the objstore tests
# into /var/cache/clio-test/npm (override with CLIO_S3RVER_PREFIX), then patches its one
# consistency bug (below). Idempotent.
set -euo pipefail
VERSION=3.7.1
PREFIX=${CLIO_S3RVER_PREFIX:-/var/cache/clio-test/npm}
BIN="$PREFIX/node_modules/.bin/s3rver"
STORE="$PREFIX/node_modules/s3rver/lib/stores/filesystem.js"
MARK="clio: answer a PUT only once its file is written"
if [[ -x "$BIN" ]] && grep -q "\"version\": \"$VERSION\"" "$PREFIX/node_modules/s3rver/package.json" 2>/dev/null; then
  echo "install_s3rver: s3rver $VERSION present in $PREFIX"
else
  command -v npm >/dev/null || { echo "install_s3rver: npm is missing (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$PREFIX"
  npm install --no-audit --no-fund --loglevel=error --prefix "$PREFIX" "s3rver@$VERSION" >/dev/null
  echo "install_s3rver: installed s3rver $VERSION into $PREFIX"
fi
# s3rver 3.7.1's putObject resolves (and the PUT is answered) before its write stream has
# finished: on a body held in memory right after writeStream.end(), on a streamed body (and
# on a multipart part) when the checksum transform finishes. A GET sent after the PUT's answer can then stat an empty
# or short file and answer "Content-Length: 1" with no body. S3 promises read-after-write
# consistency, so a faithful stand-in must too: resolve on the write stream's 'finish'.
if ! grep -q "$MARK" "$STORE"; then
  MARK="$MARK" perl -0pi -e '
    s{writeStream\.end\(object\.content\);\n(\s*)md5Context\.update\(object\.content\);\n\s*resolve\(\[object\.content\.length, md5Context\.digest\(\x27hex\x27\)\]\);}
     {// $ENV{MARK}\n$1md5Context.update(object.content);\n$1const digest = md5Context.digest(\x27hex\x27);\n$1writeStream.on(\x27error\x27, reject).on(\x27finish\x27, () => resolve([object.content.length, digest]));\n$1writeStream.end(object.content);};
    s{\.on\(\x27finish\x27, \(\) => resolve\(\[totalLength, md5Context\.digest\(\x27hex\x27\)\]\)\)\n(\s*)\.pipe\(writeStream\);}
     {.pipe(writeStream)\n$1.on(\x27error\x27, reject)\n$1.on(\x27finish\x27, () => resolve([totalLength, md5Context.digest(\x27hex\x27)]));};
    s{\.on\(\x27finish\x27, \(\) => \{\n\s*resolve\(\[totalLength, md5Context\.digest\(\x27hex\x27\)\]\);\n\s*\}\)\n(\s*)\.pipe\(writeStream\);}
     {.pipe(writeStream)\n$1.on(\x27error\x27, reject)\n$1.on(\x27finish\x27, () => resolve([totalLength, md5Context.digest(\x27hex\x27)]));};
  ' "$STORE"
  # Both places patched: the marker is in, and no write stream is piped to as the last step.
  if ! grep -q "$MARK" "$STORE" || grep -q "pipe(writeStream);" "$STORE"; then
    echo "install_s3rver: could not patch $STORE (has s3rver $VERSION changed?)" >&2
    exit 1
  fi
  echo "install_s3rver: patched s3rver's PUT to answer after its file is written"
fi
