#!/usr/bin/env bash
# The README's second command (and what CI runs): install dependencies, build the test
# configuration, and run every test. End-to-end tests mount FUSE filesystems: run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --tests
bash scripts/build.sh test
# The Debian package, which the package test checks (lintian, contents, running it).
bash scripts/package.sh
cd build-test
ctest --output-on-failure -j2 --timeout 900
