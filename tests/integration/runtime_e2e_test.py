#!/usr/bin/env python3
"""End-to-end tests of the runtime kernel (issue 5) with the real clio_run, clio-fuse and clioctl:

  transports  the mount driven over each client transport in turn (CLIO_IPC_MODE=shm, unix,
              tcp), each seen in `clioctl stat`; then the runtime stopped and started again,
              and killed and started again, under a live mount with a reader and a writer
              running: the mount reconnects, every operation completes or fails with an error
              (never hangs), and what was fsynced is intact.
  module      the example module libclio_stats.so loaded by clio_run from a root-owned
              runtime.module_dir with `clioctl pool create`, standing in front of a bdev pool:
              requests sent to it reach the device and show in its counters on /api/v1/status;
              the device cannot be destroyed under it.
  in_runtime  `clio_run start --mount DIR`, the runtime serving the mount itself: bad mount
              points and options refused at start; files written, read back and intact after
              a stop and start; a stop with a file still open ends its reads with ENOTCONN
              and takes the mount away; an unmount from outside leaves the runtime serving;
              after kill -9 a start detaches the dead CLIO mount and mounts again; another file
              system's dead mount is refused, naming it.
  flush_error a failed write-back (RAM over an S3 bucket refusing PUTs) is reported to the
              writer's close, not taken by a reader's: a read-only open and close in between
              succeeds; after the bucket recovers the data becomes durable.

  fuse_uring  FUSE over io_uring on the runtime's mount: bad -o io_uring/uring_threads values
              refused; with the kernel's fuse.enable_uring off, io_uring=on refuses to start
              naming the fix and auto serves through /dev/fuse; with it on, files large and
              small, concurrent writers, xattrs and renames come back intact, /metrics counts
              the requests on the rings, a stop with a file open ends it with ENOTCONN, and
              after kill -9 a start mounts again with the fsynced data. Skipped (77) on a
              kernel without FUSE over io_uring.

Usage:
    python3 tests/integration/runtime_e2e_test.py --build-dir build [--only SCENARIO] [--keep]

Uses the harness of e2e_test.py (Env, run_cmd, check, ...). Needs root, /dev/fuse.
"""

import argparse
import errno
import json
import os
import shutil
import socket
import stat
import struct
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e_test as e2e  # noqa: E402
from e2e_test import KiB, MiB, check, check_exact, describe, free_port, log, run_cmd, _text  # noqa: E402

SCENARIOS = ("transports", "module", "in_runtime", "flush_error", "fuse_uring", "big_dir")


def _runtime_keys(env, text):
    """The config with more runtime keys (a TCP port, a module directory) under runtime:."""
    return env.config_text().replace("  num_threads: 4\n", "  num_threads: 4\n" + text, 1)


def _stat(env, ipc_mode="unix"):
    e = env.env()
    e["CLIO_IPC_MODE"] = ipc_mode
    cp = run_cmd([env.clioctl, "stat", "--json"], env=e)
    check(cp.returncode == 0, "clioctl stat\n" + describe(cp))
    return json.loads(_text(cp.stdout))["runtime"]


def _mount_with(env, mode):
    """Mounts with clio-fuse talking to the runtime over `mode`."""
    saved = env.env
    env.env = lambda conf=None, fault=None: dict(saved(conf, fault), CLIO_IPC_MODE=mode)
    try:
        env.mount()
    finally:
        env.env = saved


