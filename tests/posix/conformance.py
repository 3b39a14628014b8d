#!/usr/bin/env python3
"""POSIX conformance checks for a mounted filesystem, organised by system call.

    python3 tests/posix/conformance.py --dir DIR [--only GROUP[,GROUP]] [--as-user NAME]

Runs every group of checks in a fresh subdirectory of DIR. Each check asserts return values,
errno and resulting attributes, and prints one line: "PASS group.case" or
"FAIL group.case: why". The last line is "N passed, M failed"; the exit status is 1 when
anything failed. Python 3 standard library only (ctypes for renameat2, utimensat, fallocate).

As root, the checks run as root. With --as-user NAME (run as root), the script creates the
system user NAME if missing (useradd -r), prepares root-owned fixtures under DIR, makes a
world-writable subdirectory, and runs the checks in a forked child that has dropped to that
user: the permission checks (EACCES, EPERM for a non-owner) run only there, the checks that
need privilege (chown to another user, mknod of a device) only as root.

Timestamps are never compared after a sleep: a check either sets explicit times first and
compares with them, or spins (bounded, a few ms at most) until the clock has passed the
timestamp it recorded, so that "updated" is a strict inequality.
"""

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import mmap
import os
import pwd
import shutil
import socket
import stat
import struct
import subprocess
import sys
import time
import traceback

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)

AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
SYS_renameat2 = 316            # x86-64
SYS_getdents64 = 217           # x86-64
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
SEEK_DATA = getattr(os, "SEEK_DATA", 3)
SEEK_HOLE = getattr(os, "SEEK_HOLE", 4)

GROUPS = {}   # name -> function(Ctx), in definition order


def group(name):
    def deco(fn):
        GROUPS[name] = fn
        return fn
    return deco


class Fail(AssertionError):
    pass


# ----------------------------------------------------------------------------------------------
# syscall wrappers (ctypes) and helpers
# ----------------------------------------------------------------------------------------------

def _raise_errno(what):
    e = ctypes.get_errno()
    raise OSError(e, f"{what}: {os.strerror(e)}")


