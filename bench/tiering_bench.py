#!/usr/bin/env python3
"""Tiering benchmark (issue 6): what a RAM tier in front of a file tier buys, in one script.

1. Write bursts: files totalling the RAM tier's dirty limit (half its capacity), then twice
   its capacity, written through the mount (write + close; then fsync of every file, for the
   durable figure), on RAM over the file tier, beside the same bursts on the file tier alone.
2. Hot set: a node restarted (RAM empty, every byte on the file tier); a hot set is read once,
   the reorganizer promotes it into RAM, and cold reads of it (page cache dropped before each
   round) are timed beside the same reads on the file tier alone.

Every figure is printed with its ratio to the file-tier-alone run of the same script; the
machines are shared and noisy, so compare ratios from one run. Run as root (drop_caches):

    sudo python3 bench/tiering_bench.py --build-dir build-release [--ram-mib 256] [--hot-mib 64]
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
import e2e_test  # noqa: E402  (reuses its runtime/mount helpers)

MiB = 1 << 20
FILE_MIB = 64  # size of each file in the burst and the data set

CONFIG = """\
runtime:
  state_dir: "{T}/state"
  socket_path: "{T}/clio.sock"
  num_threads: 4
metadata:
  path: "${{CLIO_STATE_DIR}}/metadata"
compose:
  - mod_name: clio_cte_core
    pool_name: clio_cte_core
    pool_id: "512.0"
    flush_interval_ms: 2000
    reorganize_interval_ms: 1000
    reorganize_bandwidth: "1GB"
    storage:
{ram}      - path: "${{CLIO_STATE_DIR}}/tiers/disk.dat"
        bdev_type: file
        capacity_limit: "0"
        growth_unit: "256MB"
        score: 0.2
  - mod_name: clio_fs
    pool_name: clio_fs
    pool_id: "600.0"
    cte_pool: clio_cte_core
"""
RAM = """\
      - path: "ram::{name}"
        bdev_type: ram
        capacity_limit: "{mib}MB"
        score: 1.0