def _write(path, data, fsync=True):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def scenario_transports(env):
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    env.write_config(_runtime_keys(env, f"  tcp_port: {free_port()}\n"))
    env.start_runtime()
    files = {}
    for mode in ("shm", "unix", "tcp"):
        _mount_with(env, mode)
        for i in range(3):
            rel = f"{mode}_{i}.bin"
            files[rel] = os.urandom(300 * KiB + i * 4099 + (1 * MiB if i == 2 else 0))
            _write(os.path.join(env.mnt, rel), files[rel])
        for rel, data in files.items():
            check_exact(os.path.join(env.mnt, rel), data, f"over {mode}")
        rt = _stat(env)
        if mode == "shm":
            check(rt["shm_channels"] >= 1, f"clio-fuse over shm holds no channel: {rt}")
        if mode == "tcp":
            check(rt["tcp_connections"] >= 1, f"clio-fuse over tcp holds no TCP connection: {rt}")
            check(rt["shm_channels"] == 0, f"channels open with only a TCP client mounted: {rt}")
        check(rt["malformed_frames"] == 0, f"malformed frames counted: {rt}")
        env.unmount()
        log(f"mount over {mode}: {len(files)} files written and read back")

    # Restarts under a live mount (shared memory, the default): a reader and a writer keep
    # going; each operation completes (the client waits for the runtime and resends what is
    # safe to resend) or fails with an error; none hangs past the harness's timeouts.
    _mount_with(env, "auto")
    stop = threading.Event()
    outcomes = {"ok": 0, "error": 0}
    errors = []

    def reader():
        names = sorted(files)
        i = 0
        while not stop.is_set():
            rel = names[i % len(names)]
            i += 1
            try:
                with open(os.path.join(env.mnt, rel), "rb") as f:
                    got = f.read()
                if got != files[rel]:
                    errors.append(f"{rel}: {len(got)} bytes read differ from what was written")
                outcomes["ok"] += 1
            except OSError as e:
                # The runtime away (ENOTCONN) or an operation it could not finish (EIO): a
                # clean failure. Anything else is not.
                outcomes["error"] += 1
                if e.errno not in (errno.ENOTCONN, errno.EIO):
                    errors.append(f"read {rel}: {e}")

    def writer():
        n = 0
        while not stop.is_set():
            path = os.path.join(env.mnt, f"during_{n % 8}.bin")
            n += 1
            try:
                _write(path, os.urandom(64 * KiB), fsync=False)
                outcomes["ok"] += 1
            except OSError as e:
                outcomes["error"] += 1
                if e.errno not in (errno.ENOTCONN, errno.EIO):
                    errors.append(f"write {path}: {e}")

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    try:
        env.stop_runtime()
        env.start_runtime()
        before = outcomes["ok"]
        e2e.wait_until(lambda: outcomes["ok"] > before + 20, "operations to go on after a clean restart")
        env.kill9_runtime()
        env.start_runtime()
        before = outcomes["ok"]
        e2e.wait_until(lambda: outcomes["ok"] > before + 20, "operations to go on after kill -9 and a start")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    check(not any(t.is_alive() for t in threads), "a reader or writer hung across the restarts")
    check(not errors, f"wrong bytes or unexpected errors across the restarts: {errors[:5]}")
    # Every file fsynced before the restarts is intact, and the mount still writes and reads.
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after restarts under the mount")
    late = os.urandom(2 * MiB + 17)
    _write(os.path.join(env.mnt, "late.bin"), late)
    check_exact(os.path.join(env.mnt, "late.bin"), late, "written after the restarts")
    log(f"restarts under the mount: {outcomes['ok']} operations completed, {outcomes['error']} failed cleanly")
    env.unmount()
    env.stop_runtime()


def _frame(pool, method, payload=b"", rid=1):
    return struct.pack("<IHHIIQII", 0x4f494c43, 4, 0, pool, method, rid, len(payload), 0) + payload


