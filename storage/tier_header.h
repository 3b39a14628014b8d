// The 48-byte header that says which tier a medium belongs to: the first bytes of a file
// tier, the `clio_tier` object of an object tier. Layout (little-endian):
//   magic[8] | version u32 | reserved u32 | tier_id u64 | alignment u64 | created_ns u64 |
//   XXH3-64 of the preceding 40 bytes
// Each transport has its own magic, so one medium is never taken for another kind.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

struct TierHeader {
  uint64_t tier_id = 0;
  uint64_t alignment = 0;
  uint64_t created_ns = 0;
};

inline constexpr size_t kTierHeaderSize = 48;

// `magic` is 8 bytes.
std::string EncodeTierHeader(std::string_view magic, uint32_t version, const TierHeader& h);

// Corruption naming `what` (the medium: "tier file /x", "tier s3://b/p object p/clio_tier")
// for a short header, another magic ("not a <kind>"), a checksum mismatch or a version this
// build does not read. Only the first kTierHeaderSize bytes are read.
Result<TierHeader> DecodeTierHeader(std::string_view bytes, std::string_view magic,
                                    uint32_t version, const std::string& what,
                                    std::string_view kind);

}  // namespace clio
