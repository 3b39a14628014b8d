#!/usr/bin/env python3
"""Filesystem benchmark: CLIO through FUSE against the host filesystem, in one script.

Runs the same workload on a CLIO mount and on a plain directory of the host filesystem (the
reference), then prints figures and the ratio CLIO/reference. The machines are shared and
noisy: compare ratios from one run, not absolute figures across runs.

    sudo python3 bench/fs_bench.py --build-dir build-release [--size-mib 512] [--files 2000]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import e2e_test  # noqa: E402  (reuses its runtime/mount helpers)

MiB = 1 << 20


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def workload(root, size_mib, nfiles):
    """Returns {metric: value}; higher is better for every metric."""
    out = {}
    block = os.urandom(MiB)
    path = os.path.join(root, "big.bin")
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(size_mib):
        os.write(fd, block)
    os.fsync(fd)
    os.close(fd)
    out["seq write + fsync (MiB/s)"] = size_mib / (time.perf_counter() - t)

    cold = drop_caches()
    t = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    n = 0
    while True:
        b = os.read(fd, MiB)
        if not b:
            break
        n += len(b)
    os.close(fd)
    assert n == size_mib * MiB, f"read {n} bytes"
    out["seq read %s (MiB/s)" % ("cold" if cold else "warm")] = size_mib / (time.perf_counter() - t)

    small = os.urandom(4096)
    d = os.path.join(root, "small")
    os.mkdir(d)
    t = time.perf_counter()
    for i in range(nfiles):
        fd = os.open(os.path.join(d, f"f{i:06d}"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, small)
        os.close(fd)
    out["create 4 KiB files (files/s)"] = nfiles / (time.perf_counter() - t)

    drop_caches()
    t = time.perf_counter()
    names = os.listdir(d)
    for name in names:
        os.stat(os.path.join(d, name))
    assert len(names) == nfiles
    out["listdir + stat (entries/s)"] = nfiles / (time.perf_counter() - t)

    t = time.perf_counter()
    for name in names:
        os.unlink(os.path.join(d, name))
    out["unlink (files/s)"] = nfiles / (time.perf_counter() - t)
    os.rmdir(d)
    os.unlink(path)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--ram", default="2GB", help="RAM tier capacity")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    os.chdir("/")
    env = e2e_test.Env(args.build_dir, "bench")
    try:
        env.write_config(env.config_text(ram_capacity=args.ram))
        env.start_runtime()
        env.mount()
        ref = os.path.join(env.T, "reference")
        os.mkdir(ref)
        clio = workload(env.mnt, args.size_mib, args.files)
        host = workload(ref, args.size_mib, args.files)
    finally:
        env.cleanup()
    print(f"{'metric':34} {'CLIO':>12} {'host fs':>12} {'CLIO/host':>10}")
    for k in clio:
        hk = k if k in host else next(h for h in host if h.split(" (")[0][:8] == k[:8])
        print(f"{k:34} {clio[k]:12.1f} {host[hk]:12.1f} {clio[k] / host[hk]:10.2f}")


if __name__ == "__main__":
    main()
