"""End-to-end scenarios of operation: /metrics, admin commands, the dashboard, bad input, and
pools made and destroyed at run time.
"""

import html.parser
import errno as errno_mod
import json
import os
import re
import shutil

from harness import *  # noqa: F401,F403
from harness import _expect_config_refused, _text, _write_all  # noqa: E402,F401


def scenario_metrics(env):
    """/metrics after a known workload: the counters moved by exactly the workload's amounts,
    the gauges agree with `clioctl tier stat`, a taken port leaves the filesystem working, and
    the Grafana board queries only series the runtime exports."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    port = free_port()
    text = env.config_text().replace('  num_threads: 4\n', f'  num_threads: 4\n  http_port: {port}\n', 1)
    # Only fsync flushes (no background pass between a file's writes), so the bytes copied to
    # disk are exactly the bytes written.
    text = text.replace("    flush_interval_ms: 500\n", "    flush_interval_ms: 3600000\n", 1)
    env.write_config(text)

    # A port already taken: the runtime logs it and serves its clients anyway.
    import socket
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen(1)
    env.start_runtime()
    cp = run_cmd([env.clio_run, "status"], env=env.env())
    out = _text(cp.stdout)
    check(f"http not serving: HTTP port 127.0.0.1:{port} is in use" in out,
          f"clio_run status does not say the HTTP port is taken:\n{out}")
    env.mount()
    with open(os.path.join(env.mnt, "while-taken"), "wb") as f:
        f.write(b"still works")
    check(read_file(os.path.join(env.mnt, "while-taken")) == b"still works", "file written with the port taken")
    env.unmount()
    env.stop_runtime()
    holder.close()

    env.start_runtime()
    out = _text(run_cmd([env.clio_run, "status"], env=env.env()).stdout)
    check(f"http http://127.0.0.1:{port}/metrics" in out, f"clio_run status lacks the HTTP line:\n{out}")
    env.mount()
    tiers = {t["name"]: t for t in env.tier_stat()}
    ram = next(n for n, t in tiers.items() if str(t["type"]) == "ram")
    disk = next(n for n, t in tiers.items() if str(t["type"]) == "file")
    before, _ = scrape(port)

    # The workload: N files of known sizes, each written once and fsynced; two rmdirs of a
    # non-empty directory (ENOTEMPTY); three XATTR_CREATE of an existing attribute (EEXIST).
    sizes = [1 * MiB + 7, 3 * MiB, 200 * KiB, 5]
    total = sum(sizes)
    for i, n in enumerate(sizes):
        fd = os.open(os.path.join(env.mnt, f"m{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            _write_all(fd, os.urandom(n))
            os.fsync(fd)
        finally:
            os.close(fd)
    os.mkdir(os.path.join(env.mnt, "full"))
    with open(os.path.join(env.mnt, "full", "x"), "wb") as f:
        f.write(b"x")
    total += 1
    for _ in range(2):
        try:
            os.rmdir(os.path.join(env.mnt, "full"))
            raise TestFailure("rmdir of a non-empty directory succeeded")
        except OSError as e:
            check(e.errno == errno_mod.ENOTEMPTY, f"rmdir of a non-empty directory: {e}")
    target = os.path.join(env.mnt, "m0")
    os.setxattr(target, "user.k", b"v")
    for _ in range(3):
        try:
            os.setxattr(target, "user.k", b"w", os.XATTR_CREATE)
            raise TestFailure("setxattr XATTR_CREATE of an existing attribute succeeded")
        except OSError as e:
            check(e.errno == errno_mod.EEXIST, f"setxattr XATTR_CREATE: {e}")
    fd = os.open(os.path.join(env.mnt, "full", "x"), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    after, types = scrape(port)

    def delta(series):
        return after.get(series, 0) - before.get(series, 0)

    def expect(series, want):
        got = delta(series)
        check(got == want, f"{series} moved by {got}, expected {want}")

    expect('clio_fs_operations_total{op="create",outcome="ok"}', len(sizes) + 1)
    expect('clio_fs_operations_total{op="fsync",outcome="ok"}', len(sizes) + 1)
    expect('clio_fs_operations_total{op="mkdir",outcome="ok"}', 1)
    expect('clio_fs_operations_total{op="rmdir",outcome="ENOTEMPTY"}', 2)
    expect('clio_fs_operations_total{op="setxattr",outcome="ok"}', 1)
    expect('clio_fs_operations_total{op="setxattr",outcome="EEXIST"}', 3)
    expect('clio_fs_bytes_total{op="write"}', total)
    # Every byte went to the RAM tier first (score 1.0), and fsync copied each one to disk.
    expect(f'clio_cte_placed_bytes_total{{tier="{ram}"}}', total)
    expect(f'clio_bdev_bytes_total{{op="write",tier="{ram}",type="ram"}}', total)
    expect('clio_cte_flushed_bytes_total', total)
    expect(f'clio_bdev_bytes_total{{op="write",tier="{disk}",type="file"}}', total)
    check(delta(f'clio_bdev_bytes_total{{op="allocate",tier="{disk}",type="file"}}') >= total,
          "the disk tier allocated less than it wrote")
    expect('clio_cte_flushes_total', sum(-(-n // MiB) for n in sizes) + 1)  # one per 1 MiB chunk
    check(delta('clio_cte_flush_lag_seconds_count') == delta('clio_cte_flushes_total'),
          "every flush records its lag")
    check(after.get("clio_runtime_client_connections", 0) >= 1, "the FUSE daemon's connection is not counted")

    # Gauges agree with clioctl, read with nothing changing in between.
    tiers = {t["name"]: t for t in env.tier_stat()}
    now, _ = scrape(port)
    for name, kind in ((ram, "ram"), (disk, "file")):
        lab = f'{{tier="{name}",type="{kind}"}}'
        for key, series in (("used", "clio_bdev_used_bytes"), ("capacity", "clio_bdev_capacity_bytes")):
            check(now.get(series + lab) == tiers[name][key],
                  f"{series}{lab} = {now.get(series + lab)} but clioctl tier stat says {key} = {tiers[name][key]}")
        check(now.get("clio_bdev_healthy" + lab) == 1, f"tier {name} is not reported healthy")

    # The Grafana board charts only what the runtime exports.
    with open(os.path.join(SRC_DIR, "etc", "grafana", "clio-dashboard.json")) as f:
        board = json.load(f)
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    check(len(exprs) >= 20, f"the board has only {len(exprs)} queries")
    names = set()
    for e in exprs:
        for m in re.findall(r"\b(clio_[a-z0-9_]+)", e):
            names.add(re.sub(r"_(bucket|count|sum)$", "", m) if m.endswith(("_bucket", "_count", "_sum")) and
                      re.sub(r"_(bucket|count|sum)$", "", m) in types else m)
    # Only devices with inner state publish these; e2e safe_bdev checks them on an array.
    medium = {"clio_bdev_medium_events_total", "clio_bdev_medium_state"}
    missing = sorted(n for n in names - medium if n not in types)
    check(not missing, f"the Grafana board queries series the runtime does not export: {missing}")
    log(f"metrics: {len(after)} series; the board's {len(names)} metric names all exported")
    env.unmount()
    env.stop_runtime()


def scenario_admin_ops(env):
    """clioctl stat, locate and flush on a running node with the flusher held back: stat shows
    the workers, clients, pools and each tier's dirty bytes; locate shows every chunk of a file
    dirty on the RAM tier, then clean on the disk tier once `flush FILE` ran; `flush DIR` and
    `flush` empty the flush queue, and what they flushed survives kill -9; wrong paths, a
    wrong pool, bad usage and a stopped daemon each give their exit code and say why."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    # No background flush: only clioctl flush moves dirty copies to the disk tier.
    env.write_config(env.config_text().replace("    flush_interval_ms: 500\n",
                                               "    flush_interval_ms: 3600000\n", 1))
    env.start_runtime()
    env.mount()

    def ctl(*args):
        return run_cmd([env.clioctl, *args], env=env.env())

    def ctl_json(*args):
        cp = ctl(*args, "--json")
        check(cp.returncode == 0, f"clioctl {' '.join(args)} --json failed\n" + describe(cp))
        try:
            return json.loads(_text(cp.stdout))
        except json.JSONDecodeError as e:
            raise TestFailure(f"clioctl {' '.join(args)} --json printed invalid JSON ({e}):\n{_text(cp.stdout)}")

    tiers = env.tier_stat()
    ram = next(t["name"] for t in tiers if t["type"] == "ram")
    disk = next(t["name"] for t in tiers if t["type"] == "file")
    a_path = os.path.join(env.mnt, "a.bin")
    sub = os.path.join(env.mnt, "sub")
    b_path, c_path = os.path.join(sub, "b.bin"), os.path.join(sub, "c.bin")
    a, b, c = os.urandom(3 * MiB + 512 * KiB), os.urandom(200 * KiB), os.urandom(700 * KiB)
    os.mkdir(sub)
    for path, data in ((a_path, a), (b_path, b)):
        with open(path, "wb") as f:  # closed, not fsynced: dirty on the RAM tier
            f.write(data)

    st = ctl_json("stat")
    rt = st["runtime"]
    check(rt["worker_threads"] == 4 and rt["pools"] == 2 and rt["pid"] == env.runtime_pid(),
          f"stat runtime: {rt}")
    # clio-fuse keeps connections open, and clioctl's own counts.
    check(rt["client_connections"] >= 2, f"stat counts {rt['client_connections']} client connections")
    check([t["name"] for t in st["tiers"]] == [t["name"] for t in tiers],
          f"stat tiers {st['tiers']} differ from tier stat {tiers}")
    by_name = {t["name"]: t for t in st["tiers"]}
    check(by_name[ram]["dirty"] >= len(a) + len(b) and isinstance(by_name[ram]["dirty_limit"], int),
          f"stat: the RAM tier's dirty bytes after {len(a) + len(b)} bytes written: {by_name[ram]}")
    check(by_name[disk]["dirty"] == 0 and by_name[disk]["dirty_limit"] is None,
          f"stat: the disk tier has dirty bytes: {by_name[disk]}")
    wb = st["writeback"]
    check(wb["dirty_blobs"] == 5 and wb["dirty_bytes"] == by_name[ram]["dirty"],
          f"stat writeback after writing 4 + 1 chunks: {wb}")
    cp = ctl("stat")
    check(cp.returncode == 0 and "4 worker threads" in _text(cp.stdout) and "in 5 blobs" in _text(cp.stdout),
          "stat table\n" + describe(cp))

    def chunk_sizes(data):
        return [min(MiB, len(data) - i) for i in range(0, len(data), MiB)]

    loc = ctl_json("locate", a_path)
    check(loc["size"] == len(a) and loc["chunk_size"] == MiB and loc["mount"] == env.mnt,
          f"locate header: { {k: v for k, v in loc.items() if k != 'chunks'} }")
    check([ch["index"] for ch in loc["chunks"]] == [0, 1, 2, 3] and
          [ch["offset"] for ch in loc["chunks"]] == [0, MiB, 2 * MiB, 3 * MiB],
          f"locate chunks: {[(ch['index'], ch['offset']) for ch in loc['chunks']]}")
    for ch, size in zip(loc["chunks"], chunk_sizes(a)):
        check(len(ch["copies"]) == 1, f"chunk {ch['index']} before flush: {ch['copies']}")
        cp0 = ch["copies"][0]
        check(cp0["tier"] == ram and cp0["dirty"] and cp0["bytes"] == size and
              sum(e["size"] for e in cp0["extents"]) >= size,
              f"chunk {ch['index']} before flush: expected {size} dirty bytes on {ram}: {cp0}")

    cp = ctl("flush", a_path)
    check(cp.returncode == 0 and a_path in _text(cp.stdout), "flush FILE\n" + describe(cp))
    loc = ctl_json("locate", a_path)
    for ch, size in zip(loc["chunks"], chunk_sizes(a)):
        check(not any(k["dirty"] for k in ch["copies"]) and
              any(k["tier"] == disk and k["bytes"] == size and k["extents"] for k in ch["copies"]),
              f"chunk {ch['index']} after flush: expected {size} clean bytes on {disk}: {ch['copies']}")
    cp = ctl("locate", a_path)
    check(cp.returncode == 0 and "4 chunks of 1 MiB" in _text(cp.stdout) and disk in _text(cp.stdout)
          and "dirty" not in _text(cp.stdout).split("\n", 2)[-1], "locate table\n" + describe(cp))
    check(ctl_json("stat")["writeback"]["dirty_blobs"] == 1, "flush FILE left other files' blobs dirty")

    with open(c_path, "wb") as f:
        f.write(c)
    out = ctl_json("flush", sub)
    check(out["files"] == 2 and out["directories"] == 1 and out["bytes"] == len(b) + len(c) and not out["errors"],
          f"flush DIR: {out}")
    check(ctl_json("stat")["writeback"]["dirty_blobs"] == 0, "flush DIR left its files dirty")
    d_path = os.path.join(env.mnt, "d.bin")
    with open(d_path, "wb") as f:
        f.write(b"d" * (300 * KiB))
    out = ctl_json("flush")
    check(out["dirty_blobs_before"] == 1 and out["dirty_blobs_after"] == 0 and
          out["dirty_bytes_before"] >= 300 * KiB and out["dirty_bytes_after"] == 0, f"flush (all): {out}")
    # On a terminal, flush draws a progress line on stderr ending with nothing left.
    e_path = os.path.join(env.mnt, "e.bin")
    with open(e_path, "wb") as f:
        f.write(b"e" * (2 * MiB))
    proc, out, tty_out = run_with_tty_stderr([env.clioctl, "flush"], env.env())
    check(proc.returncode == 0 and b"in 2 dirty blobs" in out, f"flush on a terminal: exit {proc.returncode}\n"
          f"{_text(out)}{_text(tty_out)}")
    check(b"0 B left" in tty_out and b"flushed" in tty_out and b"/s" in tty_out,
          f"no flush progress line on the terminal: {tty_out!r}")

    # Error paths, daemon up.
    for args, code, needle in (
            (("locate", os.path.join(env.mnt, "nosuch")), 1, "No such file"),
            (("locate", env.conf), 1, "not on a CLIO mount"),
            (("locate", sub), 1, "is a directory"),
            (("locate", a_path, "--pool", "nosuch"), 1, "no clio_fs pool named 'nosuch'"),
            (("locate",), 2, "path is required"),
            (("flush", env.conf), 1, "not on a CLIO mount"),
            (("flush", a_path, "extra"), 2, "extra"),
            (("stat", "--bogus"), 2, "--bogus")):
        cp = ctl(*args)
        check(cp.returncode == code and needle in _text(cp.stderr) + _text(cp.stdout),
              f"clioctl {' '.join(args)}: expected exit {code} saying {needle!r}\n" + describe(cp))

    # What the flushes made durable survives kill -9 of the runtime and of clio-fuse.
    env.crash()
    env.start_runtime()
    env.mount()
    for path, data in ((a_path, a), (b_path, b), (c_path, c), (d_path, b"d" * (300 * KiB)),
                       (e_path, b"e" * (2 * MiB))):
        check_exact(path, data, "after flush and kill -9")
    env.unmount()
    env.stop_runtime()
    for args in (("stat",), ("flush",)):
        cp = ctl(*args)
        check(cp.returncode == 1 and os.path.join(env.T, "clio.sock") in _text(cp.stderr),
              f"clioctl {' '.join(args)} with the daemon stopped: exit 1 naming the socket\n" + describe(cp))


