// Space accounting for write-back (DESIGN.md, "Space"): what the CTE has promised but not yet
// allocated on its tiers. No bytes move here and no extent is allocated; these are counters the
// CTE consults before it places a write.
//
// FlushReservations: a blob that lands dirty on a volatile tier will need a persistent copy of
// its whole length when it is flushed. Its room is reserved pool-wide (over every healthy
// persistent tier) when the write lands, so a persistent tier that cannot hold it fails the
// write (ENOSPC at write(2)) rather than the flusher later. A reservation is released when the
// flush has allocated and recorded the real copy, or when the blob is removed.
//
// Thread safety: every method may be called concurrently. One mutex, taken last: callers may
// hold a blob's stripe lock and the CTE's dirty_mu_, and nothing here calls out while holding
// it except Bdev::GetStats (which takes only the bdev's own locks).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "storage/bdev.h"

namespace clio {

// Bytes the block allocator hands out for a request of `bytes`: whole 1 MiB blocks plus the
// smallest power-of-two class (>= min_class) that holds the rest (storage/allocator.h).
uint64_t AllocationFootprint(uint64_t bytes, uint64_t min_class);

class FlushReservations {
 public:
  // `persistent`: the bdevs whose remaining room backs reservations (not owned; they outlive
  // this object). With none, reservations are disabled: every call succeeds and reserves 0.
  explicit FlushReservations(std::vector<Bdev*> persistent);

  // Raises the reservation of (tag, blob) to the footprint of a `size`-byte copy; never
  // lowers it. NoSpace, changing nothing, when the healthy persistent tiers' remaining bytes,
  // less everything already reserved, cannot hold the increase. *previous (optional) receives
  // the reservation before the call, for RestoreBlob.
  Status ReserveBlob(uint64_t tag, uint64_t blob, uint64_t size, uint64_t* previous = nullptr);
  // Sets the reservation of (tag, blob) back to `bytes` (undoing a ReserveBlob).
  void RestoreBlob(uint64_t tag, uint64_t blob, uint64_t bytes);
  // Drops the reservation of (tag, blob), if any.
  void ReleaseBlob(uint64_t tag, uint64_t blob);

  // Holds room for a direct write of `bytes` to a persistent tier, so that write cannot take
  // room a dirty blob's flush counts on. NoSpace as for ReserveBlob. Unhold once the write has
  // allocated (or failed to).
  Status Hold(uint64_t bytes);
  void Unhold(uint64_t bytes);

  uint64_t reserved() const;
  bool enabled() const { return !persistent_.empty(); }

 private:
  // Remaining bytes of the healthy persistent tiers, less everything reserved.
  uint64_t AvailableLocked() const REQUIRES(mu_);

  const std::vector<Bdev*> persistent_;
  const uint64_t min_class_;  // the largest allocation class floor among the persistent tiers

  mutable Mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> by_blob_ GUARDED_BY(mu_);
  uint64_t reserved_ GUARDED_BY(mu_) = 0;  // sum of by_blob_ plus holds
};

}  // namespace clio
