"""Conformance groups: chmod, chown, link, mkdir, mkfifo, open.
"""

import errno
import os
import socket
import stat

from posix_lib import *  # noqa: F401,F403


@group("chmod")
def g_chmod(t):
    f = t.p("f")
    write_file(f, b"x")
    with t.case("mode_bits"):
        eq(os.chmod(f, 0o640), None, "chmod return value")
        eq(stat.S_IMODE(os.stat(f).st_mode), 0o640, "mode after chmod 0640")
        os.chmod(f, 0o4755)
        eq(stat.S_IMODE(os.stat(f).st_mode), 0o4755, "mode after chmod 04755")
        os.chmod(f, 0o1777 if t.root else 0o777)
        eq(stat.S_IMODE(os.stat(f).st_mode), 0o1777 if t.root else 0o777, "mode after chmod")
        ok(stat.S_ISREG(os.stat(f).st_mode), "file type changed by chmod")
    with t.case("fchmod"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fchmod(fd, 0o600)
            eq(stat.S_IMODE(os.fstat(fd).st_mode), 0o600, "fstat mode after fchmod 0600")
        finally:
            os.close(fd)
        eq(stat.S_IMODE(os.stat(f).st_mode), 0o600, "stat mode after fchmod 0600")
    with t.case("dir_mode"):
        d = t.p("d")
        os.mkdir(d, 0o755)
        os.chmod(d, 0o711)
        st = os.stat(d)
        ok(stat.S_ISDIR(st.st_mode), "not a directory after chmod")
        eq(stat.S_IMODE(st.st_mode), 0o711, "dir mode after chmod 0711")
    with t.case("ctime_updated_mtime_not"):
        set_old_times(f)
        b = os.stat(f)
        wait_past(ns(b, "st_ctime"))
        os.chmod(f, 0o644)
        a = os.stat(f)
        check_updated(b, a, ["st_ctime"], "chmod")
        check_unchanged(b, a, ["st_mtime"], "chmod")
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.chmod, t.p("missing"), 0o644)
    with t.case("enotdir"):
        expect_errno(errno.ENOTDIR, os.chmod, t.p("f", "x"), 0o644)
    with t.case("eperm_not_owner", only="user"):
        if runs(t, "user"):
            fx = t.fixtures
            expect_errno(errno.EPERM, os.chmod, os.path.join(fx, "public"), 0o666)
            eq(stat.S_IMODE(os.stat(os.path.join(fx, "public")).st_mode), 0o644,
               "mode of root's file after the refused chmod")
    with t.case("symlink_follows"):
        tgt = t.p("tgt")
        write_file(tgt, b"", 0o600)
        os.symlink("tgt", t.p("ln"))
        os.chmod(t.p("ln"), 0o640)
        eq(stat.S_IMODE(os.stat(tgt).st_mode), 0o640, "target mode after chmod via symlink")
        ok(stat.S_ISLNK(os.lstat(t.p("ln")).st_mode), "the symlink is no longer a symlink")
    with t.case("times_kept_when_uncached", only="root"):
        # The times stat shows stay the same after the kernel drops the inode from its caches
        # (root only: drop_caches), whatever changed them last.
        if runs(t, "root"):
            def append(p):
                with open(p, "ab") as fh:
                    fh.write(b"more")
            changes = {"write": append, "chmod": lambda p: os.chmod(p, 0o640),
                       "truncate": lambda p: os.truncate(p, 3),
                       "utime": lambda p: os.utime(p, ns=(OLD_NS, OLD_NS)),
                       "link": lambda p: os.link(p, p + ".link"),
                       "rename": lambda p: os.rename(p + ".old", p),
                       "setxattr": lambda p: os.setxattr(p, "user.t", b"1")}
            for what, change in changes.items():
                p = t.p("uncached-" + what)
                write_file(p + ".old" if what == "rename" else p, b"0123456789")
                change(p)
                b = os.stat(p)
                os.sync()  # the kernel writes dirty times back: only a clean inode is dropped
                with open("/proc/sys/vm/drop_caches", "w") as fh:
                    fh.write("2")
                a = os.stat(p)
                for field in ("st_mtime", "st_ctime"):
                    eq(ns(a, field), ns(b, field), f"{field} after {what}, once the inode was dropped")


