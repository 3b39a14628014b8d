// clioctl commands, one per file.
#pragma once

#include <string>

namespace clio {

struct CommandContext {
  std::string socket_path;
  bool json = false;
};

// `clioctl tier stat`: cli/tier_stat.cc
int TierStat(const CommandContext& ctx);

}  // namespace clio