def renameat2(old, new, flags):
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(SYS_renameat2), ctypes.c_int(AT_FDCWD), os.fsencode(old),
                     ctypes.c_int(AT_FDCWD), os.fsencode(new), ctypes.c_uint(flags))
    if r != 0:
        _raise_errno("renameat2")


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path, atime, mtime, flags=0):
    """atime/mtime: ns integer, or UTIME_NOW / UTIME_OMIT as ('now',) / ('omit',)."""
    def ts(v):
        if v == "now":
            return Timespec(0, UTIME_NOW)
        if v == "omit":
            return Timespec(0, UTIME_OMIT)
        return Timespec(v // 10**9, v % 10**9)
    arr = (Timespec * 2)(ts(atime), ts(mtime))
    if libc.utimensat(AT_FDCWD, os.fsencode(path), arr, flags) != 0:
        _raise_errno("utimensat")


def fallocate(fd, mode, off, length):
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    if libc.fallocate(fd, mode, off, length) != 0:
        _raise_errno("fallocate")


def getxattr_buf(path, name, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    libc.getxattr.restype = ctypes.c_ssize_t
    r = libc.getxattr(os.fsencode(path), name.encode(), buf if size else None, ctypes.c_size_t(size))
    if r < 0:
        _raise_errno("getxattr")
    return r


def ename(e):
    return errno.errorcode.get(e, str(e))


def expect_errno(allowed, fn, *args, **kw):
    """fn(*args) must fail with one of the errnos in allowed (an int or a tuple)."""
    allowed = (allowed,) if isinstance(allowed, int) else tuple(allowed)
    want = "/".join(ename(e) for e in allowed)
    try:
        r = fn(*args, **kw)
    except OSError as e:
        if e.errno not in allowed:
            raise Fail(f"{fn.__name__}{_fmt(args)}: expected {want}, got {ename(e.errno)} ({e})")
        return
    raise Fail(f"{fn.__name__}{_fmt(args)}: expected {want}, but it succeeded (returned {r!r})")


def _fmt(args):
    out = []
    for a in args:
        s = repr(a)
        out.append(s if len(s) < 60 else s[:40] + "...")
    return "(" + ", ".join(out) + ")"


def eq(got, want, what):
    if got != want:
        g, w = repr(got), repr(want)
        if len(g) > 120:
            g = g[:120] + "..."
        if len(w) > 120:
            w = w[:120] + "..."
        raise Fail(f"{what}: expected {w}, got {g}")


def ok(cond, msg):
    if not cond:
        raise Fail(msg)


def write_file(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        n = os.write(fd, data)
        eq(n, len(data), f"write() to {path} return value")
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def pread_all(fd, n, off):
    out = b""
    while len(out) < n:
        b = os.pread(fd, n - len(out), off + len(out))
        if not b:
            break
        out += b
    return out


def exists(path):
    try:
        os.lstat(path)
        return True
    except FileNotFoundError:
        return False


def wait_past(ts_ns):
    """Spins until both the fine and the coarse real-time clocks are past ts_ns (a few ms at
    most): a timestamp taken by the filesystem after this is then strictly greater."""
    coarse = getattr(time, "CLOCK_REALTIME_COARSE", 5)   # 5 on Linux
    deadline = time.monotonic() + 2.0
    while True:
        now = time.clock_gettime_ns(coarse) if coarse is not None else time.time_ns()
        if now > ts_ns and time.time_ns() > ts_ns:
            return
        if time.monotonic() > deadline:
            raise Fail(f"the clock did not pass the file's timestamp {ts_ns} within 2 s "
                       f"(now {time.time_ns()}): timestamp in the future?")


def ns(st, field):
    return getattr(st, field + "_ns")


OLD_NS = 1_000_000_000 * 10**9       # 2001-09-09, an explicit old time


def set_old_times(path, follow=True):
    """Sets atime and mtime to OLD_NS, then waits until the clock is past the ctime that this
    set, so that a later ctime update is a strict increase."""
    os.utime(path, ns=(OLD_NS, OLD_NS), follow_symlinks=follow)
    wait_past(os.stat(path, follow_symlinks=follow).st_ctime_ns)


def check_updated(before, after, fields, what):
    for f in fields:
        b, a = ns(before, f), ns(after, f)
        ok(a > b, f"{what}: {f} not updated (before {b}, after {a})")


def check_unchanged(before, after, fields, what):
    for f in fields:
        b, a = ns(before, f), ns(after, f)
        ok(a == b, f"{what}: {f} changed (before {b}, after {a})")


# ----------------------------------------------------------------------------------------------
# The context: where a group works, who we are, results
# ----------------------------------------------------------------------------------------------

class Ctx:
    def __init__(self, base, fixtures, other_dir, label):
        self.base = base
        self.fixtures = fixtures          # root-owned fixtures (user run only) or None
        self.other_dir = other_dir        # a writable directory on another filesystem, or None
        self.root = os.geteuid() == 0
        self.label = label
        self.passed = 0
        self.failed = 0
        self.group = None
        self.dir = None

    def p(self, *names):
        return os.path.join(self.dir, *names)

    @contextlib.contextmanager
    def case(self, name, only=None):
        """One check. only='root' / 'user' restricts it to that run (no result otherwise)."""
        cid = f"{self.group}.{name}"
        if (only == "root" and not self.root) or (only == "user" and self.root):
            yield
            return
        try:
            yield
        except Fail as e:
            self._fail(cid, str(e))
        except OSError as e:
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"line {fr.lineno}: {fr.line}" for fr in reversed(tb)
                          if fr.filename == __file__), "")
            self._fail(cid, f"unexpected {ename(e.errno) if e.errno else ''} {e} ({where})")
        except Exception as e:  # noqa: BLE001 - a broken check is a failed check
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"line {fr.lineno}: {fr.line}" for fr in reversed(tb)
                          if fr.filename == __file__), "")
            self._fail(cid, f"{type(e).__name__}: {e} ({where})")
        else:
            self.passed += 1
            print(f"PASS {cid}", flush=True)

    def _fail(self, cid, msg):
        self.failed += 1
        msg = msg.replace("\n", " | ")
        print(f"FAIL {cid}: {msg}", flush=True)


# A with-body cannot be skipped from its context manager, so a restricted case also guards
# its body with `if runs(t, only):`.
def runs(t, only):
    return not ((only == "root" and not t.root) or (only == "user" and t.root))


# ----------------------------------------------------------------------------------------------
# chmod
# ----------------------------------------------------------------------------------------------

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

def find_other_dir(base):
    """A directory writable by us on a filesystem other than base's (for EXDEV)."""
    dev = os.stat(base).st_dev
    for c in ("/tmp", "/var/tmp", "/dev/shm", "/run"):
        try:
            if os.stat(c).st_dev != dev and os.access(c, os.W_OK | os.X_OK):
                return c
        except OSError:
            pass
    return None


