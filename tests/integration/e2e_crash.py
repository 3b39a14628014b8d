"""End-to-end scenarios of the crash contract: a clean restart, kill -9 and power cuts in the middle
of a workload, the same over an S3 tier, and a full disk.
"""

import errno as errno_mod
import json
import os
import stat

from harness import *  # noqa: F401,F403
from harness import _write_all  # noqa: E402,F401


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