class _DashboardTables(html.parser.HTMLParser):
    """Collects, from the dashboard's rendered DOM, each row of table#tiers (data-tier, and
    every cell's data-field -> data-value or text), the data-pool of each row of table#pools,
    the items of ul#errors, and body's data-refreshes."""

    def __init__(self):
        super().__init__()
        self.tiers, self.pools, self.errors = {}, [], []
        self.refreshes = None
        self._table = self._row = self._field = None
        self._in_error = False
        self._text = ""
        self._value = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.refreshes = int(a.get("data-refreshes", "0"))
        elif tag == "table":
            self._table = a.get("id")
        elif tag == "tr" and self._table == "tiers" and "data-tier" in a:
            self._row = self.tiers.setdefault(a["data-tier"], {})
        elif tag == "tr" and self._table == "pools" and "data-pool" in a:
            self.pools.append(a["data-pool"])
        elif tag == "td" and self._row is not None and "data-field" in a:
            self._field, self._value, self._text = a["data-field"], a.get("data-value"), ""
        elif tag == "li":
            self._in_error, self._text = True, ""

    def handle_endtag(self, tag):
        if tag == "td" and self._field is not None:
            self._row[self._field] = self._value if self._value is not None else self._text
            self._field = None
        elif tag == "tr":
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "li" and self._in_error:
            self.errors.append(self._text)
            self._in_error = False

    def handle_data(self, data):
        if self._field is not None or self._in_error:
            self._text += data


