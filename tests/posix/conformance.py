#!/usr/bin/env python3
"""POSIX conformance checks for a mounted filesystem, organised by system call.

    python3 tests/posix/conformance.py --dir DIR [--only GROUP[,GROUP]] [--as-user NAME]

Runs every group of checks in a fresh subdirectory of DIR. Each check asserts return values,
errno and resulting attributes, and prints one line: "PASS group.case" or
"FAIL group.case: why". The last line is "N passed, M failed"; the exit status is 1 when
anything failed. Python 3 standard library only (ctypes for renameat2, utimensat, fallocate).

As root, the checks run as root. With --as-user NAME (run as root), the script creates the
system user NAME if missing (useradd -r), prepares root-owned fixtures under DIR, makes a
world-writable subdirectory, and runs the checks in a forked child that has dropped to that
user: the permission checks (EACCES, EPERM for a non-owner) run only there, the checks that
need privilege (chown to another user, mknod of a device) only as root.

Timestamps are never compared after a sleep: a check either sets explicit times first and
compares with them, or spins (bounded, a few ms at most) until the clock has passed the
timestamp it recorded, so that "updated" is a strict inequality.
"""

import argparse
import os
import pwd
import shutil
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from posix_lib import *  # noqa: E402,F401,F403
# The groups register themselves (posix_lib.group) in this order, which is the order they run.
import groups_files  # noqa: E402,F401
import groups_names  # noqa: E402,F401
import groups_data  # noqa: E402,F401
import groups_dirs  # noqa: E402,F401


def find_other_dir(base):
    """A directory writable by us on a filesystem other than base's (for EXDEV)."""
    dev = os.stat(base).st_dev
    for c in ("/tmp", "/var/tmp", "/dev/shm", "/run"):
        try:
            if os.stat(c).st_dev != dev and os.access(c, os.W_OK | os.X_OK):
                return c
        except OSError:
            pass
    return None


def run_groups(base, only, fixtures, label):
    os.umask(0)
    ctx = Ctx(base, fixtures, find_other_dir(base), label)
    for name, fn in GROUPS.items():
        if only and name not in only:
            continue
        ctx.group = name
        ctx.dir = os.path.join(base, name)
        try:
            if os.path.lexists(ctx.dir):
                shutil.rmtree(ctx.dir)
            os.mkdir(ctx.dir, 0o755)
            fn(ctx)
        except Exception as e:  # noqa: BLE001 - setup outside any case
            ctx._fail(f"{name}.setup", f"{type(e).__name__}: {e} | "
                      + traceback.format_exc().strip().splitlines()[-2].strip())
        finally:
            shutil.rmtree(ctx.dir, ignore_errors=True)
    return ctx.passed, ctx.failed


def ensure_user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        cp = subprocess.run(["useradd", "-r", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name],
                            capture_output=True, text=True)
        if cp.returncode != 0:
            sys.exit(f"conformance: useradd {name} failed: {cp.stderr.strip()}")
        return pwd.getpwnam(name)


def make_fixtures(fx):
    """Root-owned objects for the unprivileged run's permission checks."""
    if os.path.lexists(fx):
        shutil.rmtree(fx)
    os.mkdir(fx, 0o755)
    write_file(os.path.join(fx, "secret"), b"secret", 0o600)
    write_file(os.path.join(fx, "public"), b"public", 0o644)
    write_file(os.path.join(fx, "world"), b"world", 0o666)
    os.utime(os.path.join(fx, "world"), ns=(OLD_NS, OLD_NS))
    os.mkdir(os.path.join(fx, "rootdir"), 0o755)
    write_file(os.path.join(fx, "rootdir", "f"), b"f", 0o666)
    os.mkdir(os.path.join(fx, "rootdir", "sub"), 0o755)
    os.mkdir(os.path.join(fx, "sticky"), 0o1777)
    write_file(os.path.join(fx, "sticky", "rootfile"), b"r", 0o666)
    os.mkdir(os.path.join(fx, "private"), 0o700)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="directory to test in (on the filesystem under test)")
    ap.add_argument("--only", help="comma-separated groups: " + ",".join(GROUPS))
    ap.add_argument("--as-user", metavar="NAME", help="run the checks as this (created) system user")
    ap.add_argument("--list", action="store_true", help="list the groups and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(GROUPS))
        return 0
    only = set(args.only.split(",")) if args.only else None
    if only and only - set(GROUPS):
        ap.error(f"unknown group(s) {sorted(only - set(GROUPS))}; known: {', '.join(GROUPS)}")
    os.umask(0)
    base = os.path.abspath(args.dir)
    if not os.path.isdir(base):
        ap.error(f"--dir {base} is not a directory")

    if not args.as_user:
        run = os.path.join(base, f"posix-{'root' if os.geteuid() == 0 else 'uid%d' % os.geteuid()}")
        os.makedirs(run, exist_ok=True)
        passed, failed = run_groups(run, only, None, "root" if os.geteuid() == 0 else "user")
        shutil.rmtree(run, ignore_errors=True)
    else:
        if os.geteuid() != 0:
            ap.error("--as-user needs root (it creates the user and root-owned fixtures)")
        pw = ensure_user(args.as_user)
        fx = os.path.join(base, "posix-fixtures")
        make_fixtures(fx)
        run = os.path.join(base, "posix-user")
        if os.path.lexists(run):
            shutil.rmtree(run)
        os.mkdir(run)
        os.chmod(run, 0o777)
        r, w = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
                os.environ["HOME"] = run
                os.chdir(run)
                p, f = run_groups(run, only, fx, "user")
                os.write(w, f"{p} {f}".encode())
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            os._exit(code)
        os.close(w)
        out = b""
        while True:
            b = os.read(r, 100)
            if not b:
                break
            out += b
        os.close(r)
        _, status = os.waitpid(pid, 0)
        try:
            passed, failed = map(int, out.split())
        except ValueError:
            print(f"FAIL harness.user_run: the child running as {args.as_user} died "
                  f"(wait status {status})", flush=True)
            passed, failed = 0, 1
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(fx, ignore_errors=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
