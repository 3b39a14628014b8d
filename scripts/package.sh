#!/usr/bin/env bash
# Builds the Debian package: the release configuration, then CPack (cmake/Packaging.cmake).
#   scripts/package.sh      -> build-release/clio_<version>-1_amd64.deb
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --package
bash scripts/build.sh release
cd build-release
rm -f clio_*.deb
cpack -G DEB >/dev/null
echo "package: build-release/$(ls clio_*.deb)"
