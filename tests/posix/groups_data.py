"""Conformance groups: xattr, fallocate, lseek, locks, mmap.
"""

import errno
import fcntl
import mmap
import os
import struct
import traceback

from posix_lib import *  # noqa: F401,F403


@group("xattr")
def g_xattr(t):
    f = t.p("f")
    write_file(f, b"x")
    with t.case("set_get_list_remove"):
        eq(os.setxattr(f, "user.foo", b"bar"), None, "setxattr return value")
        eq(os.getxattr(f, "user.foo"), b"bar", "getxattr")
        ok("user.foo" in os.listxattr(f), f"listxattr lacks user.foo: {os.listxattr(f)}")
        os.removexattr(f, "user.foo")
        expect_errno(errno.ENODATA, os.getxattr, f, "user.foo")
        ok("user.foo" not in os.listxattr(f), "removed attribute still listed")
    with t.case("binary_and_empty_values"):
        v = bytes(range(256)) * 4
        os.setxattr(f, "user.bin", v)
        eq(os.getxattr(f, "user.bin"), v, "binary value with NULs")
        os.setxattr(f, "user.empty", b"")
        eq(os.getxattr(f, "user.empty"), b"", "empty value")
        ok("user.empty" in os.listxattr(f), "empty-valued attribute not listed")
    with t.case("replace_value"):
        os.setxattr(f, "user.r", b"long value here")
        os.setxattr(f, "user.r", b"short")
        eq(os.getxattr(f, "user.r"), b"short", "value after overwrite with a shorter one")
    with t.case("create_flag_eexist"):
        os.setxattr(f, "user.c", b"1")
        expect_errno(errno.EEXIST, os.setxattr, f, "user.c", b"2", os.XATTR_CREATE)
        eq(os.getxattr(f, "user.c"), b"1", "value after refused XATTR_CREATE")
    with t.case("replace_flag_enodata"):
        expect_errno(errno.ENODATA, os.setxattr, f, "user.nothere", b"2", os.XATTR_REPLACE)
        os.setxattr(f, "user.c", b"3", os.XATTR_REPLACE)
        eq(os.getxattr(f, "user.c"), b"3", "value after XATTR_REPLACE")
    with t.case("remove_missing_enodata"):
        expect_errno(errno.ENODATA, os.removexattr, f, "user.nothere")
    with t.case("size_query_erange"):
        os.setxattr(f, "user.sz", b"0123456789")
        eq(getxattr_buf(f, "user.sz", 0), 10, "getxattr(size 0) returns the value size")
        try:
            getxattr_buf(f, "user.sz", 4)
            raise Fail("getxattr with a 4-byte buffer for a 10-byte value succeeded")
        except OSError as e:
            eq(ename(e.errno), "ERANGE", "errno of getxattr with a too small buffer")
    with t.case("large_value"):
        v = os.urandom(4000)
        os.setxattr(f, "user.large", v)
        eq(os.getxattr(f, "user.large"), v, "4000-byte value")
    with t.case("name_too_long_erange"):
        expect_errno(errno.ERANGE, os.setxattr, f, "user." + "n" * 300, b"v")
    with t.case("value_too_big_e2big"):
        expect_errno((errno.E2BIG, errno.ENOSPC), os.setxattr, f, "user.huge", b"v" * (64 * KiB + 1))
    with t.case("ctime_updated"):
        b = os.stat(f)
        wait_past(ns(b, "st_ctime"))
        os.setxattr(f, "user.ct", b"1")
        check_updated(b, os.stat(f), ["st_ctime"], "setxattr")
    with t.case("directory"):
        os.mkdir(t.p("d"))
        os.setxattr(t.p("d"), "user.d", b"dir")
        eq(os.getxattr(t.p("d"), "user.d"), b"dir", "xattr on a directory")
    with t.case("survives_rename_and_link"):
        os.setxattr(f, "user.keep", b"kept")
        os.rename(f, t.p("f2"))
        os.link(t.p("f2"), t.p("f3"))
        eq(os.getxattr(t.p("f3"), "user.keep"), b"kept", "xattr via a new link after rename")
    with t.case("symlink_user_eperm"):
        os.symlink("f2", t.p("ln"))
        expect_errno(errno.EPERM, os.setxattr, t.p("ln"), "user.x", b"1", follow_symlinks=False)
    with t.case("unknown_namespace"):
        expect_errno(errno.EOPNOTSUPP, os.setxattr, t.p("f2"), "bogus.x", b"1")
    with t.case("security_names_set_get_remove", only="root"):
        if runs(t, "root"):
            # Names clio-fuse remembers as absent (security.selinux is asked by every ls -l):
            # an answer of "absent" must not outlive a set or a remove.
            g = t.p("sec")
            write_file(g, b"x")
            for round_ in range(2):
                expect_errno(errno.ENODATA, os.getxattr, g, "security.selinux")
                os.setxattr(g, "security.selinux", b"clio_t%d" % round_)
                eq(os.getxattr(g, "security.selinux"), b"clio_t%d" % round_,
                   "security.selinux after set")
                os.removexattr(g, "security.selinux")
            expect_errno(errno.ENODATA, os.getxattr, g, "security.selinux")
            os.link(g, t.p("sec2"))
            os.setxattr(t.p("sec2"), "security.selinux", b"via_link")
            eq(os.getxattr(g, "security.selinux"), b"via_link", "set through another link")
    with t.case("trusted_eperm", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EPERM, os.setxattr, t.p("f2"), "trusted.x", b"1")
    with t.case("eacces_not_owner", only="user"):
        if runs(t, "user"):
            expect_errno((errno.EACCES, errno.EPERM), os.setxattr,
                         os.path.join(t.fixtures, "public"), "user.x", b"1")


