// BlockAllocator: the one block allocator every bdev transport uses (seeds/bdev-module.txt,
// "The allocator").
//
// A bump pointer over [0, capacity) plus segregated free lists, one per size class. Size
// classes are powers of two from min_class = max(512, alignment) to 1 MiB. Blocks are never
// split, merged or compacted: a block keeps its (offset, size) for the life of the device, so
// long churn fragments free space into blocks of at most 1 MiB.
//
// Allocate(bytes), bytes rounded up to the alignment:
//  - up to 1 MiB: one block of the smallest class >= bytes, taken from that class's free list,
//    else from the bump pointer, else a free block of a larger class used whole;
//  - over 1 MiB: ceil(bytes / 1 MiB) pieces of 1 MiB, the last one the smallest class that
//    holds the remainder, each piece served as above;
//  - a piece the above cannot serve is assembled from several smaller free blocks (and smaller
//    blocks carved from what is left of the bump space), so one request may return several
//    extents. If the whole request cannot be served, every step is undone and NoSpace returned.
//
// The bump pointer may not pass `limit` (<= capacity): transports that commit backing storage
// in steps (file growth, shm populate) raise the limit as they grow. Allocate(..., exact_only)
// lets them try "same-class list or bump" first and grow before falling back to fragments.
//
// Thread safety: all methods may be called concurrently; one mutex guards all state.
// (Per-worker free lists with stealing, as the seed describes, are a later issue.)
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "storage/bdev.h"

namespace clio {

// Told about every state change, under the allocator's lock and in allocator order, before
// allocated blocks are returned and before freed blocks can be reused. The allocator log
// implements it; it must be cheap (buffer, don't write) and must not call the allocator.
class AllocObserver {
 public:
  virtual ~AllocObserver() = default;
  virtual void OnAllocate(const ExtentList& blocks) = 0;
  virtual void OnFree(const ExtentList& blocks) = 0;
};

class BlockAllocator {
 public:
  static constexpr uint64_t kMinClass = 512;
  static constexpr uint64_t kMaxClass = 1ull << 20;

  // Ok when `alignment` is a power of two no larger than 1 MiB (0 is not allowed).
  static Status ValidateAlignment(uint64_t alignment);

  // Precondition: ValidateAlignment(alignment).ok(). `observer` (may be null) outlives this.
  BlockAllocator(uint64_t capacity, uint64_t alignment, AllocObserver* observer = nullptr);

  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // See the file comment. InvalidArgument for 0 bytes; NoSpace when it cannot be served (and
  // then nothing changed). With `exact_only`, only the same-class free list and the bump
  // pointer are used.
  Result<ExtentList> Allocate(uint64_t bytes, bool exact_only = false) EXCLUDES(mu_);

  // Returns blocks to their class's free list. Internal error, and no change at all, when any
  // extent is not an allocated block of exactly that size or appears twice.
  Status Free(const ExtentList& extents) EXCLUDES(mu_);

  // Replay and reconciliation hooks.
  // Replaces all state: `live` blocks allocated, `free` blocks on the free lists, bump = the
  // highest end. Corruption if a block is not a valid class/offset or two blocks overlap.
  // The observer is not told (the state came from it).
  Status Restore(const ExtentList& live, const ExtentList& free) EXCLUDES(mu_);
  // Makes `block` allocated: a no-op if it already is; taken off its free list if free; carved
  // past the bump pointer if beyond it (the gap becomes free blocks). Corruption if it overlaps
  // a different block. The observer is told of every change.
  Status MarkAllocated(const Extent& block) EXCLUDES(mu_);
  // Makes `block` free: a no-op if it already is; like Free() if allocated; carved past the
  // bump pointer if beyond it. Corruption if it overlaps a different block.
  Status MarkFree(const Extent& block) EXCLUDES(mu_);

  // Runs `fn(live, free)` under the lock, so no allocation or free interleaves (log compaction).
  Status WithSnapshot(const std::function<Status(const ExtentList& live, const ExtentList& free)>&
                          fn) EXCLUDES(mu_);

  ExtentList LiveExtents() const EXCLUDES(mu_);
  ExtentList FreeExtents() const EXCLUDES(mu_);

  // Bytes a request takes from the bump pointer at most (sum of its pieces' classes).
  uint64_t MaxBumpNeed(uint64_t bytes) const;
  uint64_t RoundUp(uint64_t bytes) const;  // to the alignment (saturating)
  uint64_t min_class() const { return min_class_; }
  uint64_t alignment() const { return alignment_; }

  void SetLimit(uint64_t limit) EXCLUDES(mu_);
  uint64_t limit() const EXCLUDES(mu_);
  uint64_t bump() const EXCLUDES(mu_);  // high-water mark
  uint64_t capacity() const { return capacity_; }
  uint64_t used() const EXCLUDES(mu_);        // bytes in allocated blocks
  uint64_t free_bytes() const EXCLUDES(mu_);  // bytes on the free lists
  // capacity - bump + free-list bytes (ignores the limit: what could be allocated after growth)
  uint64_t remaining() const EXCLUDES(mu_);

 private:
  // One step of an allocation, so a failed request can be undone exactly.
  struct Taken {
    uint64_t offset;
    uint64_t size;
    int from_class;  // free list it came from; -1 = carved from the bump pointer
  };

  int ClassIndex(uint64_t cls) const;        // cls must be a valid class
  uint64_t ClassFor(uint64_t bytes) const;   // smallest class >= bytes (bytes <= kMaxClass)
  bool ValidBlock(const Extent& e) const;
  uint64_t BumpEnd() const REQUIRES(mu_);    // min(limit, capacity)

  bool TakeExact(uint64_t cls, std::vector<Taken>* taken) REQUIRES(mu_);
  bool TakeLarger(uint64_t cls, std::vector<Taken>* taken) REQUIRES(mu_);
  bool TakeSmaller(uint64_t below, std::vector<Taken>* taken) REQUIRES(mu_);
  void Undo(const std::vector<Taken>& taken) REQUIRES(mu_);
  bool RemoveFromFreeList(const Extent& e) REQUIRES(mu_);
  // Pushes [bump_, to) as free blocks and moves bump_ to `to`; returns them.
  ExtentList FreeGapUpTo(uint64_t to) REQUIRES(mu_);
  void PushFree(uint64_t offset, uint64_t size) REQUIRES(mu_);
  ExtentList LiveLocked() const REQUIRES(mu_);
  ExtentList FreeLocked() const REQUIRES(mu_);

  const uint64_t alignment_;
  const uint64_t min_class_;
  const int num_classes_;
  AllocObserver* const observer_;

  const uint64_t capacity_;

  mutable Mutex mu_;
  uint64_t limit_ GUARDED_BY(mu_);
  uint64_t bump_ GUARDED_BY(mu_) = 0;
  std::vector<std::vector<uint64_t>> free_ GUARDED_BY(mu_);  // per class: offsets (a stack)
  uint64_t free_bytes_ GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, uint64_t> allocated_ GUARDED_BY(mu_);  // offset -> size
  uint64_t used_ GUARDED_BY(mu_) = 0;
};

}  // namespace clio
