#!/usr/bin/env python3
"""The runtime's boundary, probed as a local attacker would (docs/security.md).

The attacker is uid 65534 (nobody) with the runtime socket's group among its groups: a member
of group clio, who may connect. Needs root (to become that user).

    python3 tests/integration/security_test.py --build-dir build [--only caller_classes] [--keep]

Scenarios:
- caller_classes: the attacker calls every method of every pool (tests/caller_probe.cc) over
  shared memory and over the plain socket: only the reader methods run; `clioctl stat` and `tier
  list` work for it, `pool create` (a file at a chosen path) is refused naming its uid and
  creates nothing; `locate` answers only for files it could read.
- squatter: a process of the attacker listens on the socket path while the runtime is away:
  clioctl and clio-fuse (root) refuse it and send it nothing.
- no_tcp_fallback: with runtime.tcp_port set and the runtime away, the attacker holds the port:
  an `auto` client does not fall back to TCP; a client told to use TCP sends it a nonce, never
  the token.
- frame_budget: a reader's frame announcing 64 MiB is refused at its header, a reader holds at
  most 32 connections, and root's frames wait for runtime.max_inflight (the peak stays near it).
- flood: one user's 70 silent TCP connections and 20 slow HTTP clients do not lock root out.
- tls: TCP on 0.0.0.0 over TLS with the real binaries; clients without TLS or trusting another
  certificate, and a key file others can read, refused by name.
- state_modes: the state directory 0700 (0750 with group clio) and its files 0600, a too-long
  socket_path refused before anything is made, a token file others may read set back to 0600,
  a token file or a state directory of another user refused.
"""

import argparse
import os
import shutil
import socket
import stat
import subprocess
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_test import (SAFE_CONFIG, SAFE_MEMBER, Env, TestFailure, check, describe, is_mounted,  # noqa: E402
                      log, run_cmd)

ATTACKER = 65534


def attacker_groups(env):
    return [os.stat(os.path.join(env.T, "clio.sock")).st_gid] if os.path.exists(
        os.path.join(env.T, "clio.sock")) else []


