#!/usr/bin/env python3
"""The README's first command on a fresh Debian 12, the way a newcomer meets it.

A minimal root (`debootstrap --variant=minbase`, plus only git, ca-certificates and sudo: no
compiler, no library) gets a copy of the source tree, and `systemd-nspawn` runs in it:

1. bad input: with its package source unreachable, `scripts/install-deps.sh` exits 1 naming the
   packages it needed and the command to retry, and installs nothing;
2. the README's first command, `sudo scripts/run.sh`: it installs what it needs, builds, starts
   the runtime on the default config and mounts /mnt/clio; a file written there (a size that is
   not a page multiple) reads back byte for byte after an unmount and a second
   `sudo scripts/run.sh` (the runtime already running, mounted again), and the README's stop
   line stops both;
3. the test configuration's first step: `scripts/install-deps.sh --tests` then the configure
   step of `scripts/build.sh test`.

The host's apt cache is bound in (nothing is downloaded twice) and, unless --cold, the host's
ccache: the release build `scripts/test.sh` made before ctest is then a cache hit (ccache
checks every input, so a missing header or library still fails the build). --cold uses an
empty ccache, which is how the README's figure for a fresh machine was measured.

    python3 tests/integration/fresh_root_test.py [--src DIR] [--cold] [--no-bad-input] [--keep]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import SRC_DIR, TestFailure, check, describe, log, run_cmd  # noqa: E402
from debroot import APT_CACHE, make_root, without_fuse_mounts  # noqa: E402

NEWCOMER_PACKAGES = ("git", "ca-certificates", "sudo")
CCACHE_IN_ROOT = "/root/.cache/ccache"

FIRST_COMMAND = r"""
set -euo pipefail
step() { echo "STEP $*"; }
step run
started=$(date +%s)
sudo scripts/run.sh
echo "TIME first_command $(( $(date +%s) - started ))"
step mounted
findmnt -n -o FSTYPE /mnt/clio | grep -qx fuse.clio
step write
head -c 3000001 /dev/urandom > /root/hello.src
cp /root/hello.src /mnt/clio/hello.bin
sync /mnt/clio/hello.bin
step unmount
fusermount3 -u /mnt/clio
step run_again
sudo scripts/run.sh
step read
cmp /root/hello.src /mnt/clio/hello.bin
test "$(stat -c %s /mnt/clio/hello.bin)" = 3000001
step stop
fusermount3 -u /mnt/clio && clio_run stop
step done
"""

TEST_CONFIGURE = r"""
set -euo pipefail
step() { echo "STEP $*"; }
step install_tests
started=$(date +%s)
scripts/install-deps.sh --tests
echo "TIME install_tests $(( $(date +%s) - started ))"
step configure
scripts/build.sh test --configure-only
step done
"""


def host_ccache_dir():
    cp = run_cmd(["ccache", "-k", "cache_dir"]) if shutil.which("ccache") else None
    return cp.stdout.strip() if cp is not None and cp.returncode == 0 and cp.stdout.strip() else None


class Root:
    def __init__(self, path, src_inside, ccache):
        self.path = path
        self.src_inside = src_inside
        self.ccache = ccache

    def nspawn(self, script, timeout):
        """Runs a bash script in the root (its own mount namespace, /dev/fuse bound in, the host's
        network for apt and npm), from the copy of the source tree."""
        argv = without_fuse_mounts([
            "systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--pipe", "--as-pid2",
            "-D", self.path, "--bind=/dev/fuse", f"--bind={APT_CACHE}:/var/cache/apt/archives",
            f"--bind={self.ccache}:{CCACHE_IN_ROOT}", f"--setenv=CCACHE_DIR={CCACHE_IN_ROOT}",
            "--setenv=HOME=/root", f"--chdir={self.src_inside}", "--", "bash", "-c", script])
        started = time.monotonic()
        # The source sits at the host's path (ccache keys hold it); nspawn would hide one under
        # /tmp behind a tmpfs of its own.
        cp = run_cmd(argv, env=dict(os.environ, SYSTEMD_NSPAWN_TMPFS_TMP="0"), timeout=timeout)
        return cp, time.monotonic() - started

    def has_command(self, name):
        return run_cmd(["chroot", self.path, "sh", "-c", f"command -v {name}"]).returncode == 0

    def installed(self, package):
        cp = run_cmd(["chroot", self.path, "dpkg-query", "-W", "-f=${Status}", package])
        return cp.returncode == 0 and "install ok installed" in cp.stdout


def last_step(cp):
    steps = [l.split(" ", 1)[1] for l in cp.stdout.splitlines() if l.startswith("STEP ")]
    return steps[-1] if steps else None


def times(cp):
    return {l.split()[1]: int(l.split()[2]) for l in cp.stdout.splitlines() if l.startswith("TIME ")}


def trust_host_cas(root):
    """The certificate authorities the host's network needs (a proxy in front of the npm
    registry, say: /usr/local/share/ca-certificates), as on any machine of that network. Part of
    the machine, not of the project: the root gets them as it gets the host's apt sources."""
    local = "/usr/local/share/ca-certificates"
    names = [n for n in os.listdir(local) if n.endswith(".crt")] if os.path.isdir(local) else []
    if not names:
        return
    for n in names:
        shutil.copy(os.path.join(local, n), os.path.join(root.path, local.lstrip("/"), n))
    cp = run_cmd(["chroot", root.path, "update-ca-certificates"])
    check(cp.returncode == 0, "update-ca-certificates in the root\n" + describe(cp))
    log(f"the root trusts the host's local certificate authorities ({', '.join(names)})")


