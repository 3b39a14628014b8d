"""Conformance groups: readdir, largefile, statfs.
"""

import ctypes
import errno
import os
import stat
import struct

from posix_lib import *  # noqa: F401,F403


def getdents_walk(path, bufsize, actions=None):
    """The names getdents64(2) lists with a small buffer (so the kernel asks the file system
    for offsets in the middle of what it answered before); actions maps a number of names
    read to a function run once, right after that many were read."""
    actions = dict(actions or {})
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    buf = ctypes.create_string_buffer(bufsize)
    names = []
    libc.syscall.restype = ctypes.c_long
    try:
        while True:
            n = libc.syscall(ctypes.c_long(SYS_getdents64), ctypes.c_int(fd), buf, ctypes.c_uint(bufsize))
            if n < 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e), path)
            if n == 0:
                return names
            raw, off = buf.raw[:n], 0
            while off < n:
                reclen = struct.unpack_from("<H", raw, off + 16)[0]
                name = raw[off + 19:off + reclen].split(b"\0", 1)[0].decode()
                off += reclen
                if name in (".", ".."):
                    continue
                names.append(name)
                if len(names) in actions:
                    actions.pop(len(names))()
    finally:
        os.close(fd)


class Dirent(ctypes.Structure):  # glibc's struct dirent on 64-bit Linux
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64), ("d_reclen", ctypes.c_ushort),
                ("d_type", ctypes.c_ubyte), ("d_name", ctypes.c_char * 256)]


class DirStream:
    """opendir/readdir/telldir/seekdir/rewinddir of libc, which os.scandir does not offer."""

    def __init__(self, path):
        libc.opendir.restype = ctypes.c_void_p
        libc.readdir.restype = ctypes.POINTER(Dirent)
        libc.readdir.argtypes = [ctypes.c_void_p]
        libc.telldir.restype = ctypes.c_long
        libc.telldir.argtypes = [ctypes.c_void_p]
        libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
        libc.rewinddir.argtypes = [ctypes.c_void_p]
        libc.closedir.argtypes = [ctypes.c_void_p]
        self.d = libc.opendir(os.fsencode(path))
        if not self.d:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), path)

    def read(self):
        """The next name, None at the end."""
        ctypes.set_errno(0)
        ent = libc.readdir(self.d)
        if not ent:
            e = ctypes.get_errno()
            if e:
                raise OSError(e, os.strerror(e))
            return None
        return ent.contents.d_name.decode()

    def tell(self):
        return libc.telldir(self.d)

    def seek(self, loc):
        libc.seekdir(self.d, loc)

    def rewind(self):
        libc.rewinddir(self.d)

    def close(self):
        libc.closedir(self.d)


# ----------------------------------------------------------------------------------------------
# readdir while the directory changes
# ----------------------------------------------------------------------------------------------

