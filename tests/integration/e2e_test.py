#!/usr/bin/env python3
"""End-to-end tests of CLIO: runtime + FUSE mount + restart / crash recovery.

Usage:
    python3 tests/integration/e2e_test.py --build-dir build [--only SCENARIO] [--keep]

Scenarios: see SCENARIOS below and README.md.
Python 3 standard library only. Needs /dev/fuse and fusermount3. The last line printed is
"N passed, M failed"; the exit status is non-zero when anything failed.
"""

import argparse
import hashlib
import html.parser
import errno as errno_mod
import json
import os
import pty
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback

KiB = 1024
MiB = 1024 * 1024
CMD_TIMEOUT = 120          # seconds, every external command
READY_TIMEOUT = 60         # seconds, waiting for a daemon / mount to become ready
SCENARIOS = ("clean_restart", "kill9_restart", "power_cut", "bad_input", "s3_restart",
             "s3_kill9", "full_disk", "tier_ops", "attached_pool", "safe_bdev", "metrics",
             "admin_ops", "dashboard", "pool_ops")
SRC_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
S3_KEY, S3_SECRET = "E2EACCESSKEY", "e2e/secret+key"

# A RAM tier in front of {second_tier} (one of the entries below), under the filesystem pool.
CONFIG_SKELETON = """\
runtime:
  state_dir: "{T}/state"
  socket_path: "{T}/clio.sock"
  num_threads: 4
metadata:
  path: "${{CLIO_STATE_DIR}}/metadata"
  commit_interval_ms: 500
compose:
  - mod_name: clio_cte_core
    pool_name: clio_cte_core
    pool_id: "512.0"
    flush_interval_ms: 500
    storage:
      - path: "ram::{ram_name}"
        bdev_type: ram
        capacity_limit: "{ram_capacity}"
        score: 1.0
{second_tier}  - mod_name: clio_fs
    pool_name: clio_fs
    pool_id: "600.0"
    cte_pool: clio_cte_core
    chunk_size: "1MiB"
"""
FILE_TIER = """\
      - path: "${CLIO_STATE_DIR}/tiers/disk.dat"
        bdev_type: file
        capacity_limit: "2GB"
        growth_unit: "64MB"
        score: 0.2
        persistence_level: temporary
"""
# An S3 bucket: the signature-verifying stand-in of tests/objstore.
S3_TIER = """\
      - path: "s3://e2e-bucket/{ram_name}"
        bdev_type: s3
        alloc_log: "${CLIO_STATE_DIR}/tiers/s3.alloc_log"
        request_timeout_ms: 20000
        score: 0.1
"""


def config_text(T, ram_name, ram_capacity="32MB", second_tier=FILE_TIER):
    return CONFIG_SKELETON.format(T=T, ram_name=ram_name, ram_capacity=ram_capacity,
                                  second_tier=second_tier.replace("{ram_name}", ram_name))


class TestFailure(AssertionError):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------------------------
# Process and mount helpers
# ----------------------------------------------------------------------------------------------

def run_cmd(argv, env=None, timeout=CMD_TIMEOUT, keep_as=None):
    """Runs a command and returns a CompletedProcess with text stdout/stderr; never raises
    on a non-zero exit.

    Output goes to temporary files, not pipes: a program that daemonizes may keep its
    stdout/stderr open (logging), and a pipe would then never reach EOF. With keep_as (a path
    prefix) they are appended to keep_as.stdout/.stderr, which then also collect what a daemon
    logs later.
    """
    if keep_as:
        out_f, err_f = open(keep_as + ".stdout", "a+b"), open(keep_as + ".stderr", "a+b")
    else:
        out_f, err_f = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    with out_f as out, err_f as err:
        o0, e0 = out.seek(0, os.SEEK_END), err.seek(0, os.SEEK_END)
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            rc = p.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
            timed_out = True
        out.seek(o0)
        err.seek(e0)
        o, e = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
    if timed_out:
        raise TestFailure(f"command timed out after {timeout}s: {' '.join(argv)}\n"
                          f"stdout: {o}\nstderr: {e}")
    return subprocess.CompletedProcess(argv, rc, o, e)


def _text(b):
    if b is None:
        return ""
    if isinstance(b, bytes):
        return b.decode("utf-8", "replace")
    return b


def describe(cp):
    return (f"command: {' '.join(cp.args)}\nexit status: {cp.returncode}\n"
            f"stdout:\n{_text(cp.stdout).rstrip()}\nstderr:\n{_text(cp.stderr).rstrip()}")


def wait_until(cond, what, timeout=READY_TIMEOUT, interval=0.05):
    """Polls cond() until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TestFailure(f"timed out after {timeout}s waiting for: {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, 0.5)


def _unescape_mount_field(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mount_entries(path):
    """The /proc/self/mounts entries (fstype, source) whose mount point is path."""
    path = os.path.realpath(path) if os.path.exists(path) else os.path.abspath(path)
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and _unescape_mount_field(parts[1]) == path:
                out.append((parts[2], _unescape_mount_field(parts[0])))
    return out


def is_mounted(path):
    return bool(mount_entries(path))


def pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # state is the field after the ")" that closes comm
    state = data[data.rfind(")") + 2:].split()[0]
    return state not in ("Z", "X")


def process_gone(pid):
    """True once pid has exited with every thread (reaped, or a zombie leader alone)."""
    if pid_alive(pid):
        return False
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (FileNotFoundError, ProcessLookupError):
        return True


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []


def is_clio_run(pid):
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        exe = ""
    return "clio_run" in exe or any("clio_run" in a for a in proc_cmdline(pid))


FUSE_URING_PARAM = "/sys/module/fuse/parameters/enable_uring"


def kernel_has_fuse_uring():
    """Whether the kernel has FUSE over io_uring (the fuse module's parameters show once it is
    loaded, which an open of /dev/fuse does)."""
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError:
        pass
    return os.path.exists(FUSE_URING_PARAM)


def kernel_fuse_uring():
    """The kernel's switch for FUSE over io_uring: on or off."""
    with open(FUSE_URING_PARAM) as f:
        return f.read().strip() in ("Y", "1")


def set_kernel_fuse_uring(on):
    with open(FUSE_URING_PARAM, "w") as f:
        f.write("1\n" if on else "0\n")


def fuse_ring_threads(pid):
    """Names of a process's FUSE ring threads (fs/mount/fuse_uring.cc names them by state:
    clio-uring-reg, clio-uringQ once it served on CPU queue Q, clio-uring-no when refused)."""
    names = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return [n for n in names if n.startswith("clio-uring")]


def find_fuse_pids(fuse_bin, mountpoint):
    """Pids of clio-fuse processes serving exactly this mount point (our own temp dir)."""
    name = os.path.basename(fuse_bin)
    mp = os.path.abspath(mountpoint)
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        argv = proc_cmdline(d)
        if argv and os.path.basename(argv[0]) == name and \
                any(os.path.abspath(a) == mp for a in argv[1:] if not a.startswith("-")):
            if pid_alive(int(d)):
                pids.append(int(d))
    return pids


# ----------------------------------------------------------------------------------------------
# One test environment: temp dir, config, runtime, mount
# ----------------------------------------------------------------------------------------------

