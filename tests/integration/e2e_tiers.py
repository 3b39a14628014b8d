"""End-to-end scenarios of tiers: adding, draining and removing tiers at run time, a tier on a
bdev pool composed earlier, and safe-bdev arrays.
"""

import json
import os

from harness import *  # noqa: F401,F403
from harness import _expect_config_refused, _text  # noqa: E402,F401


def scenario_tier_ops(env):
    """clioctl tier drain / undrain / lifespan / add / rm on a running node, through the mount:
    the RAM tier drained to empty while files stay readable byte for byte; lifespans set and
    read back; a tier added at run time takes flushed data, survives a restart and is removed
    once drained; a wrong tier name, a bad value and a stopped daemon each give their exit
    code."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    port = free_port()
    env.write_config(env.config_text().replace('  num_threads: 4\n', f'  num_threads: 4\n  http_port: {port}\n', 1))
    env.start_runtime()
    env.mount()
    files = {f"f{i}.bin": os.urandom(300000 + i * 77777) for i in range(6)}
    for rel, data in files.items():
        with open(os.path.join(env.mnt, rel), "wb") as f:
            f.write(data)
    ram = next(t for t in env.tier_stat() if t["type"] == "ram")
    disk = next(t for t in env.tier_stat() if t["type"] == "file")
    check(ram["used"] > 0, f"the RAM tier holds nothing after the writes: {ram}")
    check(disk["name"] == os.path.join(env.state, "tiers", "disk.dat_node0") and os.path.exists(disk["name"]),
          f"the file tier is not named and stored as <path>_node0: {disk['name']}")

    def ctl(*args):
        return run_cmd([env.clioctl, *args], env=env.env())

    cp = ctl("tier", "drain", ram["name"], "--json")
    check(cp.returncode == 0, "tier drain failed\n" + describe(cp))
    out = json.loads(_text(cp.stdout))
    check(out["bytes_left"] == 0 and out["draining"] and out["moved_copies"] > 0,
          f"tier drain answer: {out}")
    ram_after = next(t for t in env.tier_stat() if t["name"] == ram["name"])
    check(ram_after["used"] == 0, f"the RAM tier holds {ram_after['used']} bytes after drain")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after drain")
    # Drained: new writes go to the file tier; still readable.
    with open(os.path.join(env.mnt, "late.bin"), "wb") as f:
        f.write(b"z" * 100000)
    check(next(t for t in env.tier_stat() if t["name"] == ram["name"])["used"] == 0,
          "a drained tier took new data")
    listed = {t["name"]: t for t in json.loads(_text(ctl("tier", "list", "--json").stdout))}
    check(listed[ram["name"]]["draining"] and listed[ram["name"]]["state"].startswith("drained"),
          f"tier list of the drained RAM tier: {listed[ram['name']]}")
    check(listed[disk["name"]]["state"] == "active", f"tier list of the disk tier: {listed[disk['name']]}")
    # The runtime's words (Cte::TierStates), not the CLI's: the config opened both tiers.
    check(listed[ram["name"]]["condition"] == "drained" and listed[disk["name"]]["condition"] == "active" and
          listed[ram["name"]]["from_config"] and listed[disk["name"]]["from_config"],
          f"tier list's condition and from_config: {listed}")
    cp = ctl("tier", "undrain", ram["name"])
    check(cp.returncode == 0, "tier undrain failed\n" + describe(cp))
    cp = ctl("tier", "list")
    rows = [l.split() for l in _text(cp.stdout).splitlines()]
    check(cp.returncode == 0 and rows[0][:3] == ["NAME", "ID", "TYPE"] and
          {r[0]: r[-1] for r in rows[1:]} == {ram["name"]: "active", disk["name"]: "active"},
          "tier list after undrain\n" + describe(cp))

    cp = ctl("tier", "lifespan", "get", disk["name"], "--json")
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["lifetime_days"] >= 999999,
          "lifespan get of a healthy tier\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"], "30")
    check(cp.returncode == 0 and "30 days" in _text(cp.stdout), "lifespan set\n" + describe(cp))
    cp = ctl("tier", "lifespan", "get", disk["name"], "--json")
    check(json.loads(_text(cp.stdout))["lifetime_days"] == 30, "lifespan read back\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"], "3")
    dying = {t["name"]: t for t in json.loads(_text(ctl("tier", "list", "--json").stdout))}[disk["name"]]
    check(cp.returncode == 0 and dying["state"].startswith("dying"), f"tier list of a dying tier: {dying}")
    cp = ctl("tier", "lifespan", "set", disk["name"], "30")
    check(cp.returncode == 0, "lifespan set back to 30\n" + describe(cp))

    # A tier added to the running node takes the flushed copies (it outranks the disk tier),
    # comes back after a restart, and leaves only once drained.
    added_path = os.path.join(env.state, "tiers", "added.dat")
    cp = ctl("tier", "add", added_path, "bdev_type=file", "capacity_limit=256MB", "growth_unit=16MB",
             "score=0.5", "--json")
    check(cp.returncode == 0, "tier add failed\n" + describe(cp))
    added = json.loads(_text(cp.stdout))
    # Tier pool names end in _node<N> (runtime.node_id, 0 here); commands take either name.
    check(added["name"] == added_path + "_node0" and added["score"] == 0.5, f"tier add answer: {added}")
    check(os.path.exists(added["name"]), f"no tier file at {added['name']}")
    cp = ctl("tier", "add", added_path, "score=0.4")
    check(cp.returncode == 1 and "already" in _text(cp.stderr), "adding a tier twice\n" + describe(cp))
    more = {f"g{i}.bin": os.urandom(200000 + i * 4099) for i in range(4)}
    for rel, data in more.items():
        with open(os.path.join(env.mnt, rel), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    now = {t["name"]: t for t in env.tier_stat()}
    check(now[added["name"]]["used"] > 0, f"the added tier took no flushed data: {now[added['name']]}")
    files.update(more)
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    now = {t["name"]: t for t in env.tier_stat()}
    check(added["name"] in now and now[added["name"]]["id"] == added["id"],
          f"the added tier did not come back after a restart: {list(now)}")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after a restart with the added tier")
    cp = ctl("tier", "rm", added_path)
    check(cp.returncode == 1 and "drain it first" in _text(cp.stderr),
          "removing a tier that holds data\n" + describe(cp))
    # On a terminal the drain draws a progress line (bytes left and moved, rate, time left) on
    # stderr, ending with the final figures.
    proc, out, tty_out = run_with_tty_stderr([env.clioctl, "tier", "drain", added_path], env.env())
    check(proc.returncode == 0, f"drain of the added tier: exit {proc.returncode}\n{_text(out)}{_text(tty_out)}")
    check(b"0 B left" in tty_out and b"moved" in tty_out and b"/s" in tty_out,
          f"no progress line on the terminal: {tty_out!r}")
    values, _ = scrape(port)
    check(any(f'tier="{added["name"]}"' in k for k in values), "/metrics has no series of the added tier")
    listed = {t["name"]: t for t in json.loads(_text(ctl("tier", "list", "--json").stdout))}
    check(not listed[added["name"]]["from_config"], f"the added tier is listed as the config's: {listed}")
    cp = ctl("tier", "rm", added_path, "--json")
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["removed"] and
          not json.loads(_text(cp.stdout))["in_config"], "tier rm\n" + describe(cp))
    check(added["name"] not in {t["name"] for t in env.tier_stat()}, "the removed tier is still listed")
    # Its series leave /metrics with it (a pool name must not live on in the export).
    values, _ = scrape(port)
    left = [k for k in values if f'tier="{added["name"]}"' in k]
    check(not left, f"/metrics still has series of the removed tier: {left[:5]}")
    check(any(f'tier="{disk["name"]}"' in k for k in values), "/metrics lost the remaining tiers' series")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after removing the added tier")
    cp = ctl("tier", "add", os.path.join(env.T, "bad.dat"), "capacity_limit=12XB")
    check(cp.returncode == 2 and "capacity_limit" in _text(cp.stderr),
          "tier add with a bad size is a usage error naming the key\n" + describe(cp))
    cp = ctl("tier", "add", os.path.join(env.T, "bad.dat"), "capacity_limit")
    check(cp.returncode == 2 and "KEY=VALUE" in _text(cp.stderr), "tier add without KEY=VALUE\n" + describe(cp))
    # A tier a client adds makes its file beneath the state directory (or runtime.allowed_paths).
    outside = os.path.join(env.T, "outside.dat")
    cp = ctl("tier", "add", outside, "bdev_type=file", "capacity_limit=64MB", "score=0.3")
    check(cp.returncode == 1 and "is outside them" in _text(cp.stderr) and not os.path.exists(outside),
          "tier add of a file outside the state directory\n" + describe(cp))
    check(not any(t["name"].startswith(outside) for t in env.tier_stat()), "the refused tier is listed")
    cp = ctl("tier", "rm", "nope")
    check(cp.returncode == 1 and "no tier 'nope'" in _text(cp.stderr), "rm of an unknown tier\n" + describe(cp))
    cp = ctl("tier", "rm", disk["name"])
    check(cp.returncode == 1 and "drain it first" in _text(cp.stderr),
          "rm of the config's file tier, not drained\n" + describe(cp))

    cp = ctl("tier", "drain", "nope")
    check(cp.returncode == 1 and "no tier 'nope'" in _text(cp.stderr),
          "drain of an unknown tier\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"], "-3")
    check(cp.returncode == 2, "a negative lifespan is a usage error\n" + describe(cp))
    cp = ctl("tier", "lifespan", "set", disk["name"])
    check(cp.returncode == 2, "lifespan set without days is a usage error\n" + describe(cp))
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "at the end")
    env.unmount()
    env.stop_runtime()
    cp = ctl("tier", "drain", ram["name"])
    check(cp.returncode == 1 and _text(cp.stderr).strip(), "drain with the daemon down\n" + describe(cp))
    cp = ctl("tier", "list")
    check(cp.returncode == 1 and _text(cp.stderr).strip(), "tier list with the daemon down\n" + describe(cp))


ATTACHED_CONFIG = """\
runtime:
  state_dir: "{T}/state"
  socket_path: "{T}/clio.sock"
