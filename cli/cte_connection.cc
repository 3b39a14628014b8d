#include "cli/cte_connection.h"

#include "placement/cte_protocol.h"
#include "storage/media.h"

namespace clio {

Result<CteConnection> CteConnection::Open(const CommandContext& ctx) {
  RuntimeClient::Options o = ctx.rpc;
  CteConnection c;
  c.node_id = ctx.node_id;
  CLIO_ASSIGN_OR_RETURN(c.client, RuntimeClient::Connect(o));
  auto pool = c.client->FindPool("clio_cte_core");
  if (!pool.ok()) return pool.status().WithContext("the runtime has no clio_cte_core pool");
  c.pool = *pool;
  return c;
}

Result<std::vector<TierInfo>> CteConnection::ListTiers() {
  CLIO_ASSIGN_OR_RETURN(cteproto::TierListReply r, client->Call(pool, cteproto::ListTiers{}));
  return std::move(r.tiers);
}

Result<TierInfo> CteConnection::FindTier(const std::string& name) {
  CLIO_ASSIGN_OR_RETURN(std::vector<TierInfo> tiers, ListTiers());
  std::string names;
  for (const TierInfo& t : tiers)
    if (t.name == name) return t;
  for (const TierInfo& t : tiers) {
    if (NodeTierName(name, t.stats.type, node_id) == t.name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  return NotFound("no tier '" + name + "' (tiers: " + names + ")");
}

Result<WritebackStats> CteConnection::Writeback() {
  CLIO_ASSIGN_OR_RETURN(cteproto::WritebackReply r, client->Call(pool, cteproto::Writeback{}));
  return std::move(r.stats);
}

}  // namespace clio
