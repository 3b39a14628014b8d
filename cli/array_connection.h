// The connection clioctl's array commands share: the runtime client and a clio_safe_bdev pool
// found by name or id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/status.h"
#include "daemon/ipc.h"

namespace clio {

struct ArrayConnection {
  std::unique_ptr<RuntimeClient> client;
  uint32_t pool = 0;
  std::string name;

  // `array`: the pool name (safe::array0) or id (310.0).
  static Result<ArrayConnection> Open(const CommandContext& ctx, const std::string& array);
  // The pool's Monitor JSON (members, spares, counters).
  Result<std::string> Monitor();
};

}  // namespace clio