def as_attacker(env, argv, groups, extra_env=None):
    """Runs argv as uid/gid 65534 with `groups`; the binaries come from a copy the attacker
    can reach (the build tree may lie under a 0700 home)."""
    e = env.env()
    e.update(extra_env or {})
    p = subprocess.run(argv, env=e, user=ATTACKER, group=ATTACKER, extra_groups=groups,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    return p


def open_for_attacker(env):
    """The attacker must reach the socket and the config: T becomes 0755 (the state dir stays
    the runtime's), and the client binaries are copied where it can run them."""
    os.chmod(env.T, 0o755)
    bindir = os.path.join(env.T, "bin")
    os.makedirs(bindir, exist_ok=True)
    os.chmod(bindir, 0o755)
    for b in (env.clioctl, env.clio_fuse):
        shutil.copy2(b, bindir)
    os.chmod(env.conf, 0o644)
    return os.path.join(bindir, "clioctl")


def scenario_caller_classes(env):
    probe = os.path.join(env.build_dir, "tests", "clio_caller_probe")
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl, probe)
    # Every module: file bdevs under a safe-bdev array under the CTE, and the filesystem.
    os.makedirs(env.state, exist_ok=True)
    members = "".join(SAFE_MEMBER.format(i=i, j=i + 1) for i in range(4))
    env.write_config(SAFE_CONFIG.format(T=env.T, ram_name=env.ram_name, members=members))
    env.start_runtime()
    env.mount(options=["allow_other"])  # as the package mounts: the attacker may use it
    files = {}
    for name, mode, gid in (("secret", 0o600, 0), ("public", 0o644, 0), ("group", 0o640, ATTACKER)):
        path = os.path.join(env.mnt, name)
        with open(path, "wb") as f:
            f.write(name.encode() * 1000)
            f.flush()
            os.fsync(f.fileno())
        os.chown(path, 0, gid)
        os.chmod(path, mode)
        files[name] = os.stat(path).st_ino
    # A readable file in a directory the attacker cannot search: the kernel would not let it
    # reach the file, so neither does locate.
    os.mkdir(os.path.join(env.mnt, "private"), 0o700)
    hidden = os.path.join(env.mnt, "private", "inside")
    with open(hidden, "wb") as f:
        f.write(b"hidden" * 1000)
    os.chmod(hidden, 0o644)
    files["private/inside"] = os.stat(hidden).st_ino
    clioctl = open_for_attacker(env)
    groups = attacker_groups(env)
    check(groups, "no socket after the start")
    sock = os.path.join(env.T, "clio.sock")
    for mode in ("shm", "unix"):
        argv = [probe, "--uid", str(ATTACKER), "--gid", str(ATTACKER), "--groups", ",".join(map(str, groups)),
                "--locate", f"{files['secret']}:secret=deny", "--locate", f"{files['public']}:public=allow",
                "--locate", f"{files['group']}:group=allow",
                "--locate", f"{files['private/inside']}:private/inside=deny",
                # the path of a readable file with another file's inode, and no path at all
                "--locate", f"{files['secret']}:public=deny", "--locate", f"{files['public']}:=deny", sock]
        e = env.env()
        e["CLIO_IPC_MODE"] = mode
        cp = run_cmd(argv, env=e)
        lines = cp.stdout.strip().splitlines()
        log(f"probe over {mode}: {lines[-1] if lines else '(no output)'}")
        check(cp.returncode == 0, f"the probe over {mode} found methods open to uid {ATTACKER}:\n"
              + "\n".join(x for x in lines if "WRONG" in x) + "\n" + describe(cp))
        check("'private/inside': refused: PermissionDenied: locate: 'private' is not searchable" in cp.stdout,
              f"locate of a file in a directory uid {ATTACKER} cannot search was not refused for that:\n{cp.stdout}")
        for module in ("admin", "clio_bdev", "clio_safe_bdev", "clio_cte_core", "clio_fs"):
            check(f"[{module}] method" in cp.stdout, f"the probe over {mode} called no {module} pool:\n{cp.stdout}")

    # clioctl as the attacker: reports work, changes are refused by name and make nothing.
    for args in (["stat"], ["tier", "list"]):
        cp = as_attacker(env, [clioctl] + args, groups)
        check(cp.returncode == 0, f"clioctl {' '.join(args)} as uid {ATTACKER}: exit {cp.returncode}\n"
              f"{cp.stdout}\n{cp.stderr}")
    # clioctl locate as the attacker, through the mount: its path goes along and is checked.
    cp = as_attacker(env, [clioctl, "locate", os.path.join(env.mnt, "public")], groups)
    check(cp.returncode == 0, f"clioctl locate of a public file as uid {ATTACKER}: exit {cp.returncode}\n"
          f"{cp.stdout}\n{cp.stderr}")
    cp = as_attacker(env, [clioctl, "locate", os.path.join(env.mnt, "secret")], groups)
    check(cp.returncode == 1 and "not readable by uid" in cp.stderr,
          f"clioctl locate of a 0600 root file as uid {ATTACKER}: exit {cp.returncode}\n{cp.stdout}\n{cp.stderr}")
    target = os.path.join(env.T, "planted")
    cp = as_attacker(env, [clioctl, "pool", "create", "clio_bdev", target, "bdev_type=file", "capacity=1MB"], groups)
    check(cp.returncode == 1, f"pool create as uid {ATTACKER}: exit {cp.returncode}, not 1\n{cp.stdout}\n{cp.stderr}")
    check(f"uid {ATTACKER}" in cp.stderr and "admin" in cp.stderr,
          f"pool create's refusal does not name the caller and the class:\n{cp.stderr}")
    check(not os.path.exists(target), f"a refused pool create made {target}")
    cp = run_cmd([env.clioctl, "pool", "list"], env=env.env())
    check(cp.returncode == 0 and target not in cp.stdout, "root's pool list:\n" + describe(cp))
    # The mount lock is the runtime's alone: a group member cannot lock every mount out, and
    # its clio-fuse says who may mount.
    lock = sock + ".mount"
    check(stat.S_IMODE(os.stat(lock).st_mode) == 0o600, f"mount lock mode {oct(os.stat(lock).st_mode)}")
    mnt2 = os.path.join(env.T, "mnt2")
    os.makedirs(mnt2)
    os.chmod(mnt2, 0o777)
    cp = as_attacker(env, [os.path.join(env.T, "bin", "clio-fuse"), mnt2], groups)
    check(cp.returncode == 1 and "mounting needs root or the runtime's user" in cp.stderr
          and f"uid {ATTACKER}" in cp.stderr, f"clio-fuse as uid {ATTACKER}: exit {cp.returncode}\n{cp.stderr}")
    check(not is_mounted(mnt2), f"uid {ATTACKER} mounted {mnt2}")
    # Root still administers.
    cp = run_cmd([env.clioctl, "stat"], env=env.env())
    check(cp.returncode == 0, "clioctl stat as root:\n" + describe(cp))