def copy_tree(src, dst):
    """The files a clone of `src` has (tracked, and untracked ones git does not ignore)."""
    cp = subprocess.run(["git", "-C", src, "ls-files", "-z", "-co", "--exclude-standard"],
                        capture_output=True, check=False)
    check(cp.returncode == 0, f"git ls-files in {src}: {cp.stderr.decode(errors='replace')}")
    os.makedirs(dst, exist_ok=True)
    names = [n for n in cp.stdout.decode().split("\0") if n and os.path.lexists(os.path.join(src, n))]
    tar_in = subprocess.Popen(["tar", "-C", src, "--null", "-T", "-", "-cf", "-"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    tar_out = subprocess.Popen(["tar", "-C", dst, "-xpf", "-"], stdin=tar_in.stdout)
    tar_in.stdout.close()
    tar_in.stdin.write("\0".join(names).encode())
    tar_in.stdin.close()
    check(tar_in.wait() == 0 and tar_out.wait() == 0, f"copying {src} into the root")
    log(f"copied {len(names)} files of {src} into the root")


def bad_input(root):
    """An unreachable package source: exit 1, the packages named, the retry command, nothing
    installed."""
    apt = os.path.join(root.path, "etc/apt")
    lists = os.path.join(root.path, "var/lib/apt/lists")
    os.rename(os.path.join(apt, "sources.list.d"), os.path.join(apt, "sources.list.d.saved"))
    os.makedirs(os.path.join(apt, "sources.list.d"))
    if os.path.exists(os.path.join(apt, "sources.list")):
        os.rename(os.path.join(apt, "sources.list"), os.path.join(apt, "sources.list.saved"))
    with open(os.path.join(apt, "sources.list"), "w") as f:
        f.write("deb http://127.0.0.1:9/debian bookworm main\n")
    os.rename(lists, lists + ".saved")
    os.makedirs(os.path.join(lists, "partial"))
    try:
        cp, secs = root.nspawn("scripts/install-deps.sh", timeout=300)
        log(f"install-deps.sh with an unreachable source: exit {cp.returncode} in {secs:.0f}s")
        check(cp.returncode == 1, "install-deps.sh with an unreachable package source: expected exit 1\n"
              + describe(cp))
        for needle in ("127.0.0.1:9", "nothing was installed; needed: gcc g++ ",
                       "retry: sudo scripts/install-deps.sh"):
            check(needle in cp.stderr, f"install-deps.sh did not say {needle!r}\n" + describe(cp))
        check(not root.installed("g++") and not root.installed("cmake"),
              "install-deps.sh failed but installed packages anyway")
        log("install-deps.sh named the unreachable source, the packages and the retry command, and installed nothing")
    finally:
        shutil.rmtree(lists)
        os.rename(lists + ".saved", lists)
        os.remove(os.path.join(apt, "sources.list"))
        if os.path.exists(os.path.join(apt, "sources.list.saved")):
            os.rename(os.path.join(apt, "sources.list.saved"), os.path.join(apt, "sources.list"))
        os.rmdir(os.path.join(apt, "sources.list.d"))
        os.rename(os.path.join(apt, "sources.list.d.saved"), os.path.join(apt, "sources.list.d"))


def phase(root, script, timeout, what):
    """Runs one of the scripts above in the root; fails naming the step it stopped at."""
    cp, secs = root.nspawn(script, timeout=timeout)
    check(cp.returncode == 0 and last_step(cp) == "done",
          f"{what} in a fresh root failed at step {last_step(cp)!r}\n" + describe(cp))
    return times(cp), secs


def first_command(root):
    t, secs = phase(root, FIRST_COMMAND, 2400, "the README's first command")
    log(f"sudo scripts/run.sh: built, started and mounted /mnt/clio in {t['first_command']}s; "
        f"a 3,000,001-byte file read back after a remount; stopped (all in {secs:.0f}s)")


def test_configure(root):
    t, secs = phase(root, TEST_CONFIGURE, 1800, "the test configuration")
    log(f"scripts/install-deps.sh --tests in {t['install_tests']}s, then the test configuration "
        f"configured (all in {secs:.0f}s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=SRC_DIR, help="the source tree to copy in (default: this one)")
    ap.add_argument("--cold", action="store_true", help="an empty ccache: the build of a fresh machine")
    ap.add_argument("--no-bad-input", action="store_true", help="skip the unreachable-source check")
    ap.add_argument("--keep", action="store_true", help="keep the root")
    args = ap.parse_args()
    src = os.path.realpath(args.src)
    os.chdir("/")
    for tool in ("debootstrap", "systemd-nspawn"):
        if not shutil.which(tool):
            log(f"FAIL: {tool} is not installed (scripts/install-deps.sh --tests installs it)")
            return 1
    T = os.path.realpath(tempfile.mkdtemp(prefix="clio-fresh-root-"))
    ok = False
    try:
        ccache = host_ccache_dir()
        if args.cold or ccache is None:
            ccache = os.path.join(T, "ccache")
            log(f"an empty ccache ({ccache}): a fresh machine's build")
        os.makedirs(ccache, exist_ok=True)
        root = Root(os.path.join(T, "root"), src, ccache)
        make_root(root.path, include=NEWCOMER_PACKAGES)
        trust_host_cas(root)
        for cc in ("cc", "c++", "gcc", "g++", "cmake"):
            check(not root.has_command(cc), f"the fresh root already has {cc}: it is not what a newcomer has")
        # The same path as on the host: the ccache keys hold the build directory's path.
        copy_tree(src, os.path.join(root.path, src.lstrip("/")))
        if not args.no_bad_input:
            bad_input(root)
        first_command(root)
        test_configure(root)
        ok = True
    except TestFailure as e:
        log(f"FAIL: {e}")
    finally:
        if args.keep:
            log(f"kept {T}")
        else:
            shutil.rmtree(T, ignore_errors=True)
    log("PASS fresh_root" if ok else "FAIL fresh_root")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
