#!/usr/bin/env python3
"""A runtime crash under a live mount loses nothing: inode numbers never come back, fsynced
files stay byte-exact (size included), every create after the restart succeeds.

Scenarios (--only NAME; ctest crash_live_<NAME>):

- reuse: the deterministic reproduction. Group commits 60 s apart; `lost` (5,000 bytes of x,
  never fsynced) is created, the runtime is killed (kill -9) and started again under the same
  mount; `kept` is created, 3,000 bytes of y, fsynced. `kept` has a node id of its own, is
  3,000 bytes of y through the live mount and after a clean stop, start and remount (before the
  fix it took `lost`'s node id and came back 4,096 bytes: y then x from the lost file), and
  `lost` is gone from the kernel's view.
- kill9 / power_cut / remount: the loop. Each cycle writes 20 files of random sizes that are
  not page multiples (1 KiB to 2 MiB: open O_CREAT|O_TRUNC, write, fsync, close) and checks
  them; a separate writer process keeps writing 64 KiB files without fsync; after 0.1-0.9 s
  the runtime is killed with SIGKILL and started again, with the mount kept (kill9); with the
  fault-injection I/O layer dropping every unsynced write and the FUSE connection aborted so
  the kernel's dirty pages die too, then mounted again (power_cut); or with clio-fuse
  unmounted and mounted again after the restart (remount). Then every fsynced file so far is
  compared, size and bytes; each unsynced file that survived holds only its own bytes or
  zeros; the writer's creates that began after the restart all succeeded, and none of its
  operations failed with ENOENT. At the end every file is removed, and after a clean restart
  the persistent tier holds nothing (no extent leaked by lost creates and writes).
- replace: atomic replace. A temporary file written and fsynced, renamed over the target,
  kill -9 at once: the target is whole, the old or the new version, never a mix or short.
- orphan: a file opened, unlinked, the runtime killed and started again under the mount:
  every byte still reads and writes through the open descriptor; closing it removes it.

--keep-going counts damage instead of stopping at the first (bench/crash_stress.sh runs the
loop for 1,000 cycles that way, keeping the files of the last --keep-cycles cycles). The last
line says "N passed, M failed"; with --report also the counts.

    python3 tests/integration/live_crash_test.py --build-dir build --only kill9 [--cycles 20] [--seed 1]
"""

import argparse
import errno
import os
import random
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import (Env, TestFailure, _write_all, check, check_prefix_or_zero, first_diff,  # noqa: E402
                      free_port, fsync_dir, log, read_file, scrape, wait_until)

KiB = 1024
MiB = 1 << 20
SCENARIOS = ("reuse", "kill9", "power_cut", "remount", "replace", "orphan")

# The writer of unsynced files: 64 KiB files whose bytes say which file they are, never
# fsynced. One line per create: "start end ok N" or "start end err N ERRNO" (monotonic times).
WRITER = r"""
import os, sys, time
d, first, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(out, "a", buffering=1) as log:
    n = first
    while True:
        t0 = time.monotonic()
        try:
            with open(os.path.join(d, "unsynced_%d" % n), "wb") as f:
                f.write((b"%08d" % n) * 8192)
            log.write("%f %f ok %d\n" % (t0, time.monotonic(), n))
        except OSError as e:
            log.write("%f %f err %d %d\n" % (t0, time.monotonic(), n, e.errno))
        n += 1
"""


def unsynced_bytes(n):
    return (b"%08d" % n) * 8192


def file_bytes(seed, size):
    return random.Random(seed).randbytes(size)


class Damage:
    """What the checks found. In the test any of it fails at once; with --keep-going it is
    counted (the stress run's report)."""

    def __init__(self, keep_going):
        self.keep_going = keep_going
        self.damaged_fsynced = 0
        self.failed_creates = 0
        self.foreign_bytes = 0
        self.notes = []

    def found(self, kind, msg):
        setattr(self, kind, getattr(self, kind) + 1)
        if not self.keep_going:
            raise TestFailure(msg)
        if len(self.notes) < 20:
            self.notes.append(msg)
        log(f"DAMAGE ({kind}): {msg}")

    def report(self):
        return (f"damaged fsynced files: {self.damaged_fsynced}, failed creates: {self.failed_creates}, "
                f"files with foreign bytes: {self.foreign_bytes}")


