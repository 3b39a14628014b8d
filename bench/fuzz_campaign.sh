#!/bin/sh
# Runs every libFuzzer target of a build (ASan + UBSan: the test build) for a chosen time each,
# one after another, and prints a table: executions, coverage (libFuzzer's cov and ft), corpus
# size, crashes. Each target starts from its committed corpus (tests/fuzz/corpus/NAME, when there
# is one) copied into OUT, so the source tree stays as committed; a crash leaves its input in
# OUT/NAME/ and the script exits 1.
#
#   bench/fuzz_campaign.sh [BUILD_DIR] [SECONDS_EACH] [OUT_DIR]
#   bench/fuzz_campaign.sh build-test 3600 /tmp/fuzz      # the issue's hour per target
#
# To grow a committed corpus, merge what a run found back into it:
#   build-test/tests/fuzz_frames -merge=1 tests/fuzz/corpus/frames /tmp/fuzz/frames/corpus
set -eu

build=$(cd "${1:-build-test}" && pwd)
seconds=${2:-60}
out=${3:-/tmp/clio-fuzz-campaign}
src=$(cd "$(dirname "$0")/.." && pwd)

targets=$(ls "$build"/tests/fuzz_* 2>/dev/null || true)
if [ -z "$targets" ]; then
  echo "fuzz_campaign: no fuzz targets in $build/tests (configure with -DCLIO_BUILD_FUZZ=ON, clang)" >&2
  exit 2
fi
mkdir -p "$out"
printf '%-20s %8s %12s %8s %8s %8s %7s\n' TARGET SECONDS EXECUTIONS COV FT CORPUS CRASHES
failed=0
for bin in $targets; do
  name=$(basename "$bin")
  short=${name#fuzz_}
  dir="$out/$short"
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  if [ -d "$src/tests/fuzz/corpus/$short" ]; then cp -r "$src/tests/fuzz/corpus/$short/." "$dir/corpus/"; fi
  rc=0
  (cd "$dir" && "$bin" -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
     -artifact_prefix="$dir/" corpus >"$dir/log" 2>&1) || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$dir/log" | tail -1 | cut -d' ' -f2)
  corpus=$(ls "$dir/corpus" | wc -l)
  crashes=$(ls "$dir" | grep -c -E '^(crash|leak|timeout|oom)-' || true)
  [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes="rc=$rc"
  printf '%-20s %8s %12s %8s %8s %8s %7s\n' "$name" "$seconds" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$corpus" "$crashes"
  if [ "$rc" -ne 0 ]; then failed=1; fi
done
if [ "$failed" -ne 0 ]; then
  echo "fuzz_campaign: a target failed: see $out/NAME/log and the crash inputs beside it" >&2
  exit 1
fi
