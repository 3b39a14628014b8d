#!/usr/bin/env python3
"""The Debian package installed the way an operator installs it, on a fresh Debian 12 root:

- `debootstrap --variant=minbase bookworm` makes the root (its .debs cached in the host's apt
  cache, so a second run downloads nothing);
- `apt-get install ./clio_*.deb` inside it (chroot) pulls the package's dependencies, runs its
  maintainer scripts: the clio user and group exist afterwards, /etc/clio/clio.yaml is there;
- `systemd-nspawn --boot` boots that root with systemd as its PID 1 (no bus or machined is
  needed: --register=no --keep-unit); inside it `systemctl start clio-runtime.service
  clio-fuse@mnt-clio.service` gives a mount on /mnt/clio, a file written there reads back,
  `clioctl tier stat --json` lists the tiers of the packaged config, the runtime runs as the
  clio user and logs to journald, and `systemctl stop` stops both units cleanly (ExecStop
  flushes).

What the machine does not allow, said plainly: the container shares the host's kernel and
/dev/fuse (bound in), and the host's cgroup setup; it is not a VM.

    python3 tests/integration/package_install_test.py --deb-dir build-release
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import TestFailure, check, describe, log, run_cmd, wait_until  # noqa: E402
from package_test import find_deb  # noqa: E402
from debroot import APT_CACHE, make_root, mounted, without_fuse_mounts  # noqa: E402


def chroot_install(root, deb):
    """apt-get install of the package inside the root, the host's apt cache bound in."""
    shutil.copy(deb, os.path.join(root, "tmp"))
    inside = "/tmp/" + os.path.basename(deb)
    with mounted(root, [(APT_CACHE, "var/cache/apt/archives", ["--bind"]), ("proc", "proc", ["-t", "proc"])]):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["chroot", root, "apt-get", "install", "-y", "-q", "--no-install-recommends", inside]
        cp = run_cmd(install, env=env, timeout=900)
        if cp.returncode != 0 and "Failed to fetch" in cp.stdout + cp.stderr:
            # The host's lists were older than the mirror: fetch the root's own, then retry.
            log("apt-get install: the host's package lists are stale; apt-get update in the root")
            cp = run_cmd(["chroot", root, "apt-get", "update", "-q"], env=env, timeout=900)
            check(cp.returncode == 0, "apt-get update in the root\n" + describe(cp))
            cp = run_cmd(install, env=env, timeout=900)
        check(cp.returncode == 0, "apt-get install of the package into the fresh root\n" + describe(cp))
    cp = run_cmd(["chroot", root, "dpkg-query", "-W", "-f=${Status} ${Version}", "clio"])
    check(cp.returncode == 0 and cp.stdout.startswith("install ok installed"),
          "dpkg does not list clio as installed\n" + describe(cp))
    with open(os.path.join(root, "etc/passwd")) as f:
        check(re.search(r"^clio:x:\d+:\d+:", f.read(), re.M), "postinst did not create the clio user")
    check(os.path.isfile(os.path.join(root, "etc/clio/clio.yaml")), "/etc/clio/clio.yaml is missing")
    log(f"installed {os.path.basename(deb)} into the root with apt-get; the clio user exists")


class Container:
    """The root booted by systemd-nspawn; commands run in it through nsenter."""

    def __init__(self, root, log_path):
        self.root = root
        self.log_path = log_path
        self.out = open(log_path, "wb")
        self.proc = subprocess.Popen(
            without_fuse_mounts(["systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
                                 "--console=read-only", "-D", root, "--bind=/dev/fuse", "--boot"]),
            stdin=subprocess.DEVNULL, stdout=self.out, stderr=subprocess.STDOUT)
        self.pid = wait_until(self._init_pid, "the container's systemd to start", timeout=120, interval=0.2)

    def _init_pid(self):
        """The host pid of the container's PID 1: a descendant of systemd-nspawn whose pid in
        its own namespace is 1."""
        if self.proc.poll() is not None:
            raise TestFailure(f"systemd-nspawn exited with {self.proc.returncode}\n{self.log_tail()}")
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/status") as f:
                    fields = dict(l.split(":", 1) for l in f if ":" in l)
                nspid = fields.get("NSpid", "").split()
                if len(nspid) < 2 or nspid[-1] != "1" or not self._descends(int(d)):
                    continue
                return int(d)
            except OSError:
                continue
        return None

    def _descends(self, pid):
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])  # field 4, after the comm
            if pid == self.proc.pid:
                return True
        return False

    def run(self, *argv, timeout=300):
        return run_cmd(["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-n", "-p", "--"] + list(argv),
                       timeout=timeout)

    def log_tail(self):
        self.out.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-4000:].decode(errors="replace")

    def poweroff(self):
        if self.proc.poll() is None:
            if self.run("systemctl", "poweroff", "--no-block").returncode != 0:
                self.proc.terminate()  # systemd-nspawn shuts its container down in order on SIGTERM
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()
        return self.proc.returncode


