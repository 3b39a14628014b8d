// Output helpers of clioctl: counts with their noun, and the progress line of long operations (tier drain, flush): redrawn on stderr while a
// blocking call runs. Interrupting clioctl leaves the operation running in the runtime; the
// same command again waits for it and finishes what is left.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace clio {

// "1 file", "2 files": `n` and the noun for one or for many.
std::string Count(uint64_t n, const std::string& one, const std::string& many);

struct Progress {
  uint64_t left = 0;  // bytes still to go
  uint64_t done = 0;  // bytes the operation has handled so far (moved, flushed)
};

// Runs `op`; meanwhile, when `show` (a terminal, no --json) redraws every half second one line:
// a bar of (total - left) / total, the bytes left, `done_word` bytes done, the rate and the
// time left, from `poll` (nullopt: keep the last line). One last line once `op` returned.
Status WithProgress(bool show, uint64_t total, const std::string& done_word,
                                 const std::function<std::optional<Progress>()>& poll,
                                 const std::function<Status()>& op);

}  // namespace clio
