// BlockAllocator: the one block allocator every bdev transport uses (seeds/bdev-module.txt,
// "The allocator").
//
// A bump pointer over [0, capacity) plus segregated free lists, kept in several free-list sets
// (one per worker, `sets` of them, default 4). Size classes are powers of two from
// min_class = max(512, alignment) to 1 MiB; every block handed out is one size class (its
// Extent::size) at an offset that is a multiple of min_class.
//
// Free space below the bump pointer is kept as free *ranges* that are coalesced: freeing a
// block merges it with the free ranges on either side, so long churn does not fragment free
// space forever. A range never crosses a 1 MiB-aligned boundary ("region"); all ranges of a
// region live in one set, its home set (region index mod sets), so neighbours always meet
// under one lock. A range is filed under the class bit_floor(its length); a block of class c
// is carved from the start of a range of class >= c, and the rest stays free. A merged range
// that ends at the bump pointer moves the bump pointer back over it (and over the free ranges
// of the regions below that then end at it), so freeing everything brings it back to 0.
//
// Invariant: every byte below the bump pointer is either in an allocated block or free (in a
// set, or on its way into one), so used() + free_bytes() == bump() and remaining() is
// capacity - used(), exactly.
//
// Allocate(bytes), bytes rounded up to the alignment, in pieces of at most 1 MiB (the last
// piece the smallest class that holds the remainder); each piece is served by the first of:
//  1. a free range of exactly that class, from the caller's set, then stolen from the others;
//  2. the bump pointer;
//  3. a larger free range, split (caller's set first, then the others);
//  4. assembly from several smaller blocks (free ranges and bump space), so one request may
//     return several extents.
// If the whole request cannot be served, every piece is given back and NoSpace returned.
// The caller's set is picked per thread (round robin on first use, modulo the set count).
//
// The bump pointer may not pass `limit` (<= capacity): transports that commit backing storage
// in steps (file growth, shm populate) raise the limit as they grow. Allocate(..., exact_only)
// lets them try steps 1-2 first and grow before falling back to splitting and fragments.
//
// Thread safety: all methods may be called concurrently. Lock order (never the reverse):
//   slow_mu_ (shared: Allocate/Free; exclusive: Restore/MarkAllocated/MarkFree/
//             CheckConsistency)
//   -> one FreeSet::mu at a time (never two sets at once)
//   -> mu_ (bump pointer, limit, allocated-block table, used bytes)
//   -> the observer's own locks (it is called under mu_).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "storage/bdev.h"

namespace clio {

// Told about every allocation and free, under the allocator's lock and in allocator order:
// before allocated blocks are returned, and before freed blocks can be reused. Merging free
// space is not reported (replay derives free space from the live blocks; docs/alloc-log.md).
// The allocator log implements it; it must be cheap (buffer, don't write) and must not call
// the allocator.
class AllocObserver {
 public:
  virtual ~AllocObserver() = default;
  virtual void OnAllocate(const ExtentList& blocks) = 0;
  virtual void OnFree(const ExtentList& blocks) = 0;
};

class BlockAllocator {
 public:
  static constexpr uint64_t kMinClass = 512;
  static constexpr uint64_t kMaxClass = 1ull << 20;  // also the region size
  static constexpr int kDefaultSets = 4;

  // Ok when `alignment` is a power of two no larger than 1 MiB (0 is not allowed).
  static Status ValidateAlignment(uint64_t alignment);

  // Precondition: ValidateAlignment(alignment).ok(). `observer` (may be null) outlives this.
  // `sets` < 1 is taken as 1.
  BlockAllocator(uint64_t capacity, uint64_t alignment, AllocObserver* observer = nullptr,
                 int sets = kDefaultSets);

  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // See the file comment. InvalidArgument for 0 bytes; NoSpace when it cannot be served (and
  // then nothing is allocated). With `exact_only`, only same-class free ranges and the bump
  // pointer are used.
  Result<ExtentList> Allocate(uint64_t bytes, bool exact_only = false) EXCLUDES(slow_mu_, mu_);

