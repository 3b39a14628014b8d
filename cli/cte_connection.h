// The connection clioctl's tier commands share: the runtime client and the id of the
// clio_cte_core pool, and tier names resolved to ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/status.h"
#include "daemon/ipc.h"
#include "placement/cte.h"

namespace clio {

// Whether a TierStates call failed because the runtime is of a release before it (an upgraded
// clioctl before the runtime restarted): the method is unknown there, or, unknown, taken for an
// administrator's.
inline bool PredatesTierStates(const Status& s) {
  return s.code() == Code::kNotSupported || s.code() == Code::kPermissionDenied;
}

struct CteConnection {
  std::unique_ptr<RuntimeClient> client;
  uint32_t pool = 0;
  uint32_t node_id = 0;

  // Connects to the runtime and finds clio_cte_core; errors name what is missing.
  static Result<CteConnection> Open(const CommandContext& ctx);
  Result<std::vector<TierInfo>> ListTiers();
  // The tier called `name`: its name as `tier stat` prints it, or the path it was configured
  // with (without the _node<N> suffix). NotFound lists the names.
  Result<TierInfo> FindTier(const std::string& name);
  Result<WritebackStats> Writeback();
};

}  // namespace clio
