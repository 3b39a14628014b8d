#!/usr/bin/env bash
# The README's first command: install dependencies, build, start the runtime on the default
# config (or $CLIO_CONF) and mount the filesystem.
#   sudo scripts/run.sh [MOUNTPOINT]      (default /mnt/clio)
set -euo pipefail
cd "$(dirname "$0")/.."
mnt=${1:-/mnt/clio}
bash scripts/install-deps.sh
bash scripts/build.sh release
bin=$PWD/build-release
if [[ $(id -u) -eq 0 ]]; then
  # The binaries and share/clio only: /etc/clio, the units and man pages are the package's.
  cmake --install build-release --prefix /usr/local --component Unspecified >/dev/null
  # mount(8) looks for its helpers in /sbin: `mount -t fuse.clio` and /etc/fstab need these.
  for n in mount.clio mount.fuse.clio; do ln -sf /usr/local/bin/clio-fuse "/usr/sbin/$n"; done
  bin_run=/usr/local/bin/clio_run; bin_fuse=/usr/local/bin/clio-fuse; bin_ctl=/usr/local/bin/clioctl
else
  bin_run=$bin/cli/clio_run; bin_fuse=$bin/fs/mount/clio-fuse; bin_ctl=$bin/cli/clioctl
fi
state_dir=$("$bin_run" status >/dev/null 2>&1 && echo running || true)
if [[ $state_dir != running ]]; then
  log=${CLIO_LOG_FILE:-/tmp/clio_run.$(id -u).log}
  "$bin_run" start 2>>"$log" || { echo "run: the runtime did not start; see $log" >&2; tail -5 "$log" >&2; exit 1; }
  echo "run: runtime started (log: $log)"
else
  echo "run: runtime already running"
fi
mkdir -p "$mnt"
if grep -q " $(realpath "$mnt") fuse.clio " /proc/self/mounts; then
  echo "run: $mnt is already mounted"
else
  "$bin_fuse" "$mnt"
fi
cat <<MSG
CLIO is mounted on $mnt.
  tiers:   $bin_ctl tier stat
  status:  $bin_run status
  stop:    fusermount3 -u $mnt && $bin_run stop
MSG
