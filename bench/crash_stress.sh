#!/usr/bin/env bash
# The live-mount crash loop of tests/integration/live_crash_test.py, long: a runtime killed
# (kill -9) CYCLES times under a mount kept across every restart, while a separate process
# writes unsynced files; 20 fsynced files of sizes that are not page multiples each cycle.
# Counts instead of stopping at the first problem, and prints the counts: damaged fsynced
# files, failed creates, files with foreign bytes (all three must be 0). Keeps the files of the
# last 5 cycles (each is checked every cycle while it lives), so space and time stay bounded.
#   sudo bench/crash_stress.sh [BUILD_DIR] [CYCLES] [kill9|power_cut|remount]
#   (default build-release, 1000, kill9; about 4 s a cycle on the 2-core VM)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
cycles=${2:-1000}
how=${3:-kill9}
exec python3 tests/integration/live_crash_test.py --build-dir "$build" --only "$how" --cycles "$cycles" \
  --keep-going --keep-cycles 5 --report --seed "${SEED:-1}"