metadata:
  path: "${{CLIO_STATE_DIR}}/metadata"
  commit_interval_ms: 500
compose:
  - mod_name: clio_bdev
    pool_name: "${{CLIO_STATE_DIR}}/array.dat"
    pool_id: "301.0"
    bdev_type: file
    capacity: "1GB"
    growth_unit: "64MB"
  - mod_name: clio_bdev
    pool_name: "${{CLIO_STATE_DIR}}/spare.dat"
    pool_id: "302.0"
    bdev_type: file
    capacity: "256MB"
    growth_unit: "64MB"
  - mod_name: clio_cte_core
    pool_name: clio_cte_core
    pool_id: "512.0"
    flush_interval_ms: 500
    storage:
      - path: "ram::{ram_name}"
        bdev_type: ram
        capacity_limit: "32MB"
        score: 1.0
      - existing_pool_id: "301.0"
        existing_pool_module: clio_bdev
        score: 0.2
  - mod_name: clio_fs
    pool_name: clio_fs
    pool_id: "600.0"
    cte_pool: clio_cte_core
"""


def scenario_attached_pool(env):
    """A CTE tier attached to a bdev pool composed before it (existing_pool_id +
    existing_pool_module): fsynced files land on the pool's device, survive a clean restart and
    a kill -9 byte for byte; a second pool attached with `clioctl tier add` comes back after the
    restarts and leaves with `tier rm` once drained; a storage entry naming a pool that is not
    there is refused with the file, line and key."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    os.makedirs(env.state, exist_ok=True)
    env.write_config(ATTACHED_CONFIG.format(T=env.T, ram_name=env.ram_name))
    env.start_runtime()
    env.mount()
    files = {f"a{i}.bin": os.urandom(700000 + i * 65537) for i in range(5)}
    for rel, data in files.items():
        with open(os.path.join(env.mnt, rel), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    array = os.path.join(env.state, "array.dat")
    spare = os.path.join(env.state, "spare.dat")
    # clioctl pool list: every pool, in compose order, with its module.
    cp = run_cmd([env.clioctl, "pool", "list", "--json"], env=env.env())
    check(cp.returncode == 0, "clioctl pool list\n" + describe(cp))
    pools = [(p["id"], p["name"], p["module"]) for p in json.loads(_text(cp.stdout))]
    check(pools == [(301, array, "clio_bdev"), (302, spare, "clio_bdev"), (512, "clio_cte_core", "clio_cte_core"),
                    (600, "clio_fs", "clio_fs")], f"pool list: {pools}")
    cp = run_cmd([env.clioctl, "pool", "list"], env=env.env())
    check(cp.returncode == 0 and "clio_cte_core" in _text(cp.stdout) and array in _text(cp.stdout),
          "the pool list table\n" + describe(cp))
    tiers = {t["name"]: t for t in env.tier_stat()}
    check(array in tiers and tiers[array]["used"] >= sum(len(d) for d in files.values()),
          f"the attached pool's device does not hold the fsynced files: {tiers}")
    cp = run_cmd([env.clioctl, "tier", "add", "existing_pool_id=302.0", "existing_pool_module=clio_bdev",
                  "score=0.5", "--json"], env=env.env())
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["name"] == spare,
          "attaching a pool at run time\n" + describe(cp))
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after a clean restart")
    env.crash()
    env.start_runtime()
    env.mount()
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after kill -9")
    check(spare in {t["name"] for t in env.tier_stat()}, "the pool attached at run time did not come back")
    for args in (["drain", spare], ["rm", spare]):
        cp = run_cmd([env.clioctl, "tier", *args], env=env.env())
        check(cp.returncode == 0, f"tier {args[0]} of the attached spare\n" + describe(cp))
    check(spare not in {t["name"] for t in env.tier_stat()}, "the removed spare is still listed")
    for rel, data in files.items():
        check_exact(os.path.join(env.mnt, rel), data, "after the spare left")
    env.unmount()
    env.stop_runtime()
    cp = run_cmd([env.clioctl, "pool", "list"], env=env.env())
    check(cp.returncode == 1 and "clioctl:" in _text(cp.stderr), "pool list with the runtime down\n" + describe(cp))
    bad = ATTACHED_CONFIG.format(T=env.T, ram_name=env.ram_name).replace('existing_pool_id: "301.0"',
                                                                          'existing_pool_id: "309.0"')
    conf = env.write_config(bad, os.path.join(env.T, "bad_attach.yaml"))
    env.confs.append(conf)
    bad_line = bad.splitlines().index('      - existing_pool_id: "309.0"') + 1
    _expect_config_refused(env, conf, [conf, f":{bad_line}:", "existing_pool_id", "no pool 309.0"],
                           "a storage entry attached to a missing pool")

