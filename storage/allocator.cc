#include "storage/allocator.h"

#include <algorithm>
#include <bit>
#include <string>
#include <unordered_set>

#include "storage/sys_util.h"

namespace clio {
namespace {

std::string ExtentString(const Extent& e) {
  return "{offset " + std::to_string(e.offset) + ", size " + std::to_string(e.size) + "}";
}

}  // namespace

Status BlockAllocator::ValidateAlignment(uint64_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment) || alignment > kMaxClass) {
    return InvalidArgument("alignment " + std::to_string(alignment) +
                           " must be a power of two no larger than 1 MiB");
  }
  return Status::Ok();
}

BlockAllocator::BlockAllocator(uint64_t capacity, uint64_t alignment, AllocObserver* observer)
    : alignment_(alignment),
      min_class_(std::max(kMinClass, alignment)),
      num_classes_(std::countr_zero(kMaxClass) - std::countr_zero(min_class_) + 1),
      observer_(observer),
      capacity_(capacity),
      limit_(capacity),
      free_(static_cast<size_t>(num_classes_)) {}

int BlockAllocator::ClassIndex(uint64_t cls) const {
  return std::countr_zero(cls) - std::countr_zero(min_class_);
}

uint64_t BlockAllocator::ClassFor(uint64_t bytes) const {
  return std::max(min_class_, std::bit_ceil(bytes));
}

uint64_t BlockAllocator::RoundUp(uint64_t bytes) const { return RoundUpTo(bytes, alignment_); }

bool BlockAllocator::ValidBlock(const Extent& e) const {
  return e.size >= min_class_ && e.size <= kMaxClass && std::has_single_bit(e.size) &&
         e.offset % min_class_ == 0 && e.offset <= UINT64_MAX - e.size;
}

uint64_t BlockAllocator::MaxBumpNeed(uint64_t bytes) const {
  uint64_t b = RoundUp(bytes);
  uint64_t full = b / kMaxClass;
  uint64_t rest = b % kMaxClass;
  uint64_t need = full > UINT64_MAX / kMaxClass ? UINT64_MAX : full * kMaxClass;
  if (rest != 0) need = need > UINT64_MAX - kMaxClass ? UINT64_MAX : need + ClassFor(rest);
  return need;
}

uint64_t BlockAllocator::BumpEnd() const { return std::min(limit_, capacity_); }

bool BlockAllocator::TakeExact(uint64_t cls, std::vector<Taken>* taken) {
  int i = ClassIndex(cls);
  auto& list = free_[static_cast<size_t>(i)];
  if (!list.empty()) {
    taken->push_back({list.back(), cls, i});
    list.pop_back();
    free_bytes_ -= cls;
    return true;
  }
  uint64_t end = BumpEnd();
  if (bump_ <= end && end - bump_ >= cls) {
    taken->push_back({bump_, cls, -1});
    bump_ += cls;
    return true;
  }
  return false;
}

bool BlockAllocator::TakeLarger(uint64_t cls, std::vector<Taken>* taken) {
  for (int i = ClassIndex(cls) + 1; i < num_classes_; ++i) {
    auto& list = free_[static_cast<size_t>(i)];
    if (list.empty()) continue;
    uint64_t size = min_class_ << i;
    taken->push_back({list.back(), size, i});
    list.pop_back();
    free_bytes_ -= size;
    return true;
  }
  return false;
}

// Takes the largest block of a class below `below`: from a free list or carved from the bump
// space, whichever is larger (the free list on a tie, to keep bump space unfragmented).
bool BlockAllocator::TakeSmaller(uint64_t below, std::vector<Taken>* taken) {
  int best_list = -1;
  for (int i = ClassIndex(below) - 1; i >= 0; --i) {
    if (!free_[static_cast<size_t>(i)].empty()) {
      best_list = i;
      break;
    }
  }
  uint64_t end = BumpEnd();
  uint64_t room = bump_ < end ? end - bump_ : 0;
  int best_bump = -1;
  for (int i = ClassIndex(below) - 1; i >= 0; --i) {
    if ((min_class_ << i) <= room) {
      best_bump = i;
      break;
    }
  }
  if (best_list < 0 && best_bump < 0) return false;
  if (best_list >= best_bump) {
    auto& list = free_[static_cast<size_t>(best_list)];
    uint64_t size = min_class_ << best_list;
    taken->push_back({list.back(), size, best_list});
    list.pop_back();
    free_bytes_ -= size;
  } else {
    uint64_t size = min_class_ << best_bump;
    taken->push_back({bump_, size, -1});
    bump_ += size;
  }
  return true;
}

