// clioctl commands, one per file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "daemon/ipc.h"

namespace clio {

struct CommandContext {
  RuntimeClient::Options rpc;             // how to reach the runtime (RuntimeClient::OptionsFor)
  bool json = false;
  std::string config_file;                // where the config came from
  uint32_t node_id = 0;                   // runtime.node_id: tier names end in _node<N>
};

// `clioctl tier list`: each tier's id, type, persistence and state (draining, dying ...): cli/tier_list.cc
int TierList(const CommandContext& ctx);
// `clioctl tier stat`: cli/tier_stat.cc
int TierStat(const CommandContext& ctx);
// `clioctl tier lifespan get NAME` (no days) / `set NAME DAYS`: cli/tier_ops.cc
int TierLifespan(const CommandContext& ctx, const std::string& name, std::optional<double> days);
// `clioctl tier drain NAME` (waits until the tier is empty) / `undrain NAME`: cli/tier_ops.cc
int TierDrain(const CommandContext& ctx, const std::string& name, bool undrain);
// `clioctl tier add PATH [KEY=VALUE ...]` (the keys of a storage: entry): cli/tier_add.cc
// Without PATH, the keys attach a bdev pool that lasts (the config's, or pool create --restart).
int TierAdd(const CommandContext& ctx, const std::vector<std::string>& args);
// `clioctl tier rm NAME` (a drained, empty tier): cli/tier_rm.cc
int TierRm(const CommandContext& ctx, const std::string& name);
// `clioctl pool list`: every pool of the runtime, in creation order: cli/pool_list.cc
int PoolList(const CommandContext& ctx);
// The table (or --json array) of pool list, also printed by pool create and compose.
void PrintPools(const CommandContext& ctx, const std::vector<PoolInfo>& rows);
// `clioctl pool create MODULE NAME [KEY=VALUE ...] [--id MAJOR.MINOR] [--restart]` (the keys of a
// compose entry; the id defaults to the first free from 1000) / `pool destroy NAME`: cli/pool_ops.cc
int PoolCreate(const CommandContext& ctx, const std::string& module, const std::string& name,
               const std::string& id, bool restart, const std::vector<std::string>& keys);
int PoolDestroy(const CommandContext& ctx, const std::string& name);
// `compose start|stop FILE` (clioctl and clio_run): the pools of a compose file: cli/pool_ops.cc
int Compose(const CommandContext& ctx, bool start, const std::string& file);
// `clioctl stat`: runtime, tiers with dirty bytes, write-back: cli/stat.cc
int Stat(const CommandContext& ctx);
// `clioctl flush [PATH]`: every dirty blob (no PATH), or fsync of PATH's files: cli/flush.cc
int Flush(const CommandContext& ctx, const std::string& path);
// `clioctl locate PATH [--pool NAME]`: each chunk's copies, tiers and extents: cli/locate.cc
int Locate(const CommandContext& ctx, const std::string& path, const std::string& fs_pool);
// `clioctl array status ARRAY`: a safe-bdev's members, spares and counters: cli/array_status.cc
int ArrayStatus(const CommandContext& ctx, const std::string& array);
// `clioctl array add ARRAY POOL` / `remove ARRAY MEMBER [REASON]` / `recover ARRAY MEMBER POOL`
// / `verify ARRAY`: cli/array_ops.cc (`op` is add, remove, recover or verify; `args` as listed).
int ArrayOp(const CommandContext& ctx, const std::string& op, const std::string& array,
            const std::vector<std::string>& args);

}  // namespace clio
