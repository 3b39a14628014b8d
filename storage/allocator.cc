#include "storage/allocator.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <string>
#include <unordered_set>

#include "storage/sys_util.h"

namespace clio {
namespace {

std::string ExtentString(const Extent& e) {
  return "{offset " + std::to_string(e.offset) + ", size " + std::to_string(e.size) + "}";
}

// Workers are numbered round robin on their first allocation; the number picks their set.
std::atomic<unsigned> g_next_worker{0};

unsigned WorkerIndex() {
  thread_local const unsigned index = g_next_worker.fetch_add(1, std::memory_order_relaxed);
  return index;
}

uint64_t RegionEnd(uint64_t offset) {
  return (offset / BlockAllocator::kMaxClass + 1) * BlockAllocator::kMaxClass;
}

}  // namespace

Status BlockAllocator::ValidateAlignment(uint64_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment) || alignment > kMaxClass) {
    return InvalidArgument("alignment " + std::to_string(alignment) +
                           " must be a power of two no larger than 1 MiB");
  }
  return Status::Ok();
}

namespace {

template <typename Set>
std::vector<std::unique_ptr<Set>> MakeSets(int sets, int classes) {
  std::vector<std::unique_ptr<Set>> out;
  for (int i = 0; i < std::max(1, sets); ++i) {
    auto s = std::make_unique<Set>();
    MutexLock l(&s->mu);
    s->by_class.resize(static_cast<size_t>(classes));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

BlockAllocator::BlockAllocator(uint64_t capacity, uint64_t alignment, AllocObserver* observer,
                               int sets)
    : alignment_(alignment),
      min_class_(std::max(kMinClass, alignment)),
      num_classes_(std::countr_zero(kMaxClass) - std::countr_zero(min_class_) + 1),
      observer_(observer),
      capacity_(capacity),
      sets_(MakeSets<FreeSet>(sets, num_classes_)),
      limit_(capacity) {}

int BlockAllocator::ClassIndex(uint64_t cls) const {
  return std::countr_zero(cls) - std::countr_zero(min_class_);
}

uint64_t BlockAllocator::ClassFor(uint64_t bytes) const {
  return std::max(min_class_, std::bit_ceil(bytes));
}

int BlockAllocator::RangeClass(uint64_t len) const {
  return ClassIndex(std::min(kMaxClass, std::bit_floor(len)));
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

BlockAllocator::FreeSet& BlockAllocator::HomeSet(uint64_t offset) const {
  return *sets_[(offset / kMaxClass) % sets_.size()];
}

size_t BlockAllocator::CallerSetIndex() const { return WorkerIndex() % sets_.size(); }

BlockAllocator::FreeSet& BlockAllocator::CallerSet() const { return *sets_[CallerSetIndex()]; }

// --- one set ---

void BlockAllocator::InsertRangeLocked(FreeSet& s, uint64_t start, uint64_t end) const {
  s.ranges.emplace(start, end);
  s.by_class[static_cast<size_t>(RangeClass(end - start))].insert(start);
  s.bytes += end - start;
}

void BlockAllocator::EraseRangeLocked(FreeSet& s,
                                      std::map<uint64_t, uint64_t>::iterator it) const {
  const uint64_t len = it->second - it->first;
  s.by_class[static_cast<size_t>(RangeClass(len))].erase(it->first);
  s.bytes -= len;
  s.ranges.erase(it);
}

std::pair<uint64_t, uint64_t> BlockAllocator::AddFreeLocked(FreeSet& s, uint64_t start,
                                                            uint64_t end) const {
  // Merge only inside the region: with fewer sets than regions, the neighbour across a region
  // boundary may sit in this same set, and ranges must not cross the boundary.
  auto next = s.ranges.lower_bound(start);
  if (next != s.ranges.end() && next->first == end && end % kMaxClass != 0) {
    end = next->second;
    auto after = std::next(next);
    EraseRangeLocked(s, next);
    next = after;
  }
  if (next != s.ranges.begin() && start % kMaxClass != 0) {
    auto prev = std::prev(next);
    if (prev->second == start) {
      start = prev->first;
      EraseRangeLocked(s, prev);
    }
  }
  InsertRangeLocked(s, start, end);
  return {start, end};
}

uint64_t BlockAllocator::CarveLocked(FreeSet& s, int cls, int lo, int hi) const {
  for (int k = lo; k <= hi; ++k) {
    auto& starts = s.by_class[static_cast<size_t>(k)];
    if (starts.empty()) continue;
    // The lowest range of the class: address-ordered first fit keeps free space low.
    auto it = s.ranges.find(*starts.begin());
    const uint64_t start = it->first, end = it->second;
    EraseRangeLocked(s, it);
    const uint64_t size = min_class_ << cls;
    // The rest touches no other range (this one did not), so it needs no merging.
    if (start + size < end) InsertRangeLocked(s, start + size, end);
    return start;
  }
  return UINT64_MAX;
}

bool BlockAllocator::RemoveFreeLocked(FreeSet& s, uint64_t start, uint64_t end) const {
  auto it = s.ranges.upper_bound(start);
  if (it == s.ranges.begin()) return false;
  --it;
  const uint64_t rs = it->first, re = it->second;
  if (rs > start || re < end) return false;
  EraseRangeLocked(s, it);
  if (rs < start) InsertRangeLocked(s, rs, start);
  if (end < re) InsertRangeLocked(s, end, re);
  return true;
}

// --- carving ---

bool BlockAllocator::TakeFromSets(int cls, int lo, int hi, ExtentList* taken) const {
  const size_t own = CallerSetIndex();
  for (size_t i = 0; i < sets_.size(); ++i) {  // the caller's set, then steal
    FreeSet& s = *sets_[(own + i) % sets_.size()];
    MutexLock l(&s.mu);
    const uint64_t off = CarveLocked(s, cls, lo, hi);
    if (off != UINT64_MAX) {
      taken->push_back({off, min_class_ << cls});
      return true;
    }
  }
  return false;
}

bool BlockAllocator::TakeBump(uint64_t cls, ExtentList* taken) {
  MutexLock l(&mu_);
  const uint64_t end = BumpEnd();
  if (bump_ > end || end - bump_ < cls) return false;
  taken->push_back({bump_, cls});
  bump_ += cls;
  return true;
}

bool BlockAllocator::TakeExact(uint64_t cls, ExtentList* taken) {
  const int i = ClassIndex(cls);
  return TakeFromSets(i, i, i, taken) || TakeBump(cls, taken);
}

bool BlockAllocator::TakeLarger(uint64_t cls, ExtentList* taken) {
  const int i = ClassIndex(cls);
  return i + 1 < num_classes_ && TakeFromSets(i, i + 1, num_classes_ - 1, taken);
}

bool BlockAllocator::TakeSmaller(uint64_t below, ExtentList* taken) {
  const int top = ClassIndex(below) - 1;
  // A set can change between the look and the carve; retry a few times before giving up.
  for (int attempt = 0; attempt < 3; ++attempt) {
    int best_list = -1;
    size_t best_set = 0;
    for (size_t i = 0; i < sets_.size(); ++i) {
      FreeSet& s = *sets_[i];
      MutexLock l(&s.mu);
      for (int k = top; k > best_list; --k) {
        if (!s.by_class[static_cast<size_t>(k)].empty()) {
          best_list = k;
          best_set = i;
          break;
        }
      }
    }
    int best_bump = -1;
    {
      MutexLock l(&mu_);
      const uint64_t end = BumpEnd();
      const uint64_t room = bump_ < end ? end - bump_ : 0;
      for (int k = top; k >= 0; --k) {
        if ((min_class_ << k) <= room) {
          best_bump = k;
          break;
        }
      }
    }
    if (best_list < 0 && best_bump < 0) return false;
    if (best_list >= best_bump) {
      FreeSet& s = *sets_[best_set];
      MutexLock l(&s.mu);
      const uint64_t off = CarveLocked(s, best_list, best_list, best_list);
      if (off != UINT64_MAX) {
        taken->push_back({off, min_class_ << best_list});
        return true;
      }
    } else if (TakeBump(min_class_ << best_bump, taken)) {
      return true;
    }
  }
  return false;
}

void BlockAllocator::GiveBack(uint64_t offset, uint64_t size, bool retract) {
  const uint64_t end = offset + size;
  bool retracted = false;
  for (uint64_t a = offset; a < end;) {
    const uint64_t b = std::min(end, RegionEnd(a));
    FreeSet& s = HomeSet(a);
    MutexLock l(&s.mu);
    const auto [ms, me] = AddFreeLocked(s, a, b);
    if (retract) {
      MutexLock h(&mu_);
      if (me == bump_) {
        bump_ = ms;
        EraseRangeLocked(s, s.ranges.find(ms));
        retracted = true;
      }
    }
    a = b;
  }
  if (retracted) RetractAcrossRegions();
}

void BlockAllocator::RetractAcrossRegions() {
  // The range below a region boundary lives in another set than the one just retracted over,
  // whose lock the caller held; take it now, in lock order, and re-check.
  for (;;) {
    uint64_t b = 0;
    {
      MutexLock h(&mu_);
      b = bump_;
    }
    if (b == 0 || b % kMaxClass != 0) return;
    FreeSet& s = HomeSet(b - 1);
    MutexLock l(&s.mu);
    MutexLock h(&mu_);
    if (bump_ != b) return;  // moved meanwhile; whoever moved it handles the rest
    auto it = s.ranges.upper_bound(b - 1);
    if (it == s.ranges.begin()) return;
    --it;
    if (it->second != b) return;
    bump_ = it->first;
    EraseRangeLocked(s, it);
  }
}

Result<ExtentList> BlockAllocator::Allocate(uint64_t bytes, bool exact_only) {
  if (bytes == 0) return InvalidArgument("allocate of 0 bytes");
  const uint64_t rounded = RoundUp(bytes);
  ReaderLock r(&slow_mu_);
  {
    MutexLock l(&mu_);
    if (rounded > capacity_) {
      return NoSpace("allocate " + std::to_string(bytes) + " bytes: larger than the capacity " +
                     std::to_string(capacity_));
    }
    if (rounded > capacity_ - used_) {
      return NoSpace("allocate " + std::to_string(bytes) + " bytes: " +
                     std::to_string(capacity_ - used_) + " bytes remain");
    }
  }
  ExtentList taken;
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
    // Nothing was published or logged: give the pieces back, newest first, so bump pieces
    // move the bump pointer back where it was (unless another thread bumped meanwhile).
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) {
      GiveBack(it->offset, it->size, /*retract=*/true);
    }
    MutexLock l(&mu_);
    return NoSpace("allocate " + std::to_string(bytes) + " bytes: " +
                   std::to_string(capacity_ - used_) + " bytes remain" +
                   (exact_only ? " (without splitting or fragmenting)" : " (fragmented)"));
  }
  MutexLock l(&mu_);
  for (const auto& t : taken) {
    allocated_.emplace(t.offset, t.size);
    used_ += t.size;
  }
  if (observer_ != nullptr) observer_->OnAllocate(taken);
  return taken;
}

Status BlockAllocator::Free(const ExtentList& extents) {
  ReaderLock r(&slow_mu_);
  {
    MutexLock l(&mu_);
    std::unordered_set<uint64_t> seen;
    for (const auto& e : extents) {
      auto it = allocated_.find(e.offset);
      if (it == allocated_.end() || it->second != e.size || !seen.insert(e.offset).second) {
        return Internal("free of " + ExtentString(e) + ", which is not an allocated block");
      }
    }
    // Logged before the blocks can be carved again (they reach the sets after this).
    if (observer_ != nullptr) observer_->OnFree(extents);
    for (const auto& e : extents) {
      allocated_.erase(e.offset);
      used_ -= e.size;
    }
  }
  for (const auto& e : extents) GiveBack(e.offset, e.size, /*retract=*/true);
  return Status::Ok();
}

// --- replay and reconciliation ---

const std::pair<const uint64_t, uint64_t>* BlockAllocator::OverlapLocked(uint64_t offset,
                                                                         uint64_t size) const {
  auto it = allocated_.lower_bound(offset);
  if (it != allocated_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second > offset) return &*prev;
  }
  if (it != allocated_.end() && it->first < offset + size) return &*it;
  return nullptr;
}

void BlockAllocator::AppendBlocks(uint64_t start, uint64_t end, ExtentList* out) const {
  while (start < end) {
    const uint64_t size = std::min(kMaxClass, std::bit_floor(end - start));
    out->push_back({start, size});
    start += size;
  }
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
  auto by_offset = [](const Extent& a, const Extent& b) { return a.offset < b.offset; };
  std::sort(all.begin(), all.end(), by_offset);
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i - 1].offset + all[i - 1].size > all[i].offset) {
      return Corruption("allocator blocks " + ExtentString(all[i - 1]) + " and " +
                        ExtentString(all[i]) + " overlap");
    }
  }
  const uint64_t top = all.empty() ? 0 : all.back().offset + all.back().size;
  WriterLock w(&slow_mu_);
  for (const auto& s : sets_) {
    MutexLock l(&s->mu);
    s->ranges.clear();
    for (auto& c : s->by_class) c.clear();
    s->bytes = 0;
  }
  std::vector<Extent> sorted_live = live;
  std::sort(sorted_live.begin(), sorted_live.end(), by_offset);
  {
    MutexLock l(&mu_);
    allocated_.clear();
    used_ = 0;
    bump_ = top;
    for (const auto& e : sorted_live) {
      allocated_.emplace(e.offset, e.size);
      used_ += e.size;
    }
  }
  // Everything below the bump pointer that is not live is free, the listed free blocks and
  // any gap alike (a gap is space whose records a later, overlapping record superseded).
  uint64_t pos = 0;
  for (const auto& e : sorted_live) {
    if (e.offset > pos) GiveBack(pos, e.offset - pos, /*retract=*/false);
    pos = e.offset + e.size;
  }
  if (top > pos) GiveBack(pos, top - pos, /*retract=*/false);
  return Status::Ok();
}

