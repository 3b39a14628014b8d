// `clioctl tier list`: which tiers the node has and what each is doing (takes data, draining,
// drained, dying, degraded), where `tier stat` shows how full they are.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "common/size.h"
#include "placement/cte_pool.h"

namespace clio {
namespace {

// One word for what placement does with the tier now, then why.
std::string TierState(const TierInfo& t, const DrainProgress& d) {
  if (d.draining)
    return d.bytes_left == 0 ? "drained (empty; `tier rm` removes it)"
                             : "draining (" + FormatSize(d.bytes_left) + " left)";
  const bool persistent = t.stats.persistence != Persistence::kVolatile;
  if (t.stats.lifetime_days < kDeadLifespanDays) return "dead (lifespan under 1 day: takes no data)";
  if (persistent && t.stats.lifetime_days < kDyingLifespanDays)
    return "dying (lifespan under 7 days: takes no new persistent data)";
  if (!t.stats.health.empty() && t.stats.health != "ok") return "degraded";
  return "active";
}

}  // namespace

int TierList(const CommandContext& ctx) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", c.status().message().c_str());
    return 1;
  }
  auto tiers = c->ListTiers();
  if (!tiers.ok()) {
    std::fprintf(stderr, "clioctl: tier list failed: %s\n", tiers.status().ToString().c_str());
    return 1;
  }
  struct Row {
    const TierInfo* tier;
    DrainProgress drain;
  };
  std::vector<Row> rows;
  for (const TierInfo& t : *tiers) {
    auto p = c->client->Call(c->pool, cteproto::GetDrainProgress{.tier = t.tier_id});
    if (!p.ok()) {
      std::fprintf(stderr, "clioctl: tier list: tier '%s': %s\n", t.name.c_str(), p.status().ToString().c_str());
      return 1;
    }
    rows.push_back({&t, p->progress});
  }
  if (ctx.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j = TierJson(*r.tier);
      j["draining"] = r.drain.draining;
      j["state"] = TierState(*r.tier, r.drain);
      out.push_back(std::move(j));
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  // Placement order: the first tier that takes data and has room gets a write.
  std::printf("%-40s %-18s %-6s %-11s %-10s %s\n", "NAME", "ID", "TYPE", "PERSISTENCE", "BACKEND", "STATE");
  for (const Row& r : rows) {
    char id[24];
    std::snprintf(id, sizeof id, "0x%016llx", static_cast<unsigned long long>(r.tier->tier_id));
    std::printf("%-40s %-18s %-6s %-11s %-10s %s\n", r.tier->name.c_str(), id,
                std::string(BdevTypeName(r.tier->stats.type)).c_str(),
                std::string(PersistenceName(r.tier->stats.persistence)).c_str(),
                r.tier->stats.backend.empty() ? "-" : r.tier->stats.backend.c_str(),
                TierState(*r.tier, r.drain).c_str());
  }
  return 0;
}

}  // namespace clio