void BlockAllocator::Undo(const std::vector<Taken>& taken) {
  // Reverse order restores the free-list stacks and the bump pointer exactly.
  for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
    if (it->from_class < 0) {
      bump_ -= it->size;
    } else {
      free_[static_cast<size_t>(it->from_class)].push_back(it->offset);
      free_bytes_ += it->size;
    }
  }
}

Result<ExtentList> BlockAllocator::Allocate(uint64_t bytes, bool exact_only) {
  if (bytes == 0) return InvalidArgument("allocate of 0 bytes");
  const uint64_t rounded = RoundUp(bytes);
  MutexLock l(&mu_);
  if (rounded > capacity_) {
    return NoSpace("allocate " + std::to_string(bytes) + " bytes: larger than the capacity " +
                   std::to_string(capacity_));
  }
  std::vector<Taken> taken;
  bool ok = true;
  for (uint64_t left = rounded; left > 0 && ok;) {
    const uint64_t need = std::min(left, kMaxClass);
    left -= need;
    const uint64_t cls = ClassFor(need);
    if (TakeExact(cls, &taken)) continue;
    if (exact_only) {
      ok = false;
      break;
    }
    if (TakeLarger(cls, &taken)) continue;
    // Assemble the piece from smaller blocks.
    for (uint64_t rest = need; rest > 0;) {
      const uint64_t c = ClassFor(rest);
      if (c < cls && (TakeExact(c, &taken) || TakeLarger(c, &taken))) break;
      if (!TakeSmaller(c, &taken)) {
        ok = false;
        break;
      }
      rest -= std::min(rest, taken.back().size);
    }
  }
  if (!ok) {
    Undo(taken);
    uint64_t rem = capacity_ > bump_ ? capacity_ - bump_ + free_bytes_ : free_bytes_;
    return NoSpace("allocate " + std::to_string(bytes) + " bytes: " + std::to_string(rem) +
                   " bytes remain" + (exact_only ? " (without fragmenting)" : ""));
  }
  ExtentList out;
  out.reserve(taken.size());
  for (const auto& t : taken) {
    out.push_back({t.offset, t.size});
    allocated_.emplace(t.offset, t.size);
    used_ += t.size;
  }
  if (observer_ != nullptr) observer_->OnAllocate(out);
  return out;
}

void BlockAllocator::PushFree(uint64_t offset, uint64_t size) {
  free_[static_cast<size_t>(ClassIndex(size))].push_back(offset);
  free_bytes_ += size;
}

Status BlockAllocator::Free(const ExtentList& extents) {
  MutexLock l(&mu_);
  std::unordered_set<uint64_t> seen;
  for (const auto& e : extents) {
    auto it = allocated_.find(e.offset);
    if (it == allocated_.end() || it->second != e.size || !seen.insert(e.offset).second) {
      return Internal("free of " + ExtentString(e) + ", which is not an allocated block");
    }
  }
  if (observer_ != nullptr) observer_->OnFree(extents);
  for (const auto& e : extents) {
    allocated_.erase(e.offset);
    used_ -= e.size;
    PushFree(e.offset, e.size);
  }
  return Status::Ok();
}

Status BlockAllocator::Restore(const ExtentList& live, const ExtentList& free) {
  std::vector<Extent> all;
  all.reserve(live.size() + free.size());
  for (const auto* list : {&live, &free}) {
    for (const auto& e : *list) {
      if (!ValidBlock(e)) return Corruption("allocator block " + ExtentString(e) + " is invalid");
      all.push_back(e);
    }
  }
  std::sort(all.begin(), all.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i - 1].offset + all[i - 1].size > all[i].offset) {
      return Corruption("allocator blocks " + ExtentString(all[i - 1]) + " and " +
                        ExtentString(all[i]) + " overlap");
    }
  }
  MutexLock l(&mu_);
  allocated_.clear();
  used_ = 0;
  for (auto& list : free_) list.clear();
  free_bytes_ = 0;
  bump_ = all.empty() ? 0 : all.back().offset + all.back().size;
  for (const auto& e : live) {
    allocated_.emplace(e.offset, e.size);
    used_ += e.size;
  }
  for (const auto& e : free) PushFree(e.offset, e.size);
  return Status::Ok();
}

bool BlockAllocator::RemoveFromFreeList(const Extent& e) {
  auto& list = free_[static_cast<size_t>(ClassIndex(e.size))];
  auto it = std::find(list.begin(), list.end(), e.offset);
  if (it == list.end()) return false;
  list.erase(it);
  free_bytes_ -= e.size;
  return true;
}