Status BlockAllocator::MarkAllocated(const Extent& block) {
  if (!ValidBlock(block)) return Corruption("extent " + ExtentString(block) + " is invalid");
  const uint64_t start = block.offset, end = block.offset + block.size;
  WriterLock w(&slow_mu_);  // no block is in flight between the table and the sets
  uint64_t old_bump = 0;
  {
    MutexLock l(&mu_);
    if (end > capacity_) {
      return Corruption("extent " + ExtentString(block) + " lies past the capacity " +
                        std::to_string(capacity_));
    }
    auto it = allocated_.find(start);
    if (it != allocated_.end() && it->second == block.size) return Status::Ok();
    if (const auto* o = OverlapLocked(start, block.size)) {
      return Corruption("extent " + ExtentString(block) + " overlaps allocated block " +
                        ExtentString({o->first, o->second}));
    }
    old_bump = bump_;
    if (end > bump_) {
      ExtentList gap;
      if (start > bump_) AppendBlocks(bump_, start, &gap);
      if (observer_ != nullptr && !gap.empty()) observer_->OnFree(gap);
      bump_ = end;
    }
    allocated_.emplace(start, block.size);
    used_ += block.size;
    if (observer_ != nullptr) observer_->OnAllocate({block});
  }
  // Below the old bump pointer the block was free space (nothing is in flight): take it out.
  for (uint64_t a = start; a < std::min(end, old_bump);) {
    const uint64_t b = std::min({end, old_bump, RegionEnd(a)});
    FreeSet& s = HomeSet(a);
    MutexLock l(&s.mu);
    if (!RemoveFreeLocked(s, a, b)) {
      return Internal("extent " + ExtentString(block) + " was neither allocated nor free");
    }
    a = b;
  }
  if (start > old_bump) GiveBack(old_bump, start - old_bump, /*retract=*/false);
  return Status::Ok();
}