@group("readdir")
def g_readdir(t):
    n = 600
    names = [f"entry-{i:04d}-" + "p" * 40 for i in range(n)]
    for nm in names:
        write_file(t.p(nm), b"")
    with t.case("complete_listing"):
        got = os.listdir(t.dir)
        eq(len(got), n, "number of entries listed")
        eq(sorted(got), sorted(names), "listed names")
    with t.case("dtype_and_ino"):
        os.mkdir(t.p("zdir"))
        os.symlink("x", t.p("zlink"))
        seen = {}
        with os.scandir(t.dir) as it:
            for e in it:
                seen[e.name] = e
        ok(seen["zdir"].is_dir(follow_symlinks=False), "d_type of a directory")
        ok(seen["zlink"].is_symlink(), "d_type of a symlink")
        ok(seen[names[0]].is_file(follow_symlinks=False), "d_type of a file")
        for nm in (names[0], "zdir", "zlink"):
            eq(seen[nm].inode(), os.lstat(t.p(nm)).st_ino, f"d_ino of {nm}")
        os.rmdir(t.p("zdir"))
        os.unlink(t.p("zlink"))
    with t.case("changes_during_listing"):
        removed = set(names[1::3])           # removed during the walk
        added = [f"added-{i:04d}" for i in range(200)]
        seen = []
        with os.scandir(t.dir) as it:
            for i, e in enumerate(it):
                seen.append(e.name)
                if i == 50:
                    for nm in removed:
                        os.unlink(t.p(nm))
                    for nm in added:
                        write_file(t.p(nm), b"")
        dup = sorted({x for x in seen if seen.count(x) > 1})
        ok(not dup, f"{len(dup)} entries returned twice, e.g. {dup[:3]}")
        stayed = set(names) - removed
        missing = sorted(stayed - set(seen))
        ok(not missing, f"{len(missing)} entries that stayed were skipped, e.g. {missing[:3]}")
        unknown = set(seen) - set(names) - set(added)
        ok(not unknown, f"entries that never existed: {sorted(unknown)[:3]}")
        eq(sorted(os.listdir(t.dir)), sorted(stayed | set(added)), "listing after the changes")
    with t.case("rename_during_listing"):
        seen = []
        present = sorted(os.listdir(t.dir))
        with os.scandir(t.dir) as it:
            for i, e in enumerate(it):
                seen.append(e.name)
                if i == 10:
                    os.rename(t.p(present[-1]), t.p(present[-1] + ".moved"))
        dup = sorted({x for x in seen if seen.count(x) > 1})
        ok(not dup, f"entries returned twice: {dup[:3]}")
        missing = sorted(set(present[:-1]) - set(seen))
        ok(not missing, f"entries that stayed were skipped: {missing[:3]}")
    # Past one page of the runtime's listing (1024 entries), which a CLIO mount reads lazily:
    # the same guarantees across page boundaries, and telldir/seekdir back into earlier pages.
    big = t.p("big")
    os.mkdir(big)
    many = [f"m{i:05d}-" + "q" * 20 for i in range(3000)]
    for nm in many:
        write_file(os.path.join(big, nm), b"")
    with t.case("pages_changes_during_listing"):
        removed = set(many[5::7])
        added = [f"late-{i:04d}" for i in range(1500)]
        seen = []
        with os.scandir(big) as it:
            for i, e in enumerate(it):
                seen.append(e.name)
                if i == 1100:  # inside the second page, with most of the directory unread
                    for nm in removed:
                        os.unlink(os.path.join(big, nm))
                    for nm in added:
                        write_file(os.path.join(big, nm), b"")
        dup = sorted({x for x in seen if seen.count(x) > 1})
        ok(not dup, f"{len(dup)} entries returned twice, e.g. {dup[:3]}")
        missing = sorted(set(many) - removed - set(seen))
        ok(not missing, f"{len(missing)} entries that stayed were skipped, e.g. {missing[:3]}")
        unknown = set(seen) - set(many) - set(added)
        ok(not unknown, f"entries that never existed: {sorted(unknown)[:3]}")
        now = set(many) - removed | set(added)
        eq(sorted(os.listdir(big)), sorted(now), "listing after the changes")
    with t.case("pages_small_buffer_changes"):
        # 1 KiB getdents buffers: every call asks the file system for an offset inside its
        # previous answer. Near the end of the first page, entries already listed go and
        # names that sort before all others come: nothing that stayed may be skipped or
        # listed twice, across the page boundary either.
        before = sorted(os.listdir(big))
        gone = before[:150]
        early = [f"a-early-{i:03d}" for i in range(40)]  # fewer than go: positions shift

        def change():
            for nm in gone:
                os.unlink(os.path.join(big, nm))
            for nm in early:
                write_file(os.path.join(big, nm), b"")
        seen = getdents_walk(big, 1024, {990: change})
        dup = sorted({x for x in seen if seen.count(x) > 1})
        ok(not dup, f"{len(dup)} entries returned twice, e.g. {dup[:3]}")
        missing = sorted(set(before) - set(gone) - set(seen))
        ok(not missing, f"{len(missing)} entries that stayed were skipped, e.g. {missing[:3]}")
        unknown = set(seen) - set(before) - set(early)
        ok(not unknown, f"entries that never existed: {sorted(unknown)[:3]}")
        now = set(before) - set(gone) | set(early)
        eq(sorted(os.listdir(big)), sorted(now), "listing after the changes")
    with t.case("pages_plus_after_changes", only="root"):
        # With attributes (readdirplus), a listing hands the kernel dentries: a name removed
        # or renamed away after the listing began must not come back as one, nor an old mode.
        # Dentries are dropped first (root only), so that the stat before the rest of the walk
        # is a lookup, after which the kernel asks for attributes with the next entries.
        if runs(t, "root"):
            before = sorted(os.listdir(big))
            gone, moved, chmodded = before[2000], before[2010], before[2020]

            def change():
                os.unlink(os.path.join(big, gone))
                os.rename(os.path.join(big, moved), os.path.join(big, "z-moved"))
                os.chmod(os.path.join(big, chmodded), 0o600)
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2")
            seen = getdents_walk(big, 1024, {1040: change,
                                             1990: lambda: os.stat(os.path.join(big, before[-1]))})
            dup = sorted({x for x in seen if seen.count(x) > 1})
            ok(not dup, f"{len(dup)} entries returned twice, e.g. {dup[:3]}")
            missing = sorted(set(before) - {gone, moved} - set(seen))
            ok(not missing, f"{len(missing)} entries that stayed were skipped, e.g. {missing[:3]}")
            expect_errno(errno.ENOENT, os.stat, os.path.join(big, gone))
            expect_errno(errno.ENOENT, os.stat, os.path.join(big, moved))
            eq(stat.S_IMODE(os.stat(os.path.join(big, chmodded)).st_mode), 0o600, "mode after chmod")
            ok(exists(os.path.join(big, "z-moved")), "the renamed entry under its new name")
    with t.case("pages_telldir_seekdir_rewinddir"):
        present = sorted(os.listdir(big))
        ds = DirStream(big)
        try:
            walk, marks = [], {}
            while True:
                loc = ds.tell()
                nm = ds.read()
                if nm is None:
                    break
                walk.append(nm)
                if len(walk) in (3, 700, 1500, 2600, 4000):
                    marks[len(walk) - 1] = loc
            eq(sorted(x for x in walk if x not in (".", "..")), present, "a libc readdir walk")
            for idx in sorted(marks, reverse=True):  # back into earlier pages, latest first
                ds.seek(marks[idx])
                eq(ds.read(), walk[idx], f"readdir after seekdir to the telldir of entry {idx}")
                eq(ds.read(), walk[idx + 1] if idx + 1 < len(walk) else None,
                   f"the entry after entry {idx}, after seekdir")
            write_file(os.path.join(big, "after-rewind"), b"")
            ds.rewind()
            again = []
            while (nm := ds.read()) is not None:
                again.append(nm)
            ok("after-rewind" in again, "rewinddir lists an entry created after opendir")
            eq(len(again), len(walk) + 1, "entries after rewinddir")
        finally:
            ds.close()
    with t.case("empty_dir_enotdir"):
        os.mkdir(t.p("empty"))
        eq(os.listdir(t.p("empty")), [], "listing of an empty directory")
        expect_errno(errno.ENOTDIR, os.listdir, t.p(names[0]))
        expect_errno(errno.ENOENT, os.listdir, t.p("missing"))
    with t.case("eacces_unreadable_dir", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.listdir, os.path.join(t.fixtures, "private"))


