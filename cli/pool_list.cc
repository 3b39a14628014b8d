#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/codec.h"
#include "daemon/ipc.h"

namespace clio {

int PoolList(const CommandContext& ctx) {
  RuntimeClient::Options o;
  o.socket_path = ctx.socket_path;
  auto c = RuntimeClient::Connect(o);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", c.status().message().c_str());
    return 1;
  }
  auto r = (*c)->Call(0, static_cast<uint32_t>(AdminMethod::kListPools), "");
  if (!r.ok()) {
    std::fprintf(stderr, "clioctl: pool list failed: %s\n", r.status().ToString().c_str());
    return 1;
  }
  struct Row {
    uint32_t id = 0;
    std::string name, module, describe;
  };
  std::vector<Row> rows;
  Decoder d(*r);
  uint32_t n = 0;
  d.Get(&n);
  for (uint32_t i = 0; i < n && !d.failed(); ++i) {
    Row row;
    d.Get(&row.id);
    d.GetString(&row.name);
    d.GetString(&row.module);
    d.GetString(&row.describe);
    rows.push_back(std::move(row));
  }
  if (Status s = d.Finish("pool list"); !s.ok()) {
    std::fprintf(stderr, "clioctl: pool list: bad reply from the runtime: %s\n", s.message().c_str());
    return 1;
  }
  if (ctx.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& row : rows)
      out.push_back({{"id", row.id}, {"name", row.name}, {"module", row.module},
                     {"describe", row.describe}});
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  // ID is the pool id's major number (the part clients route by).
  std::printf("%-7s %-40s %-16s %s\n", "ID", "NAME", "MODULE", "STATE");
  for (const Row& row : rows)
    std::printf("%-7u %-40s %-16s %s\n", row.id, row.name.c_str(), row.module.c_str(), row.describe.c_str());
  return 0;
}

}  // namespace clio