# A safe-bdev (3 data + 1 parity file members) as the tier behind a small RAM tier.
SAFE_MEMBER = """\
  - mod_name: clio_bdev
    pool_name: "${{CLIO_STATE_DIR}}/m{i}.dat"
    pool_id: "30{j}.0"
    bdev_type: file
    capacity: "64MB"
    growth_unit: "16MB"
"""
SAFE_CONFIG = """\
runtime:
  state_dir: "{T}/state"
  socket_path: "{T}/clio.sock"
metadata:
  path: "${{CLIO_STATE_DIR}}/metadata"
  commit_interval_ms: 500
compose:
{members}  - mod_name: clio_safe_bdev
    pool_name: "safe::array0"
    pool_id: "310.0"
    members: ["301.0", "302.0", "303.0", "304.0"]
    max_failures: 1
    chunk_size: "64KB"
    alloc_log: "${{CLIO_STATE_DIR}}/safe0.alloc_log"
    rebuild_bandwidth: "64MB"
  - mod_name: clio_cte_core
    pool_name: clio_cte_core
    pool_id: "512.0"
    flush_interval_ms: 500
    storage:
      - path: "ram::{ram_name}"
        bdev_type: ram
        capacity_limit: "16MB"
        score: 1.0
      - existing_pool_id: "310.0"
        existing_pool_module: clio_safe_bdev
        score: 0.2
  - mod_name: clio_fs
    pool_name: clio_fs
    pool_id: "600.0"
    cte_pool: clio_cte_core
"""


