#!/usr/bin/env python3
"""End-to-end tests of CLIO: runtime + FUSE mount + restart / crash recovery.

Usage:
    python3 tests/integration/e2e_test.py --build-dir build [--only SCENARIO] [--keep]

Scenarios: see SCENARIOS below and README.md.
Python 3 standard library only. Needs /dev/fuse and fusermount3. The last line printed is
"N passed, M failed"; the exit status is non-zero when anything failed.
"""

import argparse
import os
import sys
import threading
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The harness's names stay importable from here: the other integration scripts use them.
from harness import *  # noqa: E402,F401,F403
from harness import _text, _unescape_mount_field, _write_all  # noqa: E402,F401
from e2e_crash import (scenario_clean_restart, scenario_kill9_restart, scenario_power_cut,  # noqa: E402
                       scenario_s3_kill9, scenario_s3_restart, scenario_full_disk, run_workload, check_tree)
from e2e_ops import (scenario_admin_ops, scenario_bad_input, scenario_dashboard, scenario_metrics,  # noqa: E402
                     scenario_pool_ops)
from e2e_tiers import SAFE_CONFIG, SAFE_MEMBER, scenario_attached_pool, scenario_safe_bdev, scenario_tier_ops  # noqa: E402


SCENARIO_FUNCS = {
    "clean_restart": scenario_clean_restart,
    "kill9_restart": scenario_kill9_restart,
    "power_cut": scenario_power_cut,
    "bad_input": scenario_bad_input,
    "s3_restart": scenario_s3_restart,
    "s3_kill9": scenario_s3_kill9,
    "full_disk": scenario_full_disk,
    "tier_ops": scenario_tier_ops,
    "attached_pool": scenario_attached_pool,
    "safe_bdev": scenario_safe_bdev,
    "metrics": scenario_metrics,
    "admin_ops": scenario_admin_ops,
    "dashboard": scenario_dashboard,
    "pool_ops": scenario_pool_ops,
}


# ----------------------------------------------------------------------------------------------
# Runner
# ----------------------------------------------------------------------------------------------

def run_scenario(name, args):
    log(f"=== {name} ===")
    env = None
    ok = False
    watchdog = None
    try:
        env = Env(args.build_dir, name, keep=args.keep)
        log(f"temp dir {env.T}")
        watchdog = threading.Timer(args.scenario_timeout, env.abort)
        watchdog.daemon = True
        watchdog.start()
        SCENARIO_FUNCS[name](env)
        ok = True
    except TestFailure as e:
        log(f"FAIL {name}: {e}")
    except Exception:  # noqa: BLE001 - report anything as a failure of this scenario
        log(f"FAIL {name}: unexpected error\n{traceback.format_exc()}")
    finally:
        if watchdog:
            watchdog.cancel()
        if env is not None:
            if env.aborted:
                log(f"FAIL {name}: aborted by the watchdog after {args.scenario_timeout}s")
                ok = False
            if not ok:
                tail = env.log_tail()
                if tail:
                    log("daemon logs:" + tail)
            try:
                errors = env.cleanup()
            except Exception:  # noqa: BLE001
                errors = [traceback.format_exc()]
            for e in errors:
                log(f"cleanup problem in {name}: {e}")
    log(f"{'PASS' if ok else 'FAIL'} {name}")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True, help="CMake build dir (holds cli/ and fs/)")
    ap.add_argument("--only", choices=SCENARIOS, help="run just this scenario")
    ap.add_argument("--keep", action="store_true", help="keep the temp dirs for inspection")
    ap.add_argument("--scenario-timeout", type=float, default=900,
                    help="seconds before a hung scenario's daemons are killed (default 900)")
    args = ap.parse_args(argv)
    os.umask(0o022)
    args.build_dir = os.path.abspath(args.build_dir)
    os.chdir("/")  # never hold a mount busy through our cwd
    names = [args.only] if args.only else list(SCENARIOS)
    passed = failed = 0
    for n in names:
        if run_scenario(n, args):
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