def _call(sock_path, pool, method, payload=b""):
    """One request over the Unix socket, as a raw client: (code, payload)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(sock_path)
        s.sendall(_frame(pool, method, payload))
        head = b""
        while len(head) < 24:
            chunk = s.recv(24 - len(head))
            check(chunk, "the runtime closed the connection")
            head += chunk
        _magic, _version, code, _rid, length, _flags = struct.unpack("<IHHQII", head)
        body = b""
        while len(body) < length:
            chunk = s.recv(length - len(body))
            check(chunk, "the runtime closed the connection mid-answer")
            body += chunk
        return code, body


def scenario_module(env):
    env.check_binaries(env.clio_run, env.clioctl)
    lib = os.path.join(env.build_dir, "examples", "libclio_stats.so")
    check(os.path.exists(lib), f"{lib} is not built (ninja clio_stats)")
    check(os.geteuid() == 0, "the module scenario needs root (module directories are root's)")
    mods = os.path.join(env.T, "modules")
    os.mkdir(mods, 0o755)
    os.chmod(mods, 0o755)
    shutil.copy(lib, os.path.join(mods, "libclio_stats.so"))
    os.chmod(os.path.join(mods, "libclio_stats.so"), 0o644)
    port = free_port()
    env.write_config(_runtime_keys(env, f"  module_dir: \"{mods}\"\n  http_port: {port}\n"))
    env.start_runtime()

    def ctl(*args):
        return run_cmd([env.clioctl, *args], env=env.env())

    dev = f"ram::{env.ram_name}_dev"
    cp = ctl("pool", "create", "clio_bdev", dev, "bdev_type=ram", "capacity=8MB", "--id", "1301.0")
    check(cp.returncode == 0, "pool create of the device\n" + describe(cp))
    cp = ctl("pool", "create", "clio_stats", "stats::dev", "next_pool_id=1301.0", "--id", "1320.0")
    check(cp.returncode == 0 and "created stats::dev (clio_stats, id 1320)" in _text(cp.stdout),
          "pool create of the module's pool\n" + describe(cp))
    cp = ctl("pool", "list", "--json")
    pools = {p["name"]: p for p in json.loads(_text(cp.stdout))}
    check(pools["stats::dev"]["module"] == "clio_stats" and
          pools["stats::dev"]["describe"] == f"statistics in front of {dev}", f"pool list: {pools.get('stats::dev')}")
    # GetStats (14) and AllocateBlocks (10) through the module: forwarded to the device.
    sock = os.path.join(env.T, "clio.sock")
    code, body = _call(sock, 1320, 14)
    check(code == 0 and len(body) > 40, f"GetStats through the module: code {code}")
    code, body = _call(sock, 1320, 10, struct.pack("<Q", 128 * KiB))
    check(code == 0, f"AllocateBlocks through the module: code {code} {body!r}")
    code, _ = _call(sock, 1320, 10, b"\x01")  # malformed: the device's error, counted
    check(code != 0, "a malformed AllocateBlocks was accepted")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status", timeout=30) as r:
        st = json.loads(r.read())
    state = next(p["state"] for p in st["pools"] if p["name"] == "stats::dev")
    check(state["methods"]["14"]["calls"] == 1 and state["methods"]["10"]["calls"] == 2 and
          state["methods"]["10"]["errors"] == 1, f"the module's counters: {state['methods']}")
    check(state["next"]["used"] >= 128 * KiB, f"the device under the module: {state['next']}")
    cp = ctl("pool", "destroy", dev)
    check(cp.returncode == 1 and "is used by pool 'stats::dev'" in _text(cp.stderr),
          "destroying the device under the module\n" + describe(cp))
    for name in ("stats::dev", dev):
        cp = ctl("pool", "destroy", name)
        check(cp.returncode == 0, f"pool destroy {name}\n" + describe(cp))
    # A module not loaded yet, from a directory others may write, is refused, naming why (a
    # module already loaded stays loaded).
    shutil.copy(lib, os.path.join(mods, "libclio_other.so"))
    os.chmod(os.path.join(mods, "libclio_other.so"), 0o644)
    os.chmod(mods, 0o777)
    cp = ctl("pool", "create", "clio_other", "other::again")
    check(cp.returncode != 0 and "writable by its group or others" in _text(cp.stderr),
          "a world-writable module directory\n" + describe(cp))
    env.stop_runtime()


def _dead(path):
    """A mount whose FUSE process died (statvfs always asks the file system; a stat may be
    answered from the kernel's cache)."""
    try:
        os.statvfs(path)
        return False
    except OSError as e:
        return e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED)


def _stop_with_file_open(env, mnt, path):
    """Stops the runtime serving `mnt` while `path` is open: the stop ends the connection, the
    holder's next read fails with ENOTCONN (not a hang) and the mount is gone."""
    holder = open(path, "rb")
    try:
        env.stop_runtime()
        check(not e2e.is_mounted(mnt), "the mount outlived the runtime's stop")
        try:
            holder.read()
            check(False, "a read of a file held open across the stop succeeded")
        except OSError as e:
            check(e.errno in (errno.ENOTCONN, errno.ECONNABORTED), f"read after the stop: {e} (expected ENOTCONN)")
    finally:
        try:
            holder.close()
        except OSError:
            pass


def _check_dead(mnt):
    """The mount of a killed runtime answers with an error, not a hang. The first access after
    the abort may say ECONNABORTED (ECANCELED over io_uring, for a request the kernel was
    handing to a ring of the dead process), later ones ENOTCONN."""
    try:
        os.listdir(mnt)
        check(False, "the mount answered after its runtime was killed")
    except OSError as e:
        check(e.errno in (errno.ENOTCONN, errno.ECONNABORTED, errno.ECANCELED), f"listdir of the dead mount: {e}")


