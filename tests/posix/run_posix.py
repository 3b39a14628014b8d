#!/usr/bin/env python3
"""POSIX conformance of CLIO against tmpfs as the reference, plus real programs.

    sudo python3 tests/posix/run_posix.py --build-dir build [--user clio-test] [--only GROUPS]
                                          [--skip-tmpfs] [--skip-programs] [--keep]
                                          [--in-runtime] [--io-uring]

1. Mounts a fresh tmpfs and runs tests/posix/conformance.py on it as root and as an
   unprivileged user (--user, created with useradd -r if missing): the reference, which must
   pass completely.
2. Starts a CLIO runtime and FUSE mount (-o allow_other) with tests/integration/e2e_test.py's
   Env and runs the same suite there, as root and as the user. With --in-runtime the runtime
   serves the mount itself (clio_run start --mount) instead of clio-fuse. With --io-uring the
   mount serves FUSE over io_uring (-o io_uring=on, the kernel's fuse.enable_uring turned on
   for the run and restored after): the same suite through the rings, and a check that the
   rings served it (threads named clio-uringQ, none refused).
3. Runs real programs on each mount: git init/add/commit/gc/clone/fsck, tar of a tree in and
   back out compared by sha256 (and mode, mtime, link targets), make -j2 of a generated C
   project.

Every result is one line. On CLIO, a failing check named in KNOWN_FAILURES is printed as XFAIL
(not counted as a failure); a check in KNOWN_FAILURES that passes is XPASS and fails the run, and
so does an entry that matched no check at all, so the list cannot go stale. Nothing is excused
on tmpfs. The last line is "N passed, M failed"; the exit status is non-zero when M > 0, and
77 (skipped) without root or /dev/fuse (or, with --io-uring, a kernel without FUSE over io_uring).
"""

import argparse
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import e2e_test  # noqa: E402  (runtime + mount helpers)

CONFORMANCE = os.path.join(HERE, "conformance.py")
SUITE_TIMEOUT = 900          # seconds, one conformance.py run
PROG_TIMEOUT = 300           # seconds, one external program

# Checks known to fail on CLIO today, "RUN:ID" -> one-line reason. RUN is root, user or
# programs; ID is the check id as conformance.py prints it (group.case) or a program check.
# Each one is a bug to fix in fs/ (or below); remove the entry with the fix.
KNOWN_FAILURES = {
}


class Results:
    def __init__(self):
        self.rows = []           # (fs, run, id, status, msg)

    def add(self, fs, run, cid, good, msg=""):
        key = f"{run}:{cid}"
        known = KNOWN_FAILURES.get(key) if fs == "clio" else None
        if known is not None:
            status = "XPASS" if good else "XFAIL"
        else:
            status = "PASS" if good else "FAIL"
        self.rows.append((fs, run, cid, status, msg))
        line = f"{status} {fs}:{run}:{cid}"
        if status == "FAIL":
            line += f": {msg}"
        elif status == "XFAIL":
            line += f" (known: {known}) got: {msg}"
        elif status == "XPASS":
            line += f": listed in KNOWN_FAILURES ({known}) but passed: remove it from the list"
        print(line, flush=True)

    def stale(self, clio_runs):
        """KNOWN_FAILURES entries that matched no check of a CLIO run that took place."""
        seen = {f"{r}:{c}" for fs, r, c, _, _ in self.rows if fs == "clio"}
        return [k for k in KNOWN_FAILURES if k.split(":", 1)[0] in clio_runs and k not in seen]

    def counts(self):
        passed = sum(1 for r in self.rows if r[3] in ("PASS", "XFAIL"))
        failed = sum(1 for r in self.rows if r[3] in ("FAIL", "XPASS"))
        return passed, failed