  // Returns blocks to free space, coalesced with free neighbours. Internal error, and no
  // change at all, when any extent is not an allocated block of exactly that size or appears
  // twice.
  Status Free(const ExtentList& extents) EXCLUDES(slow_mu_, mu_);

  // Replay and reconciliation hooks.
  // Replaces all state: `live` blocks allocated, bump = the highest end of any block (live or
  // free), and everything below the bump pointer that is not live is free (the `free` blocks
  // and any gap between blocks alike). Corruption if a block is not a valid class/offset or
  // two blocks overlap. The observer is not told (the state came from it).
  Status Restore(const ExtentList& live, const ExtentList& free) EXCLUDES(slow_mu_, mu_);
  // Makes `block` allocated: a no-op if it already is; carved out of free space if it lies in
  // free space; carved past the bump pointer if it reaches beyond it (the gap becomes free).
  // Corruption if it overlaps a different allocated block. The observer is told of every
  // change.
  Status MarkAllocated(const Extent& block) EXCLUDES(slow_mu_, mu_);
  // Makes `block` free: a no-op if it already is; like Free() if allocated; the bump pointer
  // moves past it if it reaches beyond. Corruption if it overlaps a different allocated block.
  Status MarkFree(const Extent& block) EXCLUDES(slow_mu_, mu_);

  // Runs `fn(live, free)` under the lock, so no allocation or free interleaves (log
  // compaction). `free` is the free space below the bump pointer as valid blocks.
  Status WithSnapshot(const std::function<Status(const ExtentList& live, const ExtentList& free)>&
                          fn) EXCLUDES(mu_);

  ExtentList LiveExtents() const EXCLUDES(mu_);  // sorted by offset
  ExtentList FreeExtents() const EXCLUDES(mu_);  // free space below the bump, as valid blocks

  // Test hook: checks the free-list sets against the allocated-block table (ranges disjoint
  // from live blocks and each other, in their home set and class, fully merged, and summing to
  // free_bytes()). Internal error naming the first violation.
  Status CheckConsistency() const EXCLUDES(slow_mu_, mu_);

  // Bytes a request takes from the bump pointer at most (sum of its pieces' classes).
  uint64_t MaxBumpNeed(uint64_t bytes) const;
  uint64_t RoundUp(uint64_t bytes) const;  // to the alignment (saturating)
  uint64_t min_class() const { return min_class_; }
  uint64_t alignment() const { return alignment_; }
  int num_sets() const { return static_cast<int>(sets_.size()); }

  void SetLimit(uint64_t limit) EXCLUDES(mu_);
  uint64_t limit() const EXCLUDES(mu_);
  uint64_t bump() const EXCLUDES(mu_);  // high-water mark
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const EXCLUDES(mu_);        // bytes in allocated blocks
  uint64_t free_bytes() const EXCLUDES(mu_);  // free bytes below the bump pointer
  // capacity - bump + free_bytes = capacity - used (ignores the limit: what could be
  // allocated after growth)
  uint64_t remaining() const EXCLUDES(mu_);

 private:
  // One set of segregated free lists. Ranges [start, end) lie inside one region, are disjoint,
  // and no two of them touch (they would have been merged).
  struct FreeSet {
    mutable Mutex mu;
    std::map<uint64_t, uint64_t> ranges GUARDED_BY(mu);  // start -> end
    // by_class[k]: starts of the ranges whose length has bit_floor == min_class << k.
    std::vector<std::set<uint64_t>> by_class GUARDED_BY(mu);
    uint64_t bytes GUARDED_BY(mu) = 0;
  };