# ----------------------------------------------------------------------------------------------
# chown
# ----------------------------------------------------------------------------------------------

@group("chown")
def g_chown(t):
    f = t.p("f")
    write_file(f, b"data")
    me_u, me_g = os.geteuid(), os.getegid()
    with t.case("owner_is_creator"):
        st = os.stat(f)
        eq((st.st_uid, st.st_gid), (me_u, me_g), "uid/gid of a new file")
    with t.case("chown_other_ids", only="root"):
        if runs(t, "root"):
            b = os.stat(f)
            wait_past(ns(b, "st_ctime"))
            eq(os.chown(f, 1234, 5678), None, "chown return value")
            a = os.stat(f)
            eq((a.st_uid, a.st_gid), (1234, 5678), "uid/gid after chown 1234:5678")
            check_updated(b, a, ["st_ctime"], "chown")
            check_unchanged(b, a, ["st_mtime"], "chown")
    with t.case("minus_one_keeps", only="root"):
        if runs(t, "root"):
            os.chown(f, 1234, 5678)
            os.chown(f, -1, 42)
            st = os.stat(f)
            eq((st.st_uid, st.st_gid), (1234, 42), "after chown(-1, 42)")
            os.chown(f, 77, -1)
            st = os.stat(f)
            eq((st.st_uid, st.st_gid), (77, 42), "after chown(77, -1)")
    with t.case("lchown_symlink", only="root"):
        if runs(t, "root"):
            tgt = t.p("tgt")
            write_file(tgt, b"")
            os.symlink("tgt", t.p("ln"))
            os.lchown(t.p("ln"), 555, 556)
            eq((os.lstat(t.p("ln")).st_uid, os.lstat(t.p("ln")).st_gid), (555, 556), "symlink ids")
            eq((os.stat(tgt).st_uid, os.stat(tgt).st_gid), (me_u, me_g), "target ids after lchown")
            os.chown(t.p("ln"), 600, 601)
            eq((os.stat(tgt).st_uid, os.stat(tgt).st_gid), (600, 601), "target ids after chown via link")
    with t.case("fchown", only="root"):
        if runs(t, "root"):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fchown(fd, 4321, 8765)
                eq((os.fstat(fd).st_uid, os.fstat(fd).st_gid), (4321, 8765), "fstat after fchown")
            finally:
                os.close(fd)
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.chown, t.p("missing"), -1, -1)
    with t.case("eperm_give_away", only="user"):
        if runs(t, "user"):
            g = t.p("mine")
            write_file(g, b"")
            expect_errno(errno.EPERM, os.chown, g, 0, -1)
            eq(os.stat(g).st_uid, me_u, "uid after the refused chown")
    with t.case("eperm_not_owner", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EPERM, os.chown, os.path.join(t.fixtures, "public"), me_u, me_g)
    with t.case("own_group_allowed", only="user"):
        if runs(t, "user"):
            g = t.p("mine2")
            write_file(g, b"")
            os.chown(g, -1, me_g)
            os.chown(g, me_u, -1)
            eq((os.stat(g).st_uid, os.stat(g).st_gid), (me_u, me_g), "ids after chown to self")
    with t.case("clears_suid", only="user"):
        if runs(t, "user"):
            g = t.p("suid")
            write_file(g, b"#!/bin/sh\n", 0o755)
            os.chmod(g, 0o4755)
            eq(stat.S_IMODE(os.stat(g).st_mode), 0o4755, "mode after chmod 04755")
            os.chown(g, -1, me_g)
            eq(stat.S_IMODE(os.stat(g).st_mode), 0o755,
               "mode after an unprivileged chown (POSIX: S_ISUID shall be cleared)")


# ----------------------------------------------------------------------------------------------
# link
# ----------------------------------------------------------------------------------------------

