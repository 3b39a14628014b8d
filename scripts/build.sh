#!/usr/bin/env bash
# Configures and builds CLIO with Ninja (ccache when present).
#   scripts/build.sh release   -> build-release/  (optimized, for running)
#   scripts/build.sh test      -> build-test/     (clang 14, ASan+UBSan, -Wthread-safety, -Werror)
#   scripts/build.sh KIND --configure-only          (CMake only: checks the tools and libraries)
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
configure_only=0
case "${2:-}" in
  "") ;;
  --configure-only) configure_only=1 ;;
  *) echo "usage: scripts/build.sh release|test [--configure-only]" >&2; exit 2 ;;
esac
case "$kind" in
  release)
    dir=build-release
    flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCLIO_BUILD_TESTS=OFF -DCLIO_BUILD_BENCH=ON) ;;
  test)
    dir=build-test
    flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14
           -DCLIO_SANITIZE=ON -DCLIO_WERROR=ON -DCLIO_BUILD_TESTS=ON -DCLIO_BUILD_BENCH=ON
           -DCLIO_BUILD_FUZZ=ON) ;;
  *) echo "usage: scripts/build.sh release|test [--configure-only]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -G Ninja "${flags[@]}" >/dev/null
if ((configure_only)); then
  echo "build: $dir configured"
  exit 0
fi
ninja -C "$dir" -j"$(nproc)"
echo "build: $dir ready"
