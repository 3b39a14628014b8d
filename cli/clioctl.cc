// clioctl: the admin CLI: `stat`, `flush [PATH]`, `locate PATH`; `tier list`, `tier stat`, `tier add`,
// `tier rm`, `tier lifespan get|set`, `tier drain`, `tier undrain`; `pool list|create|destroy`;
// `compose start|stop FILE`;
// `array status|add|remove|recover|verify` for safe-bdev arrays.
// Exit codes: 0 ok, 1 operation failed, 2 bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/log.h"
#include "daemon/config.h"
#include "daemon/ipc.h"

int main(int argc, char** argv) {
  clio::InitLogging("ctl");
  CLI::App app{"clioctl: manage CLIO tiers and pools"};
  app.require_subcommand(1);
  clio::CommandContext ctx;
  app.add_flag("--json", ctx.json, "print JSON instead of a table");
  auto* dstat = app.add_subcommand(
      "stat", "the node at a glance: runtime workers and clients, tiers with dirty bytes, the flush queue");
  dstat->add_flag("--json", ctx.json, "print JSON");
  std::string path, fs_pool;
  auto* flush = app.add_subcommand(
      "flush", "write dirty data to persistent tiers and make the metadata durable: every file of the "
               "node, or PATH (a file, or every file under a directory) as fsync would");
  flush->add_option("path", path, "a file or directory on a CLIO mount (default: everything)");
  flush->add_flag("--json", ctx.json, "print JSON");
  auto* locate = app.add_subcommand(
      "locate", "each chunk of a file: the tiers and extents holding its copies, dirty or clean");
  locate->add_option("path", path, "a file on a CLIO mount")->required();
  locate->add_option("--pool", fs_pool, "the mount's clio_fs pool, when the runtime has several");
  locate->add_flag("--json", ctx.json, "print JSON");
  auto* tier = app.add_subcommand("tier", "storage tiers");
  tier->require_subcommand(1);
  auto* tlist = tier->add_subcommand(
      "list", "one row per tier in placement order: id, type, persistence, backend, and its state (active, "
              "draining, drained, dying, dead, degraded)");
  tlist->add_flag("--json", ctx.json, "print JSON instead of a table");
  auto* stat = tier->add_subcommand("stat", "one row per tier: capacity, used, remaining, score, persistence");
  stat->add_flag("--json", ctx.json, "print JSON instead of a table");
  std::string tier_name;
  double days = 0;
  auto* lifespan = tier->add_subcommand("lifespan", "a tier's predicted lifetime in days");
  lifespan->require_subcommand(1);
  auto* lget = lifespan->add_subcommand("get", "print it (999999: healthy)");
  lget->add_option("name", tier_name, "tier name, as in `tier stat`")->required();
  lget->add_flag("--json", ctx.json, "print JSON");
  auto* lset = lifespan->add_subcommand(
      "set", "set it: under 7 days the tier takes no new persistent data, under 1 day nothing");
  lset->add_option("name", tier_name, "tier name, as in `tier stat`")->required();
  lset->add_option("days", days, "days, 0 or more")->required()->check(CLI::Range(0.0, 999999.0));
  lset->add_flag("--json", ctx.json, "print JSON");
  auto* drain = tier->add_subcommand(
      "drain", "move every blob off a tier (files stay readable and writable); waits until empty");
  drain->add_option("name", tier_name, "tier name, as in `tier stat`")->required();
  drain->add_flag("--json", ctx.json, "print JSON");
  auto* undrain = tier->add_subcommand("undrain", "let a drained tier take new data again");
  undrain->add_option("name", tier_name, "tier name, as in `tier stat`")->required();
  std::vector<std::string> add_args;
  auto* add = tier->add_subcommand(
      "add", "add a tier to the running node (kept across restarts), e.g. "
             "`tier add /mnt/nvme1/clio.dat capacity_limit=100GB score=0.5`, or attach a pool "
             "of the config or made with `pool create --restart`: `tier add existing_pool_id=301.0 existing_pool_module=clio_bdev`");
  add->add_option("args", add_args,
                  "PATH (a file path, ram::NAME, or s3://bucket/prefix), then KEY=VALUE settings of a "
                  "storage: entry (bdev_type, capacity_limit, score, growth_unit, persistence_level, "
                  "alloc_log, dirty_limit, perf_metrics.write_bandwidth_mbps, ...)")
      ->required();
  add->add_flag("--json", ctx.json, "print JSON");
  auto* rm = tier->add_subcommand("rm", "remove a drained, empty tier from the running node");
  rm->add_option("name", tier_name, "tier name, as in `tier stat`")->required();
  rm->add_flag("--json", ctx.json, "print JSON");
  auto* pool = app.add_subcommand("pool", "the runtime's pools (module instances: the config's and those made at run time)");
  pool->require_subcommand(1);
  auto* plist = pool->add_subcommand("list", "one row per pool, in creation order: id, name, module, state");
  plist->add_flag("--json", ctx.json, "print JSON instead of a table");
  std::string module, pool_name, pool_id;
  bool restart = false;
  std::vector<std::string> pool_keys;
  auto* pcreate = pool->add_subcommand(
      "create", "create a pool on the running node, e.g. `pool create clio_bdev ram::scratch bdev_type=ram "
                "capacity=1GB`; --restart keeps it across restarts");
  pcreate->add_option("module", module, "the module: clio_bdev, clio_safe_bdev, clio_cte_core, clio_fs")->required();
  pcreate->add_option("name", pool_name, "the pool's name (for clio_bdev: its device, a file path or ram::NAME)")
      ->required();
  pcreate->add_option("keys", pool_keys, "KEY=VALUE settings of a compose entry of that module (a.b=v: key b of map a)");
  pcreate->add_option("--id", pool_id, "the pool id MAJOR.MINOR (default: the first free from 1000.0)");
  pcreate->add_flag("--restart", restart, "record it in the node's pool log so the next start recreates it");
  pcreate->add_flag("--json", ctx.json, "print JSON");
  auto* pdestroy = pool->add_subcommand(
      "destroy", "stop and remove a pool made at run time (once its requests finish; refused while another pool uses it)");
  pdestroy->add_option("name", pool_name, "the pool's name, as in `pool list`")->required();
  pdestroy->add_flag("--json", ctx.json, "print JSON");
  auto* compose = app.add_subcommand("compose", "create or destroy the pools of a compose file on the running node");
  compose->require_subcommand(1);
  std::string compose_file;
  auto* cstart = compose->add_subcommand("start", "create the file's pools in order (all or none)");
  cstart->add_option("file", compose_file, "YAML: `compose:` with a list of pool entries, as in the config")->required();
  cstart->add_flag("--json", ctx.json, "print JSON");
  auto* cstop = compose->add_subcommand("stop", "destroy the file's pools in reverse order");
  cstop->add_option("file", compose_file, "the file given to compose start")->required();
  cstop->add_flag("--json", ctx.json, "print JSON");
  auto* array = app.add_subcommand("array", "erasure-coded safe-bdev arrays (clio_safe_bdev pools)");
  array->require_subcommand(1);
  std::string array_name, member, pool_ref, reason;
  auto* astatus = array->add_subcommand("status", "members, their state and rebuild progress, spares, counters");
  astatus->add_option("array", array_name, "the array's pool name (safe::array0) or id (310.0)")->required();
  astatus->add_flag("--json", ctx.json, "print the pool's Monitor JSON");
  auto* aadd = array->add_subcommand("add", "AddBdev: a clio_bdev pool becomes a spare (a failed member rebuilds onto it)");
  aadd->add_option("array", array_name, "the array's pool name or id")->required();
  aadd->add_option("pool", pool_ref, "a clio_bdev pool composed before the array: id (305.0) or name")->required();
  aadd->add_flag("--json", ctx.json, "print JSON");
  auto* aremove = array->add_subcommand("remove", "RemoveBdev: take a member out of service (it counts as failed)");
  aremove->add_option("array", array_name, "the array's pool name or id")->required();
  aremove->add_option("member", member, "the member, as `array status` names it")->required();
  aremove->add_option("reason", reason, "why, for the status and the log");
  aremove->add_flag("--json", ctx.json, "print JSON");
  auto* arecover = array->add_subcommand(
      "recover", "RecoverBdev: rebuild a failed member onto POOL (a spare, a new pool, or its own once it works)");
  arecover->add_option("array", array_name, "the array's pool name or id")->required();
  arecover->add_option("member", member, "the failed member, as `array status` names it")->required();
  arecover->add_option("pool", pool_ref, "the replacement: a clio_bdev pool's id or name")->required();
  arecover->add_flag("--json", ctx.json, "print JSON");
  auto* averify = array->add_subcommand(
      "verify", "scrub: read every stripe, check every chunk and the parity, repair what does not verify");
  averify->add_option("array", array_name, "the array's pool name or id")->required();
  averify->add_flag("--json", ctx.json, "print JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto cfg = clio::LoadRuntimeConfig();
  if (!cfg.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", cfg.status().message().c_str());
    return 2;
  }
  ctx.rpc = clio::RuntimeClient::OptionsFor(*cfg);
  ctx.config_file = cfg->file;
  ctx.node_id = cfg->node_id;
  for (const clio::ComposeEntry& e : cfg->compose) {
    if (e.mod_name != "clio_cte_core" || !e.node) continue;
    clio::ConfigReader r(e.node, cfg->file);
    const clio::ConfigValue* storage = r.Child("storage");
    if (!storage) continue;
    for (const clio::ConfigValue& item : storage->list) {
      clio::ConfigReader t(&item, cfg->file);
      if (auto p = t.String("path", ""); p.ok() && !p->empty()) ctx.configured_tiers.insert(*p);
    }
  }
  if (*dstat) return clio::Stat(ctx);
  if (*flush) return clio::Flush(ctx, path);
  if (*locate) return clio::Locate(ctx, path, fs_pool);
  if (*tlist) return clio::TierList(ctx);
  if (*stat) return clio::TierStat(ctx);
  if (*lget) return clio::TierLifespan(ctx, tier_name, std::nullopt);
  if (*lset) return clio::TierLifespan(ctx, tier_name, days);
  if (*drain) return clio::TierDrain(ctx, tier_name, false);
  if (*undrain) return clio::TierDrain(ctx, tier_name, true);
  if (*add) return clio::TierAdd(ctx, add_args);
  if (*rm) return clio::TierRm(ctx, tier_name);
  if (*plist) return clio::PoolList(ctx);
  if (*pcreate) return clio::PoolCreate(ctx, module, pool_name, pool_id, restart, pool_keys);
  if (*pdestroy) return clio::PoolDestroy(ctx, pool_name);
  if (*cstart) return clio::Compose(ctx, true, compose_file);
  if (*cstop) return clio::Compose(ctx, false, compose_file);
  if (*astatus) return clio::ArrayStatus(ctx, array_name);
  if (*aadd) return clio::ArrayOp(ctx, "add", array_name, {pool_ref});
  if (*aremove) return clio::ArrayOp(ctx, "remove", array_name, {member, reason});
  if (*arecover) return clio::ArrayOp(ctx, "recover", array_name, {member, pool_ref});
  if (*averify) return clio::ArrayOp(ctx, "verify", array_name, {});
  return 2;
}