class Env:
    def __init__(self, build_dir, scenario, keep=False):
        self.build_dir = os.path.abspath(build_dir)
        self.clio_run = os.path.join(self.build_dir, "cli", "clio_run")
        self.clioctl = os.path.join(self.build_dir, "cli", "clioctl")
        self.clio_fuse = os.path.join(self.build_dir, "fs", "mount", "clio-fuse")
        self.scenario = scenario
        self.keep = keep
        self.T = os.path.realpath(tempfile.mkdtemp(prefix=f"clio-e2e-{scenario}-"))
        self.state = os.path.join(self.T, "state")
        self.mnt = os.path.join(self.T, "mnt")
        self.conf = os.path.join(self.T, "clio.yaml")
        # Unique RAM segment name, so that parallel ctest runs never share a segment.
        self.ram_name = f"e2e_{scenario}_{os.getpid()}_{os.path.basename(self.T)[-8:]}"
        self.ram_name = re.sub(r"[^A-Za-z0-9_]", "_", self.ram_name)
        self.mountpoints = set()      # every mount point we tried to mount, for cleanup
        self.confs = [self.conf]      # configs whose runtime we may have started
        self.fault_injection = False
        self.aborted = False
        self.s3 = None                # the S3 stand-in process, when a scenario uses one
        self.s3_port = None
        os.makedirs(self.mnt)

    # -- S3 stand-in ---------------------------------------------------------------------
    def start_s3(self):
        port_file = os.path.join(self.T, "s3.port")
        self.s3 = subprocess.Popen(
            [sys.executable, os.path.join(SRC_DIR, "tests", "objstore", "s3_server.py"),
             "--port", "0", "--port-file", port_file, "--access-key", S3_KEY,
             "--secret-key", S3_SECRET, "--require-content-md5"],
            stdin=subprocess.DEVNULL, stdout=open(self.logs("s3_server") + ".stdout", "ab"),
            stderr=open(self.logs("s3_server") + ".stderr", "ab"))

        def port():
            try:
                with open(port_file) as f:
                    return int(f.read().strip() or 0)
            except (FileNotFoundError, ValueError):
                check(self.s3.poll() is None, "the S3 stand-in exited at start")
                return 0
        self.s3_port = wait_until(port, "the S3 stand-in's port file")
        log(f"S3 stand-in on 127.0.0.1:{self.s3_port}")

    def s3_admin(self, path):
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.s3_port}{path}", timeout=30) as r:
            return json.loads(r.read())

    def s3_admin_post(self, path, body):
        """POST to the stand-in's admin API (tests/objstore/standin_common.py): faults."""
        import urllib.request
        req = urllib.request.Request(f"http://127.0.0.1:{self.s3_port}{path}", method="POST",
                                     data=json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    # -- config --------------------------------------------------------------------------
    def config_text(self, ram_capacity="32MB"):
        return config_text(self.T, self.ram_name, ram_capacity)

    def write_config(self, text=None, path=None):
        path = path or self.conf
        with open(path, "w") as f:
            f.write(text if text is not None else self.config_text())
        return path

    def env(self, conf=None, fault=None):
        e = dict(os.environ)
        e["CLIO_CONF"] = conf or self.conf
        if self.s3_port:
            e.update({"AWS_ACCESS_KEY_ID": S3_KEY, "AWS_SECRET_ACCESS_KEY": S3_SECRET,
                      "S3_ENDPOINT": f"http://127.0.0.1:{self.s3_port}",
                      "S3_ALLOW_BUCKET_CREATE": "1"})
        e.pop("CLIO_IO_FAULT_INJECTION", None)
        if fault if fault is not None else self.fault_injection:
            e["CLIO_IO_FAULT_INJECTION"] = "1"
        return e

    def check_binaries(self, *names):
        for b in names:
            check(os.path.isfile(b) and os.access(b, os.X_OK),
                  f"binary not found or not executable: {b} (built? --build-dir={self.build_dir})")

    def logs(self, name):
        d = os.path.join(self.T, "logs")
        os.makedirs(d, exist_ok=True)
        return os.path.join(d, name)

    # -- runtime -------------------------------------------------------------------------
    def pid_file(self):
        return os.path.join(self.state, "clio_run.pid")

    def runtime_pid(self):
        try:
            with open(self.pid_file()) as f:
                return int(f.read().strip().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def runtime_status(self):
        return run_cmd([self.clio_run, "status"], env=self.env()).returncode

    def start_runtime(self, mount=None, options=()):
        """Starts clio_run; with `mount`, the runtime serves the filesystem on that directory
        itself (clio_run start --mount, options as -o)."""
        argv = [self.clio_run, "start"]
        if mount:
            self.mountpoints.add(mount)
            argv += ["--mount", mount] + (["-o", ",".join(options)] if options else [])
        cp = run_cmd(argv, env=self.env(), keep_as=self.logs("clio_run"))
        check(cp.returncode == 0, "clio_run start failed\n" + describe(cp))
        if mount:
            check(is_mounted(mount), f"clio_run start --mount returned before {mount} was mounted")
            fstype = mount_entries(mount)[-1][0]
            check(fstype == "fuse.clio", f"{mount} is mounted with type {fstype!r}, not fuse.clio")
        wait_until(lambda: self.runtime_status() == 0, "`clio_run status` to report running")
        pid = wait_until(lambda: self.runtime_pid(), f"pid file {self.pid_file()}")
        check(pid_alive(pid), f"pid {pid} in {self.pid_file()} is not a live process")
        log(f"runtime started (pid {pid}{', fault injection' if self.fault_injection else ''})")
        return pid

    def stop_runtime(self):
        pid = self.runtime_pid()
        cp = run_cmd([self.clio_run, "stop"], env=self.env())
        check(cp.returncode == 0, "clio_run stop failed\n" + describe(cp))
        if pid:
            wait_until(lambda: not pid_alive(pid), f"runtime pid {pid} to exit after stop")
        check(self.runtime_status() != 0, "`clio_run status` still reports running after stop")
        log("runtime stopped")

    def kill9_runtime(self):
        pid = self.runtime_pid()
        check(pid is not None, f"no pid in {self.pid_file()}")
        check(pid_alive(pid), f"runtime pid {pid} is not alive before kill -9")
        check(is_clio_run(pid), f"pid {pid} from the pid file is not clio_run: "
                                f"{proc_cmdline(pid)}")
        os.kill(pid, signal.SIGKILL)
        # Gone with all its threads: a zombie leader whose other threads still finish a slow
        # device call keeps its files (the metadata's lock) until the last one exits.
        wait_until(lambda: process_gone(pid), f"runtime pid {pid} and its threads to die after SIGKILL")
        log(f"runtime pid {pid} killed with SIGKILL")

    # -- mount ---------------------------------------------------------------------------
    def mount(self, mnt=None, options=()):
        """Mounts with clio-fuse; options are extra -o options (e.g. ["allow_other"])."""
        mnt = mnt or self.mnt
        self.mountpoints.add(mnt)
        argv = [self.clio_fuse, mnt]
        if options:
            argv += ["-o", ",".join(options)]
        cp = run_cmd(argv, env=self.env(),
                     keep_as=self.logs("clio-fuse-" + os.path.basename(mnt)))
        check(cp.returncode == 0, f"clio-fuse {mnt} failed\n" + describe(cp))
        wait_until(lambda: is_mounted(mnt), f"{mnt} to appear in /proc/self/mounts")
        fstype = mount_entries(mnt)[-1][0]
        check(fstype.startswith("fuse"), f"{mnt} is mounted but with type {fstype!r}, not fuse")
        log(f"mounted {mnt} ({fstype})")

    def unmount(self, mnt=None):
        mnt = mnt or self.mnt
        cp = run_cmd(["fusermount3", "-u", mnt])
        check(cp.returncode == 0, "fusermount3 -u failed\n" + describe(cp))
        wait_until(lambda: not is_mounted(mnt), f"{mnt} to leave /proc/self/mounts")
        # The FUSE daemon must have finished (flushed) before the runtime is stopped.
        wait_until(lambda: not find_fuse_pids(self.clio_fuse, mnt),
                   f"clio-fuse for {mnt} to exit after unmount")
        log(f"unmounted {mnt}")

    def kill_fuse(self, mnt=None, sig=signal.SIGKILL):
        mnt = mnt or self.mnt
        for pid in find_fuse_pids(self.clio_fuse, mnt):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        wait_until(lambda: not find_fuse_pids(self.clio_fuse, mnt),
                   f"clio-fuse for {mnt} to die after signal {sig}", timeout=30)

    def crash(self):
        """kill -9 of the runtime, then of the FUSE daemon, then a lazy unmount.

        The FUSE daemon is killed too (before the runtime restarts) so that no dirty kernel
        page cache of the old mount can reach the new runtime: the node 'crashed' as a whole.
        """
        self.kill9_runtime()
        self.kill_fuse()
        run_cmd(["fusermount3", "-uz", self.mnt])
        wait_until(lambda: not is_mounted(self.mnt), f"{self.mnt} to leave /proc/self/mounts")
        log("crash done: runtime and clio-fuse killed, mount detached")

    # -- clioctl -------------------------------------------------------------------------
    def tier_stat(self):
        cp = run_cmd([self.clioctl, "tier", "stat", "--json"], env=self.env())
        check(cp.returncode == 0, "clioctl tier stat --json failed\n" + describe(cp))
        try:
            tiers = json.loads(_text(cp.stdout))
        except json.JSONDecodeError as e:
            raise TestFailure(f"clioctl tier stat --json printed invalid JSON ({e}):\n"
                              f"{_text(cp.stdout)}")
        check(isinstance(tiers, list) and tiers, f"tier stat: expected a non-empty JSON array, got {tiers!r}")
        for t in tiers:
            check(isinstance(t, dict), f"tier stat: entry is not an object: {t!r}")
            missing = [k for k in ("name", "type", "capacity", "used", "remaining", "score",
                                   "persistence") if k not in t]
            check(not missing, f"tier stat: entry lacks {missing}: {t!r}")
            check(isinstance(t["used"], (int, float)) and not isinstance(t["used"], bool),
                  f"tier stat: 'used' is not a number: {t!r}")
        check(len(tiers) >= 2, f"tier stat: expected both configured tiers, got {tiers!r}")
        return tiers

    # -- diagnostics and cleanup ---------------------------------------------------------
    def log_tail(self, limit=4000):
        """Tails of any log files the runtime left in its state dir."""
        out = []
        logs = os.path.join(self.T, "logs")
        for fn in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
            p = os.path.join(logs, fn)
            if os.path.getsize(p):
                with open(p, "rb") as f:
                    f.seek(max(0, os.path.getsize(p) - limit))
                    out.append(f"\n--- tail of {p} (daemon output) ---\n" + _text(f.read()))
        for root, dirs, files in os.walk(self.state):
            dirs[:] = [d for d in dirs if d not in ("metadata", "tiers")]  # RocksDB WALs, data
            for fn in files:
                if fn.endswith(".log"):
                    p = os.path.join(root, fn)
                    try:
                        with open(p, "rb") as f:
                            f.seek(max(0, os.path.getsize(p) - limit))
                            out.append(f"\n--- tail of {p} ---\n" + _text(f.read()))
                    except OSError:
                        pass
        return "".join(out)

    def abort(self):
        """Watchdog: a hung scenario is turned into I/O errors by killing its daemons."""
        self.aborted = True
        log(f"WATCHDOG: scenario {self.scenario} ran too long, killing its daemons")
        for mnt in list(self.mountpoints):
            for pid in find_fuse_pids(self.clio_fuse, mnt):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        pid = self.runtime_pid()
        if pid and pid_alive(pid) and is_clio_run(pid):
            os.kill(pid, signal.SIGKILL)

    def cleanup(self):
        errors = []
        for mnt in sorted(self.mountpoints, key=len, reverse=True):
            for _ in range(4):  # a buggy daemon may have stacked mounts
                if not is_mounted(mnt):
                    break
                cp = run_cmd(["fusermount3", "-u", mnt])
                if cp.returncode != 0:
                    run_cmd(["fusermount3", "-uz", mnt])
            try:
                pids = find_fuse_pids(self.clio_fuse, mnt)
                for pid in pids:
                    os.kill(pid, signal.SIGTERM)
                if pids:
                    try:
                        wait_until(lambda: not find_fuse_pids(self.clio_fuse, mnt), "fuse exit", 10)
                    except TestFailure:
                        for pid in find_fuse_pids(self.clio_fuse, mnt):
                            os.kill(pid, signal.SIGKILL)
            except Exception as e:  # noqa: BLE001 - cleanup must go on
                errors.append(f"killing clio-fuse for {mnt}: {e}")
            if is_mounted(mnt):
                errors.append(f"{mnt} is still mounted after cleanup")
        for conf in self.confs:
            try:
                pid = self.runtime_pid()
                if pid and pid_alive(pid) and os.path.exists(conf):
                    run_cmd([self.clio_run, "stop"], env=self.env(conf=conf), timeout=60)
                    try:
                        wait_until(lambda: not pid_alive(pid), "runtime exit", 20)
                    except TestFailure:
                        pass
                if pid and pid_alive(pid) and is_clio_run(pid):
                    os.kill(pid, signal.SIGKILL)
            except Exception as e:  # noqa: BLE001
                errors.append(f"stopping the runtime: {e}")
        for p in os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []:
            if self.ram_name in p:
                try:
                    os.unlink(os.path.join("/dev/shm", p))
                except OSError:
                    pass
        if self.s3 is not None and self.s3.poll() is None:
            self.s3.terminate()
            try:
                self.s3.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.s3.kill()
                self.s3.wait()
        still = [m for m in self.mountpoints if is_mounted(m)]
        if self.keep:
            log(f"kept {self.T}")
        elif still:
            errors.append(f"not removing {self.T}: still mounted: {still}")
        else:
            shutil.rmtree(self.T, ignore_errors=True)
        return errors


# ----------------------------------------------------------------------------------------------
# Content checks
# ----------------------------------------------------------------------------------------------

def run_with_tty_stderr(argv, env):
    """Runs argv with stderr on a pseudo-terminal (so clioctl draws its progress line) and
    stdout on a pipe. Returns (process, stdout bytes, everything written to the terminal)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    tty_out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        tty_out += chunk
    os.close(master)
    out, _ = proc.communicate(timeout=CMD_TIMEOUT)
    return proc, out, tty_out


def sha(b):
    return hashlib.sha256(b).hexdigest()


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def first_diff(a, b):
    n = min(len(a), len(b))
    step = 64 * KiB
    for off in range(0, n, step):
        if a[off:off + step] != b[off:off + step]:
            for i in range(off, min(off + step, n)):
                if a[i] != b[i]:
                    return i
    return n if len(a) != len(b) else None


def check_exact(path, expected, label):
    st = os.stat(path)
    check(stat.S_ISREG(st.st_mode), f"{label}: {path} is not a regular file (mode {oct(st.st_mode)})")
    data = read_file(path)
    check(st.st_size == len(expected),
          f"{label}: {path}: stat size {st.st_size}, expected {len(expected)}")
    if len(data) != len(expected) or sha(data) != sha(expected):
        off = first_diff(data, expected)
        got = data[off:off + 16].hex() if off is not None else ""
        exp = expected[off:off + 16].hex() if off is not None else ""
        raise TestFailure(
            f"{label}: {path}: content mismatch: read {len(data)} bytes (sha256 {sha(data)[:16]}), "
            f"expected {len(expected)} bytes (sha256 {sha(expected)[:16]}); first difference at "
            f"offset {off} (chunk {off // MiB if off is not None else '?'}): got {got} expected {exp}")


def check_bytes_each(path, data, allowed, label, what):
    """Every byte of data must equal one of the candidate byte strings at that offset."""
    step = 64 * KiB
    for off in range(0, len(data), step):
        got = data[off:off + step]
        if any(c[off:off + len(got)] == got for c in allowed):
            continue
        for i in range(off, off + len(got)):
            if not any(data[i] == c[i] for c in allowed):
                raise TestFailure(
                    f"{label}: {path}: byte at offset {i} is {data[i]:#04x}, which is {what} "
                    f"(candidates there: {[hex(c[i]) for c in allowed]}); bytes of another file "
                    f"or of a freed block?")


def check_prefix_or_zero(path, expected, label):
    """An unsynced file after a crash: size <= written size; each byte expected or zero."""
    data = read_file(path)
    check(len(data) <= len(expected),
          f"{label}: {path}: unsynced file has {len(data)} bytes, more than the {len(expected)} "
          f"ever written")
    check_bytes_each(path, data, [expected[:len(data)], bytes(len(data))], label,
                     "neither the written byte nor zero")


def check_old_or_new(path, old, new, label):
    """A file fsynced at 'old', then overwritten in place (same size) without fsync."""
    data = read_file(path)
    check(len(data) == len(old),
          f"{label}: {path}: size {len(data)}, expected {len(old)} (an in-place overwrite "
          f"never changed the size)")
    check_bytes_each(path, data, [old, new], label, "neither the fsynced nor the newer byte")


# ----------------------------------------------------------------------------------------------
# The shared workload and its model
# ----------------------------------------------------------------------------------------------

class Model:
    def __init__(self):
        self.files = {}        # rel -> expected final bytes (every file that should exist)
        self.dirs = {""}       # rel dirs that should exist ("" = the mount root)
        self.durable = set()   # files whose content and name were fsynced
        self.loose = set()     # files written after the last fsync (crash: may be short/zero/missing)
        self.old_or_new = {}   # rel -> (fsynced bytes, newer unsynced bytes of the same size)
        self.gone = set()      # names that must not exist (deleted, renamed away)
        self.modes = {}        # rel -> expected S_IMODE (explicit chmods), files and dirs
        self.recorded = {}     # rel -> S_IMODE seen through the mount before the restart

    def children(self, d):
        names = set()
        for p in list(self.files) + [x for x in self.dirs if x]:
            parent, base = os.path.split(p)
            if parent == d:
                names.add(base)
        return names


def _write_all(fd, data, offset=None):
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        piece = view[pos:pos + MiB]
        n = os.pwrite(fd, piece, offset + pos) if offset is not None else os.write(fd, piece)
        check(n > 0, f"write returned {n}")
        pos += n


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def run_workload(env, model, tier_check=False):
    """Builds the file tree through the mount, fsyncing what the crash checks assert on."""
    root = env.mnt
    P = lambda rel: os.path.join(root, rel)  # noqa: E731

    def create(rel, data, fsync=True, mode=None):
        fd = os.open(P(rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            _write_all(fd, data)
            if mode is not None:
                os.fchmod(fd, mode)
                model.modes[rel] = mode
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        model.files[rel] = bytes(data)
        (model.durable if fsync else model.loose).add(rel)

    def mkdir(rel, mode=None):
        os.mkdir(P(rel))
        if mode is not None:
            os.chmod(P(rel), mode)
            model.modes[rel] = mode
        model.dirs.add(rel)

    def rename(src, dst):
        os.rename(P(src), P(dst))
        if src in model.dirs:
            moved = {}
            for f in list(model.files):
                if f == src or f.startswith(src + "/"):
                    moved[f] = dst + f[len(src):]
            for d in list(model.dirs):
                if d == src or d.startswith(src + "/"):
                    model.dirs.discard(d)
                    model.dirs.add(dst + d[len(src):])
                    model.gone.add(d)
                    if d in model.modes:
                        model.modes[dst + d[len(src):]] = model.modes.pop(d)
        else:
            moved = {src: dst}
        for old, new in moved.items():
            model.files[new] = model.files.pop(old)
            for s in (model.durable, model.loose):
                if old in s:
                    s.discard(old)
                    s.add(new)
            if old in model.modes:
                model.modes[new] = model.modes.pop(old)
            model.gone.add(old)
        model.gone.discard(dst)
        for d in model.dirs:
            model.gone.discard(d)

    def unlink(rel):
        os.unlink(P(rel))
        del model.files[rel]
        model.durable.discard(rel)
        model.loose.discard(rel)
        model.modes.pop(rel, None)
        model.gone.add(rel)

    # Directories, nested, one with an explicit mode.
    os.makedirs(P("a/b/c/d"))
    model.dirs |= {"a", "a/b", "a/b/c", "a/b/c/d"}
    mkdir("x", 0o750)
    mkdir("empty_dir")
    mkdir("rmdir_me")

    if tier_check:
        env.used_at_start = sum(t["used"] for t in env.tier_stat())

    # Edge sizes around the 1 MiB chunk.
    create("f_0", b"")
    create("f_1", os.urandom(1), mode=0o600)
    create("f_4k", os.urandom(4 * KiB), mode=0o755)
    create("f_1m_minus", os.urandom(MiB - 1))
    create("f_1m_plus", os.urandom(MiB + 1))
    create("f_1m", os.urandom(MiB), fsync=False)    # fsynced below, after a reopen
    fd = os.open(P("f_1m"), os.O_RDWR)
    os.fsync(fd)
    os.close(fd)
    model.loose.discard("f_1m")
    model.durable.add("f_1m")

    # 64 MiB: more than the 32 MB RAM tier, so it spills onto the file tier.
    create("big_64m", os.urandom(64 * MiB))
    if tier_check:
        tiers = env.tier_stat()
        used = sum(t["used"] for t in tiers)
        check(used > env.used_at_start,
              f"tier stat: sum of used did not grow after writing 64 MiB: {env.used_at_start} "
              f"at start, {used} now; tiers: {tiers}")
        persistent = sum(t["used"] for t in tiers if str(t["persistence"]).lower() != "volatile")
        check(persistent >= 64 * MiB,
              f"tier stat: after fsync of a 64 MiB file the persistent tiers hold only "
              f"{persistent} bytes; tiers: {tiers}")
        log(f"tier stat: used {env.used_at_start} -> {used} (persistent {persistent})")

    # Files in nested directories.
    create("a/top.txt", b"top level of a\n")
    create("a/b/mid.bin", os.urandom(3000))
    create("a/b/c/d/deep.bin", os.urandom(100 * KiB + 3), mode=0o640)
    create("a/b/c/d/deep2.bin", os.urandom(2 * MiB))
    create("olddir_inner_tmp", os.urandom(7777))

    # Renames: same directory, across directories, onto an existing file, a whole directory.
    create("rename_src.bin", os.urandom(MiB + 17))
    rename("rename_src.bin", "renamed.bin")
    create("a/b/move_me.bin", os.urandom(5000), mode=0o600)
    rename("a/b/move_me.bin", "x/moved.bin")
    create("replace_src.bin", os.urandom(4000))
    create("replace_dst.bin", os.urandom(9000))
    rename("replace_src.bin", "replace_dst.bin")
    mkdir("olddir")
    rename("olddir_inner_tmp", "olddir/inner.bin")
    mkdir("olddir/sub")
    create("olddir/sub/leaf.bin", os.urandom(MiB + 5))
    rename("olddir", "a/newdir")

    # Deletes: a multi-chunk file, a nested file, an empty directory.
    create("delete_me.bin", os.urandom(2 * MiB + 1))
    unlink("delete_me.bin")
    create("a/b/c/delete_me_too.bin", os.urandom(300), fsync=False)
    unlink("a/b/c/delete_me_too.bin")
    os.rmdir(P("rmdir_me"))
    model.dirs.discard("rmdir_me")
    model.gone.add("rmdir_me")

    # Overwrite in the middle, across the chunk boundary at 1 MiB, and inside chunk 2.
    data = bytearray(os.urandom(3 * MiB))
    create("overwrite.bin", bytes(data))
    patch1, patch2 = os.urandom(300), os.urandom(10)
    fd = os.open(P("overwrite.bin"), os.O_RDWR)
    try:
        _write_all(fd, patch1, offset=MiB - 100)
        _write_all(fd, patch2, offset=2 * MiB + 5)
        os.fsync(fd)
    finally:
        os.close(fd)
    data[MiB - 100:MiB + 200] = patch1
    data[2 * MiB + 5:2 * MiB + 15] = patch2
    model.files["overwrite.bin"] = bytes(data)

    # Truncate shorter, to the middle of chunk 1.
    data = os.urandom(2 * MiB + MiB // 2)
    create("truncate.bin", data)
    new_len = MiB + MiB // 2 - 7
    os.truncate(P("truncate.bin"), new_len)
    fd = os.open(P("truncate.bin"), os.O_RDWR)
    os.fsync(fd)
    os.close(fd)
    model.files["truncate.bin"] = data[:new_len]

    # A sparse file: the hole reads as zeros.
    tail = os.urandom(4 * KiB)
    fd = os.open(P("sparse.bin"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_all(fd, tail, offset=5 * MiB + 123)
        os.fsync(fd)
    finally:
        os.close(fd)
    model.files["sparse.bin"] = bytes(5 * MiB + 123) + tail
    model.durable.add("sparse.bin")

    # A file fsynced at v1, later overwritten in place without fsync (see below).
    v1 = os.urandom(2 * MiB)
    create("ovw_unsynced.bin", v1)

    # Make every name durable: fsync each directory, deepest first.
    for d in sorted(model.dirs, key=lambda s: s.count("/") + (1 if s else 0), reverse=True):
        fsync_dir(P(d) if d else root)

    # --- After the last fsync: writes a crash may lose. -------------------------------
    create("unsynced_a.bin", os.urandom(2 * MiB + 123), fsync=False)
    create("a/b/unsynced_b.bin", os.urandom(5000), fsync=False)
    v2 = bytearray(v1)
    patch = os.urandom(64 * KiB)
    v2[MiB - 32 * KiB:MiB + 32 * KiB] = patch
    fd = os.open(P("ovw_unsynced.bin"), os.O_RDWR)
    try:
        _write_all(fd, patch, offset=MiB - 32 * KiB)
    finally:
        os.close(fd)
    model.files["ovw_unsynced.bin"] = bytes(v2)
    model.durable.discard("ovw_unsynced.bin")
    model.old_or_new["ovw_unsynced.bin"] = (v1, bytes(v2))

    for rel in model.files:
        assert rel in model.durable or rel in model.loose or rel in model.old_or_new, rel


def check_tree(env, model, mode):
    """mode 'exact': everything as last written (live mount, clean restart).
    mode 'crash': only what was fsynced is guaranteed; the rest obeys the crash rules."""
    root = env.mnt
    P = lambda rel: os.path.join(root, rel) if rel else root  # noqa: E731
    label = f"{env.scenario}/{mode}"
    crash = mode == "crash"

    for rel, expected in sorted(model.files.items()):
        path = P(rel)
        if not crash or rel in model.durable:
            check(os.path.lexists(path), f"{label}: {rel} is missing"
                  + (" (its content and directory were fsynced)" if crash else ""))
            check_exact(path, expected, label)
        elif rel in model.old_or_new:
            check(os.path.lexists(path), f"{label}: {rel} is missing (it was fsynced before "
                                         f"the unsynced overwrite)")
            old, new = model.old_or_new[rel]
            check_old_or_new(path, old, new, label)
        else:  # loose: may be missing
            if os.path.lexists(path):
                check_prefix_or_zero(path, expected, label)

    for rel in sorted(model.gone):
        check(not os.path.lexists(P(rel)), f"{label}: {rel} should be gone (deleted or renamed "
                                           f"away{', and its directory was fsynced' if crash else ''})")

    for d in sorted(model.dirs):
        path = P(d)
        check(os.path.isdir(path), f"{label}: directory {d or '/'} is missing or not a directory")
        got = set(os.listdir(path))
        want = model.children(d)
        if crash:
            must = {n for n in want if os.path.join(d, n) in model.durable
                    or os.path.join(d, n) in model.dirs or os.path.join(d, n) in model.old_or_new}
            check(must <= got, f"{label}: listing of {d or '/'} lacks fsynced names "
                               f"{sorted(must - got)}; got {sorted(got)}")
            check(got <= want, f"{label}: listing of {d or '/'} has unexpected names "
                               f"{sorted(got - want)}; expected at most {sorted(want)}")
        else:
            check(got == want, f"{label}: listing of {d or '/'} is {sorted(got)}, expected "
                               f"{sorted(want)} (missing {sorted(want - got)}, extra "
                               f"{sorted(got - want)})")

    # Modes: the explicit ones, and (after a restart) whatever the mount showed before.
    for rel in sorted(set(model.files) | (model.dirs - {""})):
        path = P(rel)
        if not os.path.lexists(path):
            continue  # a loose file lost in a crash; already judged above
        st = os.lstat(path)
        is_dir = rel in model.dirs
        check(stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode),
              f"{label}: {rel} has file type {oct(stat.S_IFMT(st.st_mode))}, expected "
              f"{'directory' if is_dir else 'regular file'}")
        m = stat.S_IMODE(st.st_mode)
        if rel in model.modes:
            check(m == model.modes[rel], f"{label}: {rel} has mode {oct(m)}, expected "
                                         f"{oct(model.modes[rel])} (set by chmod)")
        if rel in model.recorded:
            check(m == model.recorded[rel], f"{label}: {rel} has mode {oct(m)} after the "
                                            f"restart, {oct(model.recorded[rel])} before")


def record_modes(env, model):
    for rel in set(model.files) | (model.dirs - {""}):
        model.recorded[rel] = stat.S_IMODE(os.lstat(os.path.join(env.mnt, rel)).st_mode)


# ----------------------------------------------------------------------------------------------
# Scenarios
# ----------------------------------------------------------------------------------------------

def scenario_clean_restart(env):
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    env.write_config()
    env.start_runtime()
    # The namespace pool made the mount lock beside the socket, for the runtime's user alone
    # (a member of the socket's group who could lock it would block every mount).
    lock = os.path.join(env.T, "clio.sock.mount")
    check(os.path.isfile(lock), f"no mount lock {lock} after the runtime started")
    check(stat.S_IMODE(os.stat(lock).st_mode) == 0o600,
          f"mount lock mode {oct(stat.S_IMODE(os.stat(lock).st_mode))}, not 0600")
    env.mount()
    model = Model()
    run_workload(env, model, tier_check=True)
    log("workload done; checking through the live mount")
    check_tree(env, model, "exact")
    record_modes(env, model)
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    log("checking after a clean restart")
    check_tree(env, model, "exact")
    tiers = env.tier_stat()
    persistent = sum(t["used"] for t in tiers if str(t["persistence"]).lower() != "volatile")
    check(persistent >= 64 * MiB, f"tier stat after restart: persistent tiers hold only "
                                  f"{persistent} bytes, less than the 64 MiB file; tiers: {tiers}")
    env.unmount()
    env.stop_runtime()


def _crash_scenario(env, fault):
    env.check_binaries(env.clio_run, env.clio_fuse)
    env.fault_injection = fault
    env.write_config()
    env.start_runtime()
    env.mount()
    model = Model()
    run_workload(env, model)
    log("workload done; checking through the live mount")
    check_tree(env, model, "exact")
    record_modes(env, model)
    env.crash()
    env.start_runtime()
    env.mount()
    log("checking after the crash")
    check_tree(env, model, "crash")
    env.unmount()
    env.stop_runtime()


def scenario_kill9_restart(env):
    _crash_scenario(env, fault=False)


def scenario_power_cut(env):
    _crash_scenario(env, fault=True)


def _s3_scenario(env, crash):
    """RAM over an S3 bucket: files written through the mount, the daemon restarted (cleanly
    or by SIGKILL), every file read back from the bucket byte for byte."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    env.start_s3()
    env.write_config(config_text(env.T, env.ram_name, "32MB", S3_TIER))
    env.start_runtime()
    env.mount()
    model = Model()
    run_workload(env, model)
    check_tree(env, model, "exact")
    record_modes(env, model)
    stats = env.s3_admin("/_admin/stats")
    log(f"S3 stand-in after the workload: {json.dumps(stats)[:400]}")
    stored = stats["bytes_stored"]
    check(stored >= 64 * MiB, f"the bucket holds {stored} bytes after fsync of a 64 MiB file")
    if crash:
        env.crash()
    else:
        env.unmount()
        env.stop_runtime()
    env.start_runtime()
    env.mount()
    log("checking after the restart: the RAM tier is empty, everything comes from the bucket")
    check_tree(env, model, "crash" if crash else "exact")
    tiers = env.tier_stat()
    s3 = [t for t in tiers if "s3" in str(t.get("backend", "")) or "s3" in str(t.get("type", ""))]
    check(s3 and s3[0]["used"] >= 64 * MiB, f"tier stat after restart: {tiers}")
    env.unmount()
    env.stop_runtime()


def scenario_s3_restart(env):
    _s3_scenario(env, crash=False)


def scenario_s3_kill9(env):
    _s3_scenario(env, crash=True)


def _write_file_expect_enospc(path, data, fsync=True):
    """Writes, fsyncs (unless told not to) and closes a new file. Returns (stage, errno) of the
    first failure, or None when everything succeeded. Any failure but ENOSPC fails the test."""
    import errno as errno_mod
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    stage, err = "write", None
    try:
        _write_all(fd, data)
        stage = "fsync"
        if fsync:
            os.fsync(fd)
    except OSError as e:
        err = (stage, e)
    try:
        os.close(fd)
    except OSError as e:
        err = err or ("close", e)
    if err is None:
        return None
    stage, e = err
    check(e.errno == errno_mod.ENOSPC,
          f"{path}: {stage} failed with {errno_mod.errorcode.get(e.errno, e.errno)} "
          f"({e.strerror}), expected ENOSPC")
    return stage, e.errno


def scenario_full_disk(env):
    """A 24 MB file tier behind a 16 MB RAM tier, filled through the mount.

    Writing more than the file tier holds fails with ENOSPC at write(2), fsync or close (the
    RAM tier must not accept bytes that could never be flushed); nothing fsynced before is lost
    or damaged; after deleting files, new writes succeed, and everything survives a restart.
    """
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    text = env.config_text(ram_capacity="16MB")
    text = text.replace('capacity_limit: "2GB"', 'capacity_limit: "24MB"')
    text = text.replace('growth_unit: "64MB"', 'growth_unit: "4MB"')
    text = text.replace('        capacity_limit: "16MB"\n',
                        '        capacity_limit: "16MB"\n        dirty_limit: "8MB"\n')
    check('capacity_limit: "24MB"' in text and 'dirty_limit: "8MB"' in text,
          "full_disk: the config template changed; the scenario's edits no longer apply")
    env.write_config(text)
    env.start_runtime()
    env.mount()
    P = lambda rel: os.path.join(env.mnt, rel)  # noqa: E731

    keep = {"keep_a": os.urandom(3 * MiB), "keep_b": os.urandom(2 * MiB + 12345)}
    for rel, data in keep.items():
        check(_write_file_expect_enospc(P(rel), data) is None, f"{rel}: failed on an empty filesystem")
    fsync_dir(env.mnt)

    # Fill with 2 MiB files, closed but not fsynced, until one fails: the writes land on the
    # RAM tier, and each must reserve its flushed copy on the 24 MB file tier. 16 of them
    # cannot fit.
    closed, failed = {}, None
    for i in range(16):
        rel, data = f"fill_{i:02d}", os.urandom(2 * MiB)
        r = _write_file_expect_enospc(P(rel), data, fsync=False)
        if r is not None:
            failed = (rel, data, r[0])
            break
        closed[rel] = data
    check(failed is not None, "32 MiB went into a 24 MB file tier (behind 16 MB of RAM) "
                              "without ENOSPC")
    rel, data, stage = failed
    log(f"ENOSPC at {stage} of {rel}, after {len(closed)} files of 2 MiB were closed")
    check(len(closed) >= 4, f"only {len(closed)} files of 2 MiB fit before ENOSPC; expected "
                            f"the 24 MB tier to take at least 4 besides the 5 MiB kept")
    # A second write fails the same way (no retry makes room by itself).
    check(_write_file_expect_enospc(P("one_more"), os.urandom(2 * MiB)) is not None,
          "a write after ENOSPC succeeded although nothing was deleted")

    # Every file whose write and close succeeded can still be made durable: the room for its
    # persistent copy was promised when the write was accepted.
    for r, d in closed.items():
        fd = os.open(P(r), os.O_RDWR)
        try:
            os.fsync(fd)
        except OSError as e:
            raise TestFailure(f"{r}: fsync after a successful write and close failed: {e}; "
                              f"the write was accepted without room for its flushed copy")
        finally:
            os.close(fd)
    # Nothing fsynced was lost or damaged; the failed file holds only its own bytes or zeros.
    for r, d in list(keep.items()) + list(closed.items()):
        check_exact(P(r), d, "after ENOSPC")
    check_prefix_or_zero(P(rel), data, "the file that met ENOSPC")

    # Deleting makes room: once the deletions are durable, new writes fit again.
    for r in list(closed) + [rel, "one_more"]:
        os.unlink(P(r))
    fsync_dir(env.mnt)
    fresh = {f"after_{i}": os.urandom(4 * MiB) for i in range(3)}
    for r, d in fresh.items():
        res = _write_file_expect_enospc(P(r), d)
        check(res is None, f"{r}: ENOSPC at {res[0] if res else ''} after the fill files were deleted")
    fsync_dir(env.mnt)
    for r, d in list(keep.items()) + list(fresh.items()):
        check_exact(P(r), d, "after deleting and writing again")

    tiers = env.tier_stat()
    persistent = [t for t in tiers if str(t["persistence"]).lower() != "volatile"]
    check(all(t["used"] <= t["capacity"] for t in persistent), f"tier stat: used past capacity: {tiers}")

    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    for r, d in list(keep.items()) + list(fresh.items()):
        check_exact(P(r), d, "after a clean restart")
    check(sorted(os.listdir(env.mnt)) == sorted(list(keep) + list(fresh)),
          f"after restart the mount lists {sorted(os.listdir(env.mnt))}")
    env.unmount()
    env.stop_runtime()


def scenario_tier_ops(env):
    """clioctl tier drain / undrain / lifespan / add / rm on a running node, through the mount:
    the RAM tier drained to empty while files stay readable byte for byte; lifespans set and
    read back; a tier added at run time takes flushed data, survives a restart and is removed
    once drained; a wrong tier name, a bad value and a stopped daemon each give their exit
    code."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    port = free_port()
    env.write_config(env.config_text().replace('  num_threads: 4\n', f'  num_threads: 4\n  http_port: {port}\n', 1))
    env.start_runtime()
    env.mount()
    files = {f"f{i}.bin": os.urandom(300000 + i * 77777) for i in range(6)}
    for rel, data in files.items():
        with open(os.path.join(env.mnt, rel), "wb") as f:
            f.write(data)
    ram = next(t for t in env.tier_stat() if t["type"] == "ram")
    disk = next(t for t in env.tier_stat() if t["type"] == "file")
    check(ram["used"] > 0, f"the RAM tier holds nothing after the writes: {ram}")
    check(disk["name"] == os.path.join(env.state, "tiers", "disk.dat_node0") and os.path.exists(disk["name"]),
          f"the file tier is not named and stored as <path>_node0: {disk['name']}")

    def ctl(*args):
        return run_cmd([env.clioctl, *args], env=env.env())

    cp = ctl("tier", "drain", ram["name"], "--json")
    check(cp.returncode == 0, "tier drain failed\n" + describe(cp))
    out = json.loads(_text(cp.stdout))
    check(out["bytes_left"] == 0 and out["draining"] and out["moved_copies"] > 0,
          f"tier drain answer: {out}")
    ram_after = next(t for t in env.tier_stat() if t["name"] == ram["name"])
    check(ram_after["used"] == 0, f"the RAM tier holds {ram_after['used']} bytes after drain")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after drain")
    # Drained: new writes go to the file tier; still readable.
    with open(os.path.join(env.mnt, "late.bin"), "wb") as f:
        f.write(b"z" * 100000)
    check(next(t for t in env.tier_stat() if t["name"] == ram["name"])["used"] == 0,
          "a drained tier took new data")
    listed = {t["name"]: t for t in json.loads(_text(ctl("tier", "list", "--json").stdout))}
    check(listed[ram["name"]]["draining"] and listed[ram["name"]]["state"].startswith("drained"),
          f"tier list of the drained RAM tier: {listed[ram['name']]}")
    check(listed[disk["name"]]["state"] == "active", f"tier list of the disk tier: {listed[disk['name']]}")
    # The runtime's words (Cte::TierStates), not the CLI's: the config opened both tiers.
    check(listed[ram["name"]]["condition"] == "drained" and listed[disk["name"]]["condition"] == "active" and
          listed[ram["name"]]["from_config"] and listed[disk["name"]]["from_config"],
          f"tier list's condition and from_config: {listed}")
    cp = ctl("tier", "undrain", ram["name"])
    check(cp.returncode == 0, "tier undrain failed\n" + describe(cp))
    cp = ctl("tier", "list")
    rows = [l.split() for l in _text(cp.stdout).splitlines()]
    check(cp.returncode == 0 and rows[0][:3] == ["NAME", "ID", "TYPE"] and
          {r[0]: r[-1] for r in rows[1:]} == {ram["name"]: "active", disk["name"]: "active"},
          "tier list after undrain\n" + describe(cp))

    cp = ctl("tier", "lifespan", "get", disk["name"], "--json")
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["lifetime_days"] >= 999999,
          "lifespan get of a healthy tier\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"], "30")
    check(cp.returncode == 0 and "30 days" in _text(cp.stdout), "lifespan set\n" + describe(cp))
    cp = ctl("tier", "lifespan", "get", disk["name"], "--json")
    check(json.loads(_text(cp.stdout))["lifetime_days"] == 30, "lifespan read back\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"], "3")
    dying = {t["name"]: t for t in json.loads(_text(ctl("tier", "list", "--json").stdout))}[disk["name"]]
    check(cp.returncode == 0 and dying["state"].startswith("dying"), f"tier list of a dying tier: {dying}")
    cp = ctl("tier", "lifespan", "set", disk["name"], "30")
    check(cp.returncode == 0, "lifespan set back to 30\n" + describe(cp))

    # A tier added to the running node takes the flushed copies (it outranks the disk tier),
    # comes back after a restart, and leaves only once drained.
    added_path = os.path.join(env.state, "tiers", "added.dat")
    cp = ctl("tier", "add", added_path, "bdev_type=file", "capacity_limit=256MB", "growth_unit=16MB",
             "score=0.5", "--json")
    check(cp.returncode == 0, "tier add failed\n" + describe(cp))
    added = json.loads(_text(cp.stdout))
    # Tier pool names end in _node<N> (runtime.node_id, 0 here); commands take either name.
    check(added["name"] == added_path + "_node0" and added["score"] == 0.5, f"tier add answer: {added}")
    check(os.path.exists(added["name"]), f"no tier file at {added['name']}")
    cp = ctl("tier", "add", added_path, "score=0.4")
    check(cp.returncode == 1 and "already" in _text(cp.stderr), "adding a tier twice\n" + describe(cp))
    more = {f"g{i}.bin": os.urandom(200000 + i * 4099) for i in range(4)}
    for rel, data in more.items():
        with open(os.path.join(env.mnt, rel), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    now = {t["name"]: t for t in env.tier_stat()}
    check(now[added["name"]]["used"] > 0, f"the added tier took no flushed data: {now[added['name']]}")
    files.update(more)
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    now = {t["name"]: t for t in env.tier_stat()}
    check(added["name"] in now and now[added["name"]]["id"] == added["id"],
          f"the added tier did not come back after a restart: {list(now)}")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after a restart with the added tier")
    cp = ctl("tier", "rm", added_path)
    check(cp.returncode == 1 and "drain it first" in _text(cp.stderr),
          "removing a tier that holds data\n" + describe(cp))
    # On a terminal the drain draws a progress line (bytes left and moved, rate, time left) on
    # stderr, ending with the final figures.
    proc, out, tty_out = run_with_tty_stderr([env.clioctl, "tier", "drain", added_path], env.env())
    check(proc.returncode == 0, f"drain of the added tier: exit {proc.returncode}\n{_text(out)}{_text(tty_out)}")
    check(b"0 B left" in tty_out and b"moved" in tty_out and b"/s" in tty_out,
          f"no progress line on the terminal: {tty_out!r}")
    values, _ = scrape(port)
    check(any(f'tier="{added["name"]}"' in k for k in values), "/metrics has no series of the added tier")
    listed = {t["name"]: t for t in json.loads(_text(ctl("tier", "list", "--json").stdout))}
    check(not listed[added["name"]]["from_config"], f"the added tier is listed as the config's: {listed}")
    cp = ctl("tier", "rm", added_path, "--json")
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["removed"] and
          not json.loads(_text(cp.stdout))["in_config"], "tier rm\n" + describe(cp))
    check(added["name"] not in {t["name"] for t in env.tier_stat()}, "the removed tier is still listed")
    # Its series leave /metrics with it (a pool name must not live on in the export).
    values, _ = scrape(port)
    left = [k for k in values if f'tier="{added["name"]}"' in k]
    check(not left, f"/metrics still has series of the removed tier: {left[:5]}")
    check(any(f'tier="{disk["name"]}"' in k for k in values), "/metrics lost the remaining tiers' series")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after removing the added tier")
    cp = ctl("tier", "add", os.path.join(env.T, "bad.dat"), "capacity_limit=12XB")
    check(cp.returncode == 2 and "capacity_limit" in _text(cp.stderr),
          "tier add with a bad size is a usage error naming the key\n" + describe(cp))
    cp = ctl("tier", "add", os.path.join(env.T, "bad.dat"), "capacity_limit")
    check(cp.returncode == 2 and "KEY=VALUE" in _text(cp.stderr), "tier add without KEY=VALUE\n" + describe(cp))
    # A tier a client adds makes its file beneath the state directory (or runtime.allowed_paths).
    outside = os.path.join(env.T, "outside.dat")
    cp = ctl("tier", "add", outside, "bdev_type=file", "capacity_limit=64MB", "score=0.3")
    check(cp.returncode == 1 and "is outside them" in _text(cp.stderr) and not os.path.exists(outside),
          "tier add of a file outside the state directory\n" + describe(cp))
    check(not any(t["name"].startswith(outside) for t in env.tier_stat()), "the refused tier is listed")
    cp = ctl("tier", "rm", "nope")
    check(cp.returncode == 1 and "no tier 'nope'" in _text(cp.stderr), "rm of an unknown tier\n" + describe(cp))
    cp = ctl("tier", "rm", disk["name"])
    check(cp.returncode == 1 and "drain it first" in _text(cp.stderr),
          "rm of the config's file tier, not drained\n" + describe(cp))

    cp = ctl("tier", "drain", "nope")
    check(cp.returncode == 1 and "no tier 'nope'" in _text(cp.stderr),
          "drain of an unknown tier\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"], "-3")
    check(cp.returncode == 2, "a negative lifespan is a usage error\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"])
    check(cp.returncode == 2, "lifespan set without days is a usage error\n" + describe(cp))
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "at the end")
    env.unmount()
    env.stop_runtime()
    cp = ctl("tier", "drain", ram["name"])
    check(cp.returncode == 1 and _text(cp.stderr).strip(), "drain with the daemon down\n" + describe(cp))
    cp = ctl("tier", "list")
    check(cp.returncode == 1 and _text(cp.stderr).strip(), "tier list with the daemon down\n" + describe(cp))


ATTACHED_CONFIG = """\
runtime:
  state_dir: "{T}/state"
  socket_path: "{T}/clio.sock"
metadata:
  path: "${{CLIO_STATE_DIR}}/metadata"
  commit_interval_ms: 500
compose:
  - mod_name: clio_bdev
    pool_name: "${{CLIO_STATE_DIR}}/array.dat"
    pool_id: "301.0"
    bdev_type: file
    capacity: "1GB"
    growth_unit: "64MB"
  - mod_name: clio_bdev
    pool_name: "${{CLIO_STATE_DIR}}/spare.dat"
    pool_id: "302.0"
    bdev_type: file
    capacity: "256MB"
    growth_unit: "64MB"
  - mod_name: clio_cte_core
    pool_name: clio_cte_core
    pool_id: "512.0"
    flush_interval_ms: 500
    storage:
      - path: "ram::{ram_name}"
        bdev_type: ram
        capacity_limit: "32MB"
        score: 1.0
      - existing_pool_id: "301.0"
        existing_pool_module: clio_bdev
        score: 0.2
  - mod_name: clio_fs
    pool_name: clio_fs
    pool_id: "600.0"
    cte_pool: clio_cte_core
"""


def scenario_attached_pool(env):
    """A CTE tier attached to a bdev pool composed before it (existing_pool_id +
    existing_pool_module): fsynced files land on the pool's device, survive a clean restart and
    a kill -9 byte for byte; a second pool attached with `clioctl tier add` comes back after the
    restarts and leaves with `tier rm` once drained; a storage entry naming a pool that is not
    there is refused with the file, line and key."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    os.makedirs(env.state, exist_ok=True)
    env.write_config(ATTACHED_CONFIG.format(T=env.T, ram_name=env.ram_name))
    env.start_runtime()
    env.mount()
    files = {f"a{i}.bin": os.urandom(700000 + i * 65537) for i in range(5)}
    for rel, data in files.items():
        with open(os.path.join(env.mnt, rel), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    array = os.path.join(env.state, "array.dat")
    spare = os.path.join(env.state, "spare.dat")
    # clioctl pool list: every pool, in compose order, with its module.
    cp = run_cmd([env.clioctl, "pool", "list", "--json"], env=env.env())
    check(cp.returncode == 0, "clioctl pool list\n" + describe(cp))
    pools = [(p["id"], p["name"], p["module"]) for p in json.loads(_text(cp.stdout))]
    check(pools == [(301, array, "clio_bdev"), (302, spare, "clio_bdev"), (512, "clio_cte_core", "clio_cte_core"),
                    (600, "clio_fs", "clio_fs")], f"pool list: {pools}")
    cp = run_cmd([env.clioctl, "pool", "list"], env=env.env())
    check(cp.returncode == 0 and "clio_cte_core" in _text(cp.stdout) and array in _text(cp.stdout),
          "the pool list table\n" + describe(cp))
    tiers = {t["name"]: t for t in env.tier_stat()}
    check(array in tiers and tiers[array]["used"] >= sum(len(d) for d in files.values()),
          f"the attached pool's device does not hold the fsynced files: {tiers}")
    cp = run_cmd([env.clioctl, "tier", "add", "existing_pool_id=302.0", "existing_pool_module=clio_bdev",
                  "score=0.5", "--json"], env=env.env())
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["name"] == spare,
          "attaching a pool at run time\n" + describe(cp))
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after a clean restart")
    env.crash()
    env.start_runtime()
    env.mount()
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after kill -9")
    check(spare in {t["name"] for t in env.tier_stat()}, "the pool attached at run time did not come back")
    for args in (["drain", spare], ["rm", spare]):
        cp = run_cmd([env.clioctl, "tier", *args], env=env.env())
        check(cp.returncode == 0, f"tier {args[0]} of the attached spare\n" + describe(cp))
    check(spare not in {t["name"] for t in env.tier_stat()}, "the removed spare is still listed")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after the spare left")
    env.unmount()
    env.stop_runtime()
    cp = run_cmd([env.clioctl, "pool", "list"], env=env.env())
    check(cp.returncode == 1 and "clioctl:" in _text(cp.stderr), "pool list with the runtime down\n" + describe(cp))
    bad = ATTACHED_CONFIG.format(T=env.T, ram_name=env.ram_name).replace('existing_pool_id: "301.0"',
                                                                          'existing_pool_id: "309.0"')
    conf = env.write_config(bad, os.path.join(env.T, "bad_attach.yaml"))
    env.confs.append(conf)
    bad_line = bad.splitlines().index('      - existing_pool_id: "309.0"') + 1
    _expect_config_refused(env, conf, [conf, f":{bad_line}:", "existing_pool_id", "no pool 309.0"],
                           "a storage entry attached to a missing pool")

# A safe-bdev (3 data + 1 parity file members) as the tier behind a small RAM tier.
SAFE_MEMBER = """\
  - mod_name: clio_bdev
    pool_name: "${{CLIO_STATE_DIR}}/m{i}.dat"
    pool_id: "30{j}.0"
    bdev_type: file
    capacity: "64MB"
    growth_unit: "16MB"
"""
SAFE_CONFIG = """\
runtime:
  state_dir: "{T}/state"
  socket_path: "{T}/clio.sock"
metadata:
  path: "${{CLIO_STATE_DIR}}/metadata"
  commit_interval_ms: 500
compose:
{members}  - mod_name: clio_safe_bdev
    pool_name: "safe::array0"
    pool_id: "310.0"
    members: ["301.0", "302.0", "303.0", "304.0"]
    max_failures: 1
    chunk_size: "64KB"
    alloc_log: "${{CLIO_STATE_DIR}}/safe0.alloc_log"
    rebuild_bandwidth: "64MB"
  - mod_name: clio_cte_core
    pool_name: clio_cte_core
    pool_id: "512.0"
    flush_interval_ms: 500
    storage:
      - path: "ram::{ram_name}"
        bdev_type: ram
        capacity_limit: "16MB"
        score: 1.0
      - existing_pool_id: "310.0"
        existing_pool_module: clio_safe_bdev
        score: 0.2
  - mod_name: clio_fs
    pool_name: clio_fs
    pool_id: "600.0"
    cte_pool: clio_cte_core
"""


def scenario_safe_bdev(env):
    """A CTE tier attached to a safe-bdev of four file members (3 + 1) under the mount: one
    member file fails while files are written and read; nothing is lost, tier stat and
    `clioctl array status` name the failed member, the array stays degraded across a kill -9,
    and `clioctl array recover` rebuilds the member once its device works again."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    os.makedirs(env.state, exist_ok=True)
    members = "".join(SAFE_MEMBER.format(i=i, j=i + 1) for i in range(4))
    port = free_port()
    env.write_config(SAFE_CONFIG.format(T=env.T, ram_name=env.ram_name, members=members).replace(
        '  socket_path: "', f'  http_port: {port}\n  socket_path: "', 1))
    env.start_runtime()
    env.mount()
    m1 = os.path.join(env.state, "m1.dat")

    def array_status():
        cp = run_cmd([env.clioctl, "array", "status", "safe::array0", "--json"], env=env.env())
        check(cp.returncode == 0, "clioctl array status\n" + describe(cp))
        return json.loads(_text(cp.stdout))

    def safe_tier():
        tiers = [t for t in env.tier_stat() if t["name"] == "safe::array0"]
        check(len(tiers) == 1, "the safe-bdev tier is not listed by tier stat")
        return tiers[0]

    files = {}

    def write(prefix, count, size):
        for i in range(count):
            rel = f"{prefix}{i}.bin"
            files[rel] = os.urandom(size + i * 4099)
            with open(os.path.join(env.mnt, rel), "wb") as f:
                f.write(files[rel])
                f.flush()
                os.fsync(f.fileno())

    def check_all(when):
        for rel, data in files.items():
            check_exact(os.path.join(env.mnt, rel), data, when)

    write("a", 10, 3 * MiB)  # 30 MiB: more than the RAM tier holds
    check(safe_tier()["health"] == "ok", f"a healthy array: {safe_tier()}")
    check(safe_tier()["used"] > 0, "nothing reached the array")

    with open(m1 + ".fail", "w") as f:
        f.write("test: member m1 fails\n")
    write("b", 6, 2 * MiB)
    check_all("with member m1 failed")
    health = safe_tier()["health"]
    check(health.startswith("degraded") and m1 in health, f"tier stat health does not name m1: {health!r}")
    st = array_status()
    check(st["members"][1]["name"] == m1 and st["members"][1]["state"] == "failed",
          f"array status does not show m1 failed: {st['members']}")
    cp = run_cmd([env.clioctl, "array", "status", "safe::array0"], env=env.env())
    check(cp.returncode == 0 and "failed" in _text(cp.stdout) and m1 in _text(cp.stdout),
          "the array status table\n" + describe(cp))

    env.crash()
    env.start_runtime()
    env.mount()
    check_all("after kill -9 with m1 failed")
    # The RAM tier started empty: those reads came from the array, a third of them rebuilt.
    st = array_status()
    check(st["reconstructed_reads"] > 0, "no read was served by reconstruction")
    # The same state through /metrics: the array's own series, labelled as the array tier.
    series, _ = scrape(port)
    lab = 'tier="safe::array0",type="safe"'
    check(series.get(f'clio_bdev_medium_state{{state="failed_members",{lab}}}') == 1,
          "clio_bdev_medium_state failed_members is not 1 for the degraded array")
    check(series.get(f'clio_bdev_medium_events_total{{event="chunk_reconstructed",{lab}}}') ==
          st["reconstructed_reads"], "the reconstructed-chunk count differs from array status")
    check(series.get(f'clio_bdev_healthy{{{lab}}}') == 0, "a degraded array is reported healthy")
    write("c", 3, 1 * MiB)
    check(array_status()["members"][1]["state"] == "failed", "m1 came back as working after the restart")

    # The device works again: rebuild it in place while files are read.
    os.remove(m1 + ".fail")
    cp = run_cmd([env.clioctl, "array", "recover", "safe::array0", m1, "302.0"], env=env.env())
    check(cp.returncode == 0, "clioctl array recover\n" + describe(cp))
    check_all("during the rebuild")
    wait_until(lambda: not array_status()["rebuilding"], "the rebuild of m1", timeout=300, interval=0.2)
    st = array_status()
    check(not st["degraded"] and st["members"][1]["state"] == "ok" and st["rebuilds_done"] == 1,
          f"after the rebuild: {st}")
    check(safe_tier()["health"] == "ok", f"tier stat after the rebuild: {safe_tier()}")
    cp = run_cmd([env.clioctl, "array", "verify", "safe::array0", "--json"], env=env.env())
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["bad_stripes"] == 0,
          "a scrub after the rebuild\n" + describe(cp))
    cp = run_cmd([env.clioctl, "array", "recover", "safe::array0", "/no/such/member", "302.0"], env=env.env())
    check(cp.returncode == 2 and "no member" in _text(cp.stderr), "recover of an unknown member\n" + describe(cp))
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    check_all("after a clean restart")
    env.unmount()
    env.stop_runtime()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    """GET /metrics -> {series: value} (series as printed, labels sorted) and the # TYPE names."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        check(r.status == 200, f"/metrics answered {r.status}")
        ctype = r.headers.get("Content-Type", "")
        check(ctype.startswith("text/plain; version=0.0.4"), f"/metrics Content-Type is {ctype!r}")
        text = r.read().decode()
    values, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            series, _, value = line.rpartition(" ")
            values[series] = float(value)
    return values, types


def scenario_metrics(env):
    """/metrics after a known workload: the counters moved by exactly the workload's amounts,
    the gauges agree with `clioctl tier stat`, a taken port leaves the filesystem working, and
    the Grafana board queries only series the runtime exports."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    port = free_port()
    text = env.config_text().replace('  num_threads: 4\n', f'  num_threads: 4\n  http_port: {port}\n', 1)
    # Only fsync flushes (no background pass between a file's writes), so the bytes copied to
    # disk are exactly the bytes written.
    text = text.replace("    flush_interval_ms: 500\n", "    flush_interval_ms: 3600000\n", 1)
    env.write_config(text)

    # A port already taken: the runtime logs it and serves its clients anyway.
    import socket
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen(1)
    env.start_runtime()
    cp = run_cmd([env.clio_run, "status"], env=env.env())
    out = _text(cp.stdout)
    check(f"http not serving: HTTP port 127.0.0.1:{port} is in use" in out,
          f"clio_run status does not say the HTTP port is taken:\n{out}")
    env.mount()
    with open(os.path.join(env.mnt, "while-taken"), "wb") as f:
        f.write(b"still works")
    check(read_file(os.path.join(env.mnt, "while-taken")) == b"still works", "file written with the port taken")
    env.unmount()
    env.stop_runtime()
    holder.close()

    env.start_runtime()
    out = _text(run_cmd([env.clio_run, "status"], env=env.env()).stdout)
    check(f"http http://127.0.0.1:{port}/metrics" in out, f"clio_run status lacks the HTTP line:\n{out}")
    env.mount()
    tiers = {t["name"]: t for t in env.tier_stat()}
    ram = next(n for n, t in tiers.items() if str(t["type"]) == "ram")
    disk = next(n for n, t in tiers.items() if str(t["type"]) == "file")
    before, _ = scrape(port)

    # The workload: N files of known sizes, each written once and fsynced; two rmdirs of a
    # non-empty directory (ENOTEMPTY); three XATTR_CREATE of an existing attribute (EEXIST).
    sizes = [1 * MiB + 7, 3 * MiB, 200 * KiB, 5]
    total = sum(sizes)
    for i, n in enumerate(sizes):
        fd = os.open(os.path.join(env.mnt, f"m{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            _write_all(fd, os.urandom(n))
            os.fsync(fd)
        finally:
            os.close(fd)
    os.mkdir(os.path.join(env.mnt, "full"))
    with open(os.path.join(env.mnt, "full", "x"), "wb") as f:
        f.write(b"x")
    total += 1
    for _ in range(2):
        try:
            os.rmdir(os.path.join(env.mnt, "full"))
            raise TestFailure("rmdir of a non-empty directory succeeded")
        except OSError as e:
            check(e.errno == errno_mod.ENOTEMPTY, f"rmdir of a non-empty directory: {e}")
    target = os.path.join(env.mnt, "m0")
    os.setxattr(target, "user.k", b"v")
    for _ in range(3):
        try:
            os.setxattr(target, "user.k", b"w", os.XATTR_CREATE)
            raise TestFailure("setxattr XATTR_CREATE of an existing attribute succeeded")
        except OSError as e:
            check(e.errno == errno_mod.EEXIST, f"setxattr XATTR_CREATE: {e}")
    fd = os.open(os.path.join(env.mnt, "full", "x"), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    after, types = scrape(port)

    def delta(series):
        return after.get(series, 0) - before.get(series, 0)

    def expect(series, want):
        got = delta(series)
        check(got == want, f"{series} moved by {got}, expected {want}")

    expect('clio_fs_operations_total{op="create",outcome="ok"}', len(sizes) + 1)
    expect('clio_fs_operations_total{op="fsync",outcome="ok"}', len(sizes) + 1)
    expect('clio_fs_operations_total{op="mkdir",outcome="ok"}', 1)
    expect('clio_fs_operations_total{op="rmdir",outcome="ENOTEMPTY"}', 2)
    expect('clio_fs_operations_total{op="setxattr",outcome="ok"}', 1)
    expect('clio_fs_operations_total{op="setxattr",outcome="EEXIST"}', 3)
    expect('clio_fs_bytes_total{op="write"}', total)
    # Every byte went to the RAM tier first (score 1.0), and fsync copied each one to disk.
    expect(f'clio_cte_placed_bytes_total{{tier="{ram}"}}', total)
    expect(f'clio_bdev_bytes_total{{op="write",tier="{ram}",type="ram"}}', total)
    expect('clio_cte_flushed_bytes_total', total)
    expect(f'clio_bdev_bytes_total{{op="write",tier="{disk}",type="file"}}', total)
    check(delta(f'clio_bdev_bytes_total{{op="allocate",tier="{disk}",type="file"}}') >= total,
          "the disk tier allocated less than it wrote")
    expect('clio_cte_flushes_total', sum(-(-n // MiB) for n in sizes) + 1)  # one per 1 MiB chunk
    check(delta('clio_cte_flush_lag_seconds_count') == delta('clio_cte_flushes_total'),
          "every flush records its lag")
    check(after.get("clio_runtime_client_connections", 0) >= 1, "the FUSE daemon's connection is not counted")

    # Gauges agree with clioctl, read with nothing changing in between.
    tiers = {t["name"]: t for t in env.tier_stat()}
    now, _ = scrape(port)
    for name, kind in ((ram, "ram"), (disk, "file")):
        lab = f'{{tier="{name}",type="{kind}"}}'
        for key, series in (("used", "clio_bdev_used_bytes"), ("capacity", "clio_bdev_capacity_bytes")):
            check(now.get(series + lab) == tiers[name][key],
                  f"{series}{lab} = {now.get(series + lab)} but clioctl tier stat says {key} = {tiers[name][key]}")
        check(now.get("clio_bdev_healthy" + lab) == 1, f"tier {name} is not reported healthy")

    # The Grafana board charts only what the runtime exports.
    with open(os.path.join(SRC_DIR, "etc", "grafana", "clio-dashboard.json")) as f:
        board = json.load(f)
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    check(len(exprs) >= 20, f"the board has only {len(exprs)} queries")
    names = set()
    for e in exprs:
        for m in re.findall(r"\b(clio_[a-z0-9_]+)", e):
            names.add(re.sub(r"_(bucket|count|sum)$", "", m) if m.endswith(("_bucket", "_count", "_sum")) and
                      re.sub(r"_(bucket|count|sum)$", "", m) in types else m)
    # Only devices with inner state publish these; e2e safe_bdev checks them on an array.
    medium = {"clio_bdev_medium_events_total", "clio_bdev_medium_state"}
    missing = sorted(n for n in names - medium if n not in types)
    check(not missing, f"the Grafana board queries series the runtime does not export: {missing}")
    log(f"metrics: {len(after)} series; the board's {len(names)} metric names all exported")
    env.unmount()
    env.stop_runtime()


def scenario_admin_ops(env):
    """clioctl stat, locate and flush on a running node with the flusher held back: stat shows
    the workers, clients, pools and each tier's dirty bytes; locate shows every chunk of a file
    dirty on the RAM tier, then clean on the disk tier once `flush FILE` ran; `flush DIR` and
    `flush` empty the flush queue, and what they flushed survives kill -9; wrong paths, a
    wrong pool, bad usage and a stopped daemon each give their exit code and say why."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    # No background flush: only clioctl flush moves dirty copies to the disk tier.
    env.write_config(env.config_text().replace("    flush_interval_ms: 500\n",
                                               "    flush_interval_ms: 3600000\n", 1))
    env.start_runtime()
    env.mount()

    def ctl(*args):
        return run_cmd([env.clioctl, *args], env=env.env())

    def ctl_json(*args):
        cp = ctl(*args, "--json")
        check(cp.returncode == 0, f"clioctl {' '.join(args)} --json failed\n" + describe(cp))
        try:
            return json.loads(_text(cp.stdout))
        except json.JSONDecodeError as e:
            raise TestFailure(f"clioctl {' '.join(args)} --json printed invalid JSON ({e}):\n{_text(cp.stdout)}")

    tiers = env.tier_stat()
    ram = next(t["name"] for t in tiers if t["type"] == "ram")
    disk = next(t["name"] for t in tiers if t["type"] == "file")
    a_path = os.path.join(env.mnt, "a.bin")
    sub = os.path.join(env.mnt, "sub")
    b_path, c_path = os.path.join(sub, "b.bin"), os.path.join(sub, "c.bin")
    a, b, c = os.urandom(3 * MiB + 512 * KiB), os.urandom(200 * KiB), os.urandom(700 * KiB)
    os.mkdir(sub)
    for path, data in ((a_path, a), (b_path, b)):
        with open(path, "wb") as f:  # closed, not fsynced: dirty on the RAM tier
            f.write(data)

    st = ctl_json("stat")
    rt = st["runtime"]
    check(rt["worker_threads"] == 4 and rt["pools"] == 2 and rt["pid"] == env.runtime_pid(),
          f"stat runtime: {rt}")
    # clio-fuse keeps connections open, and clioctl's own counts.
    check(rt["client_connections"] >= 2, f"stat counts {rt['client_connections']} client connections")
    check([t["name"] for t in st["tiers"]] == [t["name"] for t in tiers],
          f"stat tiers {st['tiers']} differ from tier stat {tiers}")
    by_name = {t["name"]: t for t in st["tiers"]}
    check(by_name[ram]["dirty"] >= len(a) + len(b) and isinstance(by_name[ram]["dirty_limit"], int),
          f"stat: the RAM tier's dirty bytes after {len(a) + len(b)} bytes written: {by_name[ram]}")
    check(by_name[disk]["dirty"] == 0 and by_name[disk]["dirty_limit"] is None,
          f"stat: the disk tier has dirty bytes: {by_name[disk]}")
    wb = st["writeback"]
    check(wb["dirty_blobs"] == 5 and wb["dirty_bytes"] == by_name[ram]["dirty"],
          f"stat writeback after writing 4 + 1 chunks: {wb}")
    cp = ctl("stat")
    check(cp.returncode == 0 and "4 worker threads" in _text(cp.stdout) and "in 5 blobs" in _text(cp.stdout),
          "stat table\n" + describe(cp))

    def chunk_sizes(data):
        return [min(MiB, len(data) - i) for i in range(0, len(data), MiB)]

    loc = ctl_json("locate", a_path)
    check(loc["size"] == len(a) and loc["chunk_size"] == MiB and loc["mount"] == env.mnt,
          f"locate header: { {k: v for k, v in loc.items() if k != 'chunks'} }")
    check([ch["index"] for ch in loc["chunks"]] == [0, 1, 2, 3] and
          [ch["offset"] for ch in loc["chunks"]] == [0, MiB, 2 * MiB, 3 * MiB],
          f"locate chunks: {[(ch['index'], ch['offset']) for ch in loc['chunks']]}")
    for ch, size in zip(loc["chunks"], chunk_sizes(a)):
        check(len(ch["copies"]) == 1, f"chunk {ch['index']} before flush: {ch['copies']}")
        cp0 = ch["copies"][0]
        check(cp0["tier"] == ram and cp0["dirty"] and cp0["bytes"] == size and
              sum(e["size"] for e in cp0["extents"]) >= size,
              f"chunk {ch['index']} before flush: expected {size} dirty bytes on {ram}: {cp0}")

    cp = ctl("flush", a_path)
    check(cp.returncode == 0 and a_path in _text(cp.stdout), "flush FILE\n" + describe(cp))
    loc = ctl_json("locate", a_path)
    for ch, size in zip(loc["chunks"], chunk_sizes(a)):
        check(not any(k["dirty"] for k in ch["copies"]) and
              any(k["tier"] == disk and k["bytes"] == size and k["extents"] for k in ch["copies"]),
              f"chunk {ch['index']} after flush: expected {size} clean bytes on {disk}: {ch['copies']}")
    cp = ctl("locate", a_path)
    check(cp.returncode == 0 and "4 chunks of 1 MiB" in _text(cp.stdout) and disk in _text(cp.stdout)
          and "dirty" not in _text(cp.stdout).split("\n", 2)[-1], "locate table\n" + describe(cp))
    check(ctl_json("stat")["writeback"]["dirty_blobs"] == 1, "flush FILE left other files' blobs dirty")

    with open(c_path, "wb") as f:
        f.write(c)
    out = ctl_json("flush", sub)
    check(out["files"] == 2 and out["directories"] == 1 and out["bytes"] == len(b) + len(c) and not out["errors"],
          f"flush DIR: {out}")
    check(ctl_json("stat")["writeback"]["dirty_blobs"] == 0, "flush DIR left its files dirty")
    d_path = os.path.join(env.mnt, "d.bin")
    with open(d_path, "wb") as f:
        f.write(b"d" * (300 * KiB))
    out = ctl_json("flush")
    check(out["dirty_blobs_before"] == 1 and out["dirty_blobs_after"] == 0 and
          out["dirty_bytes_before"] >= 300 * KiB and out["dirty_bytes_after"] == 0, f"flush (all): {out}")
    # On a terminal, flush draws a progress line on stderr ending with nothing left.
    e_path = os.path.join(env.mnt, "e.bin")
    with open(e_path, "wb") as f:
        f.write(b"e" * (2 * MiB))
    proc, out, tty_out = run_with_tty_stderr([env.clioctl, "flush"], env.env())
    check(proc.returncode == 0 and b"in 2 dirty blobs" in out, f"flush on a terminal: exit {proc.returncode}\n"
          f"{_text(out)}{_text(tty_out)}")
    check(b"0 B left" in tty_out and b"flushed" in tty_out and b"/s" in tty_out,
          f"no flush progress line on the terminal: {tty_out!r}")

    # Error paths, daemon up.
    for args, code, needle in (
            (("locate", os.path.join(env.mnt, "nosuch")), 1, "No such file"),
            (("locate", env.conf), 1, "not on a CLIO mount"),
            (("locate", sub), 1, "is a directory"),
            (("locate", a_path, "--pool", "nosuch"), 1, "no clio_fs pool named 'nosuch'"),
            (("locate",), 2, "path is required"),
            (("flush", env.conf), 1, "not on a CLIO mount"),
            (("flush", a_path, "extra"), 2, "extra"),
            (("stat", "--bogus"), 2, "--bogus")):
        cp = ctl(*args)
        check(cp.returncode == code and needle in _text(cp.stderr) + _text(cp.stdout),
              f"clioctl {' '.join(args)}: expected exit {code} saying {needle!r}\n" + describe(cp))

    # What the flushes made durable survives kill -9 of the runtime and of clio-fuse.
    env.crash()
    env.start_runtime()
    env.mount()
    for path, data in ((a_path, a), (b_path, b), (c_path, c), (d_path, b"d" * (300 * KiB)),
                       (e_path, b"e" * (2 * MiB))):
        check_exact(path, data, "after flush and kill -9")
    env.unmount()
    env.stop_runtime()
    for args in (("stat",), ("flush",)):
        cp = ctl(*args)
        check(cp.returncode == 1 and os.path.join(env.T, "clio.sock") in _text(cp.stderr),
              f"clioctl {' '.join(args)} with the daemon stopped: exit 1 naming the socket\n" + describe(cp))


class _DashboardTables(html.parser.HTMLParser):
    """Collects, from the dashboard's rendered DOM, each row of table#tiers (data-tier, and
    every cell's data-field -> data-value or text), the data-pool of each row of table#pools,
    the items of ul#errors, and body's data-refreshes."""

    def __init__(self):
        super().__init__()
        self.tiers, self.pools, self.errors = {}, [], []
        self.refreshes = None
        self._table = self._row = self._field = None
        self._in_error = False
        self._text = ""
        self._value = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.refreshes = int(a.get("data-refreshes", "0"))
        elif tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table == "tiers" and "data-tier" in a:
            self._row = self.tiers.setdefault(a["data-tier"], {})
        elif tag == "tr" and self._table == "pools" and "data-pool" in a:
            self.pools.append(a["data-pool"])
        elif tag == "td" and self._row is not None and "data-field" in a:
            self._field, self._value, self._text = a["data-field"], a.get("data-value"), ""
        elif tag == "li":
            self._in_error, self._text = True, ""

    def handle_endtag(self, tag):
        if tag == "td" and self._field is not None:
            self._row[self._field] = self._value if self._value is not None else self._text
            self._field = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "li" and self._in_error:
            self.errors.append(self._text)
            self._in_error = False

    def handle_data(self, data):
        if self._field is not None or self._in_error:
            self._text += data


def scenario_dashboard(env):
    """The runtime's dashboard (GET /) in headless Chromium: after it has refreshed itself
    more than once, its tiers table equals `clioctl tier stat --json` and `clioctl stat --json`
    (capacity, used, dirty, lifespan, score, persistence), its pools table lists the composed
    pools, and a malformed client frame shows under recent errors. /api/v1/status carries the
    same. A screenshot is saved as a test artifact (CLIO_TEST_ARTIFACTS, else
    <build>/test-artifacts/dashboard.png)."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    chromium = shutil.which("chromium")
    check(chromium is not None, "chromium is not installed (scripts/install-deps.sh installs it)")
    port = free_port()
    text = env.config_text().replace('  num_threads: 4\n', f'  num_threads: 4\n  http_port: {port}\n', 1)
    # Nothing moves by itself under the comparisons: no background flush, no reorganizer.
    text = text.replace("    flush_interval_ms: 500\n", "    flush_interval_ms: 3600000\n    reorganize: false\n", 1)
    env.write_config(text)
    env.start_runtime()
    env.mount()
    for i in range(3):
        with open(os.path.join(env.mnt, f"f{i}.bin"), "wb") as f:
            f.write(os.urandom(700 * KiB + i * 4099))
    # A broken client frame: the runtime drops that connection and logs a warning.
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.path.join(env.T, "clio.sock"))
        s.sendall(b"NOTCLIO!" * 4)
        s.settimeout(30)
        check(s.recv(1) == b"", "the runtime answered a frame with a bad magic")
    base = f"http://127.0.0.1:{port}"
    import urllib.request
    import urllib.error

    def status():
        with urllib.request.urlopen(base + "/api/v1/status", timeout=30) as r:
            check(r.headers.get_content_type() == "application/json",
                  f"/api/v1/status content type {r.headers.get_content_type()}")
            return json.loads(r.read())

    st = wait_until(lambda: (lambda j: j if any("dropping client connection" in e for e in j["errors"]) else None)(status()),
                    "the dropped connection's warning in /api/v1/status")
    check(st["runtime"]["worker_threads"] == 4 and st["runtime"]["pid"] == env.runtime_pid() and
          st["runtime"]["config"] == env.conf, f"/api/v1/status runtime: {st['runtime']}")
    check([p["name"] for p in st["pools"]] == ["clio_cte_core", "clio_fs"], f"pools: {st['pools']}")
    tiers = env.tier_stat()
    cte_state = st["pools"][0]["state"]
    check([t["name"] for t in cte_state["tiers"]] == [t["name"] for t in tiers],
          f"/api/v1/status tiers {cte_state['tiers']} differ from tier stat {tiers}")
    try:
        urllib.request.urlopen(base + "/nothing", timeout=30)
        check(False, "GET /nothing answered 200")
    except urllib.error.HTTPError as e:
        check(e.code == 404 and b"/api/v1/status" in e.read(), f"GET /nothing: {e.code}")

    profile = os.path.join(env.T, "chromium")
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
              "--virtual-time-budget=7000"]
    cp = run_cmd(common + ["--dump-dom", base + "/"], env=env.env())
    check(cp.returncode == 0 and "<table" in _text(cp.stdout), "chromium --dump-dom of the dashboard\n" + describe(cp))
    page = _DashboardTables()
    page.feed(_text(cp.stdout))
    check(page.refreshes is not None and page.refreshes >= 2,
          f"the dashboard refreshed {page.refreshes} times in 7 s of page time (every 2 s expected)")
    stat = {t["name"]: t for t in json.loads(_text(run_cmd([env.clioctl, "stat", "--json"], env=env.env()).stdout))["tiers"]}
    check(sorted(page.tiers) == sorted(t["name"] for t in tiers),
          f"dashboard tiers {sorted(page.tiers)} differ from tier stat {[t['name'] for t in tiers]}")
    for t in tiers:
        row = page.tiers[t["name"]]
        for field in ("capacity", "used", "lifetime_days", "score"):
            check(float(row[field]) == float(t[field]),
                  f"dashboard {t['name']} {field} = {row[field]}, tier stat says {t[field]}")
        check(row["type"] == t["type"] and row["persistence"] == t["persistence"],
              f"dashboard {t['name']}: {row} vs {t}")
        check(int(row["dirty"]) == stat[t["name"]]["dirty"],
              f"dashboard {t['name']} dirty = {row['dirty']}, clioctl stat says {stat[t['name']]['dirty']}")
    ram = next(t["name"] for t in tiers if t["type"] == "ram")
    check(int(page.tiers[ram]["dirty"]) > 0, f"the RAM tier shows no dirty bytes: {page.tiers[ram]}")
    check(page.pools == ["clio_cte_core", "clio_fs"], f"dashboard pools: {page.pools}")
    check(any("dropping client connection" in e for e in page.errors), f"dashboard errors: {page.errors}")

    artifacts = os.environ.get("CLIO_TEST_ARTIFACTS") or os.path.join(env.build_dir, "test-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    shot = os.path.join(artifacts, "dashboard.png")
    if os.path.exists(shot):
        os.unlink(shot)
    cp = run_cmd(common + ["--window-size=1400,1000", f"--screenshot={shot}", base + "/"], env=env.env())
    check(cp.returncode == 0 and os.path.exists(shot), "chromium --screenshot\n" + describe(cp))
    with open(shot, "rb") as f:
        png = f.read()
    check(png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10000, f"the screenshot is not a PNG ({len(png)} bytes)")
    log(f"dashboard screenshot: {shot}")
    env.unmount()
    env.stop_runtime()


def _expect_config_refused(env, conf, needles, what):
    cp = run_cmd([env.clio_run, "start"], env=env.env(conf=conf))
    err = _text(cp.stderr)
    try:
        check(cp.returncode == 2, f"{what}: expected exit status 2 (bad usage)\n" + describe(cp))
        for n in needles:
            if isinstance(n, re.Pattern):
                check(n.search(err), f"{what}: stderr does not match {n.pattern!r}\n" + describe(cp))
            else:
                check(n in err, f"{what}: stderr does not name {n!r}\n" + describe(cp))
        check(env.runtime_status() != 0, f"{what}: the runtime is running although start failed")
    finally:
        pid = env.runtime_pid()
        if pid and pid_alive(pid):  # it started anyway: stop it so the next case is clean
            run_cmd([env.clio_run, "stop"], env=env.env(conf=conf))
    log(f"{what}: refused as expected: {err.strip().splitlines()[-1] if err.strip() else ''}")


def scenario_bad_input(env):
    env.check_binaries(env.clio_run, env.clio_fuse)
    good = env.config_text()
    # The good config is written first: every bad config shares its state dir and socket, so
    # `clio_run status` with it tells whether a refused start left a runtime behind.
    env.write_config(good)

    # (a) unknown key, on a known line.
    lines = good.splitlines(keepends=True)
    idx = next(i for i, l in enumerate(lines) if l.startswith("runtime:")) + 1
    lines.insert(idx, "  bogus_key: 1\n")
    bad_line = idx + 1  # 1-based
    conf_a = env.write_config("".join(lines), os.path.join(env.T, "bad_key.yaml"))
    env.confs.append(conf_a)
    _expect_config_refused(env, conf_a, [conf_a, "bogus_key",
                                         re.compile(rf"(?<!\d){bad_line}(?!\d)")],
                           "(a) unknown key")

    # (b) bad size.
    conf_b = env.write_config(env.config_text(ram_capacity="12XB"),
                              os.path.join(env.T, "bad_size.yaml"))
    env.confs.append(conf_b)
    _expect_config_refused(env, conf_b, [conf_b, "capacity_limit", "12XB"], "(b) bad size")

    # (b2) a reclaim window past its range (clio_fs orphan_reclaim_s, 0 to 3600 s).
    text = good.replace('    chunk_size: "1MiB"\n', '    chunk_size: "1MiB"\n    orphan_reclaim_s: 99999\n', 1)
    check(text != good, "(b2) the config template has no clio_fs chunk_size line to follow")
    conf_b2 = env.write_config(text, os.path.join(env.T, "bad_reclaim.yaml"))
    env.confs.append(conf_b2)
    _expect_config_refused(env, conf_b2, [conf_b2, "orphan_reclaim_s", "3600"], "(b2) bad orphan_reclaim_s")

    # (c) missing config file.
    conf_c = os.path.join(env.T, "does_not_exist.yaml")
    _expect_config_refused(env, conf_c, [conf_c], "(c) missing config file")

    # (e) clio-fuse while the runtime is NOT running.
    check(env.runtime_status() != 0, "(e) precondition: runtime should not be running")
    mnt_e = os.path.join(env.T, "mnt_e")
    os.makedirs(mnt_e)
    env.mountpoints.add(mnt_e)
    cp = run_cmd([env.clio_fuse, mnt_e], env=env.env())
    check(cp.returncode != 0, "(e) clio-fuse succeeded without a runtime\n" + describe(cp))
    check(re.search(r"not running", _text(cp.stderr), re.I),
          "(e) stderr does not say the runtime is not running\n" + describe(cp))
    check(not is_mounted(mnt_e), f"(e) {mnt_e} is a mount point after the failed mount")
    check(not find_fuse_pids(env.clio_fuse, mnt_e), "(e) a clio-fuse process was left running")
    log("(e) mount without a runtime refused as expected")

    env.start_runtime()

    # (d) mount point that does not exist.
    mnt_d = os.path.join(env.T, "no", "such", "dir")
    env.mountpoints.add(mnt_d)
    cp = run_cmd([env.clio_fuse, mnt_d], env=env.env())
    err_lines = [l for l in _text(cp.stderr).splitlines() if l.strip()]
    check(cp.returncode != 0, "(d) clio-fuse succeeded on a missing mount point\n" + describe(cp))
    check(len(err_lines) == 1, f"(d) expected one line on stderr, got {len(err_lines)}\n"
          + describe(cp))
    check(mnt_d in err_lines[0], "(d) stderr does not name the mount point\n" + describe(cp))
    check(not is_mounted(mnt_d) and not os.path.exists(mnt_d),
          f"(d) {mnt_d} exists or is mounted after the failed mount")
    check(not find_fuse_pids(env.clio_fuse, mnt_d), "(d) a clio-fuse process was left running")
    log("(d) missing mount point refused as expected")

    # (f) a directory that is already a CLIO mount.
    env.mount()
    probe = os.urandom(10000)
    with open(os.path.join(env.mnt, "probe.bin"), "wb") as f:
        f.write(probe)
    n_before = len(mount_entries(env.mnt))
    cp = run_cmd([env.clio_fuse, env.mnt], env=env.env())
    check(cp.returncode != 0, "(f) a second clio-fuse on a mounted directory succeeded\n"
          + describe(cp))
    n_after = len(mount_entries(env.mnt))
    check(n_after == n_before, f"(f) {env.mnt} has {n_after} mount entries after the refused "
                               f"mount, {n_before} before (stacked mount?)")
    check(len(find_fuse_pids(env.clio_fuse, env.mnt)) <= 1,
          "(f) more than one clio-fuse process serves the mount point")
    check_exact(os.path.join(env.mnt, "probe.bin"), probe, "(f) existing mount")
    check(os.listdir(env.mnt) == ["probe.bin"], f"(f) listing: {os.listdir(env.mnt)}")
    with open(os.path.join(env.mnt, "probe2.bin"), "wb") as f:
        f.write(b"still works")
    check_exact(os.path.join(env.mnt, "probe2.bin"), b"still works", "(f) existing mount")
    log(f"(f) double mount refused as expected: {_text(cp.stderr).strip()[:200]}")
    env.unmount()
    env.stop_runtime()


POOL_COMPOSE = """\
compose:
  - mod_name: clio_bdev
    pool_name: "${CLIO_STATE_DIR}/c0.dat"
    pool_id: "2001.0"
    bdev_type: file
    capacity: "16MB"
    growth_unit: "8MB"
  - mod_name: clio_bdev
    pool_name: "${CLIO_STATE_DIR}/c1.dat"
    pool_id: "2002.0"
    bdev_type: file
    capacity: "16MB"
    growth_unit: "8MB"
  - mod_name: clio_bdev
    pool_name: "${CLIO_STATE_DIR}/c2.dat"
    pool_id: "2003.0"
    bdev_type: file
    capacity: "16MB"
    growth_unit: "8MB"
  - mod_name: clio_safe_bdev
    pool_name: "safe::composed"
    pool_id: "2010.0"
    members: ["2001.0", "2002.0", "2003.0"]
    max_failures: 1
    chunk_size: "64KB"
    alloc_log: "${CLIO_STATE_DIR}/composed.alloc_log"
"""


def scenario_pool_ops(env):
    """Pools made and destroyed on the running node: `pool create` of a file bdev (its device
    file appears) kept across restarts with --restart, one that is not; `compose start` of three
    members and a safe-bdev over them (array status healthy), a member refused destroy while the
    array uses it, `compose stop` destroying the array first; after a restart only --restart
    pools are back, after `start --fresh` none; every bad argument, clash and a stopped daemon
    give their exit code and say why; a --restart pool attached as a tier (`tier add
    existing_pool_id=`) comes back with its data and is destroyed only once removed."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    env.write_config()
    env.start_runtime()

    def ctl(*args):
        return run_cmd([env.clioctl, *args], env=env.env())

    def names():
        cp = ctl("pool", "list", "--json")
        check(cp.returncode == 0, "pool list\n" + describe(cp))
        return [p["name"] for p in json.loads(_text(cp.stdout))]

    def refused(args, code, pattern, what):
        cp = ctl(*args)
        check(cp.returncode == code and re.search(pattern, _text(cp.stderr)),
              f"{what}: expected exit {code} and /{pattern}/ on stderr\n" + describe(cp))

    base = names()
    check(len(base) == 2, f"the default config composes the CTE and the filesystem: {base}")
    # A client's pool makes its files beneath the state directory (or runtime.allowed_paths) only.
    outside = os.path.join(env.T, "outside.dat")
    refused(("pool", "create", "clio_bdev", outside, "bdev_type=file", "capacity=32MB"), 1,
            r"outside them: a client may make the runtime create files only beneath", "a file outside the state dir")
    check(not os.path.exists(outside), f"a refused pool create made {outside}")
    os.symlink(env.T, os.path.join(env.state, "link"))
    refused(("pool", "create", "clio_bdev", os.path.join(env.state, "link", "x.dat"), "bdev_type=file",
             "capacity=32MB"), 1, r"leaves its directory", "a path through a symbolic link")
    check(not os.path.exists(os.path.join(env.T, "x.dat")), "a pool create followed a symbolic link")
    # The CTE's own tier file is locked while it is open: a second device on it is refused.
    tier_file = os.path.join(env.state, "tiers", "disk.dat_node0")
    check(os.path.exists(tier_file), f"no tier file at {tier_file}")
    refused(("pool", "create", "clio_bdev", tier_file, "bdev_type=file", "capacity=32MB"), 1, r"is in use",
            "a pool on the CTE's open tier file")
    dev = os.path.join(env.state, "extra.dat")
    cp = ctl("pool", "create", "clio_bdev", dev, "bdev_type=file", "capacity=32MB", "growth_unit=8MB",
             "--restart")
    check(cp.returncode == 0 and f"created {dev} (clio_bdev, id 1000)" in _text(cp.stdout),
          "pool create of a file bdev\n" + describe(cp))
    check(os.path.exists(dev), f"the new pool's device file {dev} was not created")
    scratch = f"ram::{env.ram_name}_scratch"
    cp = ctl("pool", "create", "clio_bdev", scratch, "bdev_type=ram", "capacity=16MB", "--id", "1500.0", "--json")
    check(cp.returncode == 0, "pool create --json\n" + describe(cp))
    made = json.loads(_text(cp.stdout))
    check(len(made) == 1 and made[0]["id"] == 1500 and made[0]["module"] == "clio_bdev" and
          "16777216" in made[0]["describe"], f"pool create --json: {made}")
    check(names() == base + [dev, scratch], f"pool list after two creates: {names()}")

    refused(("pool", "create", "clio_nosuch", "x"), 2, r"unknown module 'clio_nosuch' \(known: .*clio_bdev",
            "an unknown module")
    refused(("pool", "create", "clio_bdev", "ram::bad", "bdev_type=ram", "capacity=12XB"), 2, r"capacity",
            "a bad size")
    refused(("pool", "create", "clio_bdev", "ram::bad", "bdev_type=ram", "colour=red"), 2,
            r"colour: unknown key", "an unknown key")
    refused(("pool", "create", "clio_bdev", "ram::bad", "capacity"), 2, r"not KEY=VALUE", "a word, not KEY=VALUE")
    refused(("pool", "create", "clio_bdev", dev, "bdev_type=file"), 1, r"AlreadyExists.*is running",
            "a second pool of one name")
    refused(("pool", "create", "clio_bdev", "ram::bad", "bdev_type=ram", "--id", "1000.0"), 1,
            r"pool id 1000 is taken by pool", "a taken id")
    refused(("pool", "create", "clio_bdev", "ram::bad", "--id", "x.y"), 2, r"bad pool_id", "a malformed id")
    refused(("pool", "destroy", base[0]), 1, r"comes from the config", "destroying a pool of the config")
    refused(("pool", "destroy", "nosuch"), 1, r"no pool named 'nosuch'", "destroying an unknown pool")
    refused(("pool", "create", "clio_bdev"), 2, r"name", "a missing name")
    check("ram::bad" not in names(), f"a refused create left a pool behind: {names()}")

    compose_file = os.path.join(env.T, "more.yaml")
    with open(compose_file, "w") as f:
        f.write(POOL_COMPOSE)
    cp = ctl("compose", "start", compose_file)
    check(cp.returncode == 0 and _text(cp.stdout).count("created") == 4, "compose start\n" + describe(cp))
    members = [os.path.join(env.state, f"c{i}.dat") for i in range(3)]
    check(names() == base + [dev, scratch] + members + ["safe::composed"], f"pool list after compose start: {names()}")
    cp = ctl("array", "status", "safe::composed", "--json")
    check(cp.returncode == 0, "array status of the composed array\n" + describe(cp))
    st = json.loads(_text(cp.stdout))
    check(st["health"] == "ok" and st["failed_members"] == 0 and st["k"] == 2 and
          [m["state"] for m in st["members"]] == ["ok"] * 3, f"array status of the composed array: {st}")
    refused(("pool", "destroy", members[1]), 1, r"is used by pool 'safe::composed'", "destroying a member in use")
    refused(("compose", "start", compose_file), 1, r"AlreadyExists", "compose start twice")
    cp = ctl("compose", "stop", compose_file)
    out = _text(cp.stdout)
    check(cp.returncode == 0 and out.find("destroyed safe::composed") < out.find(f"destroyed {members[0]}") and
          out.count("destroyed") == 4, "compose stop: the array goes before its members\n" + describe(cp))
    check(names() == base + [dev, scratch], f"pool list after compose stop: {names()}")
    cp = ctl("compose", "stop", compose_file)
    check(cp.returncode == 0 and "nothing destroyed" in _text(cp.stdout), "compose stop again\n" + describe(cp))
    refused(("compose", "start", os.path.join(env.T, "missing.yaml")), 2, r"missing\.yaml", "a missing compose file")
    cp = run_cmd([env.clio_run, "compose", "start", compose_file], env=env.env())
    check(cp.returncode == 0 and _text(cp.stdout).count("created") == 4, "clio_run compose start\n" + describe(cp))

    # A restart brings back the --restart pool only; its device keeps its path.
    env.stop_runtime()
    env.start_runtime()
    check(names() == base + [dev], f"pool list after a restart: {names()}")
    pool_log = os.path.join(env.state, "pools.json")
    with open(pool_log) as f:
        check(dev in f.read(), f"{pool_log} does not record {dev}")

    # A pool made at run time becomes a tier with the keys of a storage entry, if it comes back
    # at every start (--restart); it cannot be destroyed while it is a tier, and it is back
    # after a restart with its data, before the CTE that uses it.
    tmp_pool = f"ram::{env.ram_name}_tmp"
    cp = ctl("pool", "create", "clio_bdev", tmp_pool, "bdev_type=ram", "capacity=16MB", "--id", "1600.0")
    check(cp.returncode == 0, "pool create of a pool without --restart\n" + describe(cp))
    refused(("tier", "add", "existing_pool_id=1600.0", "existing_pool_module=clio_bdev"), 2,
            r"without --restart and would not come back", "a tier on a pool that is not kept")
    cp = ctl("pool", "destroy", tmp_pool)
    check(cp.returncode == 0, "destroying the pool a refused tier add looked at\n" + describe(cp))
    cp = ctl("tier", "add", "existing_pool_id=1000.0", "existing_pool_module=clio_bdev", "score=0.9", "--json")
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["name"] == dev,
          "tier add of a pool made with --restart\n" + describe(cp))
    env.mount()
    payload = os.urandom(3 * 1024 * 1024 + 123)
    with open(os.path.join(env.mnt, "on_pool.bin"), "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    on_dev = next(t for t in env.tier_stat() if t["name"] == dev)
    check(on_dev["used"] >= len(payload), f"the attached pool's tier took no fsynced data: {on_dev}")
    refused(("pool", "destroy", dev), 1, rf"is used by pool '{base[0]}'", "destroying a pool that is a tier")
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    check(sorted(names()) == sorted(base + [dev]), f"pool list after a restart with the attached tier: {names()}")
    check(dev in {t["name"] for t in env.tier_stat()}, "the tier on the logged pool did not come back")
    env.mount()
    check_exact(os.path.join(env.mnt, "on_pool.bin"), payload, "after a restart, on the attached pool's tier")
    cp = ctl("tier", "drain", dev)
    check(cp.returncode == 0, "drain of the attached pool's tier\n" + describe(cp))
    cp = ctl("tier", "rm", dev)
    check(cp.returncode == 0, "tier rm of the attached pool's tier\n" + describe(cp))
    check_exact(os.path.join(env.mnt, "on_pool.bin"), payload, "after removing the attached pool's tier")
    env.unmount()
    cp = ctl("pool", "destroy", dev)
    check(cp.returncode == 0 and f"destroyed {dev}" in _text(cp.stdout),
          "pool destroy once its tier is gone\n" + describe(cp))
    check(not os.path.exists(pool_log), f"{pool_log} is left after its last pool was destroyed")
    check(os.path.exists(dev), "pool destroy removed the device's data; it only stops the pool")
    cp = ctl("pool", "create", "clio_bdev", scratch, "bdev_type=ram", "capacity=16MB", "--restart")
    check(cp.returncode == 0, "pool create --restart of a RAM pool\n" + describe(cp))
    env.stop_runtime()
    cp = run_cmd([env.clio_run, "start", "--fresh"], env=env.env(), keep_as=env.logs("clio_run"))
    check(cp.returncode == 0, "clio_run start --fresh\n" + describe(cp))
    wait_until(lambda: env.runtime_status() == 0, "`clio_run status` to report running")
    check(names() == base, f"pool list after start --fresh: {names()}")
    check(not os.path.exists(pool_log), f"start --fresh left {pool_log}")

    env.stop_runtime()
    for args in (("pool", "create", "clio_bdev", "ram::x", "bdev_type=ram"), ("pool", "destroy", "x"),
                 ("compose", "start", compose_file), ("compose", "stop", compose_file)):
        refused(args, 1, r"\S", f"{' '.join(args[:2])} with the daemon down")


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
