#!/usr/bin/env python3
"""Crash loop: a writer appends, overwrites, truncates and fsyncs files through the mount while
the runtime is killed (kill -9, or a simulated power cut with --fault) again and again.

After every restart each file must hold, byte for byte, a state the writer produced since its
last fsync (every byte from one of those versions, or zero where the file grew), its size must
be one of those versions' sizes, and a file whose creation was fsynced must exist. The writer
keeps that history as it goes. Kills land between operations and in the middle of a large
unsynced write. Seeded: a failing run is reproduced with the same --seed.

    python3 tests/integration/crash_loop_test.py --build-dir build [--cycles 20] [--seed 1] [--fault]
"""

import argparse
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import Env, TestFailure, check, fsync_dir, log  # noqa: E402

MiB = 1 << 20
BLOCK = 4096


class FileModel:
    def __init__(self):
        self.current = b""
        self.history = []      # every state since the last fsync, the fsynced one first
        self.durable = False   # its creation (name) was fsynced

    def changed(self, content):
        self.current = content
        self.history.append(content)

    def synced(self):
        self.history = [self.current]


def block_ok(actual, offset, versions):
    """True if every byte of actual[offset:offset+BLOCK] is that offset's byte in one of the
    versions since the last fsync. A zero no version has there is allowed only where some
    version did not reach that far (the file was shorter: a write past that end was lost with
    the crash while the size it set survived, and the bytes read as the zeros of a hole).
    Anywhere else a zero is lost data."""
    a = actual[offset:offset + BLOCK]
    if any(a == v[offset:offset + len(a)] for v in versions):
        return True
    for i, byte in enumerate(a):
        pos = offset + i
        if any(pos < len(v) and v[pos] == byte for v in versions):
            continue
        if byte == 0 and any(pos >= len(v) for v in versions):
            continue  # past the end in some version: a write there lost, the size kept
        return False
    return True


def verify(path, model, name):
    if not os.path.exists(path):
        check(not model.durable, f"{name}: its creation was fsynced but it is gone")
        return None
    with open(path, "rb") as f:
        actual = f.read()
    sizes = {len(v) for v in model.history}
    check(len(actual) in sizes or (not model.durable and len(actual) == 0),
          f"{name}: size {len(actual)} is none of the sizes since its last fsync {sorted(sizes)}")
    if any(actual == v for v in model.history):
        return actual
    for off in range(0, len(actual), BLOCK):
        if not block_ok(actual, off, model.history):
            for pos in range(off, min(off + BLOCK, len(actual))):
                if not block_ok(actual[:pos + 1], pos, [v[:pos + 1] for v in model.history]):
                    log(f"{name}: first bad byte at {pos}: got {actual[pos]}, versions since the "
                        f"fsync have {[v[pos] if pos < len(v) else None for v in model.history]}, "
                        f"sizes {[len(v) for v in model.history]}, actual size {len(actual)}")
                    break
        check(block_ok(actual, off, model.history),
              f"{name}: bytes at {off}..{off + BLOCK} are from no version since the last fsync "
              f"(lost fsynced data, or bytes never written there)")
    return actual


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fault", action="store_true", help="power cuts: drop unsynced writes")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    os.chdir("/")
    rng = random.Random(args.seed)
    env = Env(build, "crash_loop_fault" if args.fault else "crash_loop")
    env.fault_injection = args.fault
    files = {}
    ok = False
    try:
        env.write_config(env.config_text(ram_capacity="8MB"))
        env.start_runtime()
        env.mount()
        for cycle in range(args.cycles):
            for _ in range(rng.randint(5, 30)):
                op = rng.random()
                if op < 0.15 or not files:
                    name = f"f{len(files)}"
                    m = files[name] = FileModel()
                    data = rng.randbytes(rng.randint(0, 3 * MiB // 2))
                    with open(os.path.join(env.mnt, name), "wb") as f:
                        f.write(data)
                        m.changed(data)
                        f.flush()
                        os.fsync(f.fileno())
                    fsync_dir(env.mnt)
                    m.synced()
                    m.durable = True
                    continue
                name = rng.choice(sorted(files))
                m = files[name]
                path = os.path.join(env.mnt, name)
                fd = os.open(path, os.O_RDWR)
                try:
                    if op < 0.40:                       # append
                        data = rng.randbytes(rng.randint(1, 300_000))
                        os.lseek(fd, 0, os.SEEK_END)
                        os.write(fd, data)
                        m.changed(m.current + data)
                    elif op < 0.70:                     # overwrite, may extend
                        off = rng.randint(0, len(m.current) + 1000)
                        data = rng.randbytes(rng.randint(1, 400_000))
                        os.pwrite(fd, data, off)
                        cur = m.current.ljust(off, b"\0")
                        m.changed(cur[:off] + data + cur[off + len(data):])
                    elif op < 0.85:                     # truncate, shorter or longer
                        size = rng.randint(0, len(m.current) + 200_000)
                        os.ftruncate(fd, size)
                        m.changed(m.current[:size].ljust(size, b"\0"))
                    else:                               # fsync
                        os.fsync(fd)
                        m.synced()
                finally:
                    os.close(fd)
            # Kill while a large unsynced write is in flight on one of the files.
            name = rng.choice(sorted(files))
            m = files[name]
            big = rng.randbytes(4 * MiB)
            off = rng.randint(0, len(m.current))
            cur = m.current.ljust(off, b"\0")
            m.changed(cur[:off] + big + cur[off + len(big):])
            started = threading.Event()

            def writer(path=os.path.join(env.mnt, name)):
                try:
                    fd = os.open(path, os.O_RDWR)
                    started.set()
                    for i in range(0, len(big), MiB):
                        os.pwrite(fd, big[i:i + MiB], off + i)
                    os.close(fd)
                except OSError:
                    pass  # the mount died under it: its outcome is what the check allows
                finally:
                    started.set()

            t = threading.Thread(target=writer)
            t.start()
            started.wait(60)
            env.crash()
            t.join(120)
            check(not t.is_alive(), "the in-flight writer did not return after the crash")
            env.start_runtime()
            env.mount()
            for name in sorted(files):
                actual = verify(os.path.join(env.mnt, name), files[name], name)
                if actual is None:
                    del files[name]
                    continue
                # What survived is the new baseline (it came back from disk).
                files[name].current = actual
                files[name].history = [actual]
                files[name].durable = True
            log(f"cycle {cycle + 1}/{args.cycles}: {len(files)} files verified")
        env.unmount()
        env.stop_runtime()
        ok = True
    except TestFailure as e:
        log(f"FAIL crash_loop (seed {args.seed}): {e}")
        tail = env.log_tail()
        if tail:
            log("daemon logs:" + tail)
    finally:
        env.cleanup()
    print(f"{1 if ok else 0} passed, {0 if ok else 1} failed", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
