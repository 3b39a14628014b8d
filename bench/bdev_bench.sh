#!/usr/bin/env bash
# Runs the bdev micro-benchmarks and fio on the same filesystem, and prints the ratios:
# ram Write/Read vs memcpy, file 1 MiB sequential Write/Read vs fio, allocator ops/s.
#   bench/bdev_bench.sh [BUILD_DIR] [DIR]      (default build-release, /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
dir=${2:-/tmp}
command -v fio >/dev/null || { echo "bdev_bench: fio is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
out=$(mktemp)
work=$(mktemp -d "$dir/clio_fio_XXXXXX")
trap 'rm -rf "$out" "$work"' EXIT
CLIO_BENCH_DIR=$dir "$build/bench/bdev_bench" --benchmark_format=json --benchmark_out="$out" \
  --benchmark_out_format=json >/dev/null
fio_bw() {  # prints MiB/s of one fio job; reads run warm (--invalidate=0), like the bdev's
  fio --name=ref --directory="$work" --rw="$1" --bs=1m --size=256m --ioengine=io_uring \
      --end_fsync=1 --invalidate=0 --output-format=json 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$2']['bw_bytes']/1048576)"
}
fio_write=$(fio_bw write write)
fio_bw read read >/dev/null  # lays the file out and warms the page cache
fio_read=$(fio_bw read read)
python3 - "$out" "$fio_write" "$fio_read" <<'PY'
import json, sys
res = {b["name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"]}
mib = lambda n: res[n]["bytes_per_second"] / 1048576
fio_w, fio_r = float(sys.argv[2]), float(sys.argv[3])
print(f"{'figure':38} {'MiB/s or ops/s':>16} {'reference':>12} {'ratio':>7}")
for size in ("4096", "65536", "1048576"):
    m = mib(f"BM_Memcpy/{size}")
    for op in ("Write", "Read"):
        v = mib(f"BM_Ram{op}/{size}")
        print(f"{'ram ' + op + ' ' + size + ' B (vs memcpy)':38} {v:16.0f} {m:12.0f} {v / m:7.2f}")
for op, ref in (("Write", fio_w), ("Read", fio_r)):
    v = mib(f"BM_File{op}1M/real_time")
    print(f"{'file ' + op + ' 1 MiB seq (vs fio)':38} {v:16.0f} {ref:12.0f} {v / ref:7.2f}")
for name, b in res.items():
    if name.startswith("BM_AllocFree"):
        print(f"{'allocate+free ' + name.split('/', 1)[1]:38} {b['items_per_second']:16.0f}")
PY