def scenario_in_runtime(env):
    env.check_binaries(env.clio_run, env.clioctl)
    env.write_config()
    # A space in the path: the kernel's mount table escapes it, and the stop must still find
    # its own mount there (to abort it) and tell it from another.
    mnt = os.path.join(env.T, "mount point")
    os.mkdir(mnt)
    # Refused at start, naming the cause; nothing keeps running.
    for argv, code, words in (
            (["--mount", os.path.join(env.T, "nowhere")], 1, "does not exist"),
            (["--mount", mnt, "-o", "attr_timeout=soon"], 2, "bad value in -o attr_timeout=soon"),
            (["--mount", mnt, "-o", "conf=/etc/x.yaml"], 2, "-o conf is clio-fuse's"),
            (["--mount", mnt, "-o", "entry_timeout=-5"], 2, "bad value in -o entry_timeout=-5"),
            (["-o", "allow_other"], 2, "--mount")):
        cp = run_cmd([env.clio_run, "start"] + argv, env=env.env())
        out = _text(cp.stdout) + _text(cp.stderr)
        check(cp.returncode == code and words in out,
              f"clio_run start {argv}: expected exit {code} naming {words!r}\n" + describe(cp))
        check(env.runtime_status() != 0, f"a runtime runs after the refused start {argv}")
        check(not e2e.is_mounted(mnt), f"{mnt} mounted after the refused start {argv}")

    env.start_runtime(mount=mnt)
    files = {f"f{i}.bin": os.urandom(i * 70 * KiB + 13) for i in range(1, 6)}
    os.mkdir(os.path.join(mnt, "dir"))
    for rel, data in files.items():
        _write(os.path.join(mnt, "dir", rel), data)
    os.rename(os.path.join(mnt, "dir", "f1.bin"), os.path.join(mnt, "dir", "g1.bin"))
    files["g1.bin"] = files.pop("f1.bin")
    for rel, data in files.items():
        check_exact(os.path.join(mnt, "dir", rel), data, "on the runtime's own mount")
    check(sorted(os.listdir(os.path.join(mnt, "dir"))) == sorted(files), "listing of dir")
    check(_stat(env)["client_connections"] >= 1, "clioctl stat beside the runtime's mount")

    # A stop with a file open: the runtime waits a moment, then ends the connection; the
    # holder's next read fails with ENOTCONN rather than hanging, and the mount is gone.
    _stop_with_file_open(env, mnt, os.path.join(mnt, "dir", "f2.bin"))

    env.start_runtime(mount=mnt)
    for rel, data in files.items():
        check_exact(os.path.join(mnt, "dir", rel), data, "after a stop and start")
    # An unmount from outside ends the session, not the runtime.
    cp = run_cmd(["fusermount3", "-u", mnt])
    check(cp.returncode == 0, "fusermount3 -u of the runtime's mount\n" + describe(cp))
    check(not e2e.is_mounted(mnt), "still mounted after fusermount3 -u")
    check(env.runtime_status() == 0, "the runtime stopped when its mount was unmounted")
    # Something else mounted there since: the runtime's stop must leave it alone.
    cp = run_cmd(["mount", "-t", "tmpfs", "-o", "size=1m", "other", mnt])
    check(cp.returncode == 0, "mount -t tmpfs\n" + describe(cp))
    try:
        env.stop_runtime()
        check(e2e.mount_entries(mnt)[-1][0] == "tmpfs", "the runtime's stop unmounted a later mount on its path")
    finally:
        run_cmd(["umount", mnt])

    # kill -9: the kernel keeps a dead mount. A start on it detaches it (it is CLIO's, and
    # nothing can serve it any more) and mounts afresh: a restart after a crash just works.
    env.start_runtime(mount=mnt)
    late = os.urandom(3 * MiB + 5)
    _write(os.path.join(mnt, "late.bin"), late)
    env.kill9_runtime()
    _check_dead(mnt)
    env.start_runtime(mount=mnt, options=["attr_timeout=0"])
    check(len(e2e.mount_entries(mnt)) == 1, f"mounts stacked on {mnt}: {e2e.mount_entries(mnt)}")
    check_exact(os.path.join(mnt, "late.bin"), late, "fsynced before kill -9")
    for rel, data in files.items():
        check_exact(os.path.join(mnt, "dir", rel), data, "after kill -9 and a start")
    env.stop_runtime()

    # Another file system's dead mount is not ours to remove: refused, naming it.
    other = os.path.join(env.T, "other")
    src = os.path.join(env.T, "other-src")
    os.mkdir(other)
    os.mkdir(src)
    if shutil.which("bindfs"):
        cp = run_cmd(["bindfs", src, other])
        check(cp.returncode == 0, "bindfs\n" + describe(cp))
        env.mountpoints.add(other)
        for pid in e2e.find_fuse_pids("bindfs", other):
            os.kill(pid, 9)
        e2e.wait_until(lambda: _dead(other), "the bindfs mount to die")
        cp = run_cmd([env.clio_run, "start", "--mount", other], env=env.env())
        check(cp.returncode != 0 and "dead FUSE mount" in _text(cp.stderr),
              "a start on another file system's dead mount should refuse, naming it\n" + describe(cp))
        check(env.runtime_status() != 0, "a runtime runs after the refused start")
        check(e2e.mount_entries(other)[-1][0] == "fuse", f"the dead bindfs mount was touched: {e2e.mount_entries(other)}")
        run_cmd(["fusermount3", "-u", other])
    else:
        log("bindfs is not installed: the check of another file system's dead mount is skipped")

    # One mount per runtime (each mount's kernel cache is right only while it is the only
    # writer): a second clio-fuse is refused, naming the first and the bind mount to use.
    env.start_runtime()
    env.mount(mnt)
    second = os.path.join(env.T, "second")
    os.mkdir(second)

    def refused(cp, what):
        err = _text(cp.stdout) + _text(cp.stderr)
        check(cp.returncode == 1 and f"already mounted on {mnt}" in err and
              f"mount --bind {mnt} {second}" in err,
              f"{what} beside the mount on {mnt} should be refused, naming it\n" + describe(cp))
        check(not e2e.is_mounted(second), f"{second} mounted by the refused {what}")
    refused(run_cmd([env.clio_fuse, second], env=env.env()), "a second clio-fuse")
    # The bind mount is the same mount: what one path writes, the other reads at once.
    cp = run_cmd(["mount", "--bind", mnt, second])
    check(cp.returncode == 0, "mount --bind\n" + describe(cp))
    try:
        _write(os.path.join(mnt, "shared.txt"), b"first", fsync=False)
        check_exact(os.path.join(second, "shared.txt"), b"first", "through the bind mount")
        _write(os.path.join(second, "shared.txt"), b"second!", fsync=False)
        check_exact(os.path.join(mnt, "shared.txt"), b"second!", "written through the bind mount")
    finally:
        run_cmd(["umount", second])

    # clio-fuse killed with SIGKILL lets go of the lock with its life: mounted again over its
    # dead mount.
    env.kill_fuse(mnt)
    check(_dead(mnt), f"{mnt} is not a dead mount after clio-fuse was killed")
    env.mount(mnt)
    check(len(e2e.mount_entries(mnt)) == 1, f"mounts stacked on {mnt}: {e2e.mount_entries(mnt)}")
    check_exact(os.path.join(mnt, "late.bin"), late, "through clio-fuse mounted over its dead mount")
    # The lock outlives a runtime restart: a runtime started with its own mount beside the
    # waiting clio-fuse is refused, and clio-fuse serves again from the next runtime.
    env.stop_runtime()
    cp = run_cmd([env.clio_run, "start", "--mount", second], env=env.env())
    refused(cp, "clio_run start --mount")
    check(env.runtime_status() != 0, "a runtime runs after the refused start --mount")
    env.start_runtime()
    check_exact(os.path.join(mnt, "shared.txt"), b"second!", "through clio-fuse after the refused start")
    # An unmount followed at once by a mount elsewhere waits for the exiting clio-fuse.
    cp = run_cmd(["fusermount3", "-u", mnt])
    check(cp.returncode == 0, "fusermount3 -u\n" + describe(cp))
    env.mount(second)
    check_exact(os.path.join(second, "late.bin"), late, "mounted elsewhere right after an unmount")
    env.unmount(second)
    env.stop_runtime()
    env.start_runtime(mount=mnt)
    env.stop_runtime()
    check(not e2e.is_mounted(mnt), "mounted after the last stop")
    log("in-runtime mount: refusals, data across stop/start and kill -9, open file at stop, outside unmount; "
        "one mount per runtime")