def scenario_safe_bdev(env):
    """A CTE tier attached to a safe-bdev of four file members (3 + 1) under the mount: one
    member file fails while files are written and read; nothing is lost, tier stat and
    `clioctl array status` name the failed member, the array stays degraded across a kill -9,
    and `clioctl array recover` rebuilds the member once its device works again."""
    env.check_binaries(env.clio_run, env.clio_fuse, env.clioctl)
    os.makedirs(env.state, exist_ok=True)
    members = "".join(SAFE_MEMBER.format(i=i, j=i + 1) for i in range(4))
    port = free_port()
    env.write_config(SAFE_CONFIG.format(T=env.T, ram_name=env.ram_name, members=members).replace(
        '  socket_path: "', f'  http_port: {port}\n  socket_path: "', 1))
    env.start_runtime()
    env.mount()
    m1 = os.path.join(env.state, "m1.dat")

    def array_status():
        cp = run_cmd([env.clioctl, "array", "status", "safe::array0", "--json"], env=env.env())
        check(cp.returncode == 0, "clioctl array status\n" + describe(cp))
        return json.loads(_text(cp.stdout))

    def safe_tier():
        tiers = [t for t in env.tier_stat() if t["name"] == "safe::array0"]
        check(len(tiers) == 1, "the safe-bdev tier is not listed by tier stat")
        return tiers[0]

    files = {}

    def write(prefix, count, size):
        for i in range(count):
            rel = f"{prefix}{i}.bin"
            files[rel] = os.urandom(size + i * 4099)
            with open(os.path.join(env.mnt, rel), "wb") as f:
                f.write(files[rel])
                f.flush()
                os.fsync(f.fileno())

    def check_all(when):
        for rel, data in files.items():
            check_exact(os.path.join(env.mnt, rel), data, when)

    write("a", 10, 3 * MiB)  # 30 MiB: more than the RAM tier holds
    check(safe_tier()["health"] == "ok", f"a healthy array: {safe_tier()}")
    check(safe_tier()["used"] > 0, "nothing reached the array")

    with open(m1 + ".fail", "w") as f:
        f.write("test: member m1 fails\n")
    write("b", 6, 2 * MiB)
    check_all("with member m1 failed")
    health = safe_tier()["health"]
    check(health.startswith("degraded") and m1 in health, f"tier stat health does not name m1: {health!r}")
    st = array_status()
    check(st["members"][1]["name"] == m1 and st["members"][1]["state"] == "failed",
          f"array status does not show m1 failed: {st['members']}")
    cp = run_cmd([env.clioctl, "array", "status", "safe::array0"], env=env.env())
    check(cp.returncode == 0 and "failed" in _text(cp.stdout) and m1 in _text(cp.stdout),
          "the array status table\n" + describe(cp))

    env.crash()
    env.start_runtime()
    env.mount()
    check_all("after kill -9 with m1 failed")
    # The RAM tier started empty: those reads came from the array, a third of them rebuilt.
    st = array_status()
    check(st["reconstructed_reads"] > 0, "no read was served by reconstruction")
    # The same state through /metrics: the array's own series, labelled as the array tier.
    series, _ = scrape(port)
    lab = 'tier="safe::array0",type="safe"'
    check(series.get(f'clio_bdev_medium_state{{state="failed_members",{lab}}}') == 1,
          "clio_bdev_medium_state failed_members is not 1 for the degraded array")
    check(series.get(f'clio_bdev_medium_events_total{{event="chunk_reconstructed",{lab}}}') ==
          st["reconstructed_reads"], "the reconstructed-chunk count differs from array status")
    check(series.get(f'clio_bdev_healthy{{{lab}}}') == 0, "a degraded array is reported healthy")
    write("c", 3, 1 * MiB)
    check(array_status()["members"][1]["state"] == "failed", "m1 came back as working after the restart")

    # The device works again: rebuild it in place while files are read.
    os.remove(m1 + ".fail")
    cp = run_cmd([env.clioctl, "array", "recover", "safe::array0", m1, "302.0"], env=env.env())
    check(cp.returncode == 0, "clioctl array recover\n" + describe(cp))
    check_all("during the rebuild")
    wait_until(lambda: not array_status()["rebuilding"], "the rebuild of m1", timeout=300, interval=0.2)
    st = array_status()
    check(not st["degraded"] and st["members"][1]["state"] == "ok" and st["rebuilds_done"] == 1,
          f"after the rebuild: {st}")
    check(safe_tier()["health"] == "ok", f"tier stat after the rebuild: {safe_tier()}")
    cp = run_cmd([env.clioctl, "array", "verify", "safe::array0", "--json"], env=env.env())
    check(cp.returncode == 0 and json.loads(_text(cp.stdout))["bad_stripes"] == 0,
          "a scrub after the rebuild\n" + describe(cp))
    cp = run_cmd([env.clioctl, "array", "recover", "safe::array0", "/no/such/member", "302.0"], env=env.env())
    check(cp.returncode == 2 and "no member" in _text(cp.stderr), "recover of an unknown member\n" + describe(cp))
    env.unmount()
    env.stop_runtime()
    env.start_runtime()
    env.mount()
    check_all("after a clean restart")
    env.unmount()
    env.stop_runtime()
