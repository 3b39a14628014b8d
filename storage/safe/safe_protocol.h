// Method ids of a safe-bdev pool (module clio_safe_bdev) beyond the bdev task interface it
// also serves (storage/bdev_protocol.h). Format documented in docs/ipc.md. Kept apart from
// safe_pool.h so clients (clioctl) need no link to the module.
#pragma once

#include <cstdint>

namespace clio {

enum class SafeBdevMethod : uint32_t {
  kAddBdev = 20,      // string pool (id "301.0" or name) -> empty: a new spare
  kRemoveBdev = 21,   // string member, string reason -> empty: the member counts as failed
  kRecoverBdev = 22,  // string member, string replacement pool -> empty: rebuild starts
  kVerify = 23,       // -> u64 stripes that did not verify (and were repaired): a scrub
};

}  // namespace clio
