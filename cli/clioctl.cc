// clioctl: the admin CLI. One command per file under cli/commands/ as commands grow; for now
// `tier stat`. Exit codes: 0 ok, 1 operation failed, 2 bad usage.
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
  auto* tier = app.add_subcommand("tier", "storage tiers");
  tier->require_subcommand(1);
  auto* stat = tier->add_subcommand("stat", "one row per tier: capacity, used, remaining, score, persistence");
  stat->add_flag("--json", ctx.json, "print JSON instead of a table");
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
  ctx.socket_path = cfg->socket_path;
  if (*stat) return clio::TierStat(ctx);
  return 2;
}