def scenario_dashboard(env):
    """The runtime's dashboard (GET /) in headless Chromium: after it has refreshed itself
    more than once, its tiers table equals `clioctl tier stat --json` and `clioctl stat --json`
    (capacity, used, dirty, lifespan, score, persistence), its pools table lists the composed
    pools, and a malformed client frame shows under recent errors. /api/v1/status carries the
    same. A screenshot is saved as a test artifact (CLIO_TEST_ARTIFACTS, else
    <build>/test-artifacts/dashboard.png)."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    chromium = shutil.which("chromium")
    check(chromium is not None, "chromium is not installed (scripts/install-deps.sh installs it)")
    port = free_port()
    text = env.config_text().replace('  num_threads: 4\n', f'  num_threads: 4\n  http_port: {port}\n', 1)
    # Nothing moves by itself under the comparisons: no background flush, no reorganizer.
    text = text.replace("    flush_interval_ms: 500\n", "    flush_interval_ms: 3600000\n    reorganize: false\n", 1)
    env.write_config(text)
    env.start_runtime()
    env.mount()
    for i in range(3):
        with open(os.path.join(env.mnt, f"f{i}.bin"), "wb") as f:
            f.write(os.urandom(700 * KiB + i * 4099))
    # A broken client frame: the runtime drops that connection and logs a warning.
    import socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.path.join(env.T, "clio.sock"))
        s.sendall(b"NOTCLIO!" * 4)
        s.settimeout(30)
        check(s.recv(1) == b"", "the runtime answered a frame with a bad magic")
    base = f"http://127.0.0.1:{port}"
    import urllib.request
    import urllib.error

    def status():
        with urllib.request.urlopen(base + "/api/v1/status", timeout=30) as r:
            check(r.headers.get_content_type() == "application/json",
                  f"/api/v1/status content type {r.headers.get_content_type()}")
            return json.loads(r.read())

    st = wait_until(lambda: (lambda j: j if any("dropping client connection" in e for e in j["errors"]) else None)(status()),
                    "the dropped connection's warning in /api/v1/status")
    check(st["runtime"]["worker_threads"] == 4 and st["runtime"]["pid"] == env.runtime_pid() and
          st["runtime"]["config"] == env.conf, f"/api/v1/status runtime: {st['runtime']}")
    check([p["name"] for p in st["pools"]] == ["clio_cte_core", "clio_fs"], f"pools: {st['pools']}")
    tiers = env.tier_stat()
    cte_state = st["pools"][0]["state"]
    check([t["name"] for t in cte_state["tiers"]] == [t["name"] for t in tiers],
          f"/api/v1/status tiers {cte_state['tiers']} differ from tier stat {tiers}")
    try:
        urllib.request.urlopen(base + "/nothing", timeout=30)
        check(False, "GET /nothing answered 200")
    except urllib.error.HTTPError as e:
        check(e.code == 404 and b"/api/v1/status" in e.read(), f"GET /nothing: {e.code}")

    profile = os.path.join(env.T, "chromium")
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
              "--virtual-time-budget=7000"]
    cp = run_cmd(common + ["--dump-dom", base + "/"], env=env.env())
    check(cp.returncode == 0 and "<table" in _text(cp.stdout), "chromium --dump-dom of the dashboard\n" + describe(cp))
    page = _DashboardTables()
    page.feed(_text(cp.stdout))
    check(page.refreshes is not None and page.refreshes >= 2,
          f"the dashboard refreshed {page.refreshes} times in 7 s of page time (every 2 s expected)")
    stat = {t["name"]: t for t in json.loads(_text(run_cmd([env.clioctl, "stat", "--json"], env=env.env()).stdout))["tiers"]}
    check(sorted(page.tiers) == sorted(t["name"] for t in tiers),
          f"dashboard tiers {sorted(page.tiers)} differ from tier stat {[t['name'] for t in tiers]}")
    for t in tiers:
        row = page.tiers[t["name"]]
        for field in ("capacity", "used", "lifetime_days", "score"):
            check(float(row[field]) == float(t[field]),
                  f"dashboard {t['name']} {field} = {row[field]}, tier stat says {t[field]}")
        check(row["type"] == t["type"] and row["persistence"] == t["persistence"],
              f"dashboard {t['name']}: {row} vs {t}")
        check(int(row["dirty"]) == stat[t["name"]]["dirty"],
              f"dashboard {t['name']} dirty = {row['dirty']}, clioctl stat says {stat[t['name']]['dirty']}")
    ram = next(t["name"] for t in tiers if t["type"] == "ram")
    check(int(page.tiers[ram]["dirty"]) > 0, f"the RAM tier shows no dirty bytes: {page.tiers[ram]}")
    check(page.pools == ["clio_cte_core", "clio_fs"], f"dashboard pools: {page.pools}")
    check(any("dropping client connection" in e for e in page.errors), f"dashboard errors: {page.errors}")

    artifacts = os.environ.get("CLIO_TEST_ARTIFACTS") or os.path.join(env.build_dir, "test-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    shot = os.path.join(artifacts, "dashboard.png")
    if os.path.exists(shot):
        os.unlink(shot)
    cp = run_cmd(common + ["--window-size=1400,1000", f"--screenshot={shot}", base + "/"], env=env.env())
    check(cp.returncode == 0 and os.path.exists(shot), "chromium --screenshot\n" + describe(cp))
    with open(shot, "rb") as f:
        png = f.read()
    check(png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10000, f"the screenshot is not a PNG ({len(png)} bytes)")
    log(f"dashboard screenshot: {shot}")
    env.unmount()
    env.stop_runtime()


def scenario_bad_input(env):
    env.check_binaries(env.clio_run, env.clio_fuse)
    good = env.config_text()
    # The good config is written first: every bad config shares its state dir and socket, so
    # `clio_run status` with it tells whether a refused start left a runtime behind.
    env.write_config(good)

    # (a) unknown key, on a known line.
    lines = good.splitlines(keepends=True)
    idx = next(i for i, l in enumerate(lines) if l.startswith("runtime:")) + 1
    lines.insert(idx, "  bogus_key: 1\n")
    bad_line = idx + 1  # 1-based
    conf_a = env.write_config("".join(lines), os.path.join(env.T, "bad_key.yaml"))
    env.confs.append(conf_a)
    _expect_config_refused(env, conf_a, [conf_a, "bogus_key",
                                         re.compile(rf"(?<!\d){bad_line}(?!\d)")],
                           "(a) unknown key")

    # (b) bad size.
    conf_b = env.write_config(env.config_text(ram_capacity="12XB"),
                              os.path.join(env.T, "bad_size.yaml"))
    env.confs.append(conf_b)
    _expect_config_refused(env, conf_b, [conf_b, "capacity_limit", "12XB"], "(b) bad size")

    # (b2) a reclaim window past its range (clio_fs orphan_reclaim_s, 0 to 3600 s).
    text = good.replace('    chunk_size: "1MiB"\n', '    chunk_size: "1MiB"\n    orphan_reclaim_s: 99999\n', 1)
    check(text != good, "(b2) the config template has no clio_fs chunk_size line to follow")
    conf_b2 = env.write_config(text, os.path.join(env.T, "bad_reclaim.yaml"))
    env.confs.append(conf_b2)
    _expect_config_refused(env, conf_b2, [conf_b2, "orphan_reclaim_s", "3600"], "(b2) bad orphan_reclaim_s")

    # (c) missing config file.
    conf_c = os.path.join(env.T, "does_not_exist.yaml")
    _expect_config_refused(env, conf_c, [conf_c], "(c) missing config file")

    # (e) clio-fuse while the runtime is NOT running.
    check(env.runtime_status() != 0, "(e) precondition: runtime should not be running")
    mnt_e = os.path.join(env.T, "mnt_e")
    os.makedirs(mnt_e)
    env.mountpoints.add(mnt_e)
    cp = run_cmd([env.clio_fuse, mnt_e], env=env.env())
    check(cp.returncode != 0, "(e) clio-fuse succeeded without a runtime\n" + describe(cp))
    check(re.search(r"not running", _text(cp.stderr), re.I),
          "(e) stderr does not say the runtime is not running\n" + describe(cp))
    check(not is_mounted(mnt_e), f"(e) {mnt_e} is a mount point after the failed mount")
    check(not find_fuse_pids(env.clio_fuse, mnt_e), "(e) a clio-fuse process was left running")
    log("(e) mount without a runtime refused as expected")

    env.start_runtime()

    # (d) mount point that does not exist.
    mnt_d = os.path.join(env.T, "no", "such", "dir")
    env.mountpoints.add(mnt_d)
    cp = run_cmd([env.clio_fuse, mnt_d], env=env.env())
    err_lines = [l for l in _text(cp.stderr).splitlines() if l.strip()]
    check(cp.returncode != 0, "(d) clio-fuse succeeded on a missing mount point\n" + describe(cp))
    check(len(err_lines) == 1, f"(d) expected one line on stderr, got {len(err_lines)}\n"
          + describe(cp))
    check(mnt_d in err_lines[0], "(d) stderr does not name the mount point\n" + describe(cp))
    check(not is_mounted(mnt_d) and not os.path.exists(mnt_d),
          f"(d) {mnt_d} exists or is mounted after the failed mount")
    check(not find_fuse_pids(env.clio_fuse, mnt_d), "(d) a clio-fuse process was left running")
    log("(d) missing mount point refused as expected")

    # (f) a directory that is already a CLIO mount.
    env.mount()
    probe = os.urandom(10000)
    with open(os.path.join(env.mnt, "probe.bin"), "wb") as f:
        f.write(probe)
    n_before = len(mount_entries(env.mnt))
    cp = run_cmd([env.clio_fuse, env.mnt], env=env.env())
    check(cp.returncode != 0, "(f) a second clio-fuse on a mounted directory succeeded\n"
          + describe(cp))
    n_after = len(mount_entries(env.mnt))
    check(n_after == n_before, f"(f) {env.mnt} has {n_after} mount entries after the refused "
                               f"mount, {n_before} before (stacked mount?)")
    check(len(find_fuse_pids(env.clio_fuse, env.mnt)) <= 1,
          "(f) more than one clio-fuse process serves the mount point")
    check_exact(os.path.join(env.mnt, "probe.bin"), probe, "(f) existing mount")
    check(os.listdir(env.mnt) == ["probe.bin"], f"(f) listing: {os.listdir(env.mnt)}")
    with open(os.path.join(env.mnt, "probe2.bin"), "wb") as f:
        f.write(b"still works")
    check_exact(os.path.join(env.mnt, "probe2.bin"), b"still works", "(f) existing mount")
    log(f"(f) double mount refused as expected: {_text(cp.stderr).strip()[:200]}")
    env.unmount()
    env.stop_runtime()


POOL_COMPOSE = """\
compose:
  - mod_name: clio_bdev
    pool_name: "${CLIO_STATE_DIR}/c0.dat"
    pool_id: "2001.0"
    bdev_type: file
    capacity: "16MB"
    growth_unit: "8MB"
  - mod_name: clio_bdev
    pool_name: "${CLIO_STATE_DIR}/c1.dat"
    pool_id: "2002.0"
    bdev_type: file
    capacity: "16MB"
    growth_unit: "8MB"
  - mod_name: clio_bdev
    pool_name: "${CLIO_STATE_DIR}/c2.dat"
    pool_id: "2003.0"
    bdev_type: file
    capacity: "16MB"
    growth_unit: "8MB"
  - mod_name: clio_safe_bdev
    pool_name: "safe::composed"
    pool_id: "2010.0"
    members: ["2001.0", "2002.0", "2003.0"]
    max_failures: 1
    chunk_size: "64KB"
    alloc_log: "${CLIO_STATE_DIR}/composed.alloc_log"
