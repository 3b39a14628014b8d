// Small OS helpers shared by the bdev transports and the allocator log (internal to storage/).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace clio {

// A random non-zero 64-bit id (getrandom), for new tier ids.
uint64_t RandomTierId();

// Bytes an unprivileged writer can still put on the filesystem holding `path` (statvfs).
Result<uint64_t> FilesystemFreeBytes(const std::string& path);

// fsyncs the directory containing `path`, so a create or rename in it is durable.
Status SyncParentDir(const std::string& path);

// Rounds `v` up to a multiple of `unit` (unit > 0); saturates instead of overflowing.
inline uint64_t RoundUpTo(uint64_t v, uint64_t unit) {
  uint64_t r = v % unit;
  if (r == 0) return v;
  uint64_t add = unit - r;
  return v > UINT64_MAX - add ? UINT64_MAX - (UINT64_MAX % unit) : v + add;
}

}  // namespace clio