def squatter(env, argv_tail, groups):
    """A process of the attacker that listens (Unix path or TCP port), accepts, and prints the
    number of bytes each connection sent, until killed."""
    code = (
        "import socket, sys, os\n"
        "kind, where = sys.argv[1], sys.argv[2]\n"
        "if kind == 'unix':\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    s.bind(where)\n"
        "else:\n"
        "    s = socket.socket(socket.AF_INET)\n"
        "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "    s.bind(('127.0.0.1', int(where)))\n"
        "s.listen(16)\n"
        "print('listening', flush=True)\n"
        "while True:\n"
        "    c, _ = s.accept()\n"
        "    c.settimeout(2)\n"
        "    got = b''\n"
        "    try:\n"
        "        while True:\n"
        "            b = c.recv(65536)\n"
        "            if not b: break\n"
        "            got += b\n"
        "    except OSError:\n"
        "        pass\n"
        "    c.close()\n"
        "    print('received', len(got), got.hex(), flush=True)\n")
    # Debian's interpreter: the one running this test may live under a 0700 home.
    p = subprocess.Popen(["/usr/bin/python3", "-c", code] + argv_tail, user=ATTACKER, group=ATTACKER,
                         extra_groups=groups, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    check(line == "listening", f"the squatter did not start: {line!r} {p.stderr.read() if p.poll() is not None else ''}")
    return p


def squatter_report(p, contents=False):
    """The byte counts of the connections the squatter saw (with `contents`, the bytes)."""
    p.kill()
    out, _ = p.communicate(timeout=30)
    got = [x.split() for x in out.splitlines() if x.startswith("received")]
    if contents:
        return [bytes.fromhex(x[2]) if len(x) > 2 else b"" for x in got]
    return [int(x[1]) for x in got]


def scenario_squatter(env):
    env.check_binaries(env.clioctl, env.clio_fuse)
    env.write_config()
    os.chmod(env.T, 0o777)  # the attacker may create the socket file where the runtime would
    sock = os.path.join(env.T, "clio.sock")
    p = squatter(env, ["unix", sock], [])
    try:
        check(os.stat(sock).st_uid == ATTACKER, "the squatter's socket is not its own")
        cp = run_cmd([env.clioctl, "stat"], env=env.env())
        check(cp.returncode != 0, "clioctl stat talked to a squatter:\n" + describe(cp))
        check("refusing the runtime socket" in cp.stderr and f"uid {ATTACKER}" in cp.stderr,
              "clioctl's refusal does not say why:\n" + describe(cp))
        cp = run_cmd([env.clio_fuse, env.mnt], env=env.env(), keep_as=env.logs("clio-fuse-squatter"))
        check(cp.returncode != 0, "clio-fuse mounted over a squatter's socket:\n" + describe(cp))
        check(not is_mounted(env.mnt), f"{env.mnt} is mounted")
        check("refusing the runtime socket" in cp.stderr, "clio-fuse's refusal does not say why:\n" + describe(cp))
    finally:
        got = squatter_report(p)
    check(all(n == 0 for n in got), f"clients sent the squatter bytes: {got}")
    log(f"squatter refused; it got {len(got)} connection(s), 0 bytes")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scenario_no_tcp_fallback(env):
    env.check_binaries(env.clio_run, env.clioctl)
    port = free_port()
    env.write_config(env.config_text().replace("  num_threads: 4\n", f"  num_threads: 4\n  tcp_port: {port}\n"))
    env.start_runtime()  # makes the token
    env.stop_runtime()
    p = squatter(env, ["tcp", str(port)], [])
    try:
        cp = run_cmd([env.clioctl, "stat"], env=env.env())
        check(cp.returncode != 0, "clioctl stat succeeded with the runtime stopped:\n" + describe(cp))
        check("not running" in cp.stderr, "clioctl's error does not say the runtime is not running:\n" + describe(cp))
    finally:
        got = squatter_report(p)
    check(not got or all(n == 0 for n in got), f"an auto client sent the TCP squatter {got} bytes (its token)")
    check(not got, f"an auto client connected to the TCP port: {got}")
    log("auto client stayed off TCP")
    # A client told to use TCP meets the squatter: it sends a nonce, never the token, and the
    # squatter (which cannot prove the token) gets nothing more.
    with open(os.path.join(env.state, "token")) as f:
        token = f.read().strip().encode()
    p = squatter(env, ["tcp", str(port)], [])
    try:
        e = env.env()
        e["CLIO_IPC_MODE"] = "tcp"
        cp = run_cmd([env.clioctl, "stat"], env=e)
        check(cp.returncode != 0, "clioctl stat over TCP succeeded against a squatter:\n" + describe(cp))
    finally:
        got = squatter_report(p, contents=True)
    check(got and all(token not in b for b in got), f"the TCP squatter got {got}: the token crossed the wire")
    check(all(len(b) == 32 + 4 + 32 for b in got), f"the TCP squatter got more than a Hello: {[len(b) for b in got]}")
    log(f"a TCP client gave the squatter {len(got)} hello(s) of a nonce, no token")


def scenario_flood(env):
    """One local user cannot lock the others out of TCP or HTTP (docs/security.md, "Limits"):
    - the attacker opens 70 TCP connections and never says Hello: the runtime keeps 8 of them
      (per owning uid, which the kernel names) and root's TCP client still gets in;
    - the attacker opens 20 HTTP connections, more than the server's 16 threads, and sends their
      requests a byte every 2 s (each read is within Poco's timeout, so each holds a thread for
      as long as it likes): the server keeps 6 of them, and root's GET /metrics is answered."""
    env.check_binaries(env.clio_run, env.clioctl)
    tcp_port, http_port = free_port(), free_port()
    env.write_config(env.config_text().replace(
        "  num_threads: 4\n", f"  num_threads: 4\n  tcp_port: {tcp_port}\n  http_port: {http_port}\n"))
    env.start_runtime()
    code = (
        "import socket, sys, time\n"
        "tcp, http = int(sys.argv[1]), int(sys.argv[2])\n"
        "held = [socket.create_connection(('127.0.0.1', tcp)) for _ in range(70)]\n"
        "slow = [socket.create_connection(('127.0.0.1', http)) for _ in range(20)]\n"
        "print('ready', flush=True)\n"
        "req = b'GET /metrics HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nX-Slow: ' + b'a' * 1000\n"
        "for i in range(len(req)):\n"
        "    for s in slow:\n"
        "        try:\n"
        "            s.send(req[i:i + 1])\n"
        "        except OSError:\n"
        "            pass\n"
        "    time.sleep(2)\n")
    p = subprocess.Popen(["/usr/bin/python3", "-c", code, str(tcp_port), str(http_port)], user=ATTACKER,
                         group=ATTACKER, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline().strip()
        check(line == "ready", f"the attacker could not connect: {line!r} "
                               f"{p.stderr.read() if p.poll() is not None else ''}")
        e = env.env()
        e["CLIO_IPC_MODE"] = "tcp"
        cp = run_cmd([env.clioctl, "stat"], env=e)
        check(cp.returncode == 0, "root's TCP client was locked out by the attacker's 70 silent connections:\n" +
              describe(cp))
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=60) as r:
            body = r.read().decode()
        check("clio_runtime_pools" in body, f"GET /metrics beside the slow clients answered {body[:200]!r}")
        tail = env.log_tail()
        check(f"uid {ATTACKER} holds 8 connections waiting for their hello" in tail,
              "no warning named the attacker's refused TCP connections")
        check(f"HTTP: uid {ATTACKER} holds 6 connections already" in tail,
              "no warning named the attacker's refused HTTP connections")
        log("70 silent TCP connections and 20 slow HTTP clients of one user: root's TCP client and GET /metrics served")
    finally:
        p.kill()
        p.wait()


def scenario_tls(env):
    """TCP off loopback over TLS, with the real binaries: a runtime on 0.0.0.0 with a certificate
    `openssl` makes; clioctl over TCP with the node's config (pinned to that certificate) and with
    a client's config (the CA, a server name) works; a client without TLS, one that trusts
    another certificate, and a key file others can read are refused, each naming its cause."""
    env.check_binaries(env.clio_run, env.clioctl)
    if not shutil.which("openssl"):
        raise TestFailure("the openssl command is missing (scripts/install-deps.sh --tests installs it)")
    tls = os.path.join(env.T, "tls")
    os.makedirs(tls)

    def cert(name, san):
        cp = run_cmd(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                      "-days", "2", "-subj", f"/CN={name}", "-addext", f"subjectAltName={san}",
                      "-keyout", os.path.join(tls, name + ".key"), "-out", os.path.join(tls, name + ".pem")])
        check(cp.returncode == 0, "openssl could not make a certificate:\n" + describe(cp))
        os.chmod(os.path.join(tls, name + ".key"), 0o600)
        return os.path.join(tls, name + ".pem"), os.path.join(tls, name + ".key")

    crt, key = cert("node", "DNS:node1.example,IP:127.0.0.1")
    other, _ = cert("other", "DNS:node1.example,IP:127.0.0.1")
    port = free_port()
    base = env.config_text()
    tls_keys = f"  tcp_address: 0.0.0.0\n  tcp_port: {port}\n  tls_cert_file: {crt}\n  tls_key_file: {key}\n"
    env.write_config(base.replace("  num_threads: 4\n", "  num_threads: 4\n" + tls_keys))
    os.chmod(key, 0o644)
    cp = run_cmd([env.clio_run, "start"], env=env.env(), keep_as=env.logs("clio_run_open_key"))
    check(cp.returncode != 0 and "runtime.tls_key_file" in cp.stdout + cp.stderr + env.log_tail(),
          "a world-readable TLS key was not refused by name:\n" + describe(cp))
    os.chmod(key, 0o600)
    env.start_runtime()
    e = env.env()
    e["CLIO_IPC_MODE"] = "tcp"
    cp = run_cmd([env.clioctl, "stat"], env=e)
    check(cp.returncode == 0, "clioctl over TLS with the node's config failed:\n" + describe(cp))

    def client_config(keys):
        path = os.path.join(env.T, "client.yaml")
        with open(path, "w") as f:
            f.write(f"runtime:\n  state_dir: {env.state}\n  tcp_port: {port}\n" + keys)
        return run_cmd([env.clioctl, "stat"], env=env.env(conf=path) | {"CLIO_IPC_MODE": "tcp"})

    cp = client_config(f"  tcp_address: 127.0.0.1\n  tls_ca_file: {crt}\n  tls_server_name: node1.example\n")
    check(cp.returncode == 0, "clioctl with a client's config (CA, server name) failed:\n" + describe(cp))
    cp = client_config("  tcp_address: 127.0.0.1\n")
    check(cp.returncode != 0 and "if the runtime serves TLS" in cp.stderr,
          "a client without TLS was not told why it failed:\n" + describe(cp))
    cp = client_config(f"  tcp_address: 127.0.0.1\n  tls_ca_file: {other}\n")
    check(cp.returncode != 0 and "does not verify" in cp.stderr,
          "a client trusting another certificate was not refused by name:\n" + describe(cp))
    log("TLS on 0.0.0.0: clioctl served with the node's and a client's config; plain, wrong-CA and "
        "world-readable-key cases refused by name")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise TestFailure(f"no VmRSS for pid {pid}")


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise TestFailure(f"no VmHWM for pid {pid}")