  int ClassIndex(uint64_t cls) const;        // cls must be a valid class
  uint64_t ClassFor(uint64_t bytes) const;   // smallest class >= bytes (bytes <= kMaxClass)
  int RangeClass(uint64_t len) const;        // class index a free range of `len` is filed under
  bool ValidBlock(const Extent& e) const;
  uint64_t BumpEnd() const REQUIRES(mu_);    // min(limit, capacity)
  FreeSet& HomeSet(uint64_t offset) const;
  FreeSet& CallerSet() const;
  size_t CallerSetIndex() const;

  // FreeSet helpers; the caller holds s.mu.
  void InsertRangeLocked(FreeSet& s, uint64_t start, uint64_t end) const REQUIRES(s.mu);
  void EraseRangeLocked(FreeSet& s, std::map<uint64_t, uint64_t>::iterator it) const
      REQUIRES(s.mu);
  // Adds [start, end) (inside one region) merged with its neighbours; returns the merged range.
  std::pair<uint64_t, uint64_t> AddFreeLocked(FreeSet& s, uint64_t start, uint64_t end) const
      REQUIRES(s.mu);
  // Carves a block of class index `cls` from the first range filed under a class in
  // [lo, hi]; returns its offset or UINT64_MAX.
  uint64_t CarveLocked(FreeSet& s, int cls, int lo, int hi) const REQUIRES(s.mu);
  // Removes [start, end), which lies inside one free range of `s`. False when it does not.
  bool RemoveFreeLocked(FreeSet& s, uint64_t start, uint64_t end) const REQUIRES(s.mu);

  // Carving, for Allocate. Each returns false when it cannot serve the class.
  bool TakeFromSets(int cls, int lo, int hi, ExtentList* taken) const EXCLUDES(mu_);
  bool TakeExact(uint64_t cls, ExtentList* taken) EXCLUDES(mu_);   // steps 1 and 2
  bool TakeBump(uint64_t cls, ExtentList* taken) EXCLUDES(mu_);
  bool TakeLarger(uint64_t cls, ExtentList* taken) EXCLUDES(mu_);  // step 3
  // The largest block of a class below `below`, from free ranges or the bump space, whichever
  // is larger (free ranges on a tie, to keep bump space unfragmented).
  bool TakeSmaller(uint64_t below, ExtentList* taken) EXCLUDES(mu_);

  // Puts [offset, offset + size) into the home sets of its regions, merged with neighbours;
  // with `retract`, a merged range ending at the bump pointer moves it back.
  void GiveBack(uint64_t offset, uint64_t size, bool retract) EXCLUDES(mu_);
  // After a retraction to a region boundary: keeps retracting over free ranges that end at the
  // bump pointer in the regions below (they live in other sets).
  void RetractAcrossRegions() EXCLUDES(mu_);

  // Free space below the bump pointer as valid blocks (the complement of the live blocks).
  ExtentList FreeLocked() const REQUIRES(mu_);
  ExtentList LiveLocked() const REQUIRES(mu_);
  // The allocated block overlapping [offset, offset + size) with the lowest offset, if any.
  const std::pair<const uint64_t, uint64_t>* OverlapLocked(uint64_t offset, uint64_t size) const
      REQUIRES(mu_);
  // Splits [start, end) into valid blocks (largest first from each position, at most 1 MiB).
  void AppendBlocks(uint64_t start, uint64_t end, ExtentList* out) const;

  const uint64_t alignment_;
  const uint64_t min_class_;
  const int num_classes_;
  AllocObserver* const observer_;
  const uint64_t capacity_;
  const std::vector<std::unique_ptr<FreeSet>> sets_;

  // Shared by the fast paths, exclusive for the replay/reconcile paths, which then see no
  // block in flight between the table and the sets.
  mutable SharedMutex slow_mu_ ACQUIRED_BEFORE(mu_);

  mutable Mutex mu_;
  uint64_t limit_ GUARDED_BY(mu_);
  uint64_t bump_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, uint64_t> allocated_ GUARDED_BY(mu_);  // offset -> size
  uint64_t used_ GUARDED_BY(mu_) = 0;
};

}  // namespace clio
