#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "daemon/ipc.h"

namespace clio {

void PrintPools(const CommandContext& ctx, const std::vector<PoolInfo>& rows) {
  if (ctx.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const PoolInfo& row : rows)
      out.push_back({{"id", row.id}, {"name", row.name}, {"module", row.module}, {"describe", row.describe}});
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  // ID is the pool id's major number (the part clients route by).
  std::printf("%-7s %-40s %-16s %s\n", "ID", "NAME", "MODULE", "STATE");
  for (const PoolInfo& row : rows)
    std::printf("%-7u %-40s %-16s %s\n", row.id, row.name.c_str(), row.module.c_str(), row.describe.c_str());
}

int PoolList(const CommandContext& ctx) {
  RuntimeClient::Options o = ctx.rpc;
  auto c = RuntimeClient::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", c.status().message().c_str());
    return 1;
  }
  auto r = (*c)->Call(0, adminproto::ListPools{});
  if (!r.ok()) {
    std::fprintf(stderr, "clioctl: pool list failed: %s\n", r.status().ToString().c_str());
    return 1;
  }
  PrintPools(ctx, r->pools);
  return 0;
}

}  // namespace clio