# A frame's header (daemon/ipc.h): magic, version, flags, pool, method, request id, payload
# length, client. Pool 999 does not exist: the answer is an error, after the payload was read.
FRAME = "struct.pack('<IHHIIQII', 0x4f494c43, 4, 0, 999, 1, {id}, {n}, 0)"


def scenario_frame_budget(env):
    """What a connection may cost the runtime (docs/ipc.md, "Limits"):
    - a reader (the attacker) that announces a 64 MiB frame is dropped at its header, and the
      runtime allocates nothing for it;
    - a reader holds at most 32 connections: of 40 opened at once, exactly 32 are answered;
    - root's frames wait for runtime.max_inflight: 8 frames of 48 MiB sent at once on 8
      connections, with max_inflight 64MiB, are read one at a time, so the runtime's peak memory
      grows by about one frame, not eight (the peak is read after every answer came: no timing)."""
    env.check_binaries(env.clio_run, env.clioctl)
    http_port = free_port()
    env.write_config(env.config_text().replace(
        "  num_threads: 4\n", f"  num_threads: 4\n  max_inflight: 64MiB\n  http_port: {http_port}\n"))
    # Under ASan a freed buffer waits in a quarantine, resident: the peak would count every
    # frame's buffer whatever the budget. Without it, freed frames leave as they would.
    saved = os.environ.get("ASAN_OPTIONS")
    os.environ["ASAN_OPTIONS"] = ((saved + ":") if saved else "") + "quarantine_size_mb=0"
    try:
        pid = env.start_runtime()
    finally:
        if saved is None:
            os.environ.pop("ASAN_OPTIONS", None)
        else:
            os.environ["ASAN_OPTIONS"] = saved
    os.chmod(env.T, 0o755)
    sock = os.path.join(env.T, "clio.sock")
    code = (
        "import socket, struct, sys\n"
        "path = sys.argv[1]\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(path)\n"
        "s.sendall(" + FRAME.format(id=1, n="64 << 20") + ")\n"
        "try:\n"
        "    s.sendall(b'x' * 4096); closed = s.recv(64) == b''\n"
        "except OSError:\n"
        "    closed = True\n"
        "print('big frame:', 'closed' if closed else 'answered', flush=True)\n"
        "socks = []\n"
        "for i in range(40):\n"
        "    c = socket.socket(socket.AF_UNIX); c.connect(path); socks.append(c)\n"
        "answered = 0\n"
        "for i, c in enumerate(socks):\n"
        "    try:\n"
        "        c.sendall(" + FRAME.format(id="i + 2", n=0) + ")\n"
        "        if len(c.recv(24)) == 24: answered += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print('answered:', answered, flush=True)\n")
    before = rss_kib(pid)
    p = subprocess.run(["/usr/bin/python3", "-c", code, sock], user=ATTACKER, group=ATTACKER,
                       extra_groups=attacker_groups(env), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    check(p.returncode == 0, f"the attacker's script failed:\n{p.stdout}{p.stderr}")
    check("big frame: closed" in p.stdout, f"a reader's frame announcing 64 MiB was not refused at its header: {p.stdout}")
    check("answered: 32" in p.stdout, f"a reader opened 40 connections, 32 should be served: {p.stdout}")
    grown = rss_kib(pid) - before
    check(grown < 16 * 1024, f"the runtime grew by {grown // 1024} MiB for a reader's refused 64 MiB frame")
    check("who may call reader methods only" in env.log_tail(), "no warning named the reader's refused frame")
    log(f"a reader's 64 MiB frame refused at its header (runtime grew {grown} KiB); 32 of its 40 connections served")

    # Root: 8 frames of 48 MiB at once, budget 64 MiB.
    frames, size = 8, 48 << 20
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # resets the peak (VmHWM) to now
    base = vm_hwm_kib(pid)
    import struct
    import threading
    conns = []
    for i in range(frames):
        c = socket.socket(socket.AF_UNIX)
        c.connect(sock)
        c.sendall(struct.pack('<IHHIIQII', 0x4f494c43, 4, 0, 999, 1, i + 1, size, 0))
        conns.append(c)
    answers = [None] * frames
    data = b"\0" * size

    def send(i):
        try:
            conns[i].sendall(data)
            h = b""
            while len(h) < 24:
                got = conns[i].recv(24 - len(h))
                if not got:
                    break
                h += got
            answers[i] = len(h) == 24
        except OSError as e:
            answers[i] = e
    threads = [threading.Thread(target=send, args=(i,)) for i in range(frames)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for c in conns:
        c.close()
    check(all(a is True for a in answers), f"root's 48 MiB frames were not all answered: {answers}")
    peak = vm_hwm_kib(pid) - base
    log(f"{frames} frames of {size >> 20} MiB at once, max_inflight 64MiB: the runtime's peak grew {peak // 1024} MiB")
    check(peak < 160 * 1024, f"the runtime's peak grew by {peak // 1024} MiB for {frames} frames of 48 MiB under a "
                             f"64 MiB budget: they were read at once ({frames * 48} MiB)")
    cp = run_cmd([env.clioctl, "stat"], env=env.env())
    check(cp.returncode == 0, "clioctl stat after the frames:\n" + describe(cp))
    # Each frame gave its share back before its answer went out: nothing is left in flight.
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=60) as r:
        text = r.read().decode()
    inflight = [line for line in text.splitlines() if line.startswith("clio_runtime_inflight_bytes ")]
    check(inflight == ["clio_runtime_inflight_bytes 0"], f"after every answer, /metrics says {inflight}")


def scenario_state_modes(env):
    """The state directory is the runtime's (0700, or 0750 with group clio), what it makes there
    is the runtime's alone, a too-long socket_path is a usage error that makes nothing, a token
    file others may read is set back to 0600 with a warning, and a token file or state directory
    of another user stops the start."""
    env.check_binaries(env.clio_run, env.clioctl)
    # A socket path longer than a sockaddr_un holds: exit 2 naming the key, nothing made.
    long_sock = os.path.join(env.T, "s" * 120)
    env.write_config(env.config_text().replace(f'  socket_path: "{env.T}/clio.sock"', f'  socket_path: "{long_sock}"'))
    cp = run_cmd([env.clio_run, "start"], env=env.env())
    check(cp.returncode == 2, f"a {len(long_sock)}-byte socket_path: exit {cp.returncode}, not 2\n" + describe(cp))
    check("runtime.socket_path" in cp.stderr and "at most 107" in cp.stderr, "the error does not name the key:\n" + describe(cp))
    check(not os.path.exists(env.state), "a refused config made the state directory")
    check(not os.path.exists(f"/dev/shm/{env.ram_name}_node0") and not os.path.exists(f"/dev/shm/{env.ram_name}"),
          "a refused config made the RAM tier's segment")

    # An error in the last compose entry is found after the CTE opened its tiers and the
    # metadata: the start (exit 2, naming the key) removes the state it made.
    env.write_config(env.config_text().replace('    chunk_size: "1MiB"', '    chunk_size: "3000"'))
    cp = run_cmd([env.clio_run, "start"], env=env.env())
    check(cp.returncode == 2, f"a bad chunk_size in the filesystem's entry: exit {cp.returncode}, not 2\n" + describe(cp))
    check("chunk_size" in cp.stderr, "the error does not name the key:\n" + describe(cp))
    check(not os.path.exists(env.state), "a start refused for its config left the state directory it made: "
          + (", ".join(sorted(os.listdir(env.state))) if os.path.isdir(env.state) else ""))
    check(not os.path.exists(f"/dev/shm/{env.ram_name}_node0"), "a refused start left the RAM tier's segment")
    # A state directory that was there before is the operator's: the same refusal keeps it.
    os.makedirs(env.state, mode=0o700)
    marker = os.path.join(env.state, "keep-me")
    with open(marker, "w") as f:
        f.write("x")
    cp = run_cmd([env.clio_run, "start"], env=env.env())
    check(cp.returncode == 2, f"the bad chunk_size again: exit {cp.returncode}, not 2\n" + describe(cp))
    check(os.path.exists(marker), "a refused start removed a state directory it did not make")
    shutil.rmtree(env.state)

    env.write_config()
    os.makedirs(env.state, mode=0o755)
    os.chmod(env.state, 0o755)  # as an older runtime left it
    env.start_runtime()
    try:
        import grp
        grp.getgrnam("clio")
        want = 0o750
    except KeyError:
        want = 0o700
    mode = stat.S_IMODE(os.stat(env.state).st_mode)
    check(mode == want, f"state directory mode {oct(mode)}, not {oct(want)}")
    loose = []
    for root, dirs, names in os.walk(env.state):
        for n in dirs + names:
            p = os.path.join(root, n)
            st = os.lstat(p)
            if stat.S_ISSOCK(st.st_mode) or stat.S_ISLNK(st.st_mode):
                continue
            if st.st_mode & 0o077:
                loose.append(f"{p} {oct(stat.S_IMODE(st.st_mode))}")
    check(not loose, "files of the state directory others may read:\n" + "\n".join(loose))
    env.stop_runtime()

    # A token others could read (an older release's advice for TCP clients) is set back to 0600,
    # with a warning that says what to do; one of another user stops the start.
    token = os.path.join(env.state, "token")
    os.chmod(token, 0o644)
    env.start_runtime()
    mode = stat.S_IMODE(os.stat(token).st_mode)
    check(mode == 0o600, f"the token file is {oct(mode)} after the start, not 0600")
    with open(env.logs("clio_run") + ".stderr") as f:
        check("had mode 0644: set to 0600" in f.read(), "no warning about the token's mode")
    env.stop_runtime()
    os.chown(token, ATTACKER, ATTACKER)
    cp = run_cmd([env.clio_run, "start"], env=env.env(), keep_as=env.logs("clio_run"))
    check(cp.returncode != 0, "the runtime started with a token file of another user\n" + describe(cp))
    check(token in cp.stderr and f"belongs to uid {ATTACKER}" in cp.stderr,
          "the refusal does not name the token and its owner:\n" + describe(cp))
    os.chown(token, 0, 0)
    # A state directory of another user is refused: its owner could write the pool log.
    os.chown(env.state, ATTACKER, ATTACKER)
    cp = run_cmd([env.clio_run, "start"], env=env.env(), keep_as=env.logs("clio_run"))
    check(cp.returncode != 0 and f"belongs to uid {ATTACKER}" in cp.stderr,
          "the runtime started in a state directory of another user\n" + describe(cp))
    os.chown(env.state, 0, 0)
    env.start_runtime()
    env.stop_runtime()


SCENARIOS = {
    "caller_classes": scenario_caller_classes,
    "squatter": scenario_squatter,
    "no_tcp_fallback": scenario_no_tcp_fallback,
    "frame_budget": scenario_frame_budget,
    "flood": scenario_flood,
    "state_modes": scenario_state_modes,
    "tls": scenario_tls,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--only", choices=sorted(SCENARIOS))
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("security_test: SKIPPED: needs root (it becomes uid 65534)", file=sys.stderr)
        return 77
    passed = failed = 0
    for name in ([args.only] if args.only else list(SCENARIOS)):
        env = Env(args.build_dir, name, keep=args.keep)
        log(f"== {name}")
        try:
            SCENARIOS[name](env)
            passed += 1
            log(f"PASS {name}")
        except Exception as e:  # noqa: BLE001 - report every failure the same way
            failed += 1
            log(f"FAIL {name}: {e}")
            if not isinstance(e, TestFailure):
                traceback.print_exc()
            log(env.log_tail())
        finally:
            env.cleanup()
    log(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
