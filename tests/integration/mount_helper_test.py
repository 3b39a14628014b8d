#!/usr/bin/env python3
"""The mount helper: clio-fuse invoked as mount.fuse.clio with mount(8)'s arguments, the way
`mount -t fuse.clio` and /etc/fstab run it (SOURCE MOUNTPOINT -o OPTIONS, with fstab-only
options such as noauto and _netdev, and conf=FILE instead of CLIO_CONF in the environment).

    python3 tests/integration/mount_helper_test.py --build-dir build
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import Env, TestFailure, check, describe, is_mounted, log, run_cmd, wait_until  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    os.chdir("/")
    env = Env(build, "mount_helper")
    helper = os.path.join(build, "fs", "mount", "mount.fuse.clio")
    passed = failed = 0
    try:
        env.write_config()
        env.start_runtime()
        os.makedirs(env.mnt, exist_ok=True)
        env.mountpoints.add(env.mnt)
        plain = {k: v for k, v in os.environ.items() if k != "CLIO_CONF"}

        # mount -f ("fake"): everything is checked, nothing is mounted.
        cp = run_cmd([helper, "clio", env.mnt, "-f", "-o", f"conf={env.conf}"], env=plain)
        check(cp.returncode == 0, "mount -f failed\n" + describe(cp))
        check(not is_mounted(env.mnt), "mount -f mounted something")

        # An option the helper does not know is refused with usage status 2.
        cp = run_cmd([helper, "clio", env.mnt, "-z"], env=plain)
        check(cp.returncode == 2 and "unknown option -z" in cp.stderr, "bad option not refused\n" + describe(cp))

        # What /etc/fstab's "clio MNT fuse.clio noauto,_netdev,conf=FILE 0 0" becomes.
        cp = run_cmd([helper, "clio", env.mnt, "-n", "-o", f"rw,noauto,_netdev,x-systemd.automount,conf={env.conf}"],
                     env=plain, keep_as=env.logs("mount-helper"))
        check(cp.returncode == 0, "mount helper failed\n" + describe(cp))
        wait_until(lambda: is_mounted(env.mnt), "the helper's mount to appear")
        path = os.path.join(env.mnt, "via-helper.txt")
        with open(path, "w") as f:
            f.write("mounted by mount.fuse.clio\n")
        with open(path) as f:
            check(f.read() == "mounted by mount.fuse.clio\n", "read back differs")
        cp = run_cmd(["fusermount3", "-u", env.mnt])
        check(cp.returncode == 0, "unmount failed\n" + describe(cp))
        wait_until(lambda: not is_mounted(env.mnt), "the mount to go away")
        log("mount helper: fake mount, bad option and an fstab-style mount all behaved")
        passed += 1
    except TestFailure as e:
        log(f"FAIL mount_helper: {e}")
        failed += 1
    finally:
        env.cleanup()
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