@group("link")
def g_link(t):
    a, b = t.p("a"), t.p("b")
    write_file(a, b"hello")
    with t.case("creates_same_inode"):
        eq(os.link(a, b), None, "link return value")
        sa, sb = os.stat(a), os.stat(b)
        eq(sb.st_ino, sa.st_ino, "inode of the new link")
        eq(read_file(b), b"hello", "content through the new link")
    with t.case("nlink_counts"):
        eq(os.stat(a).st_nlink, 2, "st_nlink after one link")
        os.link(a, t.p("c"))
        eq(os.stat(b).st_nlink, 3, "st_nlink after two links")
        os.unlink(t.p("c"))
        eq(os.stat(a).st_nlink, 2, "st_nlink after unlinking one")
        os.unlink(b)
        eq(os.stat(a).st_nlink, 1, "st_nlink after unlinking both extra links")
        fd = os.open(a, os.O_RDONLY)
        try:
            os.link(a, b)
            eq(os.fstat(fd).st_nlink, 2, "fstat st_nlink of an open file after link")
        finally:
            os.close(fd)
    with t.case("write_visible_through_other"):
        with open(b, "r+b") as fh:
            fh.write(b"HE")
        eq(read_file(a), b"HEllo", "content via the first name after writing via the second")
    with t.case("ctime_updated"):
        set_old_times(a)
        bst = os.stat(a)
        wait_past(ns(bst, "st_ctime"))
        os.link(a, t.p("d"))
        ast = os.stat(a)
        check_updated(bst, ast, ["st_ctime"], "link (file's ctime)")
        check_unchanged(bst, ast, ["st_mtime"], "link (file's mtime)")
    with t.case("parent_mtime_updated"):
        set_old_times(t.dir)
        bst = os.stat(t.dir)
        os.link(a, t.p("e"))
        check_updated(bst, os.stat(t.dir), ["st_mtime", "st_ctime"], "link (parent dir)")
    with t.case("eexist"):
        expect_errno(errno.EEXIST, os.link, a, b)
        write_file(t.p("other"), b"o")
        expect_errno(errno.EEXIST, os.link, a, t.p("other"))
        eq(read_file(t.p("other")), b"o", "existing target's content after refused link")
    with t.case("directory_eperm"):
        os.mkdir(t.p("dir"))
        expect_errno(errno.EPERM, os.link, t.p("dir"), t.p("dirlink"))
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.link, t.p("missing"), t.p("x"))
        expect_errno(errno.ENOENT, os.link, a, t.p("nodir", "x"))
    with t.case("enametoolong"):
        expect_errno(errno.ENAMETOOLONG, os.link, a, t.p("n" * 256))
        os.link(a, t.p("n" * 255))
        eq(os.stat(t.p("n" * 255)).st_ino, os.stat(a).st_ino, "inode of a 255-byte link name")
    with t.case("exdev"):
        if t.other_dir is None:
            raise Fail("no writable directory on another filesystem found for the EXDEV check")
        expect_errno(errno.EXDEV, os.link, a, os.path.join(t.other_dir, f"clio-posix-{os.getpid()}"))
    with t.case("symlink_not_followed"):
        os.symlink("a", t.p("sl"))
        os.link(t.p("sl"), t.p("sl2"), follow_symlinks=False)
        ok(stat.S_ISLNK(os.lstat(t.p("sl2")).st_mode), "link of a symlink (linkat without "
           "AT_SYMLINK_FOLLOW) must link the symlink itself")
        eq(os.lstat(t.p("sl2")).st_ino, os.lstat(t.p("sl")).st_ino, "inode of the linked symlink")
    with t.case("eacces_dir_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.link, a, os.path.join(t.fixtures, "rootdir", "mylink"))


# ----------------------------------------------------------------------------------------------
# mkdir
# ----------------------------------------------------------------------------------------------

@group("mkdir")
def g_mkdir(t):
    d = t.p("d")
    with t.case("creates_with_mode"):
        eq(os.mkdir(d, 0o750), None, "mkdir return value")
        st = os.stat(d)
        ok(stat.S_ISDIR(st.st_mode), f"not a directory: mode {oct(st.st_mode)}")
        eq(stat.S_IMODE(st.st_mode), 0o750, "mode of a new directory (umask 0)")
        eq((st.st_uid, st.st_gid), (os.geteuid(), os.getegid()), "uid/gid of a new directory")
    with t.case("nlink"):
        eq(os.stat(d).st_nlink, 2, "st_nlink of a new empty directory")
        n0 = os.stat(t.dir).st_nlink
        os.mkdir(t.p("d2"))
        eq(os.stat(t.dir).st_nlink, n0 + 1, "parent st_nlink after mkdir of a subdirectory")
        os.rmdir(t.p("d2"))
        eq(os.stat(t.dir).st_nlink, n0, "parent st_nlink after rmdir of a subdirectory")
    with t.case("dot_and_dotdot"):
        eq(os.stat(os.path.join(d, ".")).st_ino, os.stat(d).st_ino, "inode of d/.")
        eq(os.stat(os.path.join(d, "..")).st_ino, os.stat(t.dir).st_ino, "inode of d/..")
        eq(os.listdir(d), [], "listing of a new directory")
    with t.case("parent_times_updated"):
        set_old_times(t.dir)
        b = os.stat(t.dir)
        os.mkdir(t.p("d3"))
        check_updated(b, os.stat(t.dir), ["st_mtime", "st_ctime"], "mkdir (parent)")
    with t.case("eexist"):
        expect_errno(errno.EEXIST, os.mkdir, d)
        write_file(t.p("f"), b"")
        expect_errno(errno.EEXIST, os.mkdir, t.p("f"))
        os.symlink("nowhere", t.p("dangling"))
        expect_errno(errno.EEXIST, os.mkdir, t.p("dangling"))
    with t.case("enotdir"):
        expect_errno(errno.ENOTDIR, os.mkdir, t.p("f", "sub"))
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.mkdir, t.p("missing", "sub"))
    with t.case("enametoolong"):
        expect_errno(errno.ENAMETOOLONG, os.mkdir, t.p("m" * 256))
        os.mkdir(t.p("m" * 255))
        ok(os.path.isdir(t.p("m" * 255)), "a 255-byte directory name is not a directory")
        ok(("m" * 255) in os.listdir(t.dir), "the 255-byte name is not listed")
    with t.case("setgid_inherit", only="root"):
        if runs(t, "root"):
            sg = t.p("sg")
            os.mkdir(sg, 0o775)
            os.chown(sg, -1, 4242)
            os.chmod(sg, 0o2775)
            os.mkdir(os.path.join(sg, "sub"), 0o755)
            st = os.stat(os.path.join(sg, "sub"))
            eq(st.st_gid, 4242, "gid of a directory made in a setgid directory")
            ok(st.st_mode & stat.S_ISGID, "a directory made in a setgid directory lacks S_ISGID")
            write_file(os.path.join(sg, "file"), b"")
            eq(os.stat(os.path.join(sg, "file")).st_gid, 4242, "gid of a file made in a setgid dir")
    with t.case("eacces_parent_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.mkdir, os.path.join(t.fixtures, "rootdir", "mine"))


# ----------------------------------------------------------------------------------------------
# mkfifo / mknod
# ----------------------------------------------------------------------------------------------

@group("mkfifo")
def g_mkfifo(t):
    ff = t.p("fifo")
    with t.case("creates_fifo"):
        eq(os.mkfifo(ff, 0o640), None, "mkfifo return value")
        st = os.lstat(ff)
        ok(stat.S_ISFIFO(st.st_mode), f"not a FIFO: mode {oct(st.st_mode)}")
        eq(stat.S_IMODE(st.st_mode), 0o640, "FIFO mode")
        eq(st.st_size, 0, "FIFO size")
    with t.case("eexist"):
        expect_errno(errno.EEXIST, os.mkfifo, ff)
    with t.case("data_flows"):
        r = os.open(ff, os.O_RDONLY | os.O_NONBLOCK)
        try:
            w = os.open(ff, os.O_WRONLY | os.O_NONBLOCK)
            try:
                eq(os.write(w, b"through the fifo"), 16, "write to FIFO")
                eq(os.read(r, 100), b"through the fifo", "read from FIFO")
            finally:
                os.close(w)
        finally:
            os.close(r)
    with t.case("enxio_writer_without_reader"):
        expect_errno(errno.ENXIO, os.open, ff, os.O_WRONLY | os.O_NONBLOCK)
    with t.case("espipe"):
        r = os.open(ff, os.O_RDONLY | os.O_NONBLOCK)
        try:
            expect_errno(errno.ESPIPE, os.lseek, r, 0, os.SEEK_SET)
        finally:
            os.close(r)
    with t.case("mknod_fifo"):
        os.mknod(t.p("fifo2"), 0o600 | stat.S_IFIFO)
        ok(stat.S_ISFIFO(os.lstat(t.p("fifo2")).st_mode), "mknod S_IFIFO did not make a FIFO")
    with t.case("mknod_chardev", only="root"):
        if runs(t, "root"):
            os.mknod(t.p("null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            st = os.lstat(t.p("null"))
            ok(stat.S_ISCHR(st.st_mode), f"not a char device: {oct(st.st_mode)}")
            eq(st.st_rdev, os.makedev(1, 3), "st_rdev of the device node")
    with t.case("mknod_chardev_eperm", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EPERM, os.mknod, t.p("null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    with t.case("unix_socket"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            path = t.p("sock")
            s.bind(path)
            ok(stat.S_ISSOCK(os.lstat(path).st_mode), "bind() did not create a socket node")
            s.listen(1)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            conn, _ = s.accept()
            c.sendall(b"ping")
            eq(conn.recv(4), b"ping", "data through a socket bound on the filesystem")
            conn.close()
            c.close()
        finally:
            s.close()
    with t.case("eacces_parent_not_writable", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.mkfifo, os.path.join(t.fixtures, "rootdir", "fifo"))


# ----------------------------------------------------------------------------------------------
# open (and read/write)
# ----------------------------------------------------------------------------------------------

@group("open")
def g_open(t):
    f = t.p("f")
    with t.case("creat_mode_owner"):
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
        ok(fd >= 0, f"open returned {fd}")
        os.close(fd)
        st = os.stat(f)
        ok(stat.S_ISREG(st.st_mode), "not a regular file")
        eq(stat.S_IMODE(st.st_mode), 0o640, "mode of a file created with 0640 (umask 0)")
        eq(st.st_size, 0, "size of a new file")
        eq((st.st_uid, st.st_gid), (os.geteuid(), os.getegid()), "uid/gid of a new file")
    with t.case("creat_updates_parent_times"):
        # Twice in a row: the second create must see the times the first one left.
        for i in range(2):
            set_old_times(t.dir)
            b = os.stat(t.dir)
            os.close(os.open(t.p(f"pc{i}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            a = os.stat(t.dir)
            check_updated(b, a, ["st_mtime", "st_ctime"], "create (parent)")
            ok(f"pc{i}" in os.listdir(t.dir), "created name listed")
            eq(os.stat(t.dir).st_mtime_ns, a.st_mtime_ns, "parent mtime stable after create")
    with t.case("creat_mode_readonly_fd_writable"):
        # O_CREAT with mode 0444 still gives a writable fd for this open
        fd = os.open(t.p("ro"), os.O_RDWR | os.O_CREAT, 0o444)
        try:
            eq(os.write(fd, b"abc"), 3, "write through the creating fd of a 0444 file")
        finally:
            os.close(fd)
        eq(read_file(t.p("ro")), b"abc", "content of a 0444 file written through its creating fd")
    with t.case("excl_eexist"):
        expect_errno(errno.EEXIST, os.open, f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.symlink("nowhere", t.p("dangling"))
        expect_errno(errno.EEXIST, os.open, t.p("dangling"), os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        ok(not exists(t.p("nowhere")), "O_EXCL followed a dangling symlink and created its target")
    with t.case("creat_existing_keeps_data"):
        write_file(f, b"keep me")
        mode = stat.S_IMODE(os.stat(f).st_mode)
        fd = os.open(f, os.O_WRONLY | os.O_CREAT, 0o600 if mode != 0o600 else 0o644)
        os.close(fd)
        eq(read_file(f), b"keep me", "content after O_CREAT without O_TRUNC")
        eq(stat.S_IMODE(os.stat(f).st_mode), mode, "mode after O_CREAT of an existing file")
    with t.case("trunc"):
        write_file(f, b"0123456789" * 1000)
        set_old_times(f)
        b = os.stat(f)
        fd = os.open(f, os.O_WRONLY | os.O_TRUNC)
        try:
            eq(os.fstat(fd).st_size, 0, "size right after O_TRUNC")
            os.write(fd, b"new")
        finally:
            os.close(fd)
        a = os.stat(f)
        eq(a.st_size, 3, "size after O_TRUNC + write")
        eq(read_file(f), b"new", "content after O_TRUNC + write")
        check_updated(b, a, ["st_mtime", "st_ctime"], "O_TRUNC")
    with t.case("trunc_then_read_no_stale"):
        write_file(f, b"A" * (2 * MiB + 7))
        fd = os.open(f, os.O_RDWR | os.O_TRUNC)
        try:
            os.ftruncate(fd, 2 * MiB + 7)
            data = pread_all(fd, 2 * MiB + 7, 0)
        finally:
            os.close(fd)
        ok(data == bytes(2 * MiB + 7), "after O_TRUNC and re-extend, old bytes came back "
           f"(first nonzero at {next((i for i, c in enumerate(data) if c), None)})")
    with t.case("append"):
        write_file(f, b"start")
        fd = os.open(f, os.O_WRONLY | os.O_APPEND)
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            eq(os.write(fd, b"+one"), 4, "append write")
            eq(os.lseek(fd, 0, os.SEEK_CUR), 9, "offset after an O_APPEND write")
            os.lseek(fd, 2, os.SEEK_SET)
            os.write(fd, b"+two")
        finally:
            os.close(fd)
        eq(read_file(f), b"start+one+two", "content after O_APPEND writes after lseek(0)")
    with t.case("append_two_fds"):
        write_file(f, b"")
        fa = os.open(f, os.O_WRONLY | os.O_APPEND)
        fb = os.open(f, os.O_WRONLY | os.O_APPEND)
        try:
            for i in range(50):
                os.write(fa, b"a%02d\n" % i)
                os.write(fb, b"b%02d\n" % i)
        finally:
            os.close(fa)
            os.close(fb)
        data = read_file(f)
        eq(len(data), 400, "size after 100 appends of 4 bytes via two fds")
        want = b"".join(b"a%02d\nb%02d\n" % (i, i) for i in range(50))
        eq(data, want, "content after interleaved O_APPEND writes via two fds")
    with t.case("append_other_writer_extends"):
        write_file(f, b"12345")
        fa = os.open(f, os.O_WRONLY | os.O_APPEND)
        fw = os.open(f, os.O_WRONLY)
        try:
            os.pwrite(fw, b"67890", 5)   # file grows to 10 via another fd
            os.write(fa, b"X")
        finally:
            os.close(fa)
            os.close(fw)
        eq(read_file(f), b"1234567890X", "O_APPEND must write at the current end of file")
    with t.case("eisdir"):
        os.mkdir(t.p("d"))
        expect_errno(errno.EISDIR, os.open, t.p("d"), os.O_WRONLY)
        expect_errno(errno.EISDIR, os.open, t.p("d"), os.O_RDWR)
        fd = os.open(t.p("d"), os.O_RDONLY)
        try:
            expect_errno(errno.EISDIR, os.read, fd, 10)
        finally:
            os.close(fd)
    with t.case("enotdir"):
        expect_errno(errno.ENOTDIR, os.open, f + "/", os.O_RDONLY)
        expect_errno(errno.ENOTDIR, os.open, t.p("f", "x"), os.O_RDONLY)
        expect_errno(errno.ENOTDIR, os.open, t.p("f", "x"), os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(errno.ENOTDIR, os.open, f, os.O_RDONLY | os.O_DIRECTORY)
    with t.case("enoent"):
        expect_errno(errno.ENOENT, os.open, t.p("missing"), os.O_RDONLY)
        expect_errno(errno.ENOENT, os.open, t.p("nodir", "f"), os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(errno.ENOENT, os.open, t.p("dangling"), os.O_RDONLY)
    with t.case("enametoolong"):
        expect_errno(errno.ENAMETOOLONG, os.open, t.p("x" * 256), os.O_WRONLY | os.O_CREAT, 0o644)
        expect_errno(errno.ENAMETOOLONG, os.open, t.p("x" * 256), os.O_RDONLY)
        write_file(t.p("x" * 255), b"255")
        eq(read_file(t.p("x" * 255)), b"255", "content of a file with a 255-byte name")
        ok(("x" * 255) in os.listdir(t.dir), "the 255-byte name is not listed")
    with t.case("nofollow_eloop"):
        os.symlink("f", t.p("lnk"))
        expect_errno(errno.ELOOP, os.open, t.p("lnk"), os.O_RDONLY | os.O_NOFOLLOW)
    with t.case("ebadf_wrong_mode"):
        fd = os.open(f, os.O_RDONLY)
        try:
            expect_errno(errno.EBADF, os.write, fd, b"x")
        finally:
            os.close(fd)
        fd = os.open(f, os.O_WRONLY)
        try:
            expect_errno(errno.EBADF, os.read, fd, 1)
        finally:
            os.close(fd)
    with t.case("read_write_offsets"):
        write_file(f, b"")
        fd = os.open(f, os.O_RDWR)
        try:
            eq(os.pwrite(fd, b"world", 6), 5, "pwrite return")
            eq(os.pwrite(fd, b"hello ", 0), 6, "pwrite return")
            eq(os.pread(fd, 100, 0), b"hello world", "pread")
            eq(os.pread(fd, 100, 11), b"", "pread at EOF")
            eq(os.pread(fd, 100, 1000), b"", "pread past EOF")
            eq(os.lseek(fd, 0, os.SEEK_CUR), 0, "pwrite/pread must not move the offset")
            os.pwrite(fd, b"Z", 20)
            eq(os.pread(fd, 100, 0), b"hello world" + bytes(9) + b"Z", "gap written as zeros")
        finally:
            os.close(fd)
    with t.case("write_updates_mtime"):
        set_old_times(f)
        b = os.stat(f)
        fd = os.open(f, os.O_WRONLY)
        try:
            os.write(fd, b"!")
        finally:
            os.close(fd)
        a = os.stat(f)
        check_updated(b, a, ["st_mtime", "st_ctime"], "write")
        eq(a.st_size, b.st_size, "size after overwriting one byte")
    with t.case("chunk_boundary_rw"):
        data = os.urandom(3 * MiB + 123)
        write_file(f, data)
        fd = os.open(f, os.O_RDWR)
        try:
            os.pwrite(fd, b"XYZW", MiB - 2)
            data = data[:MiB - 2] + b"XYZW" + data[MiB + 2:]
            eq(pread_all(fd, 100, MiB - 50), data[MiB - 50:MiB + 50], "bytes across 1 MiB")
        finally:
            os.close(fd)
        ok(read_file(f) == data, "whole-file content after a write across the 1 MiB boundary")
    with t.case("eacces_mode_0600_not_owner", only="user"):
        if runs(t, "user"):
            s = os.path.join(t.fixtures, "secret")
            expect_errno(errno.EACCES, os.open, s, os.O_RDONLY)
            expect_errno(errno.EACCES, os.open, s, os.O_WRONLY)
            expect_errno(errno.EACCES, os.open, os.path.join(t.fixtures, "public"), os.O_WRONLY)
            eq(read_file(os.path.join(t.fixtures, "public")), b"public", "read a 0644 root file")
    with t.case("eacces_create_in_readonly_dir", only="user"):
        if runs(t, "user"):
            expect_errno(errno.EACCES, os.open, os.path.join(t.fixtures, "rootdir", "new"),
                         os.O_WRONLY | os.O_CREAT, 0o644)
    with t.case("root_reads_0600_of_other", only="root"):
        if runs(t, "root"):
            write_file(t.p("other"), b"theirs", 0o600)
            os.chown(t.p("other"), 4321, 4321)
            eq(read_file(t.p("other")), b"theirs", "root reading a 0600 file of another user")


# ----------------------------------------------------------------------------------------------
# rename (and renameat2)
# ----------------------------------------------------------------------------------------------