Status BlockAllocator::MarkFree(const Extent& block) {
  if (!ValidBlock(block)) return Corruption("extent " + ExtentString(block) + " is invalid");
  const uint64_t start = block.offset, end = block.offset + block.size;
  WriterLock w(&slow_mu_);
  uint64_t give_from = 0, give_to = 0;
  bool was_live = false;
  {
    MutexLock l(&mu_);
    if (end > capacity_) {
      return Corruption("extent " + ExtentString(block) + " lies past the capacity");
    }
    auto it = allocated_.find(start);
    if (it != allocated_.end() && it->second == block.size) {
      if (observer_ != nullptr) observer_->OnFree({block});
      allocated_.erase(it);
      used_ -= block.size;
      give_from = start;
      give_to = end;
      was_live = true;
    } else if (const auto* o = OverlapLocked(start, block.size)) {
      return Corruption("extent " + ExtentString(block) + " overlaps allocated block " +
                        ExtentString({o->first, o->second}));
    } else if (end <= bump_) {
      return Status::Ok();  // already free
    } else {
      ExtentList gap;
      if (start > bump_) AppendBlocks(bump_, start, &gap);
      gap.push_back(block);
      if (observer_ != nullptr) observer_->OnFree(gap);
      give_from = bump_;
      give_to = end;
      bump_ = end;
    }
  }
  GiveBack(give_from, give_to - give_from, /*retract=*/was_live);
  return Status::Ok();
}

