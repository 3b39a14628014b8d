#!/usr/bin/env python3
"""The Debian package (scripts/package.sh, cmake/Packaging.cmake):

- lintian finds no error (warnings are printed);
- the control data: name, version, the dependencies the binaries need (dpkg-shlibdeps), the
  config as a conffile, maintainer scripts;
- the contents: binaries, mount helpers, systemd units, sysusers.d and tmpfiles.d entries, a
  man page per program, the default config identical to etc/clio.yaml;
- the units pass systemd-analyze verify with the package's binaries;
- the package works: its own clio_run, on its own /etc/clio/clio.yaml (state in a temporary
  $STATE_DIRECTORY), starts; its clioctl lists the tiers; its clio-fuse mounts, a file is
  written and read back; clio_run stop stops cleanly.

What this does not do, said plainly: it does not `dpkg -i` the package into a fresh Debian
root made with debootstrap (that needs the package's runtime dependencies, ROCm's HIP
libraries among them, downloaded into the root: hundreds of MiB for every CI run). It
unpacks the package with dpkg-deb and runs it from there on this machine instead; the
maintainer scripts are checked by lintian, not run.

    python3 tests/integration/package_test.py --deb-dir build-release
"""

import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import TestFailure, check, describe, is_mounted, log, run_cmd, wait_until  # noqa: E402

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_deb(deb_dir):
    debs = sorted(glob.glob(os.path.join(deb_dir, "clio_*_amd64.deb")), key=os.path.getmtime)
    check(debs, f"no clio_*_amd64.deb in {deb_dir}: build it with scripts/package.sh")
    # A package older than the binaries of its build would test yesterday's code.
    newest = max(os.path.getmtime(os.path.join(deb_dir, p)) for p in ("cli/clio_run", "cli/clioctl", "fs/mount/clio-fuse")
                 if os.path.exists(os.path.join(deb_dir, p)))
    check(os.path.getmtime(debs[-1]) >= newest,
          f"{debs[-1]} is older than the binaries in {deb_dir}: rebuild it with scripts/package.sh")
    return debs[-1]


def check_lintian(deb):
    cp = run_cmd(["lintian", "--tag-display-limit", "0", deb], timeout=600)
    lines = [l for l in cp.stdout.splitlines() + cp.stderr.splitlines() if l[:2] in ("E:", "W:")]
    for l in lines:
        log(f"lintian: {l}")
    errors = [l for l in lines if l.startswith("E:")]
    check(not errors, "lintian errors:\n" + "\n".join(errors))
    # lintian exits non-zero on errors only; anything else is lintian itself failing.
    check(cp.returncode == 0, "lintian failed\n" + describe(cp))


def check_control(deb, T):
    ctrl = os.path.join(T, "control")
    cp = run_cmd(["dpkg-deb", "-e", deb, ctrl])
    check(cp.returncode == 0, "dpkg-deb -e\n" + describe(cp))
    fields = {}
    with open(os.path.join(ctrl, "control")) as f:
        for line in f:
            if ":" in line and not line.startswith(" "):
                k, v = line.split(":", 1)
                fields[k] = v.strip()
    check(fields.get("Package") == "clio", f"package name: {fields}")
    check(fields.get("Version", "").startswith("0.1.0-"), f"version: {fields.get('Version')}")
    depends = fields.get("Depends", "")
    # RocksDB is linked statically (Debian ships its archive); its compressors are shared.
    for dep in ("fuse3", "libfuse3-3", "libzstd1", "libisal2", "libsystemd0", "liburing2", "libyaml-cpp"):
        check(dep in depends, f"Depends lacks {dep}: {depends}")
    with open(os.path.join(ctrl, "conffiles")) as f:
        check("/etc/clio/clio.yaml" in f.read().split(), "/etc/clio/clio.yaml is not a conffile")
    for script in ("postinst", "prerm", "postrm"):
        path = os.path.join(ctrl, script)
        check(os.access(path, os.X_OK), f"{script} is missing or not executable")
    with open(os.path.join(ctrl, "postinst")) as f:
        text = f.read()
    check("systemd-sysusers" in text and "tmpfiles" in text, "postinst does not make the user and directories")