ExtentList BlockAllocator::FreeGapUpTo(uint64_t to) {
  ExtentList gap;
  while (bump_ < to) {
    // Largest class that fits the gap and keeps the block aligned to its own start.
    uint64_t size = std::min(kMaxClass, std::bit_floor(to - bump_));
    gap.push_back({bump_, size});
    PushFree(bump_, size);
    bump_ += size;
  }
  return gap;
}

Status BlockAllocator::MarkAllocated(const Extent& block) {
  if (!ValidBlock(block)) return Corruption("extent " + ExtentString(block) + " is invalid");
  MutexLock l(&mu_);
  if (block.offset + block.size > capacity_) {
    return Corruption("extent " + ExtentString(block) + " lies past the capacity " +
                      std::to_string(capacity_));
  }
  auto it = allocated_.find(block.offset);
  if (it != allocated_.end()) {
    if (it->second == block.size) return Status::Ok();
    return Corruption("extent " + ExtentString(block) + " overlaps allocated block of size " +
                      std::to_string(it->second));
  }
  if (block.offset >= bump_) {
    ExtentList gap = FreeGapUpTo(block.offset);
    if (observer_ != nullptr && !gap.empty()) observer_->OnFree(gap);
    bump_ = block.offset + block.size;
  } else if (!RemoveFromFreeList(block)) {
    return Corruption("extent " + ExtentString(block) + " overlaps other allocator blocks");
  }
  allocated_.emplace(block.offset, block.size);
  used_ += block.size;
  if (observer_ != nullptr) observer_->OnAllocate({block});
  return Status::Ok();
}

Status BlockAllocator::MarkFree(const Extent& block) {
  if (!ValidBlock(block)) return Corruption("extent " + ExtentString(block) + " is invalid");
  MutexLock l(&mu_);
  auto it = allocated_.find(block.offset);
  if (it != allocated_.end()) {
    if (it->second != block.size) {
      return Corruption("extent " + ExtentString(block) + " overlaps allocated block of size " +
                        std::to_string(it->second));
    }
    if (observer_ != nullptr) observer_->OnFree({block});
    allocated_.erase(it);
    used_ -= block.size;
    PushFree(block.offset, block.size);
    return Status::Ok();
  }
  if (block.offset >= bump_) {
    if (block.offset + block.size > capacity_) {
      return Corruption("extent " + ExtentString(block) + " lies past the capacity");
    }
    ExtentList gap = FreeGapUpTo(block.offset);
    gap.push_back(block);
    PushFree(block.offset, block.size);
    bump_ = block.offset + block.size;
    if (observer_ != nullptr) observer_->OnFree(gap);
    return Status::Ok();
  }
  const auto& list = free_[static_cast<size_t>(ClassIndex(block.size))];
  if (std::find(list.begin(), list.end(), block.offset) != list.end()) return Status::Ok();
  return Corruption("extent " + ExtentString(block) + " overlaps other allocator blocks");
}

ExtentList BlockAllocator::LiveLocked() const {
  ExtentList out;
  out.reserve(allocated_.size());
  for (const auto& [off, size] : allocated_) out.push_back({off, size});
  std::sort(out.begin(), out.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  return out;
}

ExtentList BlockAllocator::FreeLocked() const {
  ExtentList out;
  for (int i = 0; i < num_classes_; ++i) {
    for (uint64_t off : free_[static_cast<size_t>(i)]) out.push_back({off, min_class_ << i});
  }
  return out;
}

Status BlockAllocator::WithSnapshot(
    const std::function<Status(const ExtentList& live, const ExtentList& free)>& fn) {
  MutexLock l(&mu_);
  return fn(LiveLocked(), FreeLocked());
}

ExtentList BlockAllocator::LiveExtents() const {
  MutexLock l(&mu_);
  return LiveLocked();
}

ExtentList BlockAllocator::FreeExtents() const {
  MutexLock l(&mu_);
  return FreeLocked();
}

void BlockAllocator::SetLimit(uint64_t limit) {
  MutexLock l(&mu_);
  limit_ = limit;
}
uint64_t BlockAllocator::limit() const {
  MutexLock l(&mu_);
  return limit_;
}
uint64_t BlockAllocator::bump() const {
  MutexLock l(&mu_);
  return bump_;
}
uint64_t BlockAllocator::used() const {
  MutexLock l(&mu_);
  return used_;
}
uint64_t BlockAllocator::free_bytes() const {
  MutexLock l(&mu_);
  return free_bytes_;
}
uint64_t BlockAllocator::remaining() const {
  MutexLock l(&mu_);
  return (capacity_ > bump_ ? capacity_ - bump_ : 0) + free_bytes_;
}

}  // namespace clio
