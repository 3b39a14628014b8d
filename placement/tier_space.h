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
// Kept room (fallocate): room reserved for a blob whatever it holds, until its owner lets it
// go: two copies' worth, since a flush writes a new persistent copy before the old one is
// freed (copy-on-write). Half is the blob's copy, half the room of its next one. It backs the
// blob's own writes, flushes and moves, so a blob whose kept room covers its size never meets
// NoSpace for room that others took, however often it is overwritten. It is counted in
// reserved() like any reservation; the part the blob's own persistent copy fills (SetFilled,
// at most one copy) is counted as used already, so it is credited back when counting what is
// free.
//
// DirtyLedger: dirty bytes (extents of dirty copies) per volatile tier, against each tier's
// dirty_limit. A charge that would pass the limit is refused; the writer kicks the flusher and
// waits for it (bounded) in WaitForRoom. Releases (flush, removal) wake the waiters.
//
// Thread safety: every method may be called concurrently. Each class has one mutex, taken
// last: callers may hold a blob's stripe lock and the CTE's dirty_mu_, and nothing here calls
// out while holding it except Bdev::GetStats and, in AllocateDirect/AllocateFlush,
// Bdev::Allocate (which take only the bdev's own locks).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
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
  // Whether a persistent bdev takes new data now (healthy lifespan, not draining).
  using AcceptsFn = std::function<bool(const Bdev&, const BdevStats&)>;
  // `persistent`: the bdevs whose remaining room backs reservations (not owned; each stays
  // valid until RemoveBdev). With none, reservations are disabled: every call succeeds and
  // reserves 0. Only the room of bdevs `accepts` approves counts (default: a lifespan of a day
  // or more); it is called under this class's mutex and must take no lock of the caller's.
  explicit FlushReservations(std::vector<Bdev*> persistent, AcceptsFn accepts = nullptr);

  // A persistent tier added at run time: its room backs reservations from now on.
  void AddBdev(Bdev* b);
  // A tier being removed: its room no longer counts, and `b` is not used after the call.
  void RemoveBdev(Bdev* b);

  // Raises the reservation of (tag, blob) to the footprint of a `size`-byte copy; never
  // lowers it. NoSpace, changing nothing, when the healthy persistent tiers' remaining bytes,
  // less everything already reserved, cannot hold the increase. *previous (optional) receives
  // the reservation before the call, for RestoreBlob.
  Status ReserveBlob(uint64_t tag, uint64_t blob, uint64_t size, uint64_t* previous = nullptr);
  // Sets the reservation of (tag, blob) back to `bytes` (undoing a ReserveBlob).
  void RestoreBlob(uint64_t tag, uint64_t blob, uint64_t bytes);
  // Raises the reservation of (tag, blob) to `bytes` if it is less: gives back what a flush
  // spent and then abandoned, while a write meanwhile may have reserved the blob's new size.
  void RestoreBlobAtLeast(uint64_t tag, uint64_t blob, uint64_t bytes);
  // Drops the reservation of (tag, blob), if any (not its kept room).
  void ReleaseBlob(uint64_t tag, uint64_t blob);

  // Sets the room kept for (tag, blob) to twice the footprint of a `size`-byte copy (0: none).
  // `in_use`: bytes the blob's persistent copies occupy now, which lie inside its kept room.
  // NoSpace, changing nothing, when an increase does not fit in what is free and unreserved.
  Status KeepRoom(uint64_t tag, uint64_t blob, uint64_t size, uint64_t in_use = 0);
  // What a kept blob's persistent copies occupy now (its index entry changed); no-op for a
  // blob that keeps nothing.
  void SetFilled(uint64_t tag, uint64_t blob, uint64_t in_use);
  bool keeps(uint64_t tag, uint64_t blob) const;
  // The room kept for (tag, blob), in bytes; for all blobs; and the part of all blobs' kept
  // copies (half of each) that no copy fills yet.
  uint64_t kept(uint64_t tag, uint64_t blob) const;
  uint64_t kept() const;
  uint64_t kept_unfilled() const;

  // Allocates `bytes` on the persistent tier `b` for a direct write or a move of (tag, blob),
  // unless that would take room a dirty blob's flush counts on or another blob keeps (NoSpace
  // as for ReserveBlob). The blob's own kept room counts as free for it: the part of its copy
  // not filled yet when the copy grows in place, the room of its next copy when `new_copy`.
  // The check and the allocation are one step: no concurrent check sees the room both
  // allocated and free.
  Result<ExtentList> AllocateDirect(uint64_t tag, uint64_t blob, Bdev* b, uint64_t bytes, bool new_copy);
  // Allocates the flushed copy of (tag, blob) on the persistent tier `b` and spends the blob's
  // reservation in the same step (a concurrent check never counts both). *spent receives what
  // was reserved, for RestoreBlob if the flush fails afterwards.
  Result<ExtentList> AllocateFlush(uint64_t tag, uint64_t blob, Bdev* b, uint64_t bytes,
                                   uint64_t* spent);

  uint64_t reserved() const;
  bool enabled() const;

 private:
  // Remaining bytes of the healthy persistent tiers, less everything reserved.
  uint64_t AvailableLocked() const REQUIRES(mu_);
  // The largest allocation class floor among the persistent tiers.
  void UpdateMinClassLocked() REQUIRES(mu_);

  const AcceptsFn accepts_;

  mutable Mutex mu_;
  std::vector<Bdev*> persistent_ GUARDED_BY(mu_);
  uint64_t min_class_ GUARDED_BY(mu_) = 0;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> by_blob_ GUARDED_BY(mu_);
  struct Kept {
    uint64_t bytes = 0;   // two copies' footprint
    uint64_t filled = 0;  // of which the blob's persistent copy occupies (at most one copy)
  };
  std::map<std::pair<uint64_t, uint64_t>, Kept> kept_ GUARDED_BY(mu_);  // fallocate
  uint64_t reserved_ GUARDED_BY(mu_) = 0;  // sum of by_blob_ and kept_ bytes
  uint64_t kept_total_ GUARDED_BY(mu_) = 0;  // sum of kept_ bytes
  uint64_t kept_filled_ GUARDED_BY(mu_) = 0;  // sum of kept_ filled
};

