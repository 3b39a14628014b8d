#!/usr/bin/env python3
"""The systemd integration, without needing systemd as PID 1:

- the units in etc/systemd pass `systemd-analyze verify` with no warning (with the binaries of
  this build in place of /usr/bin);
- `clio_run start --foreground` speaks the sd_notify protocol a Type=notify unit relies on:
  READY=1 with MAINPID only once its socket serves, STOPPING=1 on SIGTERM, then a clean exit;
- it takes $STATE_DIRECTORY (what StateDirectory= sets) as its state directory;
- clio-fuse -f announces READY=1 once mounted.

    python3 tests/integration/systemd_test.py --build-dir build
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import (Env, TestFailure, check, describe, is_mounted, log, run_cmd,  # noqa: E402
                      wait_until)

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class NotifySocket:
    """A datagram socket in the role of systemd's notify socket."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(60)
        self.messages = []

    def next(self, what):
        try:
            data = self.sock.recv(4096).decode()
        except socket.timeout:
            raise TestFailure(f"no sd_notify message ({what}) within 60 s")
        fields = dict(line.split("=", 1) for line in data.splitlines() if "=" in line)
        self.messages.append(fields)
        return fields

    def close(self):
        self.sock.close()


def check_units(T, build):
    """systemd-analyze verify on copies of the units whose /usr/bin paths name this build."""
    if not shutil.which("systemd-analyze"):
        log("SKIPPED unit verification: systemd-analyze is not installed")
        return
    units = os.path.join(T, "units")
    os.makedirs(units)
    bins = {"/usr/bin/clio_run": os.path.join(build, "cli", "clio_run"),
            "/usr/bin/clio-fuse": os.path.join(build, "fs", "mount", "clio-fuse")}
    for name in ("clio-runtime.service", "clio-fuse@.service"):
        with open(os.path.join(SRC, "etc", "systemd", name)) as f:
            text = f.read()
        for k, v in bins.items():
            text = text.replace(k, v)
        with open(os.path.join(units, name), "w") as f:
            f.write(text)
    instance = os.path.join(units, "clio-fuse@mnt-clio.service")
    os.symlink(os.path.join(units, "clio-fuse@.service"), instance)
    cp = run_cmd(["systemd-analyze", "verify", "--man=no", os.path.join(units, "clio-runtime.service"), instance])
    # verify fails on missing executables, but only warns of unknown keys and bad values (and
    # ignores them, as systemd would): any warning about these units is a failure here.
    problems = [l for l in cp.stderr.splitlines() if "clio" in l and
                any(w in l for w in ("Unknown", "Failed", "ignoring", "not executable", "Invalid", "invalid"))]
    check(cp.returncode == 0, "systemd-analyze verify failed\n" + describe(cp))
    check(cp.returncode == 0 and not problems, "systemd-analyze verify\n" + describe(cp))
    log("units verified")


