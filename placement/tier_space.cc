#include "placement/tier_space.h"

#include <algorithm>
#include <bit>

namespace clio {

namespace {
constexpr uint64_t kMaxBlockSize = 1ull << 20;  // the allocator's largest class
constexpr uint64_t kMinClass = 512;             // and its smallest
}  // namespace

uint64_t AllocationFootprint(uint64_t bytes, uint64_t min_class) {
  const uint64_t whole = bytes / kMaxBlockSize * kMaxBlockSize;
  const uint64_t rest = bytes - whole;
  if (rest == 0) return whole;
  return whole + std::max(std::max(min_class, kMinClass), std::bit_ceil(rest));
}

FlushReservations::FlushReservations(std::vector<Bdev*> persistent, AcceptsFn accepts)
    : accepts_(std::move(accepts)) {
  MutexLock l(&mu_);
  persistent_ = std::move(persistent);
  UpdateMinClassLocked();
}

void FlushReservations::UpdateMinClassLocked() {
  uint64_t m = kMinClass;
  for (Bdev* b : persistent_) m = std::max(m, b->config().alignment);
  min_class_ = std::min(m, kMaxBlockSize);
}

void FlushReservations::AddBdev(Bdev* b) {
  MutexLock l(&mu_);
  persistent_.push_back(b);
  UpdateMinClassLocked();
}

void FlushReservations::RemoveBdev(Bdev* b) {
  MutexLock l(&mu_);
  persistent_.erase(std::remove(persistent_.begin(), persistent_.end(), b), persistent_.end());
  UpdateMinClassLocked();
}

bool FlushReservations::enabled() const {
  MutexLock l(&mu_);
  return !persistent_.empty();
}

uint64_t FlushReservations::AvailableLocked() const {
  uint64_t remaining = 0;
  for (Bdev* b : persistent_) {
    BdevStats s = b->GetStats();
    // A dying or draining tier takes no flushes: its room backs nothing.
    if (accepts_ ? !accepts_(*b, s) : s.lifetime_days < 1) continue;
    remaining += s.remaining;
  }
  // Kept room a blob's own copy fills is not free: it is counted once, as used, not again as
  // reserved.
  remaining += kept_filled_;
  return remaining > reserved_ ? remaining - reserved_ : 0;
}

Status FlushReservations::ReserveBlob(uint64_t tag, uint64_t blob, uint64_t size, uint64_t* previous) {
  MutexLock l(&mu_);
  uint64_t& have = by_blob_[{tag, blob}];
  if (previous) *previous = have;
  uint64_t want = persistent_.empty() ? 0 : AllocationFootprint(size, min_class_);
  // The room of the next copy a blob keeps backs its flush: only what it does not cover is
  // reserved (the other half is the copy it has).
  auto k = kept_.find({tag, blob});
  if (k != kept_.end()) want = want > k->second.bytes / 2 ? want - k->second.bytes / 2 : 0;
  if (want <= have) {
    if (have == 0) by_blob_.erase({tag, blob});
    return Status::Ok();
  }
  const uint64_t more = want - have;
  const uint64_t avail = AvailableLocked();
  if (more > avail) {
    if (have == 0) by_blob_.erase({tag, blob});
    return NoSpace("the persistent tiers cannot hold the flushed copy: " + std::to_string(more) +
                   " more bytes needed, " + std::to_string(avail) + " free after " +
                   std::to_string(reserved_) + " bytes reserved for dirty data");
  }
  have = want;
  reserved_ += more;
  return Status::Ok();
}

void FlushReservations::RestoreBlob(uint64_t tag, uint64_t blob, uint64_t bytes) {
  MutexLock l(&mu_);
  auto it = by_blob_.find({tag, blob});
  uint64_t have = it == by_blob_.end() ? 0 : it->second;
  reserved_ = reserved_ - have + bytes;
  if (bytes == 0) {
    if (it != by_blob_.end()) by_blob_.erase(it);
  } else {
    by_blob_[{tag, blob}] = bytes;
  }
}

void FlushReservations::RestoreBlobAtLeast(uint64_t tag, uint64_t blob, uint64_t bytes) {
  MutexLock l(&mu_);
  uint64_t& have = by_blob_[{tag, blob}];
  if (bytes > have) {
    reserved_ += bytes - have;
    have = bytes;
  }
  if (have == 0) by_blob_.erase({tag, blob});
}

void FlushReservations::ReleaseBlob(uint64_t tag, uint64_t blob) { RestoreBlob(tag, blob, 0); }

Status FlushReservations::KeepRoom(uint64_t tag, uint64_t blob, uint64_t size, uint64_t in_use) {
  MutexLock l(&mu_);
  auto it = kept_.find({tag, blob});
  const Kept had = it == kept_.end() ? Kept{} : it->second;
  // The copy, and room for its next copy-on-write replacement.
  Kept now;
  now.bytes = size == 0 || persistent_.empty() ? 0 : 2 * AllocationFootprint(size, min_class_);
  now.filled = std::min(in_use, now.bytes / 2);
  // Counted with the blob's copy as it is now.
  kept_filled_ = kept_filled_ - had.filled + now.filled;
  if (now.bytes > had.bytes) {
    const uint64_t more = now.bytes - had.bytes;
    const uint64_t avail = AvailableLocked();
    if (more > avail) {
      kept_filled_ = kept_filled_ - now.filled + had.filled;
      return NoSpace("the persistent tiers cannot keep " + std::to_string(more) + " more bytes: " +
                     std::to_string(avail) + " free after " + std::to_string(reserved_) + " bytes reserved");
    }
  }
  reserved_ = reserved_ - had.bytes + now.bytes;
  kept_total_ = kept_total_ - had.bytes + now.bytes;
  if (now.bytes == 0) {
    if (it != kept_.end()) kept_.erase(it);
  } else {
    kept_[{tag, blob}] = now;
  }
  return Status::Ok();
}

void FlushReservations::SetFilled(uint64_t tag, uint64_t blob, uint64_t in_use) {
  MutexLock l(&mu_);
  auto it = kept_.find({tag, blob});
  if (it == kept_.end()) return;
  const uint64_t now = std::min(in_use, it->second.bytes / 2);
  kept_filled_ = kept_filled_ - it->second.filled + now;
  it->second.filled = now;
}

bool FlushReservations::keeps(uint64_t tag, uint64_t blob) const {
  MutexLock l(&mu_);
  return kept_.count({tag, blob}) != 0;
}

uint64_t FlushReservations::kept_unfilled() const {
  MutexLock l(&mu_);
  return kept_total_ / 2 > kept_filled_ ? kept_total_ / 2 - kept_filled_ : 0;
}

uint64_t FlushReservations::kept(uint64_t tag, uint64_t blob) const {
  MutexLock l(&mu_);
  auto it = kept_.find({tag, blob});
  return it == kept_.end() ? 0 : it->second.bytes;
}

uint64_t FlushReservations::kept() const {
  MutexLock l(&mu_);
  return kept_total_;
}

Result<ExtentList> FlushReservations::AllocateDirect(uint64_t tag, uint64_t blob, Bdev* b, uint64_t bytes,
                                                     bool new_copy) {
  if (bytes == 0) return b->Allocate(bytes);
  MutexLock l(&mu_);
  if (persistent_.empty()) return b->Allocate(bytes);
  const uint64_t want = AllocationFootprint(bytes, min_class_);
  auto k = kept_.find({tag, blob});
  uint64_t own = 0;  // the blob's own kept room that is free for this allocation
  if (k != kept_.end()) {
    const uint64_t half = k->second.bytes / 2;
    own = new_copy ? half : half - k->second.filled;
  }
  const uint64_t avail = AvailableLocked() + own;
  if (want > avail)
    return NoSpace("the persistent tiers have " + std::to_string(avail) + " bytes free after " +
                   std::to_string(reserved_) + " bytes reserved for dirty data and fallocate; " +
                   std::to_string(want) + " needed");
  return b->Allocate(bytes);
}

Result<ExtentList> FlushReservations::AllocateFlush(uint64_t tag, uint64_t blob, Bdev* b,
                                                    uint64_t bytes, uint64_t* spent) {
  *spent = 0;
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(ExtentList got, b->Allocate(bytes));
  auto it = by_blob_.find({tag, blob});
  if (it != by_blob_.end()) {
    *spent = it->second;
    reserved_ -= it->second;
    by_blob_.erase(it);
  }
  return got;
}

uint64_t FlushReservations::reserved() const {
  MutexLock l(&mu_);
  return reserved_;
}

void DirtyLedger::AddTier(uint64_t tier_id, uint64_t limit) {
  MutexLock l(&mu_);
  tiers_[tier_id].limit = limit;
}

void DirtyLedger::RemoveTier(uint64_t tier_id) {
  MutexLock l(&mu_);
  tiers_.erase(tier_id);
  for (auto it = charges_.begin(); it != charges_.end();)
    it = std::get<2>(it->first) == tier_id ? charges_.erase(it) : std::next(it);
  room_cv_.NotifyAll();
}

void DirtyLedger::SetLocked(TierState& t, const ChargeKey& key, uint64_t bytes) {
  auto c = charges_.find(key);
  const uint64_t have = c == charges_.end() ? 0 : c->second;
  t.dirty = t.dirty - have + bytes;
  t.peak = std::max(t.peak, t.dirty);
  if (bytes == 0) {
    if (c != charges_.end()) charges_.erase(c);
  } else {
    charges_[key] = bytes;
  }
  if (bytes < have) room_cv_.NotifyAll();
}

bool DirtyLedger::TryCharge(uint64_t tier_id, uint64_t tag, uint64_t blob, uint64_t bytes,
                            uint64_t* previous) {
  MutexLock l(&mu_);
  auto t = tiers_.find(tier_id);
  if (t == tiers_.end()) return true;  // not a volatile tier: nothing to count
  const ChargeKey key{tag, blob, tier_id};
  auto c = charges_.find(key);
  const uint64_t have = c == charges_.end() ? 0 : c->second;
  if (previous) *previous = have;
  const uint64_t others = t->second.dirty - have;
  if (bytes > have && others > 0 && others + bytes > t->second.limit) return false;
  SetLocked(t->second, key, bytes);
  return true;
}

void DirtyLedger::SetCharge(uint64_t tier_id, uint64_t tag, uint64_t blob, uint64_t bytes) {
  MutexLock l(&mu_);
  auto t = tiers_.find(tier_id);
  if (t != tiers_.end()) SetLocked(t->second, {tag, blob, tier_id}, bytes);
}

void DirtyLedger::ReleaseBlob(uint64_t tag, uint64_t blob) {
  MutexLock l(&mu_);
  bool released = false;
  auto it = charges_.lower_bound({tag, blob, 0});
  while (it != charges_.end() && std::get<0>(it->first) == tag && std::get<1>(it->first) == blob) {
    auto t = tiers_.find(std::get<2>(it->first));
    if (t != tiers_.end()) t->second.dirty -= it->second;
    it = charges_.erase(it);
    released = true;
  }
  if (released) room_cv_.NotifyAll();
}

bool DirtyLedger::WaitForRoom(uint64_t tier_id, uint64_t bytes,
                              std::chrono::steady_clock::time_point deadline) {
  MutexLock l(&mu_);
  auto t = tiers_.find(tier_id);
  if (t == tiers_.end() || FitsLocked(t->second, bytes)) return true;
  ++waits_;
  // Woken by every release; the deadline bounds the wait when the flusher cannot make room
  // (a failing persistent tier), and the caller then places the write elsewhere.
  while (true) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      ++timeouts_;
      return false;
    }
    room_cv_.WaitFor(&mu_, deadline - now);
    t = tiers_.find(tier_id);  // RemoveTier may have erased it meanwhile
    if (t == tiers_.end() || FitsLocked(t->second, bytes)) return true;
  }
}

std::vector<DirtyLedger::TierCounters> DirtyLedger::Counters() const {
  MutexLock l(&mu_);
  std::vector<TierCounters> out;
  for (const auto& [id, t] : tiers_) out.push_back({id, t.limit, t.dirty, t.peak});
  return out;
}

uint64_t DirtyLedger::waits() const {
  MutexLock l(&mu_);
  return waits_;
}

uint64_t DirtyLedger::timeouts() const {
  MutexLock l(&mu_);
  return timeouts_;
}

}  // namespace clio