def check_contents(root):
    for rel in ("usr/bin/clio_run", "usr/bin/clioctl", "usr/bin/clio-fuse"):
        check(os.access(os.path.join(root, rel), os.X_OK), f"{rel} is missing or not executable")
    for helper in ("mount.fuse.clio", "mount.clio"):
        link = os.path.join(root, "usr/sbin", helper)
        check(os.path.islink(link) and os.readlink(link) == "../bin/clio-fuse", f"{helper} is not a link to clio-fuse")
    for rel in ("lib/systemd/system/clio-runtime.service", "lib/systemd/system/clio-fuse@.service",
                "usr/lib/sysusers.d/clio.conf", "usr/lib/tmpfiles.d/clio.conf",
                "usr/share/doc/clio/copyright", "usr/share/doc/clio/changelog.Debian.gz",
                "usr/share/bash-completion/completions/clioctl", "usr/share/bash-completion/completions/clio_run",
                "usr/share/clio/grafana/clio-dashboard.json", "usr/share/doc/clio/metrics.md",
                "usr/share/doc/clio/write-a-module.md", "usr/lib/clio/modules/libclio_stats.so"):
        check(os.path.isfile(os.path.join(root, rel)), f"{rel} is missing")
    for page in ("clio_run", "clioctl", "clio-fuse"):
        with gzip.open(os.path.join(root, f"usr/share/man/man8/{page}.8.gz"), "rt") as f:
            check(f.read().startswith(f".TH {page.upper()} 8"), f"{page}.8 is not a man page")
    with open(os.path.join(root, "etc/clio/clio.yaml")) as a, open(os.path.join(SRC, "etc/clio.yaml")) as b:
        check(a.read() == b.read(), "the packaged /etc/clio/clio.yaml differs from etc/clio.yaml")


def check_units(root, T):
    if not shutil.which("systemd-analyze"):
        log("SKIPPED unit verification: systemd-analyze is not installed")
        return
    units = os.path.join(T, "units")
    os.makedirs(units)
    for name in ("clio-runtime.service", "clio-fuse@.service"):
        with open(os.path.join(root, "lib/systemd/system", name)) as f:
            text = f.read().replace("/usr/bin/", os.path.join(root, "usr/bin") + "/")
        with open(os.path.join(units, name), "w") as f:
            f.write(text)
    os.symlink(os.path.join(units, "clio-fuse@.service"), os.path.join(units, "clio-fuse@mnt-clio.service"))
    cp = run_cmd(["systemd-analyze", "verify", "--man=no", os.path.join(units, "clio-runtime.service"),
                  os.path.join(units, "clio-fuse@mnt-clio.service")])
    bad = [l for l in cp.stderr.splitlines() if any(w in l for w in ("Unknown", "Failed", "ignoring", "not executable"))]
    check(cp.returncode == 0 and not bad, "systemd-analyze verify of the packaged units\n" + describe(cp))


