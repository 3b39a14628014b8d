"""The end-to-end tests' harness: a runtime and its FUSE mount in a temporary directory (Env),
commands run without pipes that a daemon could hold open, checks that name what differs, and a
file model for crash workloads. The scenarios (e2e_*.py) and the other integration scripts
build on it; e2e_test.py runs the scenarios.
"""

import hashlib
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
import time

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


def describe_threads(pid):
    """Each thread of `pid`: name, state, where it sleeps (wchan) and its kernel stack (root can
    read it): what a process that does not exit is waiting on."""
    out = [f"threads of pid {pid}:"]
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return f"pid {pid}: {e}"
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"

        def read(name):
            try:
                with open(f"{base}/{name}") as f:
                    return f.read().strip()
            except OSError:
                return "?"
        state = next((line.split(":", 1)[1].strip() for line in read("status").splitlines()
                      if line.startswith("State:")), "?")
        stack = " <- ".join(line.split(" ", 1)[-1] for line in read("stack").splitlines()[:8])
        out.append(f"  {tid} {read('comm')!r} {state} wchan={read('wchan')} stack: {stack}")
    return "\n".join(out)


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
        try:
            wait_until(lambda: not find_fuse_pids(self.clio_fuse, mnt),
                       f"clio-fuse for {mnt} to exit after unmount")
        except TestFailure as e:
            # What it is stuck on, for the report: its threads, and what it logged.
            stuck = "\n".join(describe_threads(p) for p in find_fuse_pids(self.clio_fuse, mnt))
            tail = ""
            log_file = self.logs("clio-fuse-" + os.path.basename(mnt)) + ".stderr"
            if os.path.exists(log_file):
                with open(log_file, errors="replace") as f:
                    tail = "".join(f.readlines()[-20:])
            raise TestFailure(f"{e}\n{stuck}\n--- tail of {log_file} ---\n{tail}") from None
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