def check_runtime_notify(env):
    notify = NotifySocket(os.path.join(env.T, "notify.sock"))
    state = os.path.join(env.T, "from-systemd")
    os.makedirs(state)
    # A config that leaves state_dir and socket_path empty: both come from $STATE_DIRECTORY.
    conf = env.write_config(env.config_text().replace(f'state_dir: "{env.T}/state"', 'state_dir: ""')
                            .replace(f'socket_path: "{env.T}/clio.sock"', 'socket_path: ""'),
                            os.path.join(env.T, "systemd.yaml"))
    e = env.env(conf=conf)
    e.update({"NOTIFY_SOCKET": notify.path, "STATE_DIRECTORY": state})
    log_f = open(env.logs("clio_run_notify") + ".stderr", "ab")
    p = subprocess.Popen([env.clio_run, "start", "--foreground"], env=e, stdin=subprocess.DEVNULL,
                         stdout=log_f, stderr=log_f)
    try:
        ready = notify.next("READY")
        check(ready.get("READY") == "1", f"first sd_notify message is not READY=1: {ready}")
        check(ready.get("MAINPID") == str(p.pid), f"MAINPID {ready.get('MAINPID')} is not {p.pid}")
        sock = os.path.join(state, "clio.sock")
        check(sock in ready.get("STATUS", ""), f"STATUS does not name the socket: {ready}")
        # Ready means serving: a client gets an answer now, with no retry.
        cp = run_cmd([env.clio_run, "status"], env={**e, "NOTIFY_SOCKET": ""})
        check(cp.returncode == 0 and cp.stdout.startswith("running"), "status right after READY=1\n" + describe(cp))
        check(os.path.exists(os.path.join(state, "metadata")), "the metadata is not under $STATE_DIRECTORY")
        p.send_signal(signal.SIGTERM)
        stopping = notify.next("STOPPING")
        check(stopping.get("STOPPING") == "1", f"after SIGTERM: {stopping}")
        try:
            rc = p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            raise TestFailure("clio_run did not exit within 120 s of SIGTERM")
        check(rc == 0, f"clio_run exited with {rc} after SIGTERM (expected a clean stop)")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        notify.close()
        log_f.close()
    log("runtime: READY=1 once serving, STOPPING=1 on SIGTERM, clean exit; state in $STATE_DIRECTORY")


def check_fuse_notify(env):
    env.write_config()
    env.start_runtime()
    notify = NotifySocket(os.path.join(env.T, "notify-fuse.sock"))
    e = env.env()
    e["NOTIFY_SOCKET"] = notify.path
    env.mountpoints.add(env.mnt)
    log_f = open(env.logs("clio-fuse-notify") + ".stderr", "ab")
    p = subprocess.Popen([env.clio_fuse, env.mnt, "-f"], env=e, stdin=subprocess.DEVNULL, stdout=log_f,
                         stderr=log_f)
    try:
        ready = notify.next("READY")
        check(ready.get("READY") == "1" and ready.get("MAINPID") == str(p.pid), f"clio-fuse: {ready}")
        check(is_mounted(env.mnt), "READY=1 before the mount is there")
        with open(os.path.join(env.mnt, "hello"), "w") as f:
            f.write("hello")
        cp = run_cmd(["fusermount3", "-u", env.mnt])
        check(cp.returncode == 0, "fusermount3 -u\n" + describe(cp))
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise TestFailure("clio-fuse did not exit within 60 s of the unmount")
        check(rc == 0, f"clio-fuse exited with {rc} after the unmount")
        # A stop by signal (what systemd sends after ExecStop, or instead of it) is a clean
        # exit too: the mount goes and the exit status is 0, so the unit does not end failed.
        p = subprocess.Popen([env.clio_fuse, env.mnt, "-f"], env=e, stdin=subprocess.DEVNULL, stdout=log_f,
                             stderr=log_f)
        ready = notify.next("READY")
        check(ready.get("READY") == "1", f"clio-fuse, second mount: {ready}")
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise TestFailure("clio-fuse did not exit within 60 s of SIGTERM")
        check(rc == 0, f"clio-fuse exited with {rc} after SIGTERM (expected a clean stop)")
        check(not is_mounted(env.mnt), "the mount is still there after clio-fuse exited on SIGTERM")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        notify.close()
        log_f.close()
    env.stop_runtime()
    log("clio-fuse: READY=1 once mounted; a clean exit after an unmount and after SIGTERM")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    os.chdir("/")
    env = Env(build, "systemd")
    ok = False
    try:
        check_units(env.T, build)
        check_runtime_notify(env)
        check_fuse_notify(env)
        ok = True
    except TestFailure as e:
        log(f"FAIL: {e}")
        tail = env.log_tail()
        if tail:
            log("daemon logs:" + tail)
    finally:
        for err in env.cleanup():
            log(f"cleanup problem: {err}")
    log("PASS systemd" if ok else "FAIL systemd")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