def _flush_failures(port):
    """clio_cte_flush_failures_total from /metrics, read without forking: a forked child
    (a subprocess) closes its copies of the writer's descriptor, and that close would be the
    one to report the error, as with NFS."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("clio_cte_flush_failures_total"):
                return float(line.split()[-1])
    check(False, "no clio_cte_flush_failures_total in /metrics")


def scenario_flush_error(env):
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    env.start_s3()
    port = free_port()
    env.write_config(e2e.config_text(env.T, env.ram_name, "32MB", e2e.S3_TIER)
                     .replace("  num_threads: 4\n", f"  num_threads: 4\n  http_port: {port}\n", 1))
    env.start_runtime()
    env.mount()
    path = os.path.join(env.mnt, "refused.bin")
    data = os.urandom(1 * MiB + 123)
    # The bucket refuses every PUT (403 is not retried): the flusher's copies fail.
    env.s3_admin_post("/_admin/fault", {"kind": "403", "count": 1000000, "method": "PUT"})
    writer = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(writer, data)
        e2e.wait_until(lambda: _flush_failures(port) >= 1, "a failed write-back of the new file", timeout=60)
        # A reader's open and close in between: nothing to report to it, and nothing taken.
        with open(path, "rb") as f:
            check(f.read() == data, "the reader sees the written bytes")
        try:
            os.close(writer)
            check(False, "the writer's close succeeded although its bytes could not be flushed")
        except OSError as e:
            log(f"the writer's close reported the failed write-back: {e}")
        writer = -1
    finally:
        if writer >= 0:
            try:
                os.close(writer)
            except OSError:
                pass
    env.s3_admin_post("/_admin/clear_faults", {})
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)  # the flusher retries; fsync waits for a persistent copy
    finally:
        os.close(fd)
    check_exact(path, data, "after the bucket recovered")
    env.unmount()
    env.stop_runtime()


def _fuse_requests(port):
    """clio_fuse_requests_total by channel: {"io_uring": n, "dev": n}."""
    values, _ = e2e.scrape(port)
    return {ch: values.get(f'clio_fuse_requests_total{{channel="{ch}"}}', 0.0) for ch in ("io_uring", "dev")}


def _cpu_list(path):
    cpus = set()
    with open(path) as f:
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _expected_ring_threads(per_cpu):
    """fs/mount/fuse_uring.cc: per_cpu threads for each online CPU, one for a possible offline one."""
    possible = _cpu_list("/sys/devices/system/cpu/possible")
    online = _cpu_list("/sys/devices/system/cpu/online")
    return sum(per_cpu if c in online else 1 for c in possible)


def scenario_fuse_uring(env):
    env.check_binaries(env.clio_run)
    port = free_port()
    env.write_config(_runtime_keys(env, f"  http_port: {port}\n"))
    mnt = os.path.join(env.T, "ring")
    os.mkdir(mnt)
    before = e2e.kernel_fuse_uring()
    try:
        # Refused at start, naming the value; nothing keeps running or stays mounted.
        for opts, words in (("io_uring=maybe", "bad value in -o io_uring=maybe (auto, on or off)"),
                            ("uring_threads=0", "bad value in -o uring_threads=0"),
                            ("uring_threads=65", "bad value in -o uring_threads=65")):
            cp = run_cmd([env.clio_run, "start", "--mount", mnt, "-o", opts], env=env.env())
            check(cp.returncode == 2 and words in _text(cp.stdout) + _text(cp.stderr),
                  f"clio_run start -o {opts}: expected exit 2 naming {words!r}\n" + describe(cp))
            check(env.runtime_status() != 0 and not e2e.is_mounted(mnt), f"left running after -o {opts}")

        # The kernel's switch off: "on" refuses and says how to turn it on; "auto" serves
        # through /dev/fuse alone.
        e2e.set_kernel_fuse_uring(False)
        cp = run_cmd([env.clio_run, "start", "--mount", mnt, "-o", "io_uring=on"], env=env.env())
        check(cp.returncode != 0 and f"echo 1 > {e2e.FUSE_URING_PARAM}" in _text(cp.stderr),
              "io_uring=on with the kernel's switch off should refuse, naming it\n" + describe(cp))
        check(env.runtime_status() != 0 and not e2e.is_mounted(mnt), "left running after the refused io_uring=on")
        env.start_runtime(mount=mnt, options=["io_uring=auto"])
        plain = os.urandom(300 * KiB + 7)
        _write(os.path.join(mnt, "plain.bin"), plain)
        check_exact(os.path.join(mnt, "plain.bin"), plain, "through /dev/fuse")
        n = _fuse_requests(port)
        check(n["io_uring"] == 0 and n["dev"] > 0, f"with the kernel's switch off: {n}")
        check(not e2e.fuse_ring_threads(env.runtime_pid()), "ring threads although the kernel offered no ring")
        env.stop_runtime()

        # On: everything below goes through the rings. Three threads per CPU queue.
        e2e.set_kernel_fuse_uring(True)
        env.start_runtime(mount=mnt, options=["io_uring=on", "uring_threads=3"])
        # A connection keeps its ring once it has it: the switch goes back once a request
        # has gone through (the kernel read the INIT reply, which asked for it).
        os.listdir(mnt)
        e2e.set_kernel_fuse_uring(before)
        big = os.urandom(8 * MiB + 4099)   # 1 MiB writes: as large as a ring entry's payload
        _write(os.path.join(mnt, "big.bin"), big)
        small = {f"s{i:03}": os.urandom(i * 37 + 1) for i in range(200)}
        os.mkdir(os.path.join(mnt, "small"))
        for name, data in small.items():
            _write(os.path.join(mnt, "small", name), data, fsync=False)
        for i in range(0, 200, 2):
            os.rename(os.path.join(mnt, "small", f"s{i:03}"), os.path.join(mnt, "small", f"r{i:03}"))
            small[f"r{i:03}"] = small.pop(f"s{i:03}")
        for i in range(1, 200, 10):
            os.unlink(os.path.join(mnt, "small", f"s{i:03}"))
            del small[f"s{i:03}"]
        os.setxattr(os.path.join(mnt, "big.bin"), "user.note", b"x" * 4000)
        os.symlink("big.bin", os.path.join(mnt, "link"))
        errors = []

        def writer(k):
            try:
                for j in range(20):
                    data = os.urandom(k * 65536 + j * 511 + 1)
                    p = os.path.join(mnt, f"w{k}-{j}.bin")
                    _write(p, data, fsync=j % 5 == 0)
                    with open(p, "rb") as f:
                        if f.read() != data:
                            errors.append(f"{p}: read back differs")
            except OSError as e:
                errors.append(f"writer {k}: {e}")
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(not errors, f"concurrent writers: {errors}")
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")   # the reads below go to the file system, not the page cache
        check_exact(os.path.join(mnt, "big.bin"), big, "through the rings")
        for name, data in small.items():
            check_exact(os.path.join(mnt, "small", name), data, "small file through the rings")
        check(sorted(os.listdir(os.path.join(mnt, "small"))) == sorted(small), "listing through the rings")
        check(os.getxattr(os.path.join(mnt, "big.bin"), "user.note") == b"x" * 4000, "xattr through the rings")
        check(os.readlink(os.path.join(mnt, "link")) == "big.bin", "readlink through the rings")
        n = _fuse_requests(port)
        # /dev/fuse still carries INIT and the kernel's FORGETs; everything else is on the rings.
        check(n["io_uring"] >= 1000 and n["io_uring"] > 4 * n["dev"], f"requests by channel: {n}")
        names = e2e.fuse_ring_threads(env.runtime_pid())
        check(len(names) == _expected_ring_threads(3) and "clio-uring-no" not in names, f"ring threads: {names}")
        log(f"through the rings: {n}; threads {sorted(names)}")

        # A stop with a file open: the rings are torn down with the connection, the holder
        # gets ENOTCONN and the runtime exits (its ring threads end).
        _stop_with_file_open(env, mnt, os.path.join(mnt, "big.bin"))

        # kill -9 under the rings: the next start detaches the dead mount; fsynced data is there.
        e2e.set_kernel_fuse_uring(True)
        env.start_runtime(mount=mnt, options=["io_uring=on"])
        late = os.urandom(2 * MiB + 3)
        _write(os.path.join(mnt, "late.bin"), late)
        check(_fuse_requests(port)["io_uring"] > 0, "the restarted mount is not on the rings")
        env.kill9_runtime()
        _check_dead(mnt)
        env.start_runtime(mount=mnt, options=["io_uring=on"])
        os.listdir(mnt)
        e2e.set_kernel_fuse_uring(before)
        check(len(e2e.mount_entries(mnt)) == 1, f"mounts stacked on {mnt}: {e2e.mount_entries(mnt)}")
        check_exact(os.path.join(mnt, "late.bin"), late, "fsynced before kill -9, through the rings")
        check_exact(os.path.join(mnt, "big.bin"), big, "after kill -9 and a start")
        check(_fuse_requests(port)["io_uring"] > 0, "the mount started after kill -9 is not on the rings")
        env.stop_runtime()
        check(not e2e.is_mounted(mnt), "mounted after the last stop")
    finally:
        e2e.set_kernel_fuse_uring(before)
    log("FUSE over io_uring: refusals, /dev/fuse when off, data through the rings, stop and kill -9")


BIG_DIR_ENTRIES = 1_000_000


def _readdir_pages(port):
    """The listing pages the runtime has served (each a readdir request of the mount)."""
    values, _ = e2e.scrape(port)
    return values.get('clio_fs_operations_total{op="readdir",outcome="ok"}', 0.0)


def _mknod_range(d, lo, hi):
    """Child process: the entries e<lo>..e<hi - 1> of d; exit status 0 when all were made."""
    try:
        for i in range(lo, hi):
            os.mknod(os.path.join(d, f"e{i:07d}"))
        os._exit(0)
    except BaseException as e:  # noqa: B036 - a forked child must never return
        print(f"mknod in {d}: {e}", file=sys.stderr, flush=True)
        os._exit(1)


def scenario_big_dir(env):
    """A directory of a million entries (issue 7): made through the mount, listed whole and
    exactly, looked up, listed lazily (opening it and reading a few entries costs a page or
    two of the runtime's listing, not a thousand), and whole again after a restart."""
    env.check_binaries(env.clio_run)
    port = free_port()
    env.write_config(_runtime_keys(env, f"  http_port: {port}\n"))
    mnt = env.mnt
    env.start_runtime(mount=mnt)
    d = os.path.join(mnt, "big")
    os.mkdir(d)
    n = BIG_DIR_ENTRIES
    t0 = time.monotonic()
    pids = []
    for k in range(2):  # one writer per core
        pid = os.fork()
        if pid == 0:
            _mknod_range(d, k * n // 2, (k + 1) * n // 2)
        pids.append(pid)
    for pid in pids:
        _, st = os.waitpid(pid, 0)
        check(st == 0, f"a writer of the big directory failed (wait status {st})")
    log(f"made {n} entries in {time.monotonic() - t0:.0f} s")
    want = [f"e{i:07d}" for i in range(n)]

    def whole(what):
        t = time.monotonic()
        got = os.listdir(d)
        log(f"listed {len(got)} entries in {time.monotonic() - t:.1f} s ({what})")
        got.sort()
        if got != want:
            dup = len(got) - len(set(got))
            check(False, f"listing {what}: {len(got)} names, {dup} twice, missing e.g. "
                         f"{sorted(set(want) - set(got))[:3]}, unknown e.g. {sorted(set(got) - set(want))[:3]}")
    whole("after the creates")
    for i in (0, 1, n // 2, n - 1):
        st = os.lstat(os.path.join(d, f"e{i:07d}"))
        check(stat.S_ISREG(st.st_mode), f"e{i:07d} is not a regular file")
    try:
        os.lstat(os.path.join(d, f"e{n:07d}"))
        check(False, "a name never made was found")
    except FileNotFoundError:
        pass
    before = _readdir_pages(port)
    with os.scandir(d) as it:
        first = [next(it).name for _ in range(10)]
    pages = _readdir_pages(port) - before
    check(first == want[:10], f"the first entries read (a page lists in name order): {first}")
    # glibc's readdir fills a 32 KiB getdents buffer: about a thousand of these names.
    check(1 <= pages <= 2, f"reading 10 entries of {n} asked the runtime for {pages:.0f} listing pages")
    env.stop_runtime()
    env.start_runtime(mount=mnt)
    whole("after a restart")
    try:
        os.rmdir(d)
        check(False, "rmdir of the big directory succeeded")
    except OSError as e:
        check(e.errno == errno.ENOTEMPTY, f"rmdir of the big directory: {e}")
    env.stop_runtime()
    log(f"a directory of {n} entries: made, listed exactly, looked up, listed lazily, kept across a restart")


FUNCS = {"transports": scenario_transports, "module": scenario_module, "in_runtime": scenario_in_runtime,
         "flush_error": scenario_flush_error, "fuse_uring": scenario_fuse_uring, "big_dir": scenario_big_dir}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--only", choices=SCENARIOS)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--scenario-timeout", type=float, default=900)
    args = ap.parse_args(argv)
    os.umask(0o022)
    args.build_dir = os.path.abspath(args.build_dir)
    os.chdir("/")
    e2e.SCENARIO_FUNCS.update(FUNCS)
    names = [args.only] if args.only else list(SCENARIOS)
    if not e2e.kernel_has_fuse_uring():
        if args.only == "fuse_uring":
            print(f"SKIP: this kernel has no FUSE over io_uring (no {e2e.FUSE_URING_PARAM}; Linux 6.14+)")
            return 77
        names = [n for n in names if n != "fuse_uring"]
    results = [e2e.run_scenario(n, args) for n in names]
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed", flush=True)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
