// clioctl: the admin CLI: `stat`, `flush [PATH]`, `locate PATH`; `tier list`, `tier stat`, `tier add`,
// `tier rm`, `tier lifespan get|set`, `tier drain`, `tier undrain`; `pool list|create|destroy`;
// `compose start|stop FILE`;
// `array status|add|remove|recover|verify` for safe-bdev arrays.
// Exit codes: 0 ok, 1 operation failed, 2 bad usage.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/log.h"
#include "daemon/config.h"
#include "daemon/ipc.h"

namespace {

// What the command line says: every option's value, and the command to run.
struct Args {
  clio::CommandContext ctx;
  std::string path, fs_pool, tier_name, module, pool_name, pool_id, compose_file;
  std::string array_name, member, pool_ref, reason;
  double days = 0;
  bool restart = false;
  std::vector<std::string> add_args, pool_keys;
  std::function<int()> run;
};

// When `sub` is the command given, `run` is what it runs (after the config is loaded).
void On(CLI::App* sub, Args& a, std::function<int()> run) {
  sub->callback([&a, run = std::move(run)] { a.run = run; });
}

void AddNodeCommands(CLI::App& app, Args& a) {
  auto* dstat = app.add_subcommand(
      "stat", "the node at a glance: runtime workers and clients, tiers with dirty bytes, the flush queue");
  dstat->add_flag("--json", a.ctx.json, "print JSON");
  auto* flush = app.add_subcommand(
      "flush", "write dirty data to persistent tiers and make the metadata durable: every file of the "
               "node, or PATH (a file, or every file under a directory) as fsync would");
  flush->add_option("path", a.path, "a file or directory on a CLIO mount (default: everything)");
  flush->add_flag("--json", a.ctx.json, "print JSON");
  auto* locate = app.add_subcommand(
      "locate", "each chunk of a file: the tiers and extents holding its copies, dirty or clean");
  locate->add_option("path", a.path, "a file on a CLIO mount")->required();
  locate->add_option("--pool", a.fs_pool, "the mount's clio_fs pool, when the runtime has several");
  locate->add_flag("--json", a.ctx.json, "print JSON");
  On(dstat, a, [&a] { return clio::Stat(a.ctx); });
  On(flush, a, [&a] { return clio::Flush(a.ctx, a.path); });
  On(locate, a, [&a] { return clio::Locate(a.ctx, a.path, a.fs_pool); });
}

void AddTierCommands(CLI::App& app, Args& a) {
  auto* tier = app.add_subcommand("tier", "storage tiers");
  tier->require_subcommand(1);
  auto* tlist = tier->add_subcommand(
      "list", "one row per tier in placement order: id, type, persistence, backend, and its state (active, "
              "draining, drained, dying, dead, degraded)");
  tlist->add_flag("--json", a.ctx.json, "print JSON instead of a table");
  auto* stat = tier->add_subcommand("stat", "one row per tier: capacity, used, remaining, score, persistence");
  stat->add_flag("--json", a.ctx.json, "print JSON instead of a table");
  auto* lifespan = tier->add_subcommand("lifespan", "a tier's predicted lifetime in days");
  lifespan->require_subcommand(1);
  auto* lget = lifespan->add_subcommand("get", "print it (999999: healthy)");
  lget->add_option("name", a.tier_name, "tier name, as in `tier stat`")->required();
  lget->add_flag("--json", a.ctx.json, "print JSON");
  auto* lset = lifespan->add_subcommand(
      "set", "set it: under 7 days the tier takes no new persistent data, under 1 day nothing");
  lset->add_option("name", a.tier_name, "tier name, as in `tier stat`")->required();
  lset->add_option("days", a.days, "days, 0 or more")->required()->check(CLI::Range(0.0, 999999.0));
  lset->add_flag("--json", a.ctx.json, "print JSON");
  auto* drain = tier->add_subcommand(
      "drain", "move every blob off a tier (files stay readable and writable); waits until empty");
  drain->add_option("name", a.tier_name, "tier name, as in `tier stat`")->required();
  drain->add_flag("--json", a.ctx.json, "print JSON");
  auto* undrain = tier->add_subcommand("undrain", "let a drained tier take new data again");
  undrain->add_option("name", a.tier_name, "tier name, as in `tier stat`")->required();
  auto* add = tier->add_subcommand(
      "add", "add a tier to the running node (kept across restarts), e.g. "
             "`tier add /mnt/nvme1/clio.dat capacity_limit=100GB score=0.5`, or attach a pool "
             "of the config or made with `pool create --restart`: `tier add existing_pool_id=301.0 existing_pool_module=clio_bdev`");
  add->add_option("args", a.add_args,
                  "PATH (a file path, ram::NAME, or s3://bucket/prefix), then KEY=VALUE settings of a "
                  "storage: entry (bdev_type, capacity_limit, score, growth_unit, persistence_level, "
                  "alloc_log, dirty_limit, perf_metrics.write_bandwidth_mbps, ...)")
      ->required();
  add->add_flag("--json", a.ctx.json, "print JSON");
  auto* rm = tier->add_subcommand("rm", "remove a drained, empty tier from the running node (a tier the runtime "
                                        "opened from its config at start comes back, empty, at the next start)");
  rm->add_option("name", a.tier_name, "tier name, as in `tier stat`")->required();
  rm->add_flag("--json", a.ctx.json, "print JSON");
  On(tlist, a, [&a] { return clio::TierList(a.ctx); });
  On(stat, a, [&a] { return clio::TierStat(a.ctx); });
  On(lget, a, [&a] { return clio::TierLifespan(a.ctx, a.tier_name, std::nullopt); });
  On(lset, a, [&a] { return clio::TierLifespan(a.ctx, a.tier_name, a.days); });
  On(drain, a, [&a] { return clio::TierDrain(a.ctx, a.tier_name, false); });
  On(undrain, a, [&a] { return clio::TierDrain(a.ctx, a.tier_name, true); });
  On(add, a, [&a] { return clio::TierAdd(a.ctx, a.add_args); });
  On(rm, a, [&a] { return clio::TierRm(a.ctx, a.tier_name); });
}

void AddPoolCommands(CLI::App& app, Args& a) {
  auto* pool = app.add_subcommand("pool", "the runtime's pools (module instances: the config's and those made at run time)");
  pool->require_subcommand(1);
  auto* plist = pool->add_subcommand("list", "one row per pool, in creation order: id, name, module, state");
  plist->add_flag("--json", a.ctx.json, "print JSON instead of a table");
  auto* pcreate = pool->add_subcommand(
      "create", "create a pool on the running node, e.g. `pool create clio_bdev ram::scratch bdev_type=ram "
                "capacity=1GB`; --restart keeps it across restarts");
  pcreate->add_option("module", a.module, "the module: clio_bdev, clio_safe_bdev, clio_cte_core, clio_fs")->required();
  pcreate->add_option("name", a.pool_name, "the pool's name (for clio_bdev: its device, a file path or ram::NAME)")
      ->required();
  pcreate->add_option("keys", a.pool_keys, "KEY=VALUE settings of a compose entry of that module (a.b=v: key b of map a)");
  pcreate->add_option("--id", a.pool_id, "the pool id MAJOR.MINOR (default: the first free from 1000.0)");
  pcreate->add_flag("--restart", a.restart, "record it in the node's pool log so the next start recreates it");
  pcreate->add_flag("--json", a.ctx.json, "print JSON");
  auto* pdestroy = pool->add_subcommand(
      "destroy", "stop and remove a pool made at run time (once its requests finish; refused while another pool uses it)");
  pdestroy->add_option("name", a.pool_name, "the pool's name, as in `pool list`")->required();
  pdestroy->add_flag("--json", a.ctx.json, "print JSON");
  On(plist, a, [&a] { return clio::PoolList(a.ctx); });
  On(pcreate, a, [&a] { return clio::PoolCreate(a.ctx, a.module, a.pool_name, a.pool_id, a.restart, a.pool_keys); });
  On(pdestroy, a, [&a] { return clio::PoolDestroy(a.ctx, a.pool_name); });
}

void AddComposeCommands(CLI::App& app, Args& a) {
  auto* compose = app.add_subcommand("compose", "create or destroy the pools of a compose file on the running node");
  compose->require_subcommand(1);
  auto* cstart = compose->add_subcommand("start", "create the file's pools in order (all or none)");
  cstart->add_option("file", a.compose_file, "YAML: `compose:` with a list of pool entries, as in the config")->required();
  cstart->add_flag("--json", a.ctx.json, "print JSON");
  auto* cstop = compose->add_subcommand("stop", "destroy the file's pools in reverse order");
  cstop->add_option("file", a.compose_file, "the file given to compose start")->required();
  cstop->add_flag("--json", a.ctx.json, "print JSON");
  On(cstart, a, [&a] { return clio::Compose(a.ctx, true, a.compose_file); });
  On(cstop, a, [&a] { return clio::Compose(a.ctx, false, a.compose_file); });
}

void AddArrayCommands(CLI::App& app, Args& a) {
  auto* array = app.add_subcommand("array", "erasure-coded safe-bdev arrays (clio_safe_bdev pools)");
  array->require_subcommand(1);
  auto* astatus = array->add_subcommand("status", "members, their state and rebuild progress, spares, counters");
  astatus->add_option("array", a.array_name, "the array's pool name (safe::array0) or id (310.0)")->required();
  astatus->add_flag("--json", a.ctx.json, "print the pool's Monitor JSON");
  auto* aadd = array->add_subcommand("add", "AddBdev: a clio_bdev pool becomes a spare (a failed member rebuilds onto it)");
  aadd->add_option("array", a.array_name, "the array's pool name or id")->required();
  aadd->add_option("pool", a.pool_ref, "a clio_bdev pool composed before the array: id (305.0) or name")->required();
  aadd->add_flag("--json", a.ctx.json, "print JSON");
  auto* aremove = array->add_subcommand("remove", "RemoveBdev: take a member out of service (it counts as failed)");
  aremove->add_option("array", a.array_name, "the array's pool name or id")->required();
  aremove->add_option("member", a.member, "the member, as `array status` names it")->required();
  aremove->add_option("reason", a.reason, "why, for the status and the log");
  aremove->add_flag("--json", a.ctx.json, "print JSON");
  auto* arecover = array->add_subcommand(
      "recover", "RecoverBdev: rebuild a failed member onto POOL (a spare, a new pool, or its own once it works)");
  arecover->add_option("array", a.array_name, "the array's pool name or id")->required();
  arecover->add_option("member", a.member, "the failed member, as `array status` names it")->required();
  arecover->add_option("pool", a.pool_ref, "the replacement: a clio_bdev pool's id or name")->required();
  arecover->add_flag("--json", a.ctx.json, "print JSON");
  auto* averify = array->add_subcommand(
      "verify", "scrub: read every stripe, check every chunk and the parity, repair what does not verify");
  averify->add_option("array", a.array_name, "the array's pool name or id")->required();
  averify->add_flag("--json", a.ctx.json, "print JSON");
  On(astatus, a, [&a] { return clio::ArrayStatus(a.ctx, a.array_name); });
  On(aadd, a, [&a] { return clio::ArrayOp(a.ctx, "add", a.array_name, {a.pool_ref}); });
  On(aremove, a, [&a] { return clio::ArrayOp(a.ctx, "remove", a.array_name, {a.member, a.reason}); });
  On(arecover, a, [&a] { return clio::ArrayOp(a.ctx, "recover", a.array_name, {a.member, a.pool_ref}); });
  On(averify, a, [&a] { return clio::ArrayOp(a.ctx, "verify", a.array_name, {}); });
}

}  // namespace

int main(int argc, char** argv) {
  clio::InitLogging("ctl");
  CLI::App app{"clioctl: manage CLIO tiers and pools"};
  app.require_subcommand(1);
  Args a;
  app.add_flag("--json", a.ctx.json, "print JSON instead of a table");
  AddNodeCommands(app, a);
  AddTierCommands(app, a);
  AddPoolCommands(app, a);
  AddComposeCommands(app, a);
  AddArrayCommands(app, a);
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
  a.ctx.rpc = clio::RuntimeClient::OptionsFor(*cfg);
  a.ctx.config_file = cfg->file;
  a.ctx.node_id = cfg->node_id;
  return a.run ? a.run() : 2;
}