# ----------------------------------------------------------------------------------------------
# fallocate
# ----------------------------------------------------------------------------------------------

@group("fallocate")
def g_fallocate(t):
    f = t.p("f")
    data = os.urandom(3 * MiB)
    write_file(f, data)
    fd = os.open(f, os.O_RDWR)
    try:
        with t.case("default_extends"):
            eq(fallocate(fd, 0, 3 * MiB, MiB + 10), None, "fallocate return value")
            eq(os.fstat(fd).st_size, 4 * MiB + 10, "size after fallocate(0) past EOF")
            eq(os.stat(f).st_size, 4 * MiB + 10, "stat size after fallocate(0) past EOF")
            ok(pread_all(fd, 3 * MiB, 0) == data, "data before the allocated range changed")
            ok(pread_all(fd, MiB + 10, 3 * MiB) == bytes(MiB + 10), "allocated range is not zeros")
        with t.case("default_inside_keeps_data"):
            fallocate(fd, 0, 100, 1000)
            eq(os.fstat(fd).st_size, 4 * MiB + 10, "size after fallocate inside the file")
            ok(pread_all(fd, 3 * MiB, 0) == data, "fallocate inside the file changed data")
        with t.case("posix_fallocate"):
            os.posix_fallocate(fd, 0, 5 * MiB)
            eq(os.fstat(fd).st_size, 5 * MiB, "size after posix_fallocate to 5 MiB")
        with t.case("keep_size"):
            size = os.fstat(fd).st_size
            fallocate(fd, FALLOC_FL_KEEP_SIZE, size, 2 * MiB)
            eq(os.fstat(fd).st_size, size, "size after FALLOC_FL_KEEP_SIZE past EOF")
            eq(os.stat(f).st_size, size, "stat size after FALLOC_FL_KEEP_SIZE")
            eq(os.pread(fd, 10, size), b"", "read at EOF after KEEP_SIZE")
        with t.case("punch_hole"):
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
            size = os.fstat(fd).st_size
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, MiB // 2, 2 * MiB)
            eq(os.fstat(fd).st_size, size, "size after PUNCH_HOLE")
            got = pread_all(fd, size, 0)
            eq(len(got), size, "bytes read after PUNCH_HOLE")
            ok(got[:MiB // 2] == data[:MiB // 2], "bytes before the punched range changed")
            ok(got[MiB // 2:MiB // 2 + 2 * MiB] == bytes(2 * MiB),
               "punched range does not read as zeros (first nonzero at "
               f"{next((i + MiB // 2 for i, c in enumerate(got[MiB // 2:MiB // 2 + 2 * MiB]) if c), None)})")
            ok(got[MiB // 2 + 2 * MiB:] == data[MiB // 2 + 2 * MiB:], "bytes after the punched range changed")
            # and through a fresh open (no page cache of this fd involved)
            ok(read_file(f)[MiB // 2:MiB // 2 + 2 * MiB] == bytes(2 * MiB), "punched range via a new open")
        with t.case("punch_unsynced_data"):
            os.pwrite(fd, b"\xaa" * 8192, 10_000)
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8192, 8192)
            got = os.pread(fd, 10000, 8192)
            ok(got[:8192] == bytes(8192), "freshly written (unsynced) bytes survive a punch")
            eq(got[8192:], b"\xaa" * 1808, "written bytes past the punch")
        with t.case("punch_past_eof_keeps_size"):
            size = os.fstat(fd).st_size
            fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, size - 100, 10 * MiB)
            eq(os.fstat(fd).st_size, size, "size after a punch that crosses EOF")
            eq(os.pread(fd, 200, size - 100), bytes(100), "tail bytes after a punch across EOF")
        with t.case("keep_size_counts_blocks"):
            g = t.p("kept")
            gfd = os.open(g, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fallocate(gfd, FALLOC_FL_KEEP_SIZE, 0, MiB)
                st = os.fstat(gfd)
                eq(st.st_size, 0, "size after FALLOC_FL_KEEP_SIZE on an empty file")
                ok(st.st_blocks * 512 >= MiB, f"st_blocks after a 1 MiB KEEP_SIZE fallocate: {st.st_blocks}")
                fallocate(gfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, MiB)
                eq(os.fstat(gfd).st_blocks, 0, "st_blocks after punching the whole allocated range")
            finally:
                os.close(gfd)
        with t.case("punch_requires_keep_size"):
            expect_errno(errno.EOPNOTSUPP, fallocate, fd, FALLOC_FL_PUNCH_HOLE, 0, 4096)
        with t.case("einval"):
            expect_errno(errno.EINVAL, fallocate, fd, 0, 0, 0)
            expect_errno(errno.EINVAL, fallocate, fd, 0, -1, 4096)
        with t.case("ebadf_readonly"):
            rfd = os.open(f, os.O_RDONLY)
            try:
                expect_errno(errno.EBADF, fallocate, rfd, 0, 0, 4096)
            finally:
                os.close(rfd)
    finally:
        os.close(fd)
    with t.case("enodev_on_fifo_or_espipe"):
        os.mkfifo(t.p("fifo"))
        r = os.open(t.p("fifo"), os.O_RDWR | os.O_NONBLOCK)
        try:
            expect_errno(errno.ESPIPE, fallocate, r, 0, 0, 4096)
        finally:
            os.close(r)


# ----------------------------------------------------------------------------------------------
# lseek
# ----------------------------------------------------------------------------------------------

@group("lseek")
def g_lseek(t):
    f = t.p("f")
    fd = os.open(f, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with t.case("set_cur_end"):
            os.write(fd, b"0123456789")
            eq(os.lseek(fd, 3, os.SEEK_SET), 3, "SEEK_SET")
            eq(os.lseek(fd, 2, os.SEEK_CUR), 5, "SEEK_CUR")
            eq(os.read(fd, 2), b"56", "read after seeks")
            eq(os.lseek(fd, -1, os.SEEK_END), 9, "SEEK_END -1")
            eq(os.lseek(fd, 5, os.SEEK_END), 15, "SEEK_END +5 (past EOF)")
            eq(os.fstat(fd).st_size, 10, "seeking past EOF must not change the size")
        with t.case("write_past_eof_hole"):
            os.write(fd, b"X")
            eq(os.fstat(fd).st_size, 16, "size after a write past EOF")
            eq(os.pread(fd, 16, 0), b"0123456789" + bytes(5) + b"X", "gap reads as zeros")
        with t.case("einval_negative"):
            expect_errno(errno.EINVAL, os.lseek, fd, -1, os.SEEK_SET)
            expect_errno(errno.EINVAL, os.lseek, fd, -100, os.SEEK_END)
            expect_errno(errno.EINVAL, os.lseek, fd, 0, 99)
        # Layout: data [0, 4 KiB), hole, data [4 MiB, 4 MiB + 4 KiB), hole, last byte data.
        size = 8 * MiB
        os.ftruncate(fd, 0)
        os.pwrite(fd, b"\x11" * 4096, 0)
        os.pwrite(fd, b"\x22" * 4096, 4 * MiB)
        os.pwrite(fd, b"\x33", size - 1)
        with t.case("seek_data_at_data"):
            eq(os.lseek(fd, 0, SEEK_DATA), 0, "SEEK_DATA at offset 0 (written data)")
            eq(os.lseek(fd, 4 * MiB + 10, SEEK_DATA), 4 * MiB + 10, "SEEK_DATA inside written data")
            eq(os.lseek(fd, size - 1, SEEK_DATA), size - 1, "SEEK_DATA at the last (written) byte")
        with t.case("seek_data_in_range"):
            for off in (4096, 100_000, 2 * MiB, 5 * MiB, size - 2):
                r = os.lseek(fd, off, SEEK_DATA)
                ok(off <= r < size, f"SEEK_DATA({off}) = {r}, expected in [{off}, {size})")
                ok(pread_all(fd, r - off, off) == bytes(r - off) if r - off <= 8 * MiB else True,
                   f"SEEK_DATA({off}) = {r} skipped bytes that are not zero")
        with t.case("seek_hole_in_range"):
            for off in (0, 4096, 100_000, 4 * MiB, 5 * MiB, size - 1):
                r = os.lseek(fd, off, SEEK_HOLE)
                ok(off <= r <= size, f"SEEK_HOLE({off}) = {r}, expected in [{off}, {size}]")
                if r < size:
                    eq(os.pread(fd, 1, r), b"\x00", f"byte at SEEK_HOLE({off}) = {r} (must be a hole)")
        with t.case("seek_data_hole_enxio_at_eof"):
            expect_errno(errno.ENXIO, os.lseek, fd, size, SEEK_DATA)
            expect_errno(errno.ENXIO, os.lseek, fd, size + 4096, SEEK_DATA)
            expect_errno(errno.ENXIO, os.lseek, fd, size, SEEK_HOLE)
            expect_errno(errno.ENXIO, os.lseek, fd, size + 1, SEEK_HOLE)
        with t.case("seek_hole_empty_file"):
            os.ftruncate(fd, 0)
            expect_errno(errno.ENXIO, os.lseek, fd, 0, SEEK_DATA)
            expect_errno(errno.ENXIO, os.lseek, fd, 0, SEEK_HOLE)
    finally:
        os.close(fd)
    with t.case("directory_offset"):
        d = os.open(t.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            eq(os.lseek(d, 0, os.SEEK_SET), 0, "lseek(dirfd, 0, SEEK_SET)")
        finally:
            os.close(d)


# ----------------------------------------------------------------------------------------------
# locks: fcntl (POSIX record locks) and flock, between two processes
# ----------------------------------------------------------------------------------------------

FLOCK_FMT = "hhqqi4x"     # struct flock on x86-64: type, whence, start, len, pid


def getlk(fd, typ, start, length):
    s = struct.pack(FLOCK_FMT, typ, os.SEEK_SET, start, length, 0)
    r = fcntl.fcntl(fd, fcntl.F_GETLK, s)
    typ, _, st, ln, pid = struct.unpack(FLOCK_FMT, r)
    return typ, st, ln, pid


def setlk(fd, typ, start, length, wait=False):
    s = struct.pack(FLOCK_FMT, typ, os.SEEK_SET, start, length, 0)
    fcntl.fcntl(fd, fcntl.F_SETLKW if wait else fcntl.F_SETLK, s)


def in_child(fn):
    """Forks a child that runs fn(to_parent_fd, from_parent_fd); returns (pid, r, w)."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r1)
            os.close(w2)
            fn(w1, r2)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = 1
        os._exit(code)
    os.close(w1)
    os.close(r2)
    return pid, r1, w2


def reap(pid, r, w):
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass
    _, status = os.waitpid(pid, 0)
    return status


@group("locks")
def g_locks(t):
    f = t.p("f")
    write_file(f, b"x" * 100, 0o666)

    with t.case("fcntl_conflict_between_processes"):
        def holder(to_p, from_p):
            fd = os.open(f, os.O_RDWR)
            setlk(fd, fcntl.F_WRLCK, 0, 10)
            os.write(to_p, b"L")
            os.read(from_p, 1)          # hold until the parent says done
            os.close(fd)
            os.write(to_p, b"U")
        pid, r, w = in_child(holder)
        try:
            eq(os.read(r, 1), b"L", "child signalled it holds the lock")
            fd = os.open(f, os.O_RDWR)
            try:
                expect_errno((errno.EAGAIN, errno.EACCES), setlk, fd, fcntl.F_WRLCK, 5, 10)
                expect_errno((errno.EAGAIN, errno.EACCES), setlk, fd, fcntl.F_RDLCK, 0, 1)
                typ, st, ln, lpid = getlk(fd, fcntl.F_WRLCK, 0, 100)
                eq((typ, st, ln, lpid), (fcntl.F_WRLCK, 0, 10, pid), "F_GETLK of the conflicting lock")
                setlk(fd, fcntl.F_WRLCK, 10, 10)       # adjacent range: no conflict
                os.write(w, b"D")
                eq(os.read(r, 1), b"U", "child released")
                setlk(fd, fcntl.F_WRLCK, 0, 10)        # now free
                typ, *_ = getlk(fd, fcntl.F_WRLCK, 0, 100)
                eq(typ, fcntl.F_UNLCK, "F_GETLK by the owner sees no conflict")
            finally:
                os.close(fd)
        finally:
            eq(reap(pid, r, w), 0, "lock holder child exit status")

    with t.case("fcntl_shared_read_locks"):
        def reader(to_p, from_p):
            fd = os.open(f, os.O_RDONLY)
            setlk(fd, fcntl.F_RDLCK, 0, 0)
            os.write(to_p, b"L")
            os.read(from_p, 1)
            os.close(fd)
        pid, r, w = in_child(reader)
        try:
            eq(os.read(r, 1), b"L", "child holds a read lock")
            fd = os.open(f, os.O_RDWR)
            try:
                setlk(fd, fcntl.F_RDLCK, 0, 0)          # shared: must succeed
                expect_errno((errno.EAGAIN, errno.EACCES), setlk, fd, fcntl.F_WRLCK, 0, 0)
            finally:
                os.close(fd)
            os.write(w, b"D")
        finally:
            eq(reap(pid, r, w), 0, "reader child exit status")

    with t.case("fcntl_blocking_wait"):
        def holder2(to_p, from_p):
            fd = os.open(f, os.O_RDWR)
            setlk(fd, fcntl.F_WRLCK, 0, 0)
            os.write(to_p, b"L")
            os.read(from_p, 1)
            setlk(fd, fcntl.F_UNLCK, 0, 0)
            os.read(from_p, 1)
            os.close(fd)
        pid, r, w = in_child(holder2)
        try:
            eq(os.read(r, 1), b"L", "child holds the lock")
            fd = os.open(f, os.O_RDWR)
            try:
                os.write(w, b"R")                    # ask the child to release
                setlk(fd, fcntl.F_WRLCK, 0, 0, wait=True)   # F_SETLKW returns once released
                os.write(w, b"E")
            finally:
                os.close(fd)
        finally:
            eq(reap(pid, r, w), 0, "child exit status")

    with t.case("flock_between_processes"):
        def fholder(to_p, from_p):
            fd = os.open(f, os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(to_p, b"L")
            os.read(from_p, 1)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.write(to_p, b"U")
            os.read(from_p, 1)
            os.close(fd)
        pid, r, w = in_child(fholder)
        try:
            eq(os.read(r, 1), b"L", "child holds flock")
            fd = os.open(f, os.O_RDONLY)
            try:
                expect_errno(errno.EWOULDBLOCK, fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                expect_errno(errno.EWOULDBLOCK, fcntl.flock, fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                os.write(w, b"D")
                eq(os.read(r, 1), b"U", "child unlocked")
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
            os.write(w, b"E")
        finally:
            eq(reap(pid, r, w), 0, "flock child exit status")

    with t.case("flock_shared"):
        a = os.open(f, os.O_RDONLY)
        b = os.open(f, os.O_RDONLY)
        try:
            fcntl.flock(a, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(b, fcntl.LOCK_SH | fcntl.LOCK_NB)
            expect_errno(errno.EWOULDBLOCK, fcntl.flock, b, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(a)
            os.close(b)

    with t.case("flock_separate_open_descriptions"):
        a = os.open(f, os.O_RDONLY)
        b = os.open(f, os.O_RDONLY)
        try:
            fcntl.flock(a, fcntl.LOCK_EX | fcntl.LOCK_NB)
            expect_errno(errno.EWOULDBLOCK, fcntl.flock, b, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.close(a)
            a = -1
            fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)    # released by close
        finally:
            if a >= 0:
                os.close(a)
            os.close(b)

    with t.case("fcntl_released_on_any_close"):
        a = os.open(f, os.O_RDWR)
        setlk(a, fcntl.F_WRLCK, 0, 0)
        b = os.open(f, os.O_RDONLY)
        os.close(b)          # POSIX: closing any fd of the file drops the process's locks
        def probe(to_p, from_p):
            fd = os.open(f, os.O_RDWR)
            try:
                setlk(fd, fcntl.F_WRLCK, 0, 0)
                os.write(to_p, b"Y")
            except OSError:
                os.write(to_p, b"N")
            os.close(fd)
        pid, r, w = in_child(probe)
        try:
            eq(os.read(r, 1), b"Y", "lock still held after closing another fd of the file")
        finally:
            reap(pid, r, w)
            os.close(a)


# ----------------------------------------------------------------------------------------------
# mmap
# ----------------------------------------------------------------------------------------------

@group("mmap")
def g_mmap(t):
    f = t.p("f")
    size = 2 * MiB + 4096
    write_file(f, bytes(size))
    with t.case("shared_write_msync_read"):
        fd = os.open(f, os.O_RDWR)
        try:
            m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            pat = os.urandom(8192)
            m[0:8192] = pat
            m[MiB - 4096:MiB + 4096] = pat           # across the 1 MiB chunk boundary
            m[size - 10:size] = b"0123456789"
            m.flush()                                 # msync(MS_SYNC)
            m.close()
            eq(os.pread(fd, 8192, 0), pat, "read() after msync, first page")
            eq(pread_all(fd, 8192, MiB - 4096), pat, "read() after msync, across 1 MiB")
            eq(os.pread(fd, 10, size - 10), b"0123456789", "read() after msync, last bytes")
            eq(os.fstat(fd).st_size, size, "size after writing through mmap")
        finally:
            os.close(fd)
        data = read_file(f)
        eq(data[:8192], pat, "content via a new open after munmap")
    with t.case("shared_write_visible_without_msync"):
        fd = os.open(f, os.O_RDWR)
        try:
            m = mmap.mmap(fd, size)
            m[100:105] = b"HELLO"
            eq(os.pread(fd, 5, 100), b"HELLO", "read() of a page dirtied through a shared mapping")
            m.close()
        finally:
            os.close(fd)
    with t.case("write_visible_in_mapping"):
        fd = os.open(f, os.O_RDWR)
        try:
            m = mmap.mmap(fd, size)
            os.pwrite(fd, b"viawrite", 5000)
            eq(m[5000:5008], b"viawrite", "mapping sees a write() made after mapping")
            m.close()
        finally:
            os.close(fd)
    with t.case("private_not_written_back"):
        before = read_file(f)[:16]
        fd = os.open(f, os.O_RDWR)
        try:
            m = mmap.mmap(fd, size, mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE)
            m[0:16] = b"P" * 16
            eq(m[0:16], b"P" * 16, "private mapping sees its own write")
            m.close()
        finally:
            os.close(fd)
        eq(read_file(f)[:16], before, "file after writing to a MAP_PRIVATE mapping")
    with t.case("extend_then_map"):
        g = t.p("g")
        fd = os.open(g, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, 3 * MiB)
            m = mmap.mmap(fd, 3 * MiB)
            m[3 * MiB - 1:3 * MiB] = b"E"
            m[0:1] = b"S"
            m.flush()
            m.close()
            eq(os.pread(fd, 1, 3 * MiB - 1), b"E", "last byte written through a mapping")
            eq(os.pread(fd, 1, 0), b"S", "first byte written through a mapping")
            ok(pread_all(fd, MiB, MiB) == bytes(MiB), "untouched middle is not zeros")
        finally:
            os.close(fd)
    with t.case("msync_updates_mtime"):
        fd = os.open(f, os.O_RDWR)
        try:
            set_old_times(f)
            m = mmap.mmap(fd, size)
            m[0:1] = b"M"
            m.flush()
            m.close()
        finally:
            os.close(fd)
        ok(os.stat(f).st_mtime_ns > OLD_NS, "mtime not updated by a write through a shared "
           "mapping followed by msync")
    with t.case("eacces_shared_write_on_readonly_fd"):
        fd = os.open(f, os.O_RDONLY)
        try:
            expect_errno(errno.EACCES, mmap.mmap, fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