def run_package(root, T):
    state = os.path.join(T, "state")
    mnt = os.path.join(T, "mnt")
    os.makedirs(state)
    os.makedirs(mnt)
    env = dict(os.environ)
    env.pop("CLIO_IO_FAULT_INJECTION", None)
    # The packaged config, but every task observed once runs on the slow class: the release
    # build (g++, which the clang test build does not exercise) runs the runtime's coroutine
    # paths for real (g++ 12 has miscompiled co_await expressions that clang compiles right).
    with open(os.path.join(root, "etc/clio/clio.yaml")) as f:
        text = f.read()
    check("  slow_task_us: 2000\n" in text, "the packaged config has no slow_task_us: 2000 line")
    conf = os.path.join(T, "clio.yaml")
    with open(conf, "w") as f:
        f.write(text.replace("  slow_task_us: 2000\n", "  slow_task_us: 1\n", 1))
    env.update({"CLIO_CONF": conf, "STATE_DIRECTORY": state})
    bin_ = os.path.join(root, "usr/bin")
    started = mounted = False
    problems = []
    try:
        cp = run_cmd([os.path.join(bin_, "clio_run"), "start"], env=env)
        check(cp.returncode == 0, "the packaged clio_run did not start on the packaged config\n" + describe(cp))
        started = True
        check(os.path.exists(os.path.join(state, "clio.sock")), "the socket is not in $STATE_DIRECTORY")
        cp = run_cmd([os.path.join(bin_, "clioctl"), "tier", "stat", "--json"], env=env)
        check(cp.returncode == 0, "the packaged clioctl tier stat\n" + describe(cp))
        tiers = json.loads(cp.stdout)
        check(len(tiers) >= 2 and all(t["capacity"] > 0 for t in tiers), f"tier stat: {tiers}")
        cp = run_cmd([os.path.join(bin_, "clio-fuse"), mnt], env=env)
        check(cp.returncode == 0, "the packaged clio-fuse did not mount\n" + describe(cp))
        mounted = True
        wait_until(lambda: is_mounted(mnt), f"{mnt} to be mounted")
        data = os.urandom(300000)
        with open(os.path.join(mnt, "from-the-package"), "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        with open(os.path.join(mnt, "from-the-package"), "rb") as f:
            check(f.read() == data, "a file written through the packaged mount reads back other bytes")
        big = os.urandom(1 << 20)
        for i in range(24):
            with open(os.path.join(mnt, f"big{i}"), "wb") as f:
                for _ in range(2):
                    f.write(big)
                os.fsync(f.fileno())
        for i in range(24):
            with open(os.path.join(mnt, f"big{i}"), "rb") as f:
                check(f.read() == big + big, f"big{i} reads back other bytes")
        cp = run_cmd([os.path.join(bin_, "clioctl"), "stat", "--json"], env=env)
        check(cp.returncode == 0, "the packaged clioctl stat\n" + describe(cp))
        rt = json.loads(cp.stdout)["runtime"]
        check(rt["slow_tasks"] > 0 and rt["shm_channels"] > 0, f"the slow class and channels unused: {rt}")
    finally:
        # Never leave a mount or a daemon behind, and never hide the first failure.
        if mounted and run_cmd(["fusermount3", "-u", mnt]).returncode != 0:
            problems.append("fusermount3 -u of the packaged mount failed")
            run_cmd(["fusermount3", "-uz", mnt])
        if started:
            cp = run_cmd([os.path.join(bin_, "clio_run"), "stop"], env=env)
            if cp.returncode != 0:
                problems.append("clio_run stop\n" + describe(cp))
                try:
                    with open(os.path.join(state, "clio_run.pid")) as f:
                        os.kill(int(f.read().strip()), 9)
                except (OSError, ValueError):
                    pass
    check(not problems, "\n".join(problems))
    log("the unpacked package started, listed its tiers, mounted, and stopped cleanly")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deb-dir", required=True, help="where scripts/package.sh left clio_*.deb")
    args = ap.parse_args()
    args.deb_dir = os.path.abspath(args.deb_dir)
    os.chdir("/")  # never hold a mount busy through our cwd
    import tempfile
    T = os.path.realpath(tempfile.mkdtemp(prefix="clio-package-"))
    ok = False
    try:
        deb = find_deb(os.path.abspath(args.deb_dir))
        log(f"package {deb}")
        check_lintian(deb)
        check_control(deb, T)
        root = os.path.join(T, "root")
        cp = run_cmd(["dpkg-deb", "-x", deb, root])
        check(cp.returncode == 0, "dpkg-deb -x\n" + describe(cp))
        check_contents(root)
        check_units(root, T)
        run_package(root, T)
        ok = True
    except TestFailure as e:
        log(f"FAIL: {e}")
    finally:
        shutil.rmtree(T, ignore_errors=True)
    log("PASS package" if ok else "FAIL package")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
