#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "common/size.h"
#include "placement/cte_pool.h"

namespace clio {

int TierStat(const CommandContext& ctx) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", c.status().message().c_str());
    return 1;
  }
  auto tiers = c->ListTiers();
  if (!tiers.ok()) {
    std::fprintf(stderr, "clioctl: tier stat failed: %s\n", tiers.status().ToString().c_str());
    return 1;
  }
  if (ctx.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const TierInfo& t : *tiers) out.push_back(TierJson(t));
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-40s %-6s %12s %12s %12s %6s %-11s %s\n", "NAME", "TYPE", "CAPACITY", "USED", "REMAINING",
              "SCORE", "PERSISTENCE", "HEALTH");
  // HEALTH: what a redundant tier (safe-bdev) reports, e.g. which member failed; "-" otherwise.
  for (const TierInfo& t : *tiers)
    std::printf("%-40s %-6s %12s %12s %12s %6.2f %-11s %s\n", t.name.c_str(),
                std::string(BdevTypeName(t.stats.type)).c_str(), FormatSize(t.stats.capacity).c_str(),
                FormatSize(t.stats.used).c_str(), FormatSize(t.stats.remaining).c_str(), t.score,
                std::string(PersistenceName(t.stats.persistence)).c_str(),
                t.stats.health.empty() ? "-" : t.stats.health.c_str());
  return 0;
}

}  // namespace clio