def in_container(c):
    # systemctl reaches the container's systemd on its private socket, made early in boot.
    wait_until(lambda: c.run("test", "-S", "/run/systemd/private").returncode == 0,
               "the container's systemd to listen on /run/systemd/private", timeout=120, interval=0.2)
    cp = c.run("systemctl", "is-system-running", "--wait", timeout=300)
    log(f"the container booted: {cp.stdout.strip()}")
    check(cp.stdout.strip() in ("running", "degraded"), "the container did not boot\n" + describe(cp))

    cp = c.run("systemctl", "start", "clio-runtime.service", "clio-fuse@mnt-clio.service")
    if cp.returncode != 0:
        j = c.run("journalctl", "--no-pager", "-n", "60", "-u", "clio-runtime", "-u", "clio-fuse@mnt-clio")
        raise TestFailure("systemctl start of the packaged units\n" + describe(cp) + "\njournal:\n" + j.stdout)
    for unit in ("clio-runtime.service", "clio-fuse@mnt-clio.service"):
        cp = c.run("systemctl", "is-active", unit)
        check(cp.stdout.strip() == "active", f"{unit} is not active\n" + describe(cp))
    cp = c.run("sh", "-c", "stat -c %U /proc/$(systemctl show -p MainPID --value clio-runtime.service)")
    check(cp.stdout.split() == ["clio"], "the runtime does not run as the clio user\n" + describe(cp))

    cp = c.run("clioctl", "tier", "stat", "--json")
    check(cp.returncode == 0, "clioctl tier stat in the container\n" + describe(cp))
    tiers = json.loads(cp.stdout)
    check(len(tiers) >= 2 and all(t["capacity"] > 0 for t in tiers), f"tier stat: {tiers}")
    log(f"clioctl tier stat: {', '.join(t['name'] for t in tiers)}")

    cp = c.run("findmnt", "-n", "-o", "FSTYPE", "/mnt/clio")
    check(cp.stdout.strip().startswith("fuse"), "/mnt/clio is not a FUSE mount\n" + describe(cp))
    cp = c.run("sh", "-c", "head -c 3000000 /dev/urandom > /tmp/src && cp /tmp/src /mnt/clio/from-dpkg && "
                           "sync /mnt/clio/from-dpkg && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; "
                           "cmp /tmp/src /mnt/clio/from-dpkg && stat -c %s /mnt/clio/from-dpkg")
    check(cp.returncode == 0 and cp.stdout.split()[-1:] == ["3000000"],
          "a file written through the packaged mount did not read back\n" + describe(cp))

    cp = c.run("journalctl", "--no-pager", "-u", "clio-runtime", "-o", "cat")
    check("serving on" in cp.stdout, "the runtime's log is not in the journal\n" + describe(cp))

    cp = c.run("systemctl", "stop", "clio-fuse@mnt-clio.service", "clio-runtime.service")
    check(cp.returncode == 0, "systemctl stop of the packaged units\n" + describe(cp))
    for unit in ("clio-runtime.service", "clio-fuse@mnt-clio.service"):
        cp = c.run("systemctl", "show", "-p", "ActiveState,Result", unit)
        if "ActiveState=inactive" not in cp.stdout or "Result=success" not in cp.stdout:
            j = c.run("journalctl", "--no-pager", "-n", "40", "-u", unit)
            raise TestFailure(f"{unit} did not stop cleanly\n" + describe(cp) + "\njournal:\n" + j.stdout)
    cp = c.run("findmnt", "/mnt/clio")
    check(cp.returncode != 0, "/mnt/clio is still mounted after the stop")
    log("systemctl start gave a working /mnt/clio; clioctl tier stat answered; both units stopped cleanly")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deb-dir", required=True, help="where scripts/package.sh left clio_*.deb")
    ap.add_argument("--keep", action="store_true", help="keep the root and the container's log")
    args = ap.parse_args()
    args.deb_dir = os.path.abspath(args.deb_dir)
    os.chdir("/")  # never hold a mount busy through our cwd
    for tool in ("debootstrap", "systemd-nspawn", "nsenter"):
        if not shutil.which(tool):
            log(f"FAIL: {tool} is not installed (scripts/install-deps.sh --tests installs it)")
            return 1
    T = os.path.realpath(tempfile.mkdtemp(prefix="clio-pkg-install-"))
    root = os.path.join(T, "root")
    ok = False
    container = None
    try:
        deb = find_deb(args.deb_dir)
        log(f"package {deb}")
        make_root(root)
        chroot_install(root, deb)
        container = Container(root, os.path.join(T, "container.log"))
        in_container(container)
        rc = container.poweroff()
        container = None
        check(rc == 0, f"the container did not power off cleanly (systemd-nspawn exit status {rc})")
        ok = True
    except TestFailure as e:
        log(f"FAIL: {e}")
        if container is not None:
            log("container console:\n" + container.log_tail())
    finally:
        if container is not None:
            container.poweroff()
        if args.keep:
            log(f"kept {T}")
        else:
            shutil.rmtree(T, ignore_errors=True)
    log("PASS package_install" if ok else "FAIL package_install")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
