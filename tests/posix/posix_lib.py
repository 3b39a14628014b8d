"""What the conformance groups share: the system calls Python lacks (ctypes), the checks that
name errno and values, the group registry, and the context a group's cases run in.
"""

import contextlib
import ctypes
import ctypes.util
import errno
import os
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep  # a failing line is reported from these files

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
                          if fr.filename.startswith(HERE)), "")
            self._fail(cid, f"unexpected {ename(e.errno) if e.errno else ''} {e} ({where})")
        except Exception as e:  # noqa: BLE001 - a broken check is a failed check
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"line {fr.lineno}: {fr.line}" for fr in reversed(tb)
                          if fr.filename.startswith(HERE)), "")
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