"""


def scenario_pool_ops(env):
    """Pools made and destroyed on the running node: `pool create` of a file bdev (its device
    file appears) kept across restarts with --restart, one that is not; `compose start` of three
    members and a safe-bdev over them (array status healthy), a member refused destroy while the
    array uses it, `compose stop` destroying the array first; after a restart only --restart
    pools are back, after `start --fresh` none; every bad argument, clash and a stopped daemon
    give their exit code and say why; a --restart pool attached as a tier (`tier add
    existing_pool_id=`) comes back with its data and is destroyed only once removed."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    env.write_config()
    env.start_runtime()

    def ctl(*args):
        return run_cmd([env.clioctl, *args], env=env.env())

    def names():
        cp = ctl("pool", "list", "--json")
        check(cp.returncode == 0, "pool list\n" + describe(cp))
        return [p["name"] for p in json.loads(_text(cp.stdout))]

    def refused(args, code, pattern, what):
        cp = ctl(*args)
        check(cp.returncode == code and re.search(pattern, _text(cp.stderr)),
              f"{what}: expected exit {code} and /{pattern}/ on stderr\n" + describe(cp))

    base = names()
    check(len(base) == 2, f"the default config composes the CTE and the filesystem: {base}")
    # A client's pool makes its files beneath the state directory (or runtime.allowed_paths) only.
    outside = os.path.join(env.T, "outside.dat")
    refused(("pool", "create", "clio_bdev", outside, "bdev_type=file", "capacity=32MB"), 1,
            r"outside them: a client may make the runtime create files only beneath", "a file outside the state dir")
    check(not os.path.exists(outside), f"a refused pool create made {outside}")
    os.symlink(env.T, os.path.join(env.state, "link"))
    refused(("pool", "create", "clio_bdev", os.path.join(env.state, "link", "x.dat"), "bdev_type=file",
             "capacity=32MB"), 1, r"leaves its directory", "a path through a symbolic link")
    check(not os.path.exists(os.path.join(env.T, "x.dat")), "a pool create followed a symbolic link")
    # The CTE's own tier file is locked while it is open: a second device on it is refused.
    tier_file = os.path.join(env.state, "tiers", "disk.dat_node0")
    check(os.path.exists(tier_file), f"no tier file at {tier_file}")
    refused(("pool", "create", "clio_bdev", tier_file, "bdev_type=file", "capacity=32MB"), 1, r"is in use",
            "a pool on the CTE's open tier file")
    dev = os.path.join(env.state, "extra.dat")
    cp = ctl("pool", "create", "clio_bdev", dev, "bdev_type=file", "capacity=32MB", "growth_unit=8MB",
             "--restart")
    check(cp.returncode == 0 and f"created {dev} (clio_bdev, id 1000)" in _text(cp.stdout),
          "pool create of a file bdev\n" + describe(cp))
    check(os.path.exists(dev), f"the new pool's device file {dev} was not created")
    scratch = f"ram::{env.ram_name}_scratch"
    cp = ctl("pool", "create", "clio_bdev", scratch, "bdev_type=ram", "capacity=16MB", "--id", "1500.0", "--json")
    check(cp.returncode == 0, "pool create --json\n" + describe(cp))
    made = json.loads(_text(cp.stdout))
    check(len(made) == 1 and made[0]["id"] == 1500 and made[0]["module"] == "clio_bdev" and
          "16777216" in made[0]["describe"], f"pool create --json: {made}")
    check(names() == base + [dev, scratch], f"pool list after two creates: {names()}")

    refused(("pool", "create", "clio_nosuch", "x"), 2, r"unknown module 'clio_nosuch' \(known: .*clio_bdev",
            "an unknown module")
    refused(("pool", "create", "clio_bdev", "ram::bad", "bdev_type=ram", "capacity=12XB"), 2, r"capacity",
            "a bad size")
    refused(("pool", "create", "clio_bdev", "ram::bad", "bdev_type=ram", "colour=red"), 2,
            r"colour: unknown key", "an unknown key")
    refused(("pool", "create", "clio_bdev", "ram::bad", "capacity"), 2, r"not KEY=VALUE", "a word, not KEY=VALUE")
    refused(("pool", "create", "clio_bdev", dev, "bdev_type=file"), 1, r"AlreadyExists.*is running",
            "a second pool of one name")
    refused(("pool", "create", "clio_bdev", "ram::bad", "bdev_type=ram", "--id", "1000.0"), 1,
            r"pool id 1000 is taken by pool", "a taken id")
    refused(("pool", "create", "clio_bdev", "ram::bad", "--id", "x.y"), 2, r"bad pool_id", "a malformed id")
    refused(("pool", "destroy", base[0]), 1, r"comes from the config", "destroying a pool of the config")
    refused(("pool", "destroy", "nosuch"), 1, r"no pool named 'nosuch'", "destroying an unknown pool")
    refused(("pool", "create", "clio_bdev"), 2, r"name", "a missing name")
    check("ram::bad" not in names(), f"a refused create left a pool behind: {names()}")

    compose_file = os.path.join(env.T, "more.yaml")
    with open(compose_file, "w") as f:
        f.write(POOL_COMPOSE)
    cp = ctl("compose", "start", compose_file)
    check(cp.returncode == 0 and _text(cp.stdout).count("created") == 4, "compose start\n" + describe(cp))
    members = [os.path.join(env.state, f"c{i}.dat") for i in range(3)]
    check(names() == base + [dev, scratch] + members + ["safe::composed"], f"pool list after compose start: {names()}")
    cp = ctl("array", "status", "safe::composed", "--json")
    check(cp.returncode == 0, "array status of the composed array\n" + describe(cp))
    st = json.loads(_text(cp.stdout))
    check(st["health"] == "ok" and st["failed_members"] == 0 and st["k"] == 2 and
          [m["state"] for m in st["members"]] == ["ok"] * 3, f"array status of the composed array: {st}")
    refused(("pool", "destroy", members[1]), 1, r"is used by pool 'safe::composed'", "destroying a member in use")
    refused(("compose", "start", compose_file), 1, r"AlreadyExists", "compose start twice")
    cp = ctl("compose", "stop", compose_file)
    out = _text(cp.stdout)
    check(cp.returncode == 0 and out.find("destroyed safe::composed") < out.find(f"destroyed {members[0]}") and
          out.count("destroyed") == 4, "compose stop: the array goes before its members\n" + describe(cp))
    check(names() == base + [dev, scratch], f"pool list after compose stop: {names()}")
    cp = ctl("compose", "stop", compose_file)
    check(cp.returncode == 0 and "nothing destroyed" in _text(cp.stdout), "compose stop again\n" + describe(cp))
    refused(("compose", "start", os.path.join(env.T, "missing.yaml")), 2, r"missing\.yaml", "a missing compose file")
    cp = run_cmd([env.clio_run, "compose", "start", compose_file], env=env.env())
    check(cp.returncode == 0 and _text(cp.stdout).count("created") == 4, "clio_run compose start\n" + describe(cp))

    # A restart brings back the --restart pool only; its device keeps its path.
    env.stop_runtime()
    env.start_runtime()
    check(names() == base + [dev], f"pool list after a restart: {names()}")
    pool_log = os.path.join(env.state, "pools.json")
    with open(pool_log) as f:
        check(dev in f.read(), f"{pool_log} does not record {dev}")

    # A pool made at run time becomes a tier with the keys of a storage entry, if it comes back
    # at every start (--restart); it cannot be destroyed while it is a tier, and it is back
    # after a restart with its data, before the CTE that uses it.
    tmp_pool = f"ram::{env.ram_name}_tmp"
    cp = ctl("pool", "create", "clio_bdev", tmp_pool, "bdev_type=ram", "capacity=16MB", "--id", "1600.0")
    check(cp.returncode == 0, "pool create of a pool without --restart\n" + describe(cp))
    refused(("tier", "add", "existing_pool_id=1600.0", "existing_pool_module=clio_bdev"), 2,
            r"without --restart and would not come back", "a tier on a pool that is not kept")
    cp = ctl("pool", "destroy", tmp_pool)
    check(cp.returncode == 0, "destroying the pool a refused tier add looked at\n" + describe(cp))
    cp = ctl("tier", "add", "existing_pool_id=1000.0", "existing_pool_module=clio_bdev", "score=0.9", "--json")
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["name"] == dev,
          "tier add of a pool made with --restart\n" + describe(cp))
    env.mount()
    payload = os.urandom(3 * 1024 * 1024 + 123)
    with open(os.path.join(env.mnt, "on_pool.bin"), "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    on_dev = next(t for t in env.tier_stat() if t["name"] == dev)
    check(on_dev["used"] >= len(payload), f"the attached pool's tier took no fsynced data: {on_dev}")
    refused(("pool", "destroy", dev), 1, rf"is used by pool '{base[0]}'", "destroying a pool that is a tier")
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    check(sorted(names()) == sorted(base + [dev]), f"pool list after a restart with the attached tier: {names()}")
    check(dev in {t["name"] for t in env.tier_stat()}, "the tier on the logged pool did not come back")
    env.mount()
    check_exact(os.path.join(env.mnt, "on_pool.bin"), payload, "after a restart, on the attached pool's tier")
    cp = ctl("tier", "drain", dev)
    check(cp.returncode == 0, "drain of the attached pool's tier\n" + describe(cp))
    cp = ctl("tier", "rm", dev)
    check(cp.returncode == 0, "tier rm of the attached pool's tier\n" + describe(cp))
    check_exact(os.path.join(env.mnt, "on_pool.bin"), payload, "after removing the attached pool's tier")
    env.unmount()
    cp = ctl("pool", "destroy", dev)
    check(cp.returncode == 0 and f"destroyed {dev}" in _text(cp.stdout),
          "pool destroy once its tier is gone\n" + describe(cp))
    check(not os.path.exists(pool_log), f"{pool_log} is left after its last pool was destroyed")
    check(os.path.exists(dev), "pool destroy removed the device's data; it only stops the pool")
    cp = ctl("pool", "create", "clio_bdev", scratch, "bdev_type=ram", "capacity=16MB", "--restart")
    check(cp.returncode == 0, "pool create --restart of a RAM pool\n" + describe(cp))
    env.stop_runtime()
    cp = run_cmd([env.clio_run, "start", "--fresh"], env=env.env(), keep_as=env.logs("clio_run"))
    check(cp.returncode == 0, "clio_run start --fresh\n" + describe(cp))
    wait_until(lambda: env.runtime_status() == 0, "`clio_run status` to report running")
    check(names() == base, f"pool list after start --fresh: {names()}")
    check(not os.path.exists(pool_log), f"start --fresh left {pool_log}")

    env.stop_runtime()
    for args in (("pool", "create", "clio_bdev", "ram::x", "bdev_type=ram"), ("pool", "destroy", "x"),
                 ("compose", "start", compose_file), ("compose", "stop", compose_file)):
        refused(args, 1, r"\S", f"{' '.join(args[:2])} with the daemon down")
