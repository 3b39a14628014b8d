// Clean copies on volatile tiers, least recently used first, per tier: the copies the CTE may
// drop (keeping the persistent copy beneath) when a fast tier is full (DESIGN.md: clean copies
// on fast tiers are evicted first when space is needed).
//
// Entries are hints: a blob listed here may have been written (dirty again), flushed away or
// removed since. The evictor re-reads the blob index under the blob's stripe lock and skips
// an entry whose copy is no longer clean on that tier.
//
// Thread safety: all methods may be called concurrently; one mutex, taken last.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <utility>

#include "common/thread_annotations.h"

namespace clio {

class CleanCopyLru {
 public:
  // Marks (tag, blob)'s clean copy on the tier as the most recently used.
  void Touch(uint64_t tier_id, uint64_t tag, uint64_t blob);
  void Remove(uint64_t tier_id, uint64_t tag, uint64_t blob);
  // Removes and returns the least recently used entry of the tier; false when it has none.
  bool PopOldest(uint64_t tier_id, uint64_t* tag, uint64_t* blob);
  size_t Count(uint64_t tier_id) const;
  // Forgets every entry of a removed tier.
  void RemoveTier(uint64_t tier_id);

 private:
  using Key = std::pair<uint64_t, uint64_t>;  // (tag, blob)
  struct TierList {
    std::list<Key> order;  // oldest first
    std::map<Key, std::list<Key>::iterator> where;
  };
  mutable Mutex mu_;
  std::map<uint64_t, TierList> tiers_ GUARDED_BY(mu_);
};

}  // namespace clio