def run_suite(res, fs, run, directory, user, only):
    argv = [sys.executable, CONFORMANCE, "--dir", directory]
    if run == "user":
        argv += ["--as-user", user]
    if only:
        argv += ["--only", only]
    e2e_test.log(f"conformance on {fs} as {run}: {' '.join(argv)}")
    try:
        cp = e2e_test.run_cmd(argv, timeout=SUITE_TIMEOUT)
    except e2e_test.TestFailure as e:
        res.add(fs, run, "harness.suite", False, f"conformance.py did not finish: {e}")
        return
    seen = 0
    for line in cp.stdout.splitlines():
        if line.startswith("PASS "):
            res.add(fs, run, line[5:].strip(), True)
            seen += 1
        elif line.startswith("FAIL "):
            cid, _, msg = line[5:].partition(": ")
            res.add(fs, run, cid.strip(), False, msg)
            seen += 1
    last = cp.stdout.strip().splitlines()[-1:] or [""]
    if seen == 0 or "passed," not in last[0]:
        res.add(fs, run, "harness.suite", False,
                f"conformance.py ended abnormally\n{e2e_test.describe(cp)}")
    elif cp.stderr.strip():
        print(f"  (stderr of conformance.py as {run}: {cp.stderr.strip()[-2000:]})", flush=True)


# ----------------------------------------------------------------------------------------------
# Real programs
# ----------------------------------------------------------------------------------------------

def sh(argv, cwd=None, env=None, timeout=PROG_TIMEOUT):
    p = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=timeout)
    return p


def out_of(p):
    return (f"`{' '.join(p.args) if isinstance(p.args, list) else p.args}` exit {p.returncode}\n"
            f"stdout: {p.stdout.strip()[-1500:]}\nstderr: {p.stderr.strip()[-1500:]}")


def prog_case(res, fs, cid, fn):
    try:
        fn()
    except subprocess.TimeoutExpired as e:
        res.add(fs, "programs", cid, False, f"timed out: {e}")
    except AssertionError as e:
        res.add(fs, "programs", cid, False, str(e).replace("\n", " | "))
    except Exception as e:  # noqa: BLE001
        res.add(fs, "programs", cid, False, f"{type(e).__name__}: {e}".replace("\n", " | "))
    else:
        res.add(fs, "programs", cid, True)


def need(p, what):
    if p.returncode != 0:
        raise AssertionError(f"{what} failed: {out_of(p)}")