def write_synced(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def check_synced(path, seed, size, damage, label):
    try:
        data = read_file(path)
    except OSError as e:
        damage.found("damaged_fsynced", f"{label}: {path}: fsynced file unreadable: {e}")
        return
    want = file_bytes(seed, size)
    if data == want:
        return
    off = first_diff(data, want)
    damage.found("damaged_fsynced",
                 f"{label}: {path}: fsynced file is {len(data)} bytes, expected {size}; first difference at "
                 f"offset {off}" + (f" (got {data[off:off + 8].hex()}, expected {want[off:off + 8].hex()})"
                                    if off < min(len(data), size) else ""))


def check_unsynced(path, n, damage, label):
    """A file of the writer after a crash: at most its 64 KiB, each byte its own or zero."""
    if not os.path.exists(path):
        return  # lost with the crash, and gone
    try:
        check_prefix_or_zero(path, unsynced_bytes(n), label)
    except (TestFailure, OSError) as e:
        damage.found("foreign_bytes", str(e))


class Writer:
    """The separate process writing unsynced files."""

    def __init__(self, env, directory, first):
        self.out = os.path.join(env.T, f"writer_{first}.log")
        self.first = first
        self.proc = subprocess.Popen([sys.executable, "-c", WRITER, directory, str(first), self.out],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(os.path.join(env.T, "writer.stderr"), "ab"))

    def ops_after(self, t):
        """How many creates it began after monotonic time t."""
        try:
            with open(self.out) as f:
                return sum(1 for line in f if line.split()[:1] and float(line.split()[0]) > t)
        except (OSError, ValueError):
            return 0

    def stop(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=120)
        ops = []
        with open(self.out) as f:
            for line in f:
                p = line.split()
                if len(p) == 4 and p[2] == "ok":
                    ops.append((float(p[0]), float(p[1]), "ok", int(p[3]), 0))
                elif len(p) == 5 and p[2] == "err":
                    ops.append((float(p[0]), float(p[1]), "err", int(p[3]), int(p[4])))
        return ops


FUSECTL = "/sys/fs/fuse/connections"


def ensure_fusectl():
    """The FUSE control filesystem, where a connection's abort file lives. systemd mounts it at
    boot (sys-fs-fuse-connections.mount); a container or a minimal root may lack it."""
    if os.path.ismount(FUSECTL):
        return
    r = subprocess.run(["mount", "-t", "fusectl", "fusectl", FUSECTL], capture_output=True, text=True)
    check(r.returncode == 0, f"cannot mount the FUSE control filesystem on {FUSECTL}: {r.stderr.strip()}")
    log(f"mounted the FUSE control filesystem on {FUSECTL}")


def mount_abort(env):
    """Aborts the mount's FUSE connection: the kernel drops its requests and dirty pages, as a
    power cut would."""
    ensure_fusectl()
    dev = os.stat(env.mnt).st_dev
    path = f"{FUSECTL}/{os.minor(dev)}/abort"
    with open(path, "w") as f:
        f.write("1\n")
    log(f"aborted the FUSE connection ({path})")


def with_http(env, text):
    """The config with /metrics on a port of its own: the tests see when the mount reattached."""
    env.http_port = free_port()
    out = text.replace("  num_threads: 4\n", f"  num_threads: 4\n  http_port: {env.http_port}\n", 1)
    check(out != text, "the config template changed: no num_threads line to put http_port after")
    return out


def reattaches(env):
    values, _ = scrape(env.http_port)
    return values.get('clio_fs_operations_total{op="reattach",outcome="ok"}', 0)


def wait_reattached(env):
    """The mount has declared its nodes to the runtime (after a restart, or a new mount)."""
    wait_until(lambda: reattaches(env) >= 1, "the mount to reattach to the runtime", timeout=60)


def persistent_used(env):
    return {t["name"]: t["used"] for t in env.tier_stat() if t["persistence"] != "volatile"}


def check_tiers_empty_after_restart(env, what):
    """Unmount, a clean stop and start: the persistent tiers hold nothing (every extent the
    files had, or lost creates and writes allocated, was freed)."""
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    used = persistent_used(env)
    check(all(v == 0 for v in used.values()), f"{what}, yet the persistent tiers hold bytes: {used}")
    env.stop_runtime()
    log(f"{what}: the persistent tiers hold nothing ({used})")


def restart(env, how, writer):
    """The crash and the start after it, until the mount has reattached. Returns the monotonic
    time the runtime answered again, and the writer's operations when it had to stop first
    (before a remount: it holds files open on the mount, and its paths would meet the bare
    mount point meanwhile)."""
    ops = None
    if how == "power_cut":
        mount_abort(env)
        ops = writer.stop()  # before the mount point is bare: its paths would meet ENOENT there
        env.crash()  # kill -9 of the runtime and clio-fuse, the dead mount detached
        env.start_runtime()
        back = time.monotonic()
        env.mount()
    else:
        env.kill9_runtime()
        env.start_runtime()
        back = time.monotonic()
        if how == "remount":
            ops = writer.stop()
            env.unmount()
            env.mount()
    wait_reattached(env)
    return back, ops


def scenario_loop(env, args, how):
    env.fault_injection = how == "power_cut"
    env.write_config(with_http(env, env.config_text(ram_capacity="32MB")))
    env.start_runtime()
    env.mount()
    d = os.path.join(env.mnt, "data")
    os.mkdir(d)
    fsync_dir(env.mnt)
    rng = random.Random(args.seed)
    damage = Damage(args.keep_going)
    synced = {}         # name -> (seed, size, cycle)
    next_unsynced = 0
    for cycle in range(args.cycles):
        label = f"cycle {cycle + 1}"
        for i in range(args.files):
            name = f"f{cycle}_{i}"
            size = rng.randint(KiB, 2 * MiB)
            if size % 4096 == 0:
                size += rng.randint(1, 4095)
            seed = rng.getrandbits(64)
            try:
                write_synced(os.path.join(d, name), file_bytes(seed, size))
            except OSError as e:
                damage.found("failed_creates", f"{label}: writing the fsynced file {name} failed: {e}")
                continue
            synced[name] = (seed, size, cycle)
            check_synced(os.path.join(d, name), seed, size, damage, label + " (before the crash)")
        fsync_dir(d)
        writer = Writer(env, d, next_unsynced)
        ops = None
        try:
            time.sleep(rng.uniform(0.1, 0.9))  # the workload's random moment to crash, not a wait
            back, ops = restart(env, how, writer)
            if ops is None:
                # The mount was kept: the writer goes on; a few creates past the restart, then
                # it stops (its files are checked below with everything else).
                wait_until(lambda: writer.ops_after(back) >= 5 or writer.proc.poll() is not None,
                           "the writer to create files after the restart", timeout=60)
                ops = writer.stop()
            for name, (seed, size, _) in sorted(synced.items()):
                check_synced(os.path.join(d, name), seed, size, damage, label + " (after the restart)")
        finally:
            if writer.proc.poll() is None:
                writer.stop()
        for start, end, what, n, err in ops:
            next_unsynced = max(next_unsynced, n + 1)
            if what == "ok":
                continue
            if err == errno.ENOENT or start > back:
                damage.found("failed_creates", f"{label}: the writer's create of unsynced_{n} failed with "
                                               f"{errno.errorcode.get(err, err)} "
                                               f"({'after' if start > back else 'across'} the restart)")
        for n in range(writer.first, next_unsynced):
            check_unsynced(os.path.join(d, f"unsynced_{n}"), n, damage, label)
        if args.keep_cycles:
            for name in [k for k, v in synced.items() if v[2] <= cycle - args.keep_cycles]:
                os.unlink(os.path.join(d, name))
                del synced[name]
            for n in range(writer.first, next_unsynced):
                try:
                    os.unlink(os.path.join(d, f"unsynced_{n}"))
                except OSError:
                    pass
        log(f"{label}/{args.cycles}: {len(synced)} fsynced files exact, writer made {len(ops)} creates; "
            + damage.report())
    # Everything removed, a clean restart: the persistent tiers hold nothing, so nothing a lost
    # create or write allocated outlived it.
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    fsync_dir(d)
    check_tiers_empty_after_restart(env, "every file is removed")
    if args.report:
        print(f"REPORT {how}: {args.cycles} cycles, {args.files} fsynced files a cycle: " + damage.report(), flush=True)
    if args.keep_going and (damage.damaged_fsynced or damage.failed_creates or damage.foreign_bytes):
        raise TestFailure(damage.report() + "\n" + "\n".join(damage.notes))


def scenario_reuse(env, args):
    text = env.config_text().replace("commit_interval_ms: 500", "commit_interval_ms: 60000")
    check("commit_interval_ms: 60000" in text, "the config template changed: no commit_interval_ms to set")
    env.write_config(with_http(env, text))
    env.start_runtime()
    # The kernel keeps entries and attributes for an hour: only clio-fuse's reattach can make
    # it forget `lost`, and a stale size of a reused node id would show.
    env.mount(options=["entry_timeout=3600", "attr_timeout=3600"])
    lost, kept = os.path.join(env.mnt, "lost"), os.path.join(env.mnt, "kept")
    with open(lost, "wb") as f:
        f.write(b"x" * 5000)
    lost_ino = os.stat(lost).st_ino
    env.kill9_runtime()
    env.start_runtime()
    write_synced(kept, b"y" * 3000)
    st = os.stat(kept)
    check(st.st_ino != lost_ino, f"'kept' got the node id {st.st_ino} of 'lost', whose creation the crash lost")
    check(st.st_size == 3000, f"'kept' is {st.st_size} bytes through the live mount, not 3000")
    check(read_file(kept) == b"y" * 3000, "'kept' does not read back as 3,000 bytes of y through the live mount")
    wait_reattached(env)

    def lost_gone():
        try:
            os.stat(lost)
            return False
        except FileNotFoundError:
            return True
    wait_until(lost_gone, "'lost' (its creation lost in the crash) to leave the kernel's view", timeout=30)
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    data = read_file(kept)
    check(data == b"y" * 3000, f"'kept' after a clean restart and remount: {len(data)} bytes, "
                               f"{data.count(b'x')} of them x from the lost file")
    check(not os.path.exists(lost), "'lost' exists after a clean restart")
    env.unmount()
    env.stop_runtime()
    log(f"'kept' (node {st.st_ino}) is exact; 'lost' (node {lost_ino}) is gone")


def scenario_replace(env, args):
    env.write_config(with_http(env, env.config_text()))
    env.start_runtime()
    # Long kernel cache lifetimes: a name the kernel keeps from before a crash stays unless the
    # mount drops it after the restart.
    env.mount(options=["entry_timeout=3600", "attr_timeout=3600"])
    rng = random.Random(args.seed)
    target = os.path.join(env.mnt, "target")
    old = rng.randbytes(300_001)
    write_synced(target, old)
    fsync_dir(env.mnt)
    for cycle in range(5):
        new = rng.randbytes(rng.randint(1, 3 * MiB))
        tmp = os.path.join(env.mnt, f".target.tmp{cycle}")
        write_synced(tmp, new)
        os.rename(tmp, target)
        env.kill9_runtime()  # no fsync of the directory: the rename may or may not survive
        env.start_runtime()
        wait_reattached(env)
        data = read_file(target)
        check(data == old or data == new,
              f"cycle {cycle + 1}: the target is {len(data)} bytes, neither the old version ({len(old)}) "
              f"nor the new one ({len(new)}) whole")
        log(f"cycle {cycle + 1}: the target is the {'new' if data == new else 'old'} version, whole")
        fsync_dir(env.mnt)
        # What the mount showed is what the runtime has: with the kernel's dentries dropped,
        # the name is looked up again and must still be the version just read (a name the
        # kernel kept from before the crash would let the directory fsync commit another).
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2")
        again = read_file(target)
        check(again == data, f"cycle {cycle + 1}: the target read {len(data)} bytes before the kernel "
                             f"dropped its entries and {len(again)} after")
        old = data
    env.unmount()
    env.stop_runtime()


# Holds a file open across the restart, in a process of its own: a process that forks (to
# start the runtime) while holding a file of the mount closes it in the child, and that close
# waits for the runtime (FLUSH) that the child is about to start. Steps on stdin, answers on
# stdout.
HOLDER = r"""
import os, sys
path, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import random
data = bytearray(random.Random(seed).randbytes(size))
def say(m):
    sys.stdout.write(m + "\n"); sys.stdout.flush()
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
view = memoryview(data)
pos = 0
while pos < len(view):
    pos += os.write(fd, view[pos:pos + (1 << 20)])
os.fsync(fd)
os.unlink(path)
say("unlinked")
sys.stdin.readline()  # the runtime was killed and started again
try:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # from the runtime, not the page cache
    got = os.pread(fd, size + 10, 0)
    if got != bytes(data):
        say("FAIL the descriptor reads %d bytes after the restart, not the %d written" % (len(got), size)); sys.exit(1)
    patch = b"written after the restart" * 1000
    os.pwrite(fd, patch, (1 << 20) + 7)
    data[(1 << 20) + 7:(1 << 20) + 7 + len(patch)] = patch
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if os.pread(fd, size, 0) != bytes(data):
        say("FAIL a write through the descriptor did not read back"); sys.exit(1)
    if os.fstat(fd).st_size != size:
        say("FAIL fstat of the descriptor says %d bytes" % os.fstat(fd).st_size); sys.exit(1)
except OSError as e:
    say("FAIL %s" % e); sys.exit(1)
os.close(fd)
say("ok")
"""


def scenario_orphan(env, args):
    env.write_config(with_http(env, env.config_text()))
    env.start_runtime()
    env.mount()
    path = os.path.join(env.mnt, "held")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, path, str(3 * MiB + 123), str(args.seed)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        said = holder.stdout.readline().strip()
        check(said == "unlinked", f"the holder of the file: {said!r}")
        fsync_dir(env.mnt)
        env.kill9_runtime()
        env.start_runtime()
        wait_reattached(env)  # it declared the open file: the orphan is its, not the window's
        check(not os.path.exists(path), "the unlinked name came back after the restart")
        holder.stdin.write("go\n")
        holder.stdin.flush()
        said = holder.stdout.readline().strip()
        check(said == "ok", f"the holder of the unlinked file: {said}")
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=60)
    log("every byte of the unlinked file read and written through its descriptor across the restart")
    # Its last close removed it: nothing on the persistent tiers, now and after a restart.
    wait_until(lambda: all(v == 0 for v in persistent_used(env).values()),
               "the closed orphan's data to leave the persistent tiers", timeout=60)
    check_tiers_empty_after_restart(env, "the unlinked file is closed")


