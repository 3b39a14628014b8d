#!/usr/bin/env bash
# Installs every Debian 12 package that building, running and testing CLIO needs.
#   install-deps.sh           what scripts/run.sh needs, and the unit and integration tests
#   install-deps.sh --tests   also the large test-only tools (chromium for the dashboard test)
# Idempotent: re-running it only checks that the packages are present.
set -euo pipefail

PACKAGES=(
  # toolchain
  cmake ninja-build ccache clang-14 libclang-rt-14-dev pkg-config git
  # libraries
  libfuse3-dev fuse3 liburing-dev libaio-dev libyaml-cpp-dev librocksdb-dev libboost-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libssl-dev libxxhash-dev
  libsystemd-dev libpoco-dev
  # metrics (the registry and text format; the runtime serves /metrics itself, with Poco)
  prometheus-cpp-dev
  # erasure coding and CRC32C for the safe-bdev module
  libisal-dev
  # tests
  doctest-dev python3 attr python3-botocore
  # the Debian package (CPack with dpkg-shlibdeps) and its checks
  dpkg-dev file lintian
  # benchmarks (bench/fsbench: fio, and bindfs as the FUSE passthrough reference)
  libbenchmark-dev fio bindfs
  # GPU runtime for the hbm and pinned tiers (CMake option CLIO_WITH_HIP, on by default)
  libamdhip64-dev
)
# The dashboard test loads the runtime's page in headless Chromium and screenshots it (~100 MB:
# only for scripts/test.sh, not for a plain run).
case "${1:-}" in
  "") ;;
  --tests) PACKAGES+=(chromium fonts-dejavu-core debootstrap systemd-container) ;;
  *) echo "usage: scripts/install-deps.sh [--tests]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "install-deps: all ${#PACKAGES[@]} packages present"

# The objstore tests also run against s3rver, an independent S3 server from the npm registry.
if ! command -v npm >/dev/null; then
  echo "install-deps: installing npm"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
bash "$(dirname "$0")/../tests/objstore/install_s3rver.sh"
