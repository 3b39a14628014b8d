#!/usr/bin/env python3
"""Runs the randomized file checkers (clio_fsx, clio_fsx_multi) on the host filesystem and on
a CLIO mount.

Usage:
    python3 tests/fsx/run_fsx.py --build-dir build [--target host|clio|both] [--only REGEX]
                                 [--seeds 1,2,3,4,5] [--ops 3000] [--keep]

First every case runs in a directory of /tmp (the host filesystem): that is the reference
proving the checker itself right, and a failure there is a bug in the checker. Then the same
cases run on a CLIO mount started with tests/integration/e2e_test.py's Env (a runtime with a
32 MB RAM tier over a file tier, and clio-fuse), each case in its own directory.

Cases whose failure on CLIO is known (KNOWN_FAILURES below) print XFAIL when they fail and
count as passed; when such a case passes it prints XPASS and counts as failed, so the entry is
removed once the bug is fixed. The last line printed is "N passed, M failed"; the exit status
is non-zero when anything failed. Python 3 standard library only.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import e2e_test  # noqa: E402  (reuses its runtime/mount helpers)

CASE_TIMEOUT = 300  # seconds, one checker run

# (target, case name) -> why it is expected to fail. Each entry names the CLIO bug it shows;
# reproduce it with --target clio --only '^NAME$'.
KNOWN_FAILURES = {
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cases(args):
    """[(name, argv-without-path, kind)]; kind 'file' gets a file path, 'dir' a directory."""
    fsx = os.path.join(args.build_dir, "tests", "clio_fsx")
    multi = os.path.join(args.build_dir, "tests", "clio_fsx_multi")
    out = []
    for s in args.seeds:
        out.append((f"fsx seed={s}", [fsx, "-s", str(s), "-n", str(args.ops)], "file"))
    # -S: fsync + drop the page cache before every check, so reads reach the runtime instead
    # of the kernel's cache (which keep_cache and the writeback cache otherwise serve).
    for s in args.synced_seeds:
        out.append((f"fsx -S seed={s}", [fsx, "-S", "-s", str(s), "-n", str(args.synced_ops)], "file"))
    for s in args.multi_seeds:
        for t, n in (("a", args.multi_ops), ("b", max(1, args.multi_ops // 2)),
                     ("c", args.multi_ops), ("d", args.multi_ops)):
            out.append((f"multi({t}) seed={s}",
                        [multi, "-s", str(s), "-k", str(args.procs), "-n", str(n), "-t", t], "dir"))
    if args.only:
        rx = re.compile(args.only)
        out = [c for c in out if rx.search(c[0])]
    return out


def run_case(name, argv, kind, workdir):
    """Returns (ok, seconds, output)."""
    d = os.path.join(workdir, re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_"))
    os.makedirs(d, exist_ok=True)
    full = argv + [os.path.join(d, "fsx.dat") if kind == "file" else d]
    t0 = time.monotonic()
    try:
        cp = subprocess.run(full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=CASE_TIMEOUT)
        out, ok = cp.stdout.decode("utf-8", "replace"), cp.returncode == 0
        if not ok:
            out += f"\n(exit status {cp.returncode})"
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode("utf-8", "replace") if e.stdout else ""
        out += f"\n(timed out after {CASE_TIMEOUT}s)"
        ok = False
    return ok, time.monotonic() - t0, " ".join(full) + "\n" + out


class Tally:
    def __init__(self):
        self.passed = self.failed = 0
        self.lines = []

    def record(self, target, name, ok, secs, out):
        known = KNOWN_FAILURES.get((target, name))
        summary = out.strip().splitlines()[-1] if out.strip() else ""
        if ok and known is None:
            verdict = "PASS"
            self.passed += 1
        elif not ok and known is not None:
            verdict = "XFAIL"
            self.passed += 1
        elif ok:
            verdict = "XPASS"
            self.failed += 1
        else:
            verdict = "FAIL"
            self.failed += 1
        log(f"{verdict} [{target}] {name} ({secs:.1f}s)"
            + (f": {summary}" if verdict == "PASS" else ""))
        if verdict in ("FAIL", "XFAIL"):
            print(out.rstrip(), flush=True)
        if verdict == "XFAIL":
            log(f"  known failure: {known}")
        if verdict == "XPASS":
            log(f"  expected to fail ({known}) but passed: remove it from KNOWN_FAILURES")
        self.lines.append(f"{verdict:5} [{target}] {name}")


def run_host(args, tally, todo):
    workdir = tempfile.mkdtemp(prefix="clio-fsx-host-", dir="/tmp")
    log(f"=== host filesystem reference: {workdir} ===")
    try:
        for name, argv, kind in todo:
            ok, secs, out = run_case(name, argv, kind, workdir)
            tally.record("host", name, ok, secs, out)
    finally:
        if args.keep:
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def mount_healthy(env):
    try:
        os.statvfs(env.mnt)
        return e2e_test.is_mounted(env.mnt) and env.runtime_status() == 0
    except OSError:
        return False


def start_clio(args):
    env = e2e_test.Env(args.build_dir, "fsx", keep=args.keep)
    env.check_binaries(env.clio_run, env.clio_fuse)
    env.write_config()
    env.start_runtime()
    env.mount()
    return env


def run_clio(args, tally, todo):
    log("=== CLIO mount ===")
    env = None
    try:
        env = start_clio(args)
        log(f"temp dir {env.T}")
        for name, argv, kind in todo:
            if not mount_healthy(env):
                log(f"the mount or the runtime died before {name}; daemon logs:" + env.log_tail())
                for e in env.cleanup():
                    log(f"cleanup problem: {e}")
                env = start_clio(args)
                log(f"restarted CLIO in {env.T}")
            ok, secs, out = run_case(name, argv, kind, env.mnt)
            if not ok and not mount_healthy(env):
                out += "\n(the mount or the runtime is dead after this case)"
            if not ok:
                out += ("\nreproduce on CLIO: python3 tests/fsx/run_fsx.py --build-dir "
                        f"{args.build_dir} --target clio --only '^{re.escape(name)}$' --keep")
            tally.record("clio", name, ok, secs, out)
        env.unmount()
        env.stop_runtime()
    except e2e_test.TestFailure as e:
        log(f"FAIL [clio] setup/teardown: {e}")
        if env is not None:
            log("daemon logs:" + env.log_tail())
        tally.failed += 1
        tally.lines.append("FAIL  [clio] setup/teardown")
    finally:
        if env is not None:
            for e in env.cleanup():
                log(f"cleanup problem: {e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True, help="CMake build dir (cli/, fs/, tests/)")
    ap.add_argument("--target", choices=("host", "clio", "both"), default="both")
    ap.add_argument("--only", help="run only the cases whose name matches this regex")
    ap.add_argument("--seeds", default="1,2,3,4,5", help="clio_fsx seeds (comma-separated)")
    ap.add_argument("--ops", type=int, default=3000, help="clio_fsx ops per seed")
    ap.add_argument("--multi-seeds", default="1", help="clio_fsx_multi seeds")
    ap.add_argument("--synced-seeds", default="6", help="clio_fsx -S seeds (reads bypass the page cache)")
    ap.add_argument("--synced-ops", type=int, default=1500, help="operations per -S seed")
    ap.add_argument("--multi-ops", type=int, default=300,
                    help="clio_fsx_multi ops per writer ((b) appenders run half)")
    ap.add_argument("--procs", type=int, default=4, help="clio_fsx_multi writers/appenders")
    ap.add_argument("--keep", action="store_true", help="keep temp dirs (files, logs, state)")
    args = ap.parse_args(argv)
    args.build_dir = os.path.abspath(args.build_dir)
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.multi_seeds = [int(s) for s in args.multi_seeds.split(",") if s]
    args.synced_seeds = [int(s) for s in args.synced_seeds.split(",") if s]
    os.umask(0o022)
    os.chdir("/")  # never hold a mount busy through our cwd
    todo = cases(args)
    for b in {a[0] for _, a, _ in todo}:
        if not os.access(b, os.X_OK):
            print(f"run_fsx: {b} not built (ninja -C {args.build_dir} clio_fsx clio_fsx_multi)")
            print("0 passed, 1 failed")
            return 1
    tally = Tally()
    t0 = time.monotonic()
    if args.target in ("host", "both"):
        run_host(args, tally, todo)
    if args.target in ("clio", "both"):
        run_clio(args, tally, todo)
    log(f"summary ({time.monotonic() - t0:.0f}s):")
    for line in tally.lines:
        print("  " + line)
    print(f"{tally.passed} passed, {tally.failed} failed", flush=True)
    return 0 if tally.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