def gen_tree(root):
    """A tree with files of awkward sizes, symlinks, a hard link, empty dirs, odd modes."""
    os.makedirs(root)
    sizes = [0, 1, 511, 4095, 4096, 65537, (1 << 20) - 1, (1 << 20) + 1, 3 * (1 << 20) + 77]
    for i, n in enumerate(sizes):
        d = os.path.join(root, f"d{i % 3}", f"sub{i % 2}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"file{i}.bin"), "wb") as f:
            f.write(os.urandom(n))
    os.makedirs(os.path.join(root, "empty", "deeper"))
    os.symlink("d0/sub0/file0.bin", os.path.join(root, "link-rel"))
    os.symlink("/nonexistent/target", os.path.join(root, "link-dangling"))
    os.link(os.path.join(root, "d1", "sub1", "file1.bin"), os.path.join(root, "hardlink"))
    with open(os.path.join(root, "exec.sh"), "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(os.path.join(root, "exec.sh"), 0o750)
    with open(os.path.join(root, "private"), "w") as f:
        f.write("p")
    os.chmod(os.path.join(root, "private"), 0o600)
    with open(os.path.join(root, "name with spaces & ünïcode"), "w") as f:
        f.write("x" * 1000)
    with open(os.path.join(root, "n" * 255), "w") as f:
        f.write("long name")
    doc = "/usr/share/doc/git"
    if os.path.isdir(doc):
        shutil.copytree(doc, os.path.join(root, "doc-git"), symlinks=True)
    # fixed mtimes so that the comparison covers them
    for dp, dns, fns in os.walk(root):
        for n in fns:
            p = os.path.join(dp, n)
            if not os.path.islink(p):
                os.utime(p, (1_300_000_000, 1_300_000_000 + len(n)))


def manifest(root):
    """path -> (type, mode, size, mtime seconds, sha256 or link target) for the whole tree."""
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", oct(stat.S_IMODE(st.st_mode)))
            else:
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for b in iter(lambda: f.read(1 << 20), b""):
                        h.update(b)
                out[rel] = ("file", oct(stat.S_IMODE(st.st_mode)), st.st_size, int(st.st_mtime),
                            h.hexdigest())
    return out


def compare_manifests(a, b, what):
    if a == b:
        return
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    diff = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    msg = [f"{what}: trees differ"]
    if only_a:
        msg.append(f"missing {len(only_a)}: {only_a[:3]}")
    if only_b:
        msg.append(f"extra {len(only_b)}: {only_b[:3]}")
    for k in diff[:3]:
        msg.append(f"{k}: expected {a[k]}, got {b[k]}")
    if len(diff) > 3:
        msg.append(f"... {len(diff)} entries differ")
    raise AssertionError("; ".join(msg))


MAKEFILE = """\
CC ?= cc
CFLAGS ?= -O1 -Wall -Werror
OBJS = main.o util.o mathx.o strx.o

prog: $(OBJS)
\t$(CC) -o $@ $(OBJS)

%.o: %.c common.h
\t$(CC) $(CFLAGS) -c -o $@ $<

clean:
\trm -f prog $(OBJS)
"""

C_FILES = {
    "common.h": "int add(int, int);\nint mul(int, int);\nint len(const char *);\nvoid hello(void);\n",
    "main.c": '#include <stdio.h>\n#include "common.h"\n'
              'int main(void) { hello(); printf("%d %d %d\\n", add(2, 3), mul(6, 7), len("clio")); return 0; }\n',
    "util.c": '#include <stdio.h>\n#include "common.h"\nvoid hello(void) { puts("hello from clio"); }\n',
    "mathx.c": '#include "common.h"\nint add(int a, int b) { return a + b; }\nint mul(int a, int b) { return a * b; }\n',
    "strx.c": '#include "common.h"\nint len(const char *s) { int n = 0; while (s[n]) n++; return n; }\n',
}


def run_programs(res, fs, mnt, scratch, keep=False):
    """scratch: a directory on a local (non-tested) filesystem. keep: leave the programs'
    trees on the mount (for the remount check)."""
    work = os.path.join(mnt, "programs")
    os.makedirs(work, exist_ok=True)
    genv = dict(os.environ, HOME=scratch, GIT_CONFIG_NOSYSTEM="1", LC_ALL="C")
    ident = ["-c", "user.name=CLIO Test", "-c", "user.email=clio@example.invalid",
             "-c", "init.defaultBranch=main", "-c", "gc.auto=0"]
    repo = os.path.join(work, "repo")

    def git(*a, cwd=repo):
        return sh(["git", *ident, *a], cwd=cwd, env=genv)

    def git_init_commit():
        need(git("init", "-q", repo, cwd=work), "git init")
        os.makedirs(os.path.join(repo, "src", "deep"))
        for i in range(40):
            with open(os.path.join(repo, "src", "deep" if i % 2 else "", f"f{i}.txt"), "w") as f:
                f.write(f"line {i}\n" * (i * 50 + 1))
        with open(os.path.join(repo, "big.bin"), "wb") as f:
            f.write(os.urandom(2 << 20))
        need(git("add", "-A"), "git add")
        need(git("commit", "-q", "-m", "first"), "git commit")
        need(git("mv", "src/f0.txt", "src/renamed.txt"), "git mv")
        need(git("rm", "-q", "src/f2.txt"), "git rm")
        with open(os.path.join(repo, "src", "f4.txt"), "a") as f:
            f.write("appended\n")
        need(git("commit", "-q", "-am", "second"), "git commit -a")
        p = git("rev-list", "--count", "HEAD")
        need(p, "git rev-list")
        assert p.stdout.strip() == "2", f"expected 2 commits, got {p.stdout.strip()!r}"
        p = git("status", "--porcelain")
        need(p, "git status")
        assert p.stdout.strip() == "", f"git status not clean after commit: {p.stdout.strip()[:500]}"

    def git_fsck():
        need(git("fsck", "--full", "--strict", "--no-progress"), "git fsck")

    def git_gc_clone_fsck():
        need(git("gc", "-q", "--prune=now"), "git gc")
        need(git("fsck", "--full", "--strict", "--no-progress"), "git fsck after gc")
        clone = os.path.join(work, "clone")
        need(git("clone", "-q", repo, clone, cwd=work), "git clone (local, hard links)")
        need(git("fsck", "--full", "--strict", "--no-progress", cwd=clone), "git fsck of the clone")
        p = git("diff", "--stat", "HEAD", cwd=clone)
        need(p, "git diff in clone")
        assert p.stdout.strip() == "", f"clone work tree differs from HEAD: {p.stdout[:300]}"

    prog_case(res, fs, "git.init_add_commit", git_init_commit)
    prog_case(res, fs, "git.fsck", git_fsck)
    prog_case(res, fs, "git.gc_clone_fsck", git_gc_clone_fsck)

    src = os.path.join(scratch, "tree-src")
    back = os.path.join(scratch, "tree-back")
    tin = os.path.join(work, "tree")

    def tar_in():
        gen_tree(src)
        os.makedirs(tin)
        p = sh(["bash", "-o", "pipefail", "-c",
                f"tar -C '{src}' -cf - . | tar -C '{tin}' -xpf -"])
        need(p, "tar into the mount")
        compare_manifests(manifest(src), manifest(tin), "tar into the mount")
        a, b = os.stat(os.path.join(src, "hardlink")), os.stat(os.path.join(tin, "hardlink"))
        assert os.stat(os.path.join(tin, "d1", "sub1", "file1.bin")).st_ino == b.st_ino, \
            "tar's hard link is not a hard link on the mount"
        assert b.st_nlink == a.st_nlink == 2, f"hard link st_nlink: {b.st_nlink}"

    def tar_out():
        arc = os.path.join(work, "tree.tar")
        need(sh(["tar", "-C", tin, "-cf", arc, "."]), "tar of the tree on the mount into an archive on the mount")
        os.makedirs(back)
        need(sh(["tar", "-C", back, "-xpf", arc]), "tar out of the mount")
        compare_manifests(manifest(src), manifest(back), "tar out of the mount")
        p = sh(["tar", "-C", tin, "--compare", "-f", arc])
        need(p, "tar --compare of the archive against the tree on the mount")

    prog_case(res, fs, "tar.in_sha256", tar_in)
    prog_case(res, fs, "tar.out_sha256", tar_out)

    proj = os.path.join(work, "proj")
    menv = dict(os.environ, LC_ALL="C")

    def make_build():
        os.makedirs(proj)
        with open(os.path.join(proj, "Makefile"), "w") as f:
            f.write(MAKEFILE)
        for n, text in C_FILES.items():
            with open(os.path.join(proj, n), "w") as f:
                f.write(text)
        need(sh(["make", "-j2"], cwd=proj, env=menv), "make -j2")
        p = sh([os.path.join(proj, "prog")], cwd=proj)
        need(p, "running the built program")
        assert p.stdout == "hello from clio\n5 42 4\n", f"program output {p.stdout!r}"

    def make_incremental():
        p = sh(["make", "-q"], cwd=proj, env=menv)
        assert p.returncode == 0, f"make -q right after a build says out of date: {out_of(p)}"
        future = time.time() + 3600
        os.utime(os.path.join(proj, "util.c"), (future, future))
        p = sh(["make", "-q"], cwd=proj, env=menv)
        assert p.returncode == 1, f"make -q after touching util.c into the future: {out_of(p)}"
        p = sh(["make", "-j2"], cwd=proj, env=menv)
        need(p, "incremental make -j2")
        assert "util.c" in p.stdout and "main.c" not in p.stdout, \
            f"incremental build rebuilt the wrong files: {p.stdout!r}"
        need(sh(["make", "clean"], cwd=proj, env=menv), "make clean")
        assert not os.path.exists(os.path.join(proj, "prog")), "prog still there after make clean"

    prog_case(res, fs, "make.j2_build_run", make_build)
    prog_case(res, fs, "make.incremental", make_incremental)
    if not keep:
        shutil.rmtree(work, ignore_errors=True)


def xattr_manifest(root):
    out = {}
    for dp, dns, fns in os.walk(root):
        for n in dns + fns:
            p = os.path.join(dp, n)
            if not os.path.islink(p):
                out[os.path.relpath(p, root)] = sorted((k, os.getxattr(p, k)) for k in os.listxattr(p))
    return out


def make_remount_tree(root):
    """Files left by the operations whose effect lives only in the kernel's caches when the
    filesystem gets them wrong: O_TRUNC rewrites, truncates, renames, attribute changes."""
    os.makedirs(root)
    p = lambda *n: os.path.join(root, *n)  # noqa: E731
    with open(p("rewritten"), "w") as f:
        f.write("a long first version of this file\n")
    with open(p("rewritten"), "w") as f:        # O_TRUNC, shorter
        f.write("short\n")
    with open(p("emptied"), "w") as f:
        f.write("contents that must go\n")
    open(p("emptied"), "w").close()             # O_TRUNC to empty
    with open(p("truncated"), "wb") as f:
        f.write(os.urandom(3 << 20))
    os.truncate(p("truncated"), (1 << 20) + 5)
    with open(p("renamed-from"), "w") as f:
        f.write("moved")
    os.rename(p("renamed-from"), p("renamed-to"))
    with open(p("attrs"), "w") as f:
        f.write("a")
    os.chmod(p("attrs"), 0o751)
    os.chown(p("attrs"), 1234, 5678)
    os.utime(p("attrs"), (1_200_000_000, 1_200_000_001))
    os.setxattr(p("attrs"), "user.k", b"v")
    os.symlink("attrs", p("symlink"))
    os.link(p("attrs"), p("hardlink"))
    os.mkdir(p("dir"))
    os.utime(p("dir"), (1_200_000_000, 1_200_000_002))   # last, after its parent changed


def mount_options(args):
    return ["allow_other"] + (["io_uring=on"] if args.io_uring else [])


def ring_check(res, env, args):
    """--io-uring: the process serving the mount has its ring threads, and they served."""
    pids = [env.runtime_pid()] if args.in_runtime else e2e_test.find_fuse_pids(env.clio_fuse, env.mnt)
    names = e2e_test.fuse_ring_threads(pids[0]) if pids and pids[0] else []
    served = [n for n in names if n[len("clio-uring"):].isdigit()]
    ok = bool(served) and "clio-uring-no" not in names
    res.add("clio", "root", "harness.io_uring_served", ok, "" if ok else f"ring threads: {names}")


def remount_check(res, env, in_runtime, options):
    """CLIO only: what the mount shows before an unmount must be what it shows after (with
    --in-runtime: before and after a stop and start of the runtime that serves it)."""
    top = os.path.join(env.mnt, "remount")
    def go():
        make_remount_tree(top)
        prog = os.path.join(env.mnt, "programs")
        trees = [t for t in (top, prog) if os.path.isdir(t)]
        before = [(manifest(t), xattr_manifest(t)) for t in trees]
        owner = os.stat(os.path.join(top, "attrs"))
        if in_runtime:
            env.stop_runtime()
            assert not e2e_test.is_mounted(env.mnt), "the runtime stopped but its mount stayed"
            env.start_runtime(mount=env.mnt, options=options)
        else:
            env.unmount()
            env.mount(options=options)
        for t, (m, x) in zip(trees, before):
            compare_manifests(m, manifest(t), f"{t} after unmount + mount")
            assert x == xattr_manifest(t), f"{t}: xattrs differ after unmount + mount"
        st = os.stat(os.path.join(top, "attrs"))
        assert (st.st_uid, st.st_gid, st.st_nlink) == (owner.st_uid, owner.st_gid, 2), \
            f"owner/nlink after remount: {(st.st_uid, st.st_gid, st.st_nlink)}"
        repo = os.path.join(prog, "repo")
        if os.path.isdir(repo):
            p = sh(["git", "fsck", "--full", "--strict", "--no-progress"], cwd=repo,
                   env=dict(os.environ, GIT_CONFIG_NOSYSTEM="1"))
            need(p, "git fsck after unmount + mount")
    try:
        go()
    except Exception as e:  # noqa: BLE001
        res.add("clio", "root", "remount.same_tree", False, f"{type(e).__name__}: {e}".replace("\n", " | "))
    else:
        res.add("clio", "root", "remount.same_tree", True)


# ----------------------------------------------------------------------------------------------
# The two filesystems
# ----------------------------------------------------------------------------------------------

def on_tmpfs(res, args):
    top = os.path.realpath(tempfile.mkdtemp(prefix="clio-posix-tmpfs-"))
    os.chmod(top, 0o755)
    mnt = os.path.join(top, "mnt")
    os.mkdir(mnt)
    scratch = os.path.join(top, "scratch")
    os.mkdir(scratch)
    p = sh(["mount", "-t", "tmpfs", "-o", "size=8g,mode=0755", "tmpfs", mnt])
    if p.returncode != 0:
        res.add("tmpfs", "root", "harness.mount", False, out_of(p))
        shutil.rmtree(top, ignore_errors=True)
        return
    try:
        e2e_test.log(f"tmpfs mounted on {mnt}")
        run_suite(res, "tmpfs", "root", mnt, args.user, args.only)
        run_suite(res, "tmpfs", "user", mnt, args.user, args.only)
        if not args.skip_programs:
            run_programs(res, "tmpfs", mnt, scratch)
    finally:
        sh(["umount", mnt])
        if not e2e_test.is_mounted(mnt):
            shutil.rmtree(top, ignore_errors=True)


def on_clio(res, args):
    env = e2e_test.Env(args.build_dir, "posix", keep=args.keep)
    try:
        env.check_binaries(env.clio_run, env.clio_fuse)
        os.chmod(env.T, 0o755)                   # the unprivileged user must reach the mount
        env.write_config(env.config_text(ram_capacity="256MB"))
        if args.in_runtime:
            env.start_runtime(mount=env.mnt, options=mount_options(args))
        else:
            env.start_runtime()
            env.mount(options=mount_options(args))
        st = os.stat(env.mnt)
        if stat.S_IMODE(st.st_mode) & 0o005 != 0o005:
            os.chmod(env.mnt, 0o755)
        run_suite(res, "clio", "root", env.mnt, args.user, args.only)
        run_suite(res, "clio", "user", env.mnt, args.user, args.only)
        if not args.skip_programs:
            scratch = os.path.join(env.T, "scratch")
            os.mkdir(scratch)
            run_programs(res, "clio", env.mnt, scratch, keep=True)
        if args.io_uring:
            ring_check(res, env, args)
        remount_check(res, env, args.in_runtime, mount_options(args))
        if args.io_uring:
            ring_check(res, env, args)   # the remounted session has its rings too
        # the mount must still be alive after all of it
        try:
            os.listdir(env.mnt)
            res.add("clio", "root", "harness.mount_alive_at_end", True)
        except OSError as e:
            res.add("clio", "root", "harness.mount_alive_at_end", False, f"listdir of the mount: {e}")
    except Exception as e:  # noqa: BLE001
        res.add("clio", "root", "harness.setup", False, f"{type(e).__name__}: {e}\n{env.log_tail()}")
    finally:
        for err in env.cleanup():
            res.add("clio", "root", "harness.cleanup", False, err)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True, help="CMake build dir (holds cli/ and fs/)")
    ap.add_argument("--user", default="clio-test", help="unprivileged user for the second run")
    ap.add_argument("--only", help="comma-separated conformance groups (default: all)")
    ap.add_argument("--skip-tmpfs", action="store_true", help="skip the tmpfs reference run")
    ap.add_argument("--skip-clio", action="store_true", help="skip the CLIO run")
    ap.add_argument("--skip-programs", action="store_true", help="skip git/tar/make")
    ap.add_argument("--keep", action="store_true", help="keep CLIO's temp dir")
    ap.add_argument("--in-runtime", action="store_true",
                    help="mount CLIO from the runtime itself (clio_run start --mount) instead of clio-fuse")
    ap.add_argument("--io-uring", action="store_true",
                    help="serve the CLIO mount over io_uring (-o io_uring=on); turns fuse.enable_uring on for the run")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    if os.geteuid() != 0:
        print("SKIP: run_posix.py needs root (mount -t tmpfs, a second user, allow_other)")
        return 77
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        print("SKIP: no /dev/fuse or fusermount3")
        return 77
    missing = [p for p in ("git", "tar", "make", "cc") if not shutil.which(p)]
    if missing and not args.skip_programs:
        print(f"note: {missing} not installed; the program checks that need them will fail")
    uring_before = None
    if args.io_uring:
        if not e2e_test.kernel_has_fuse_uring():
            print(f"SKIP: this kernel has no FUSE over io_uring (no {e2e_test.FUSE_URING_PARAM}; Linux 6.14+)")
            return 77
        uring_before = e2e_test.kernel_fuse_uring()
        e2e_test.set_kernel_fuse_uring(True)
    try:
        return run_all(args)
    finally:
        if uring_before is not None:
            e2e_test.set_kernel_fuse_uring(uring_before)


def run_all(args):
    os.chdir("/")
    res = Results()
    if not args.skip_tmpfs:
        on_tmpfs(res, args)
    if not args.skip_clio:
        on_clio(res, args)
    clio_runs = set() if args.skip_clio else {"root", "user"}
    stale = res.stale(clio_runs) if not args.only else []
    for k in stale:
        print(f"FAIL stale KNOWN_FAILURES entry {k!r}: no such check ran on CLIO", flush=True)
    print()
    for fs in ("tmpfs", "clio"):
        for run in ("root", "user", "programs"):
            rows = [r for r in res.rows if r[0] == fs and r[1] == run]
            if rows:
                c = {s: sum(1 for r in rows if r[3] == s) for s in ("PASS", "FAIL", "XFAIL", "XPASS")}
                print(f"{fs:6} {run:9} PASS {c['PASS']:4}  FAIL {c['FAIL']:3}  "
                      f"XFAIL {c['XFAIL']:3}  XPASS {c['XPASS']:3}")
    # Repeated last, where a log cut short to its tail (CI's) still shows them.
    for fs, run, cid, status, msg in res.rows:
        if status in ("FAIL", "XPASS"):
            print(f"{status} {fs}:{run}:{cid}: {msg or 'passed, but listed in KNOWN_FAILURES'}",
                  flush=True)
    passed, failed = res.counts()
    failed += len(stale)
    xfail = sum(1 for r in res.rows if r[3] == "XFAIL")
    if xfail:
        print(f"({xfail} known failures on CLIO counted as passed; see XFAIL lines)")
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