def run(name, args):
    env = Env(args.build_dir, f"live_{name}")
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    ok = False
    try:
        if name == "reuse":
            scenario_reuse(env, args)
        elif name == "replace":
            scenario_replace(env, args)
        elif name == "orphan":
            scenario_orphan(env, args)
        else:
            scenario_loop(env, args, name)
        ok = True
    except Exception as e:  # noqa: BLE001 - any error fails this scenario, not the run
        log(f"FAIL {name} (seed {args.seed}): {e if isinstance(e, TestFailure) else traceback.format_exc()}")
        tail = env.log_tail()
        if tail:
            log("daemon logs:" + tail)
    finally:
        for problem in env.cleanup():
            log(f"cleanup problem: {problem}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--only", choices=SCENARIOS, action="append")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--files", type=int, default=20, help="fsynced files a cycle")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep-going", action="store_true", help="count damage instead of failing at the first")
    ap.add_argument("--keep-cycles", type=int, default=0,
                    help="remove a cycle's files this many cycles later (0: keep all)")
    ap.add_argument("--report", action="store_true", help="print the damage counts at the end")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    os.umask(0o022)
    os.chdir("/")
    passed = failed = 0
    for name in args.only or SCENARIOS:
        log(f"=== {name} ===")
        if run(name, args):
            passed += 1
            log(f"PASS {name}")
        else:
            failed += 1
            log(f"FAIL {name}")
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
