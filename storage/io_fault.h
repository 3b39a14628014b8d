// Fault-injection wrapper of the I/O layer (internal to storage/; see io.h).
#pragma once

#include <cstdint>
#include <memory>

#include "storage/io.h"

namespace clio::io_internal {

// Wraps `base` (whose current size is `size`): writes, truncates and allocations are applied to
// an in-memory page map and reach `base` only at Sync(). Destroying the result without Sync()
// loses exactly the unsynced writes, as a power cut would. Serializes all I/O under one mutex.
std::unique_ptr<IoFile> NewFaultFile(std::unique_ptr<IoFile> base, uint64_t size);

}  // namespace clio::io_internal
