// `clioctl tier rm NAME`: removes a drained, empty tier from the running node.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "placement/cte_pool.h"

namespace clio {

int TierRm(const CommandContext& ctx, const std::string& name) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: tier rm: %s\n", c.status().ToString().c_str());
    return 1;
  }
  auto t = c->FindTier(name);
  if (!t.ok()) {
    std::fprintf(stderr, "clioctl: tier rm: %s\n", t.status().ToString().c_str());
    return 1;
  }
  // Asked before the removal: whether the runtime opened the tier from its config's storage
  // entries, in which case the next start opens it again (empty).
  // A runtime older than TierStates cannot say: the removal goes on, without the note.
  auto states = c->client->Call(c->pool, cteproto::TierStates{});
  if (!states.ok() && !PredatesTierStates(states.status())) {
    std::fprintf(stderr, "clioctl: tier rm: the tiers' states: %s\n", states.status().ToString().c_str());
    return 1;
  }
  bool in_config = false;
  if (states.ok())
    for (const TierState& s : states->states) in_config |= s.tier_id == t->tier_id && s.from_config;
  auto r = c->client->Call(c->pool, cteproto::RemoveTier{.tier = t->tier_id});
  if (!r.ok()) {
    std::fprintf(stderr, "clioctl: tier rm %s: %s\n", name.c_str(), r.status().ToString().c_str());
    return 1;
  }
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"name", t->name}, {"removed", true}, {"in_config", in_config}}.dump().c_str());
    return 0;
  }
  std::printf("%s removed", t->name.c_str());
  if (LeavesFile(t->stats.type)) std::printf("; its file stays on disk");
  std::printf("\n");
  if (in_config)
    std::printf("note: the runtime opened this tier from its config (%s); remove it there, or it is added "
                "again (empty) at the next start\n",
                ctx.config_file.c_str());
  return 0;
}

}  // namespace clio
