"""Conformance groups: rename, rmdir, symlink, truncate, unlink, utimensat.
"""

import ctypes
import errno
import os
import stat
import time

from posix_lib import *  # noqa: F401,F403


@group("rename")
def g_rename(t):
    a, b = t.p("a"), t.p("b")
    with t.case("basic"):
        write_file(a, b"A")
        ino = os.stat(a).st_ino
        eq(os.rename(a, b), None, "rename return value")
        ok(not exists(a), "old name still exists after rename")
        eq(os.stat(b).st_ino, ino, "inode after rename")
        eq(read_file(b), b"A", "content after rename")
        ok("b" in os.listdir(t.dir) and "a" not in os.listdir(t.dir), "listing after rename")
    with t.case("ctime_updated"):
        set_old_times(b)
        bs = os.stat(b)
        wait_past(ns(bs, "st_ctime"))
        os.rename(b, a)
        as_ = os.stat(a)
        check_updated(bs, as_, ["st_ctime"], "rename (the renamed file)")
        check_unchanged(bs, as_, ["st_mtime"], "rename (the renamed file)")
    with t.case("parent_times_updated"):
        os.mkdir(t.p("src"))
        os.mkdir(t.p("dst"))
        write_file(t.p("src", "f"), b"f")
        set_old_times(t.p("src"))
        set_old_times(t.p("dst"))
        bs, bd = os.stat(t.p("src")), os.stat(t.p("dst"))
        os.rename(t.p("src", "f"), t.p("dst", "f"))
        check_updated(bs, os.stat(t.p("src")), ["st_mtime", "st_ctime"], "rename (source dir)")
        check_updated(bd, os.stat(t.p("dst")), ["st_mtime", "st_ctime"], "rename (target dir)")
        eq(read_file(t.p("dst", "f")), b"f", "content after a cross-directory rename")
    with t.case("replace_file"):
        write_file(a, b"new")
        write_file(b, b"old")
        fd = os.open(b, os.O_RDONLY)
        try:
            os.rename(a, b)
            eq(read_file(b), b"new", "target content after rename over it")
            ok(not exists(a), "source remains")
            eq(os.fstat(fd).st_nlink, 0, "st_nlink of the replaced file (still open)")
            eq(os.pread(fd, 10, 0), b"old", "replaced file still readable through its open fd")
        finally:
            os.close(fd)
    with t.case("same_file_noop"):
        os.link(b, t.p("b2"))
        os.rename(b, t.p("b2"))
        ok(exists(b) and exists(t.p("b2")), "rename between two links of one file must do nothing")
        eq(os.stat(b).st_nlink, 2, "st_nlink after rename between links of one file")
        os.rename(b, b)
        eq(read_file(b), b"new", "content after rename(x, x)")
    with t.case("dir_over_empty_dir"):
        os.mkdir(t.p("d1"))
        write_file(t.p("d1", "inner"), b"i")
        os.mkdir(t.p("d2"))
        os.rename(t.p("d1"), t.p("d2"))
        eq(read_file(t.p("d2", "inner")), b"i", "content in the renamed directory")
        ok(not exists(t.p("d1")), "old directory name still exists")
    with t.case("dir_over_nonempty_enotempty"):
        os.mkdir(t.p("d3"))
        expect_errno((errno.ENOTEMPTY, errno.EEXIST), os.rename, t.p("d3"), t.p("d2"))
        ok(exists(t.p("d2", "inner")), "the non-empty target lost its entry")
    with t.case("file_over_dir_eisdir"):
        expect_errno(errno.EISDIR, os.rename, b, t.p("d3"))
    with t.case("dir_over_file_enotdir"):
        expect_errno(errno.ENOTDIR, os.rename, t.p("d3"), b)
    with t.case("into_own_subdir_einval"):
        os.mkdir(t.p("d3", "sub"))
        expect_errno(errno.EINVAL, os.rename, t.p("d3"), t.p("d3", "sub", "x"))
    with t.case("dir_dotdot_and_nlink"):
        os.mkdir(t.p("p1"))
        os.mkdir(t.p("p2"))
        os.mkdir(t.p("p1", "c"))
        n1, n2 = os.stat(t.p("p1")).st_nlink, os.stat(t.p("p2")).st_nlink
        os.rename(t.p("p1", "c"), t.p("p2", "c"))
        eq(os.stat(t.p("p2", "c", "..")).st_ino, os.stat(t.p("p2")).st_ino, "inode of moved/..")
        eq(os.stat(t.p("p1")).st_nlink, n1 - 1, "old parent st_nlink after moving a subdir out")
        eq(os.stat(t.p("p2")).st_nlink, n2 + 1, "new parent st_nlink after moving a subdir in")
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.rename, t.p("missing"), t.p("x"))
        expect_errno(errno.ENOENT, os.rename, b, t.p("nodir", "x"))
    with t.case("enametoolong"):
        expect_errno(errno.ENAMETOOLONG, os.rename, b, t.p("r" * 256))
        os.rename(b, t.p("r" * 255))
        os.rename(t.p("r" * 255), b)
    with t.case("exdev"):
        if t.other_dir is None:
            raise Fail("no writable directory on another filesystem found for the EXDEV check")
        expect_errno(errno.EXDEV, os.rename, b, os.path.join(t.other_dir, f"clio-posix-{os.getpid()}"))
    with t.case("while_open"):
        write_file(t.p("o1"), b"before")
        fd = os.open(t.p("o1"), os.O_RDWR)
        try:
            ino = os.fstat(fd).st_ino
            os.rename(t.p("o1"), t.p("o2"))
            os.pwrite(fd, b"AFTER!", 0)
            eq(os.fstat(fd).st_ino, ino, "fstat inode after rename")
            eq(os.fstat(fd).st_nlink, 1, "fstat st_nlink after rename")
        finally:
            os.close(fd)
        eq(read_file(t.p("o2")), b"AFTER!", "content via the new name of a file written while open")
    with t.case("noreplace"):
        write_file(t.p("n1"), b"one")
        write_file(t.p("n2"), b"two")
        expect_errno(errno.EEXIST, renameat2, t.p("n1"), t.p("n2"), RENAME_NOREPLACE)
        eq((read_file(t.p("n1")), read_file(t.p("n2"))), (b"one", b"two"), "contents after refused NOREPLACE")
        renameat2(t.p("n1"), t.p("n3"), RENAME_NOREPLACE)
        ok(not exists(t.p("n1")) and read_file(t.p("n3")) == b"one", "NOREPLACE to a free name")
    with t.case("exchange"):
        i2, i3 = os.stat(t.p("n2")).st_ino, os.stat(t.p("n3")).st_ino
        renameat2(t.p("n2"), t.p("n3"), RENAME_EXCHANGE)
        eq((read_file(t.p("n2")), read_file(t.p("n3"))), (b"one", b"two"), "contents after EXCHANGE")
        eq((os.stat(t.p("n2")).st_ino, os.stat(t.p("n3")).st_ino), (i3, i2), "inodes after EXCHANGE")
    with t.case("exchange_file_dir"):
        os.mkdir(t.p("xd"))
        write_file(t.p("xd", "in"), b"in")
        renameat2(t.p("n2"), t.p("xd"), RENAME_EXCHANGE)
        ok(os.path.isdir(t.p("n2")) and os.path.isfile(t.p("xd")), "types after file/dir EXCHANGE")
        eq(read_file(t.p("n2", "in")), b"in", "entry of the exchanged directory")
        eq(os.stat(t.p("n2", "..")).st_ino, os.stat(t.dir).st_ino, "exchanged dir's ..")
    with t.case("exchange_enoent"):
        expect_errno(errno.ENOENT, renameat2, t.p("n3"), t.p("nothere"), RENAME_EXCHANGE)
        ok(exists(t.p("n3")), "source vanished after a failed EXCHANGE")
    with t.case("exchange_noreplace_einval"):
        expect_errno(errno.EINVAL, renameat2, t.p("n3"), t.p("xd"), RENAME_EXCHANGE | RENAME_NOREPLACE)
    with t.case("eperm_sticky", only="user"):
        if runs(t, "user"):
            sd = os.path.join(t.fixtures, "sticky")
            expect_errno(errno.EPERM, os.rename, os.path.join(sd, "rootfile"), os.path.join(sd, "moved"))
    with t.case("eacces_dir_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.rename, b, os.path.join(t.fixtures, "rootdir", "x"))
            expect_errno(errno.EACCES, os.rename, os.path.join(t.fixtures, "rootdir", "f"), t.p("stolen"))


# ----------------------------------------------------------------------------------------------
# rmdir
# ----------------------------------------------------------------------------------------------

@group("rmdir")
def g_rmdir(t):
    d = t.p("d")
    os.mkdir(d)
    with t.case("removes_empty"):
        n0 = os.stat(t.dir).st_nlink
        set_old_times(t.dir)
        b = os.stat(t.dir)
        eq(os.rmdir(d), None, "rmdir return value")
        ok(not exists(d), "directory still exists after rmdir")
        a = os.stat(t.dir)
        eq(a.st_nlink, n0 - 1, "parent st_nlink after rmdir")
        check_updated(b, a, ["st_mtime", "st_ctime"], "rmdir (parent)")
    with t.case("enotempty"):
        os.mkdir(d)
        write_file(os.path.join(d, "f"), b"")
        expect_errno((errno.ENOTEMPTY, errno.EEXIST), os.rmdir, d)
        ok(exists(os.path.join(d, "f")), "entry lost after refused rmdir")
        os.unlink(os.path.join(d, "f"))
        os.mkdir(os.path.join(d, "sub"))
        expect_errno((errno.ENOTEMPTY, errno.EEXIST), os.rmdir, d)
    with t.case("enotdir"):
        write_file(t.p("f"), b"")
        expect_errno(errno.ENOTDIR, os.rmdir, t.p("f"))
        os.symlink("d", t.p("ln"))
        expect_errno(errno.ENOTDIR, os.rmdir, t.p("ln"))
        ok(os.path.isdir(d), "rmdir of a symlink removed its target")
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.rmdir, t.p("missing"))
    with t.case("dot_einval"):
        expect_errno(errno.EINVAL, os.rmdir, os.path.join(d, "sub", "."))
    with t.case("open_dir_then_rmdir"):
        e = t.p("e")
        os.mkdir(e)
        fd = os.open(e, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.rmdir(e)
            eq(os.fstat(fd).st_nlink, 0, "st_nlink of an open removed directory")
            expect_errno(errno.ENOENT, os.open, os.path.join(e, "x"), os.O_WRONLY | os.O_CREAT)
        finally:
            os.close(fd)
    with t.case("eacces_parent_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.rmdir, os.path.join(t.fixtures, "rootdir", "sub"))


# ----------------------------------------------------------------------------------------------
# symlink
# ----------------------------------------------------------------------------------------------

@group("symlink")
def g_symlink(t):
    write_file(t.p("tgt"), b"target data")
    with t.case("creates_and_readlink"):
        eq(os.symlink("tgt", t.p("ln")), None, "symlink return value")
        st = os.lstat(t.p("ln"))
        ok(stat.S_ISLNK(st.st_mode), f"not a symlink: {oct(st.st_mode)}")
        eq(st.st_size, 3, "lstat st_size of a symlink (length of its target)")
        eq(os.readlink(t.p("ln")), "tgt", "readlink")
        eq(read_file(t.p("ln")), b"target data", "content read through the symlink")
        eq((st.st_uid, st.st_gid), (os.geteuid(), os.getegid()), "owner of a new symlink")
    with t.case("dangling"):
        os.symlink("does/not/exist", t.p("dang"))
        eq(os.readlink(t.p("dang")), "does/not/exist", "readlink of a dangling symlink")
        expect_errno(errno.ENOENT, os.stat, t.p("dang"))
    with t.case("long_target"):
        for n in (1000, 4000):
            tgt = ("x" * 200 + "/") * (n // 201) + "y" * (n - (n // 201) * 201)
            eq(len(tgt), n, "target length")
            os.symlink(tgt, t.p(f"long{n}"))
            eq(os.readlink(t.p(f"long{n}")), tgt, f"readlink of a {n}-byte target")
            eq(os.lstat(t.p(f"long{n}")).st_size, n, f"st_size of a {n}-byte symlink")
    with t.case("eexist"):
        expect_errno(errno.EEXIST, os.symlink, "x", t.p("tgt"))
        expect_errno(errno.EEXIST, os.symlink, "x", t.p("ln"))
    with t.case("eloop"):
        os.symlink("loop2", t.p("loop1"))
        os.symlink("loop1", t.p("loop2"))
        expect_errno(errno.ELOOP, os.open, t.p("loop1"), os.O_RDONLY)
        expect_errno(errno.ELOOP, os.stat, t.p("loop1"))
    with t.case("relative_and_dir"):
        os.mkdir(t.p("dir"))
        write_file(t.p("dir", "inner"), b"inner")
        os.mkdir(t.p("other"))
        os.symlink("../dir", t.p("other", "up"))
        eq(read_file(t.p("other", "up", "inner")), b"inner", "read through a relative dir symlink")
        eq(sorted(os.listdir(t.p("other", "up"))), ["inner"], "listing through a dir symlink")
        os.symlink(t.p("dir"), t.p("abs"))
        eq(read_file(t.p("abs", "inner")), b"inner", "read through an absolute dir symlink")
    with t.case("enametoolong"):
        expect_errno(errno.ENAMETOOLONG, os.symlink, "tgt", t.p("s" * 256))
        expect_errno(errno.ENAMETOOLONG, os.symlink, "a" * 4096, t.p("toolong"))
    with t.case("enotdir"):
        expect_errno(errno.ENOTDIR, os.readlink, t.p("tgt", "x"))
        expect_errno(errno.EINVAL, os.readlink, t.p("tgt"))
    with t.case("unlink_removes_link_only"):
        os.unlink(t.p("ln"))
        ok(not exists(t.p("ln")), "symlink still exists after unlink")
        eq(read_file(t.p("tgt")), b"target data", "target after unlinking its symlink")
    with t.case("eacces_parent_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.symlink, "x", os.path.join(t.fixtures, "rootdir", "ln"))


# ----------------------------------------------------------------------------------------------
# truncate
# ----------------------------------------------------------------------------------------------

@group("truncate")
def g_truncate(t):
    f = t.p("f")
    data = os.urandom(3 * MiB + 5)
    write_file(f, data)
    with t.case("shrink"):
        eq(os.truncate(f, 1000), None, "truncate return value")
        eq(os.stat(f).st_size, 1000, "size after truncate to 1000")
        eq(read_file(f), data[:1000], "content after shrink")
    with t.case("extend_zeros"):
        os.truncate(f, 2 * MiB + 3)
        eq(os.stat(f).st_size, 2 * MiB + 3, "size after extending truncate")
        got = read_file(f)
        eq(got[:1000], data[:1000], "kept prefix after extend")
        ok(got[1000:] == bytes(2 * MiB + 3 - 1000),
           "extended range is not all zeros (bytes from before the shrink came back?) "
           f"first nonzero at {next((i + 1000 for i, c in enumerate(got[1000:]) if c), None)}")
    with t.case("shrink_mid_chunk_then_extend"):
        write_file(f, b"\xff" * (2 * MiB))
        fd = os.open(f, os.O_RDWR)
        try:
            os.ftruncate(fd, MiB + 100)
            os.ftruncate(fd, 2 * MiB)
            got = pread_all(fd, 2 * MiB, 0)
        finally:
            os.close(fd)
        eq(got[:MiB + 100], b"\xff" * (MiB + 100), "bytes before the cut")
        ok(got[MiB + 100:] == bytes(MiB - 100), "bytes after the cut are not zeros after re-extend")
    with t.case("ftruncate"):
        fd = os.open(f, os.O_RDWR)
        try:
            eq(os.ftruncate(fd, 10), None, "ftruncate return value")
            eq(os.fstat(fd).st_size, 10, "fstat size after ftruncate")
            eq(os.lseek(fd, 0, os.SEEK_END), 10, "SEEK_END after ftruncate")
        finally:
            os.close(fd)
    with t.case("times_updated"):
        set_old_times(f)
        b = os.stat(f)
        os.truncate(f, 20)
        check_updated(b, os.stat(f), ["st_mtime", "st_ctime"], "truncate (size changed)")
        set_old_times(f)
        b = os.stat(f)
        fd = os.open(f, os.O_RDWR)
        try:
            os.ftruncate(fd, 5)
        finally:
            os.close(fd)
        check_updated(b, os.stat(f), ["st_mtime", "st_ctime"], "ftruncate (size changed)")
    with t.case("eisdir"):
        os.mkdir(t.p("d"))
        expect_errno(errno.EISDIR, os.truncate, t.p("d"), 0)
    with t.case("einval"):
        expect_errno(errno.EINVAL, os.truncate, f, -1)
        fd = os.open(f, os.O_RDONLY)
        try:
            expect_errno((errno.EINVAL, errno.EBADF), os.ftruncate, fd, 0)
        finally:
            os.close(fd)
    with t.case("enoent_enotdir"):
        expect_errno(errno.ENOENT, os.truncate, t.p("missing"), 0)
        expect_errno(errno.ENOTDIR, os.truncate, t.p("f", "x"), 0)
    with t.case("eacces_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.truncate, os.path.join(t.fixtures, "public"), 0)
            eq(os.stat(os.path.join(t.fixtures, "public")).st_size, 6, "size after refused truncate")


# ----------------------------------------------------------------------------------------------
# unlink
# ----------------------------------------------------------------------------------------------

@group("unlink")
def g_unlink(t):
    f = t.p("f")
    with t.case("removes"):
        write_file(f, b"x")
        set_old_times(t.dir)
        b = os.stat(t.dir)
        eq(os.unlink(f), None, "unlink return value")
        ok(not exists(f), "file still exists after unlink")
        ok("f" not in os.listdir(t.dir), "unlinked name still listed")
        check_updated(b, os.stat(t.dir), ["st_mtime", "st_ctime"], "unlink (parent)")
    with t.case("other_link_ctime_nlink"):
        write_file(f, b"x")
        os.link(f, t.p("g"))
        set_old_times(f)
        b = os.stat(t.p("g"))
        wait_past(ns(b, "st_ctime"))
        os.unlink(f)
        a = os.stat(t.p("g"))
        eq(a.st_nlink, 1, "st_nlink of the remaining link")
        check_updated(b, a, ["st_ctime"], "unlink (the remaining link's ctime)")
    with t.case("while_open"):
        payload = os.urandom(MiB + 17)
        write_file(f, payload)
        fd = os.open(f, os.O_RDWR)
        try:
            os.unlink(f)
            ok(not exists(f), "name still exists after unlink of an open file")
            eq(os.fstat(fd).st_nlink, 0, "fstat st_nlink of an unlinked open file")
            ok(pread_all(fd, len(payload), 0) == payload, "read through the fd after unlink")
            os.pwrite(fd, b"more", len(payload))
            eq(os.fstat(fd).st_size, len(payload) + 4, "size after writing to an unlinked file")
            eq(os.pread(fd, 4, len(payload)), b"more", "read back a write made after unlink")
            # times of an unlinked but open file can still be set
            os.utime(fd, ns=(1_000_000_000, 2_000_000_000))
            eq(os.fstat(fd).st_mtime_ns, 2_000_000_000, "futimens on an unlinked open file")
            # the name can be reused while the old file is open
            write_file(f, b"new file")
            eq(read_file(f), b"new file", "new file under a reused name")
            ok(pread_all(fd, 16, 0) == payload[:16], "old fd sees its own file after name reuse")
        finally:
            os.close(fd)
        eq(read_file(f), b"new file", "new file after the old one's last close")
        os.unlink(f)
        ok(not exists(f), "gone after close")
    with t.case("while_open_fsync"):
        write_file(f, b"abc")
        fd = os.open(f, os.O_RDWR)
        try:
            os.unlink(f)
            os.write(fd, b"def")
            os.fsync(fd)
            eq(os.pread(fd, 10, 0), b"def", "read after fsync of an unlinked file")
        finally:
            os.close(fd)
        expect_errno(errno.ENOENT, os.stat, f)
    with t.case("directory_eisdir"):
        os.mkdir(t.p("d"))
        expect_errno((errno.EISDIR, errno.EPERM), os.unlink, t.p("d"))
        ok(os.path.isdir(t.p("d")), "directory vanished after refused unlink")
    with t.case("enoent_enotdir"):
        expect_errno(errno.ENOENT, os.unlink, t.p("missing"))
        write_file(f, b"")
        expect_errno(errno.ENOTDIR, os.unlink, t.p("f", "x"))
        expect_errno(errno.ENOTDIR, os.unlink, f + "/")
    with t.case("eperm_sticky", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EPERM, os.unlink, os.path.join(t.fixtures, "sticky", "rootfile"))
            ok(exists(os.path.join(t.fixtures, "sticky", "rootfile")), "root's file was removed")
    with t.case("sticky_own_file_ok", only="user"):
        if runs(t, "user"):
            mine = os.path.join(t.fixtures, "sticky", f"mine-{os.getpid()}")
            write_file(mine, b"")
            os.unlink(mine)
            ok(not exists(mine), "own file in a sticky dir not removed")
    with t.case("eacces_parent_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.unlink, os.path.join(t.fixtures, "rootdir", "f"))


# ----------------------------------------------------------------------------------------------
# utimensat
# ----------------------------------------------------------------------------------------------

@group("utimensat")
def g_utimensat(t):
    f = t.p("f")
    write_file(f, b"x")
    A = 1_500_000_000 * 10**9 + 123_456_789
    M = 1_600_000_000 * 10**9 + 987_654_321

    def near(got, want, what):
        ok(got <= want and want - got < 10**9,
           f"{what}: expected {want} (or truncated to the fs resolution), got {got}")

    with t.case("explicit"):
        b = os.stat(f)
        wait_past(ns(b, "st_ctime"))
        eq(utimensat(f, A, M), None, "utimensat return value")
        st = os.stat(f)
        near(st.st_atime_ns, A, "atime")
        near(st.st_mtime_ns, M, "mtime")
        check_updated(b, st, ["st_ctime"], "utimensat")
    with t.case("whole_seconds_exact"):
        os.utime(f, (1_234_567_890, 1_234_567_891))
        st = os.stat(f)
        eq((st.st_atime_ns, st.st_mtime_ns), (1_234_567_890 * 10**9, 1_234_567_891 * 10**9),
           "atime/mtime after utime with whole seconds")
    with t.case("past_2038"):
        y2100 = 4_102_444_800 * 10**9
        utimensat(f, y2100, y2100 + 5 * 10**9)
        st = os.stat(f)
        eq((st.st_atime_ns, st.st_mtime_ns), (y2100, y2100 + 5 * 10**9), "times in 2100")
    with t.case("omit_atime_now_mtime"):
        utimensat(f, A, M)
        b = os.stat(f)
        wait_past(max(ns(b, "st_ctime"), M))
        t0 = time.clock_gettime_ns(getattr(time, "CLOCK_REALTIME_COARSE", 5))
        utimensat(f, "omit", "now")
        st = os.stat(f)
        eq(st.st_atime_ns, b.st_atime_ns, "atime with UTIME_OMIT")
        ok(st.st_mtime_ns >= t0 - 10**9 and st.st_mtime_ns <= time.time_ns() + 10**9,
           f"mtime with UTIME_NOW: {st.st_mtime_ns}, clock at the call {t0}")
        check_updated(b, st, ["st_ctime"], "UTIME_NOW")
    with t.case("now_atime_omit_mtime"):
        utimensat(f, A, M)
        b = os.stat(f)
        utimensat(f, "now", "omit")
        st = os.stat(f)
        eq(st.st_mtime_ns, b.st_mtime_ns, "mtime with UTIME_OMIT")
        ok(st.st_atime_ns > A, f"atime with UTIME_NOW not updated: {st.st_atime_ns}")
    with t.case("omit_both"):
        utimensat(f, A, M)
        b = os.stat(f)
        utimensat(f, "omit", "omit")
        st = os.stat(f)
        eq((st.st_atime_ns, st.st_mtime_ns), (b.st_atime_ns, b.st_mtime_ns), "times with both UTIME_OMIT")
    with t.case("null_times_now"):
        utimensat(f, A, M)
        os.utime(f)
        st = os.stat(f)
        ok(st.st_mtime_ns > M and st.st_atime_ns > A, "utime(path, NULL) did not set times to now")
    with t.case("symlink_nofollow"):
        os.symlink("f", t.p("ln"))
        utimensat(f, A, M)
        utimensat(t.p("ln"), A + 10**9, M + 10**9, AT_SYMLINK_NOFOLLOW)
        near(os.lstat(t.p("ln")).st_mtime_ns, M + 10**9, "symlink mtime")
        near(os.stat(f).st_mtime_ns, M, "target mtime after AT_SYMLINK_NOFOLLOW on the link")
    with t.case("directory"):
        os.mkdir(t.p("d"))
        utimensat(t.p("d"), A, M)
        near(os.stat(t.p("d")).st_mtime_ns, M, "directory mtime")
    with t.case("futimens"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.utime(fd, ns=(A, M))
            near(os.fstat(fd).st_mtime_ns, M, "mtime after futimens")
        finally:
            os.close(fd)
    with t.case("enoent"):
        expect_errno(errno.ENOENT, utimensat, t.p("missing"), A, M)
    with t.case("einval_bad_nsec"):
        arr = (Timespec * 2)(Timespec(0, 10**9), Timespec(0, 0))
        r = libc.utimensat(AT_FDCWD, os.fsencode(f), arr, 0)
        ok(r != 0 and ctypes.get_errno() == errno.EINVAL,
           f"tv_nsec = 1e9 must be EINVAL, got rc {r} errno {ename(ctypes.get_errno())}")
    with t.case("eperm_explicit_not_owner", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EPERM, utimensat, os.path.join(t.fixtures, "world"), A, M)
    with t.case("now_with_write_access", only="user"):
        if runs(t, "user"):
            w = os.path.join(t.fixtures, "world")
            utimensat(w, "now", "now")
            ok(os.stat(w).st_mtime_ns > OLD_NS, "UTIME_NOW by a user with write access")
    with t.case("eacces_now_without_write", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, utimensat, os.path.join(t.fixtures, "public"), "now", "now")
    with t.case("eperm_now_omit_not_owner", only="user"):
        if runs(t, "user"):
            # only both UTIME_NOW (or NULL) is allowed to a non-owner with write access
            expect_errno((errno.EPERM, errno.EACCES), utimensat, os.path.join(t.fixtures, "world"), "now", A)


# ----------------------------------------------------------------------------------------------
# xattr
# ----------------------------------------------------------------------------------------------
