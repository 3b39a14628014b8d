#!/usr/bin/env bash
# Installs the Debian 12 packages CLIO needs, from a minimal root up (compilers included).
#   install-deps.sh             building the release configuration and running it (scripts/run.sh)
#   install-deps.sh --package   also the Debian package's tools (scripts/package.sh)
#   install-deps.sh --tests     also everything the test configuration, the tests and the
#                               benchmarks use (scripts/test.sh): clang, the test tools, Chromium,
#                               debootstrap, npm and the S3 test server
# Idempotent: re-running it only checks that the packages are present. When a package source
# cannot be reached or a package cannot be found, it says which packages are still missing and
# how to retry, and exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  # the release configuration: compilers (CMake's project() needs C and C++), build tools
  gcc g++ cmake ninja-build ccache pkg-config
  # libraries
  libfuse3-dev liburing-dev libaio-dev libyaml-cpp-dev librocksdb-dev libboost-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libssl-dev libxxhash-dev
  libsystemd-dev libpoco-dev
  # metrics (the registry and text format; the runtime serves /metrics itself, with Poco)
  prometheus-cpp-dev
  # erasure coding and CRC32C for the safe-bdev module
  libisal-dev
  # GPU runtime for the hbm and pinned tiers (CMake option CLIO_WITH_HIP, on by default)
  libamdhip64-dev
  # the benchmarks the release configuration builds (bench/)
  libbenchmark-dev
  # running: fusermount3 and mount.fuse3
  fuse3
)
PACKAGE_TOOLS=(
  # the Debian package: CPack with dpkg-shlibdeps
  dpkg-dev file
)
TEST_TOOLS=(
  # the test configuration: clang 14 with ASan, UBSan and libFuzzer
  clang-14 libclang-rt-14-dev
  # tests: doctest, Python, xattr tools, SigV4 vectors, the package checks
  doctest-dev python3 attr python3-botocore lintian
  # the POSIX suite's programs on the mount (git, tar, make, cc)
  git make
  # the dashboard test (headless Chromium, a screenshot), the fresh-root and package_install
  # tests (a debootstrap root booted with systemd-nspawn)
  chromium fonts-dejavu-core debootstrap systemd-container
  # benchmarks (bench/fsbench: fio, and bindfs as the FUSE passthrough reference; bindfs also
  # stands in for another file system's dead mount in a test)
  fio bindfs
  # s3rver, an independent S3 server from the npm registry, for the objstore tests
  npm ca-certificates
  # certificates for the TLS tests (security_tls)
  openssl
)
mode=run
case "${1:-}" in
  "") ;;
  --package) mode=package; PACKAGES+=("${PACKAGE_TOOLS[@]}") ;;
  --tests) mode=tests; PACKAGES+=("${PACKAGE_TOOLS[@]}" "${TEST_TOOLS[@]}") ;;
  *) echo "usage: scripts/install-deps.sh [--package|--tests]" >&2; exit 2 ;;
esac
retry="sudo scripts/install-deps.sh${1:+ $1}"

# A package another source may already provide: its command being on PATH is enough. Node.js
# from NodeSource (common on build machines) ships its own npm and conflicts with Debian's npm
# package, so asking apt for npm there fails with "held broken packages".
declare -A PROVIDED_BY_COMMAND=([npm]=npm)
installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed" && return 0
  [[ -n "${PROVIDED_BY_COMMAND[$1]:-}" ]] && command -v "${PROVIDED_BY_COMMAND[$1]}" >/dev/null
}
missing=()
for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done

# Says what failed, which packages are still missing (and whether some were installed), and
# how to retry; exit 1.
give_up() {
  echo "install-deps: $1" >&2
  local still=() p
  for p in "${missing[@]}"; do installed "$p" || still+=("$p"); done
  if ((${#still[@]} == ${#missing[@]})); then
    echo "install-deps: nothing was installed; needed: ${still[*]}" >&2
  else
    echo "install-deps: installed $((${#missing[@]} - ${#still[@]})) of the ${#missing[@]} packages; still missing: ${still[*]}" >&2
  fi
  if [[ -n "$(dpkg --audit 2>/dev/null)" ]]; then
    echo "install-deps: dpkg left packages half installed (dpkg --audit lists them); run: sudo dpkg --configure -a" >&2
  fi
  echo "install-deps: once the package source answers (or the conflict apt names is resolved), retry: $retry" >&2
  exit 1
}

SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
if ((${#missing[@]})); then
  command -v apt-get >/dev/null || give_up "apt-get is missing: this script installs Debian 12 packages"
  echo "install-deps: installing ${missing[*]}"
  apt_opts=(-o Acquire::Retries=3 -o DPkg::Lock::Timeout=300)
  # apt-get update only warns about a source it cannot reach; --error-on=any makes that an
  # error. The install may still succeed from package lists read earlier: try it, and report
  # the unreachable source only if it fails.
  update_err=$(mktemp)
  trap 'rm -f "$update_err"' EXIT
  update_ok=1
  $SUDO apt-get "${apt_opts[@]}" update -qq --error-on=any 2>"$update_err" || update_ok=0
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${apt_opts[@]}" install -y -qq \
         --no-install-recommends "${missing[@]}" >/dev/null; then
    ((update_ok)) || { echo "install-deps: apt-get update:" >&2; grep -E '^(E|W):' "$update_err" >&2 || cat "$update_err" >&2; }
    why="apt-get install failed (its errors are above)"
    ((update_ok)) || why="the package source could not be read, and apt-get install failed (errors above)"
    give_up "$why"
  fi
  if ! ((update_ok)); then
    echo "install-deps: warning: apt-get update failed; the packages came from package lists read earlier:" >&2
    grep -E '^(E|W):' "$update_err" >&2 || true
  fi
  still=()
  for p in "${missing[@]}"; do installed "$p" || still+=("$p"); done
  ((${#still[@]} == 0)) || give_up "apt-get install left packages uninstalled: ${still[*]}"
fi
echo "install-deps: all ${#PACKAGES[@]} packages present ($mode)"

if [[ $mode == tests ]]; then
  bash tests/objstore/install_s3rver.sh || {
    echo "install-deps: the S3 test server (s3rver) could not be installed from the npm registry; retry: $retry" >&2
    exit 1
  }
fi
