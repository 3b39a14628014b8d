// The blob index: blob -> list of copies, stored in the metadata KV store.
// Format (version 1) documented in docs/blob-index.md.
//
// Key:   "b/" + be64(tag) + be64(blob)
// Value: u8 version, u32 ncopies, copies newest first. Each copy: u64 tier_id, u8 state,
//        u64 generation, u32 nextents {u64 offset, u64 size}, u32 nranges {u64 begin, u64 end}.
//
// A copy's bytes map linearly onto the concatenation of its extents. Only its written ranges
// hold data; for each byte, the newest copy whose ranges cover it has the current value, and a
// byte no copy covers reads as zero.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "storage/bdev.h"

namespace clio {

inline constexpr uint8_t kBlobIndexVersion = 1;

// Sorted, disjoint, non-adjacent half-open byte ranges.
class RangeSet {
 public:
  struct Range {
    uint64_t begin;
    uint64_t end;
    bool operator==(const Range&) const = default;
  };
  void Add(uint64_t begin, uint64_t end);
  void Subtract(uint64_t begin, uint64_t end);
  // Ranges clipped to [begin, end).
  RangeSet Intersect(uint64_t begin, uint64_t end) const;
  RangeSet Minus(const RangeSet& other) const;
  void ClipTo(uint64_t end) { Subtract(end, UINT64_MAX); }
  bool empty() const { return ranges_.empty(); }
  uint64_t max_end() const { return ranges_.empty() ? 0 : ranges_.back().end; }
  uint64_t bytes() const;
  const std::vector<Range>& ranges() const { return ranges_; }
  std::vector<Range>& mutable_ranges() { return ranges_; }
  bool operator==(const RangeSet&) const = default;

 private:
  std::vector<Range> ranges_;
};

enum class CopyState : uint8_t { kClean = 0, kDirty = 1 };  // dirty: newer than every persistent copy

struct BlobCopy {
  uint64_t tier_id = 0;
  CopyState state = CopyState::kClean;
  uint64_t generation = 0;
  ExtentList extents;
  RangeSet written;
  bool operator==(const BlobCopy&) const = default;
};

struct BlobEntry {
  std::vector<BlobCopy> copies;  // newest first
  uint64_t size() const {
    uint64_t n = 0;
    for (const auto& c : copies) n = std::max(n, c.written.max_end());
    return n;
  }
  // Bytes that hold data in some copy (the union of the written ranges).
  uint64_t stored() const {
    RangeSet all;
    for (const auto& c : copies)
      for (const auto& r : c.written.ranges()) all.Add(r.begin, r.end);
    return all.bytes();
  }
  bool operator==(const BlobEntry&) const = default;
};

std::string BlobKey(uint64_t tag, uint64_t blob);
std::string BlobTagPrefix(uint64_t tag);
inline constexpr std::string_view kBlobKeyPrefix = "b/";
// Parses a key made by BlobKey.
bool ParseBlobKey(std::string_view key, uint64_t* tag, uint64_t* blob);

std::string EncodeBlobEntry(const BlobEntry& e);
// Corruption naming what was wrong; refuses unknown versions.
Result<BlobEntry> DecodeBlobEntry(std::string_view bytes);

}  // namespace clio