class DirtyLedger {
 public:
  struct TierCounters {
    uint64_t tier_id = 0;
    uint64_t limit = 0;  // bytes
    uint64_t dirty = 0;  // bytes in extents of dirty copies now
    uint64_t peak = 0;   // the most `dirty` has been
  };

  // Registers a volatile tier with its dirty limit in bytes (> 0). Call before any charge.
  void AddTier(uint64_t tier_id, uint64_t limit);
  // Forgets a tier (removed, so nothing is dirty on it) and every charge left on it.
  void RemoveTier(uint64_t tier_id);

  // Sets the dirty bytes (tag, blob) holds on the tier to `bytes`. Refused (false, nothing
  // changed) when that would take the tier past its limit while other dirty bytes are on it;
  // a tier with nothing else dirty always takes one blob, so a blob larger than the limit
  // cannot wait forever. *previous (optional) receives the charge before the call.
  bool TryCharge(uint64_t tier_id, uint64_t tag, uint64_t blob, uint64_t bytes,
                 uint64_t* previous = nullptr);
  // Sets the charge unconditionally (to undo a TryCharge).
  void SetCharge(uint64_t tier_id, uint64_t tag, uint64_t blob, uint64_t bytes);
  // Drops every charge of the blob (flushed or removed) and wakes waiting writers.
  void ReleaseBlob(uint64_t tag, uint64_t blob);

  // Waits until `bytes` more would fit under the tier's limit (or nothing else is dirty on
  // it), or until `deadline`. True when there is room. Counts the wait, and a timeout.
  bool WaitForRoom(uint64_t tier_id, uint64_t bytes, std::chrono::steady_clock::time_point deadline);

  std::vector<TierCounters> Counters() const;
  uint64_t waits() const;
  uint64_t timeouts() const;

 private:
  struct TierState {
    uint64_t limit = 0;
    uint64_t dirty = 0;
    uint64_t peak = 0;
  };
  using ChargeKey = std::tuple<uint64_t, uint64_t, uint64_t>;  // (tag, blob, tier id)
  bool FitsLocked(const TierState& t, uint64_t bytes) const REQUIRES(mu_) {
    return t.dirty == 0 || t.dirty + bytes <= t.limit;
  }
  // Sets the charge of `key` on tier `t` to `bytes`, keeping the totals and the peak.
  void SetLocked(TierState& t, const ChargeKey& key, uint64_t bytes) REQUIRES(mu_);

  mutable Mutex mu_;
  CondVar room_cv_;  // signalled whenever dirty bytes go down
  std::map<uint64_t, TierState> tiers_ GUARDED_BY(mu_);
  std::map<ChargeKey, uint64_t> charges_ GUARDED_BY(mu_);  // -> bytes charged
  uint64_t waits_ GUARDED_BY(mu_) = 0;
  uint64_t timeouts_ GUARDED_BY(mu_) = 0;
};

}  // namespace clio