# ----------------------------------------------------------------------------------------------
# sparse and large files
# ----------------------------------------------------------------------------------------------

@group("largefile")
def g_largefile(t):
    f = t.p("big")
    off = 5 * GiB
    fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with t.case("byte_at_5gib"):
            eq(os.pwrite(fd, b"Q", off), 1, "pwrite at 5 GiB")
            eq(os.fstat(fd).st_size, off + 1, "size after a byte at 5 GiB")
            eq(os.stat(f).st_size, off + 1, "stat size after a byte at 5 GiB")
            eq(os.pread(fd, 10, off), b"Q", "read back the byte at 5 GiB")
            eq(os.lseek(fd, 0, os.SEEK_END), off + 1, "SEEK_END")
        with t.case("holes_read_zeros"):
            for o in (0, GiB, 4 * GiB - 2048, off - 4096):
                eq(pread_all(fd, 4096, o), bytes(4096), f"4 KiB of hole at {o}")
        with t.case("across_4gib"):
            os.pwrite(fd, b"ABCDEFGH", 4 * GiB - 4)
            eq(os.pread(fd, 8, 4 * GiB - 4), b"ABCDEFGH", "8 bytes across the 4 GiB boundary")
            eq(os.pread(fd, 4, 4 * GiB), b"EFGH", "bytes at exactly 4 GiB")
            eq(os.pread(fd, 4, 0), bytes(4), "offset 0 (no 32-bit wrap-around)")
        with t.case("sparse_blocks"):
            os.fsync(fd)
            st = os.fstat(fd)
            ok(st.st_blocks * 512 < 64 * MiB,
               f"a sparse {st.st_size}-byte file with 9 written bytes reports st_blocks "
               f"{st.st_blocks} ({st.st_blocks * 512} bytes): holes must not count as allocated")
        with t.case("truncate_down_and_reextend"):
            os.ftruncate(fd, 4 * GiB)
            eq(os.fstat(fd).st_size, 4 * GiB, "size after truncate to 4 GiB")
            os.ftruncate(fd, off + 1)
            eq(os.pread(fd, 1, off), b"\x00", "byte at 5 GiB after cut and re-extend")
            eq(os.pread(fd, 4, 4 * GiB - 4), b"ABCD", "bytes kept below the cut")
    finally:
        os.close(fd)
        try:
            os.unlink(f)
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# statfs
# ----------------------------------------------------------------------------------------------

@group("statfs")
def g_statfs(t):
    with t.case("sane_values"):
        v = os.statvfs(t.dir)
        ok(v.f_bsize > 0 and v.f_frsize > 0, f"f_bsize {v.f_bsize}, f_frsize {v.f_frsize}")
        ok(v.f_blocks > 0, f"f_blocks is {v.f_blocks}")
        ok(v.f_bfree <= v.f_blocks, f"f_bfree {v.f_bfree} > f_blocks {v.f_blocks}")
        ok(v.f_bavail <= v.f_bfree, f"f_bavail {v.f_bavail} > f_bfree {v.f_bfree}")
        ok(v.f_ffree <= v.f_files or v.f_files == 0, f"f_ffree {v.f_ffree} > f_files {v.f_files}")
        eq(v.f_namemax, 255, "f_namemax")
    with t.case("fstatvfs_matches"):
        fd = os.open(t.dir, os.O_RDONLY)
        try:
            a, b = os.fstatvfs(fd), os.statvfs(t.dir)
            eq((a.f_bsize, a.f_frsize, a.f_blocks, a.f_namemax),
               (b.f_bsize, b.f_frsize, b.f_blocks, b.f_namemax), "fstatvfs vs statvfs")
        finally:
            os.close(fd)
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.statvfs, t.p("missing"))


# ----------------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------------
