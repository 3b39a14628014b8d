"""A fresh minimal Debian 12 root for the tests that meet CLIO the way a newcomer or an operator
does (fresh_root_test.py, package_install_test.py).

`debootstrap --variant=minbase bookworm` makes it; its .debs, and those apt fetches inside it,
are kept in the host's apt cache, so a second run downloads nothing. The root gets the host's
apt sources and package lists, so it resolves the same versions without fetching the lists
again. Nothing else of the host goes in: no compiler, no library, no tool.
"""

import contextlib
import glob
import os
import re
import shutil
import time

from e2e_test import check, describe, log, run_cmd

APT_CACHE = "/var/cache/apt/archives"

# A namespace cloned from the host's (systemd-nspawn makes one) keeps its own copy of every mount
# it found, and where the host's mounts are private an unmount on the host never reaches that
# copy: the FUSE connection lives on, and a test beside it that unmounts its CLIO mount waits for
# a clio-fuse that serves the container's copy until the container ends. So a container starts
# from a namespace of its own whose copies of FUSE mounts are detached first.
_DETACH_FUSE = ("findmnt -rn -o TARGET,FSTYPE | awk '$2 ~ /^fuse($|[.]|blk$)/ {print $1}' | sort -r | "
                "while read -r m; do umount -l \"$m\"; done; exec \"$@\"")


def without_fuse_mounts(argv):
    """argv, run in a private mount namespace without the host's FUSE mounts (see above)."""
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", _DETACH_FUSE, "sh"] + list(argv)


def host_mirror():
    """The Debian mirror the host's apt uses (the only network these machines reach)."""
    for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*")):
        try:
            with open(path) as f:
                text = f.read()
        except OSError:
            continue
        m = re.search(r"^URIs:\s*(\S+/debian)\s*$", text, re.M) or \
            re.search(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+/debian)\s+bookworm", text, re.M)
        if m:
            return m.group(1)
    return "http://deb.debian.org/debian"


def make_root(root, include=()):
    """debootstrap a minbase bookworm root at `root`, with the packages `include` added."""
    os.makedirs(APT_CACHE, exist_ok=True)
    started = time.monotonic()
    argv = ["debootstrap", "--variant=minbase", f"--cache-dir={APT_CACHE}"]
    if include:
        argv.append("--include=" + ",".join(include))
    cp = run_cmd(argv + ["bookworm", root, host_mirror()], timeout=900)
    check(cp.returncode == 0, "debootstrap of a Debian 12 root\n" + describe(cp))
    log(f"debootstrap: a minbase bookworm root in {time.monotonic() - started:.0f}s"
        + (f" (with {', '.join(include)})" if include else ""))
    shutil.rmtree(os.path.join(root, "etc/apt/sources.list.d"), ignore_errors=True)
    shutil.copytree("/etc/apt/sources.list.d", os.path.join(root, "etc/apt/sources.list.d"))
    if os.path.exists("/etc/apt/sources.list"):
        shutil.copy("/etc/apt/sources.list", os.path.join(root, "etc/apt/sources.list"))
    lists = os.path.join(root, "var/lib/apt/lists")
    for p in glob.glob("/var/lib/apt/lists/*"):
        if os.path.isfile(p):
            shutil.copy(p, lists)


@contextlib.contextmanager
def mounted(root, mounts):
    """Mounts (source, path inside root, mount options) for the duration; unmounts in reverse."""
    done = []
    try:
        for src, dst, opts in mounts:
            target = os.path.join(root, dst.lstrip("/"))
            os.makedirs(target, exist_ok=True)
            cp = run_cmd(["mount"] + opts + [src, target])
            check(cp.returncode == 0, f"mount {src} in the root\n" + describe(cp))
            done.append(target)
        yield
    finally:
        for target in reversed(done):
            run_cmd(["umount", target])
