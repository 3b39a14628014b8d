// clioctl commands, one per file.
#pragma once

#include <optional>
#include <string>

namespace clio {

struct CommandContext {
  std::string socket_path;
  bool json = false;
};

// `clioctl tier stat`: cli/tier_stat.cc
int TierStat(const CommandContext& ctx);
// `clioctl tier lifespan get NAME` (no days) / `set NAME DAYS`: cli/tier_ops.cc
int TierLifespan(const CommandContext& ctx, const std::string& name, std::optional<double> days);
// `clioctl tier drain NAME` (waits until the tier is empty) / `undrain NAME`: cli/tier_ops.cc
int TierDrain(const CommandContext& ctx, const std::string& name, bool undrain);

}  // namespace clio
