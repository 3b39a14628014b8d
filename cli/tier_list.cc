// `clioctl tier list`: which tiers the node has and what each is doing (takes data, draining,
// drained, dying, degraded), where `tier stat` shows how full they are.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "common/size.h"
#include "placement/cte_pool.h"

namespace clio {
namespace {

// The runtime's word for the tier (Cte::TierStates), and why.
std::string Describe(const std::optional<TierState>& state) {
  if (!state) return "unknown (the runtime predates tier states: restart it)";
  const TierState& s = *state;
  switch (s.condition) {
    case TierCondition::kDrained: return "drained (empty; `tier rm` removes it)";
    case TierCondition::kDraining: return "draining (" + FormatSize(s.bytes_left) + " left)";
    case TierCondition::kDead: return "dead (lifespan under 1 day: takes no data)";
    case TierCondition::kDying: return "dying (lifespan under 7 days: takes no new persistent data)";
    case TierCondition::kDegraded: return "degraded";
    case TierCondition::kActive: return "active";
  }
  return std::string(TierConditionName(s.condition));
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
  auto states = c->client->Call(c->pool, cteproto::TierStates{});
  const bool older = !states.ok() && PredatesTierStates(states.status());
  if (!states.ok() && !older) {
    std::fprintf(stderr, "clioctl: tier list: the tiers' states: %s\n", states.status().ToString().c_str());
    return 1;
  }
  struct Row {
    const TierInfo* tier;
    std::optional<TierState> state;  // none from a runtime older than TierStates
  };
  std::vector<Row> rows;
  for (const TierInfo& t : *tiers) {
    if (older) {
      rows.push_back({&t, std::nullopt});
      continue;
    }
    // Two calls: a tier added or removed between them has no state, or is not listed.
    auto it = std::find_if(states->states.begin(), states->states.end(),
                           [&](const TierState& s) { return s.tier_id == t.tier_id; });
    if (it == states->states.end()) continue;
    rows.push_back({&t, *it});
  }
  if (ctx.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j = TierJson(*r.tier);
      if (r.state) {
        j["draining"] = r.state->condition == TierCondition::kDraining || r.state->condition == TierCondition::kDrained;
        j["condition"] = std::string(TierConditionName(r.state->condition));
        j["from_config"] = r.state->from_config;
      } else {
        j["draining"] = nullptr;
        j["condition"] = "unknown";
        j["from_config"] = nullptr;
      }
      j["state"] = Describe(r.state);
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
                Describe(r.state).c_str());
  }
  return 0;
}

}  // namespace clio