"""


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def cpu_ticks():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def write_files(root, count, block, first=0):
    """Writes `count` files of FILE_MIB; returns (seconds to write + close, seconds to fsync)."""
    paths = [os.path.join(root, f"burst{i:03d}.bin") for i in range(first, first + count)]
    t = time.perf_counter()
    for p in paths:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(FILE_MIB):
            os.write(fd, block)
        os.close(fd)
    written = time.perf_counter() - t
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return written, time.perf_counter() - t


def read_files(paths, expect):
    t = time.perf_counter()
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(MiB)
                if not b:
                    break
                if b != expect:
                    raise SystemExit(f"{p}: read back wrong bytes")
                n += len(b)
    return n / MiB / (time.perf_counter() - t)


class Node:
    """A runtime and a mount over one config (with or without the RAM tier)."""

    def __init__(self, build_dir, label, ram_mib):
        self.env = e2e_test.Env(build_dir, f"bench_{label}")
        ram = RAM.format(name=self.env.ram_name, mib=ram_mib) if ram_mib else ""
        self.env.write_config(CONFIG.format(T=self.env.T, ram=ram))
        self.env.start_runtime()
        self.env.mount()

    def restart(self):
        self.env.unmount()
        self.env.stop_runtime()
        self.env.start_runtime()
        self.env.mount()

    def tier_used(self, kind):
        return sum(t["used"] for t in self.env.tier_stat() if t["type"] == kind)

    def close(self):
        self.env.cleanup()


def burst(build_dir, ram_mib, block):
    """Per config: a burst of the RAM tier's dirty limit (half its capacity, the default) into
    a fresh node, then one of twice its capacity; MiB/s written and durable, and CPU busy %."""
    small, big = ram_mib // 2 // FILE_MIB, 2 * ram_mib // FILE_MIB
    out = {}
    for label, ram in (("ram+file", ram_mib), ("file", 0)):
        node = Node(build_dir, label.replace("+", "_"), ram)
        try:
            drop_caches()
            w, d = write_files(node.env.mnt, small, block)
            out[(label, "small")] = (small * FILE_MIB / w, small * FILE_MIB / d)
            node.restart()  # empty RAM again; the files stay
            drop_caches()
            b0, t0 = cpu_ticks()
            w, d = write_files(node.env.mnt, big, block, first=small)
            b1, t1 = cpu_ticks()
            out[(label, "big")] = (big * FILE_MIB / w, big * FILE_MIB / d, 100 * (b1 - b0) / max(1, t1 - t0))
        finally:
            node.close()
    return small * FILE_MIB, big * FILE_MIB, out


def hot_set(build_dir, ram_mib, hot_mib, data_mib, block, rounds):
    out = {}
    for label, ram in (("ram+file", ram_mib), ("file", 0)):
        node = Node(build_dir, label.replace("+", "_"), ram)
        try:
            write_files(node.env.mnt, data_mib // FILE_MIB, block)
            # Volatile copies are dropped at start: every byte is on the file tier now.
            node.restart()
            paths = [os.path.join(node.env.mnt, f"burst{i:03d}.bin") for i in range(hot_mib // FILE_MIB)]
            drop_caches()
            first = read_files(paths, block)
            promoted = 0
            if ram:
                # The reorganizer runs a pass a second; wait (bounded) for the hot set in RAM.
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    promoted = node.tier_used("ram")
                    if promoted >= hot_mib * MiB:
                        break
                    time.sleep(0.5)
            figures = []
            for _ in range(rounds):
                drop_caches()
                figures.append(read_files(paths, block))
            out[label] = (first, statistics.median(figures), promoted)
        finally:
            node.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--ram-mib", type=int, default=256, help="RAM tier capacity (a multiple of 64)")
    ap.add_argument("--hot-mib", type=int, default=64, help="hot set size (a multiple of 64)")
    ap.add_argument("--rounds", type=int, default=5, help="timed cold reads of the hot set")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("tiering_bench: run as root (it drops the page cache between reads)")
    if args.ram_mib % FILE_MIB or args.hot_mib % FILE_MIB or args.hot_mib > args.ram_mib // 2:
        raise SystemExit("tiering_bench: --ram-mib and --hot-mib must be multiples of 64, hot <= ram/2")
    build_dir = os.path.abspath(args.build_dir)
    os.chdir("/")
    block = os.urandom(MiB)

    small, big, b = burst(build_dir, args.ram_mib, block)
    h = hot_set(build_dir, args.ram_mib, args.hot_mib, 4 * args.ram_mib, block, args.rounds)

    for size, key in ((small, "small"), (big, "big")):
        print(f"\nwrite burst: {size} MiB ({size / args.ram_mib:g} x the {args.ram_mib} MiB RAM tier), "
              f"files of {FILE_MIB} MiB")
        print(f"{'':34} {'RAM+file':>10} {'file alone':>11} {'ratio':>7}")
        r, f = b[("ram+file", key)], b[("file", key)]
        for i, what in enumerate(("write + close (MiB/s)", "write, then fsync all (MiB/s)")):
            print(f"{what:34} {r[i]:10.0f} {f[i]:11.0f} {r[i] / f[i]:7.2f}")
        if key == "big":
            print(f"{'machine CPU busy (%)':34} {r[2]:10.0f} {f[2]:11.0f}")
    print(f"\nhot set: {args.hot_mib} MiB of a {4 * args.ram_mib} MiB data set, cold reads "
          f"(median of {args.rounds})")
    print(f"{'':34} {'RAM+file':>10} {'file alone':>11} {'ratio':>7}")
    print(f"{'first read, from the file tier':34} {h['ram+file'][0]:10.0f} {h['file'][0]:11.0f} "
          f"{h['ram+file'][0] / h['file'][0]:7.2f}")
    print(f"{'after promotion (MiB/s)':34} {h['ram+file'][1]:10.0f} {h['file'][1]:11.0f} "
          f"{h['ram+file'][1] / h['file'][1]:7.2f}")
    print(f"RAM tier held {h['ram+file'][2] / MiB:.0f} MiB after the reorganizer's passes")


if __name__ == "__main__":
    main()