// --- snapshots and stats ---

ExtentList BlockAllocator::LiveLocked() const {
  ExtentList out;
  out.reserve(allocated_.size());
  for (const auto& [off, size] : allocated_) out.push_back({off, size});
  return out;
}

ExtentList BlockAllocator::FreeLocked() const {
  ExtentList out;
  uint64_t pos = 0;
  for (const auto& [off, size] : allocated_) {
    if (off > pos) AppendBlocks(pos, off, &out);
    pos = off + size;
  }
  if (bump_ > pos) AppendBlocks(pos, bump_, &out);
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

Status BlockAllocator::CheckConsistency() const {
  WriterLock w(&slow_mu_);
  struct Range {
    uint64_t start, end;
    size_t set;
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < sets_.size(); ++i) {
    const FreeSet& s = *sets_[i];
    MutexLock l(&s.mu);
    uint64_t bytes = 0;
    size_t filed = 0;
    for (const auto& c : s.by_class) filed += c.size();
    if (filed != s.ranges.size()) return Internal("set " + std::to_string(i) + ": class index");
    uint64_t prev_end = 0;
    for (const auto& [start, end] : s.ranges) {
      const std::string where = "set " + std::to_string(i) + " range [" + std::to_string(start) +
                                ", " + std::to_string(end) + ")";
      if (end <= start || end > RegionEnd(start)) return Internal(where + " crosses a region");
      if (&HomeSet(start) != &s) return Internal(where + " is not in its home set");
      if (s.by_class[static_cast<size_t>(RangeClass(end - start))].count(start) == 0) {
        return Internal(where + " is filed under the wrong class");
      }
      if (start == prev_end && start % kMaxClass != 0) return Internal(where + " is unmerged");
      prev_end = end;
      bytes += end - start;
      ranges.push_back({start, end, i});
    }
    if (bytes != s.bytes) return Internal("set " + std::to_string(i) + ": byte count");
  }
  MutexLock l(&mu_);
  uint64_t free = 0, used = 0;
  for (const auto& r : ranges) {
    free += r.end - r.start;
    if (r.end > bump_) return Internal("free range past the bump pointer");
    if (OverlapLocked(r.start, r.end - r.start) != nullptr) {
      return Internal("free range [" + std::to_string(r.start) + ", " + std::to_string(r.end) +
                      ") overlaps an allocated block");
    }
  }
  uint64_t prev_end = 0;
  for (const auto& [off, size] : allocated_) {
    if (off < prev_end) return Internal("allocated blocks overlap at " + std::to_string(off));
    prev_end = off + size;
    used += size;
  }
  if (used != used_) return Internal("used bytes " + std::to_string(used_) + " != table sum");
  if (prev_end > bump_) return Internal("allocated block past the bump pointer");
  if (used_ + free != bump_) {
    return Internal("used " + std::to_string(used_) + " + free " + std::to_string(free) +
                    " != bump " + std::to_string(bump_));
  }
  return Status::Ok();
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
  return bump_ - used_;
}
uint64_t BlockAllocator::remaining() const {
  MutexLock l(&mu_);
  return capacity_ - used_;
}

}  // namespace clio