def run_groups(base, only, fixtures, label):
    os.umask(0)
    ctx = Ctx(base, fixtures, find_other_dir(base), label)
    for name, fn in GROUPS.items():
        if only and name not in only:
            continue
        ctx.group = name
        ctx.dir = os.path.join(base, name)
        try:
            if os.path.lexists(ctx.dir):
                shutil.rmtree(ctx.dir)
            os.mkdir(ctx.dir, 0o755)
            fn(ctx)
        except Exception as e:  # noqa: BLE001 - setup outside any case
            ctx._fail(f"{name}.setup", f"{type(e).__name__}: {e} | "
                      + traceback.format_exc().strip().splitlines()[-2].strip())
        finally:
            shutil.rmtree(ctx.dir, ignore_errors=True)
    return ctx.passed, ctx.failed


def ensure_user(name):
    try:
        return pwd.getpwnam(name)
    except KeyError:
        cp = subprocess.run(["useradd", "-r", "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin", name],
                            capture_output=True, text=True)
        if cp.returncode != 0:
            sys.exit(f"conformance: useradd {name} failed: {cp.stderr.strip()}")
        return pwd.getpwnam(name)


def make_fixtures(fx):
    """Root-owned objects for the unprivileged run's permission checks."""
    if os.path.lexists(fx):
        shutil.rmtree(fx)
    os.mkdir(fx, 0o755)
    write_file(os.path.join(fx, "secret"), b"secret", 0o600)
    write_file(os.path.join(fx, "public"), b"public", 0o644)
    write_file(os.path.join(fx, "world"), b"world", 0o666)
    os.utime(os.path.join(fx, "world"), ns=(OLD_NS, OLD_NS))
    os.mkdir(os.path.join(fx, "rootdir"), 0o755)
    write_file(os.path.join(fx, "rootdir", "f"), b"f", 0o666)
    os.mkdir(os.path.join(fx, "rootdir", "sub"), 0o755)
    os.mkdir(os.path.join(fx, "sticky"), 0o1777)
    write_file(os.path.join(fx, "sticky", "rootfile"), b"r", 0o666)
    os.mkdir(os.path.join(fx, "private"), 0o700)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="directory to test in (on the filesystem under test)")
    ap.add_argument("--only", help="comma-separated groups: " + ",".join(GROUPS))
    ap.add_argument("--as-user", metavar="NAME", help="run the checks as this (created) system user")
    ap.add_argument("--list", action="store_true", help="list the groups and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(GROUPS))
        return 0
    only = set(args.only.split(",")) if args.only else None
    if only and only - set(GROUPS):
        ap.error(f"unknown group(s) {sorted(only - set(GROUPS))}; known: {', '.join(GROUPS)}")
    os.umask(0)
    base = os.path.abspath(args.dir)
    if not os.path.isdir(base):
        ap.error(f"--dir {base} is not a directory")

    if not args.as_user:
        run = os.path.join(base, f"posix-{'root' if os.geteuid() == 0 else 'uid%d' % os.geteuid()}")
        os.makedirs(run, exist_ok=True)
        passed, failed = run_groups(run, only, None, "root" if os.geteuid() == 0 else "user")
        shutil.rmtree(run, ignore_errors=True)
    else:
        if os.geteuid() != 0:
            ap.error("--as-user needs root (it creates the user and root-owned fixtures)")
        pw = ensure_user(args.as_user)
        fx = os.path.join(base, "posix-fixtures")
        make_fixtures(fx)
        run = os.path.join(base, "posix-user")
        if os.path.lexists(run):
            shutil.rmtree(run)
        os.mkdir(run)
        os.chmod(run, 0o777)
        r, w = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(pw.pw_gid)
                os.setuid(pw.pw_uid)
                os.environ["HOME"] = run
                os.chdir(run)
                p, f = run_groups(run, only, fx, "user")
                os.write(w, f"{p} {f}".encode())
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            os._exit(code)
        os.close(w)
        out = b""
        while True:
            b = os.read(r, 100)
            if not b:
                break
            out += b
        os.close(r)
        _, status = os.waitpid(pid, 0)
        try:
            passed, failed = map(int, out.split())
        except ValueError:
            print(f"FAIL harness.user_run: the child running as {args.as_user} died "
                  f"(wait status {status})", flush=True)
            passed, failed = 0, 1
        shutil.rmtree(run, ignore_errors=True)
        shutil.rmtree(fx, ignore_errors=True)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
