#include "storage/bdev_base.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "common/log.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

constexpr auto kGrowthFailureMemory = std::chrono::seconds(2);
constexpr auto kHostSampleInterval = std::chrono::seconds(1);
// Allocation retries after a growth another thread's allocations may have used up.
constexpr int kGrowAttempts = 3;

}  // namespace

BdevBase::BdevBase(BdevConfig config, uint64_t tier_id, uint64_t capacity, bool growable,
                   AllocObserver* observer)
    : config_(std::move(config)),
      tier_id_(tier_id),
      growable_(growable),
      alloc_(std::make_unique<BlockAllocator>(capacity, config_.alignment, observer)) {
  if (growable_) alloc_->SetLimit(0);
}

std::string BdevBase::Describe() const { return "tier '" + config_.name + "'"; }

Result<uint64_t> BdevBase::Grow(uint64_t backed, uint64_t target) {
  return NoSpace(Describe() + " cannot grow");
}

uint64_t BdevBase::EffectiveCapacity() { return alloc_->capacity(); }

Status BdevBase::GrowTo(uint64_t target) {
  target = std::min(target, alloc_->capacity());
  MutexLock g(&grow_mu_);
  const uint64_t backed = alloc_->limit();
  if (backed >= target) return Status::Ok();
  const auto now = std::chrono::steady_clock::now();
  if (failed_growth_target_ != 0 && target >= failed_growth_target_ &&
      now - failed_growth_at_ < kGrowthFailureMemory) {
    return NoSpace(Describe() + ": growth to " + std::to_string(failed_growth_target_) +
                   " bytes failed less than 2 s ago");
  }
  Result<uint64_t> grown = Grow(backed, target);
  if (!grown.ok()) {
    if (grown.status().code() == Code::kNoSpace) {
      failed_growth_target_ = target;
      failed_growth_at_ = now;
    }
    return grown.status();
  }
  failed_growth_target_ = 0;
  alloc_->SetLimit(*grown);
  return Status::Ok();
}

Result<ExtentList> BdevBase::Allocate(uint64_t bytes) {
  Result<ExtentList> r = InvalidArgument("unreachable");
  if (bytes != 0 && alloc_->RoundUp(bytes) > alloc_->remaining()) {
    // Hopeless even after growth: fail before reserving anything on the host.
    return NoSpace(Describe() + ": allocate " + std::to_string(bytes) + " bytes: " +
                   std::to_string(alloc_->remaining()) + " bytes remain");
  }
  if (growable_) {
    // Prefer growing the backing store over fragmenting: same-class blocks and the bump
    // pointer first, growth next, fragments last.
    for (int attempt = 0; attempt < kGrowAttempts; ++attempt) {
      r = alloc_->Allocate(bytes, /*exact_only=*/true);
      if (r.ok() || r.status().code() != Code::kNoSpace) break;
      const uint64_t bump = alloc_->bump();
      const uint64_t need = alloc_->MaxBumpNeed(bytes);
      const uint64_t target = bump > UINT64_MAX - need ? UINT64_MAX : bump + need;
      if (alloc_->limit() >= std::min(target, alloc_->capacity())) {
        if (target > alloc_->capacity()) break;  // at capacity: fragments are all that's left
        continue;                                // someone else grew; try again
      }
      Status g = GrowTo(target);
      if (!g.ok()) {
        if (g.code() != Code::kNoSpace) return g;
        break;
      }
    }
  }
  if (!r.ok()) r = alloc_->Allocate(bytes, /*exact_only=*/false);
  if (!r.ok()) return r.status().WithContext(Describe());
  Status p = PersistAllocator();
  if (!p.ok()) {
    // Not logged, so not handed out. The undo is logged after the allocation, in order.
    Status u = alloc_->Free(r.value());
    if (!u.ok()) CLIO_LOG_ERROR("{}: undo of a failed allocation: {}", Describe(), u.ToString());
    return p.WithContext(Describe());
  }
  return r;
}

Status BdevBase::Free(const ExtentList& extents) {
  CLIO_RETURN_IF_ERROR(alloc_->Free(extents).WithContext(Describe()));
  // The free records were queued ahead of any reuse of these blocks; a failed flush leaves them
  // queued for the next one, and a crash before that only leaves the blocks live (Reconcile
  // frees them).
  return PersistAllocator().WithContext(Describe());
}

Status BdevBase::CheckRange(const ExtentList& extents, uint64_t offset, uint64_t len) const {
  const uint64_t total = TotalSize(extents);
  if (offset > total || len > total - offset) {
    return Status(Code::kOutOfRange, Describe() + ": range [" + std::to_string(offset) + ", +" +
                                         std::to_string(len) + ") past the extents' " +
                                         std::to_string(total) + " bytes");
  }
  const uint64_t cap = alloc_->capacity();
  for (const auto& e : extents) {
    if (e.offset > cap || e.size > cap - e.offset) {
      return Status(Code::kOutOfRange, Describe() + ": extent at " + std::to_string(e.offset) +
                                           " size " + std::to_string(e.size) +
                                           " lies past the capacity " + std::to_string(cap));
    }
  }
  return Status::Ok();
}

Status BdevBase::Write(const ExtentList& extents, uint64_t offset, std::string_view data) {
  CLIO_RETURN_IF_ERROR(CheckRange(extents, offset, data.size()));
  CLIO_RETURN_IF_ERROR(CheckDevice());
  uint64_t pos = 0;  // bytes of `data` done
  uint64_t skip = offset;
  for (const auto& e : extents) {
    if (pos == data.size()) break;
    if (skip >= e.size) {
      skip -= e.size;
      continue;
    }
    uint64_t n = std::min<uint64_t>(e.size - skip, data.size() - pos);
    CLIO_RETURN_IF_ERROR(WriteAt(e.offset + skip, data.substr(pos, n)));
    pos += n;
    skip = 0;
  }
  return Status::Ok();
}

Status BdevBase::Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out) {
  CLIO_RETURN_IF_ERROR(CheckRange(extents, offset, len));
  CLIO_RETURN_IF_ERROR(CheckDevice());
  uint64_t pos = 0;
  uint64_t skip = offset;
  for (const auto& e : extents) {
    if (pos == len) break;
    if (skip >= e.size) {
      skip -= e.size;
      continue;
    }
    uint64_t n = std::min<uint64_t>(e.size - skip, len - pos);
    CLIO_RETURN_IF_ERROR(ReadAt(e.offset + skip, n, out + pos));
    pos += n;
    skip = 0;
  }
  return Status::Ok();
}

Status BdevBase::Reconcile(const ExtentList& referenced) {
  for (const auto& e : referenced) {
    CLIO_RETURN_IF_ERROR(alloc_->MarkAllocated(e).WithContext(Describe() + ": reconcile"));
  }
  std::unordered_set<uint64_t> keep;
  for (const auto& e : referenced) keep.insert(e.offset);
  ExtentList orphans;
  for (const auto& e : alloc_->LiveExtents()) {
    if (keep.count(e.offset) == 0) orphans.push_back(e);
  }
  if (!orphans.empty()) {
    CLIO_RETURN_IF_ERROR(alloc_->Free(orphans).WithContext(Describe() + ": reconcile"));
  }
  // A referenced extent past the old high-water mark must be backed before it is written.
  if (growable_ && alloc_->bump() > alloc_->limit()) CLIO_RETURN_IF_ERROR(GrowTo(alloc_->bump()));
  CLIO_RETURN_IF_ERROR(PersistAllocator().WithContext(Describe()));
  CLIO_LOG_INFO("{}: reconciled: {} extents referenced, {} unreferenced freed", Describe(),
                referenced.size(), orphans.size());
  return Status::Ok();
}

uint64_t BdevBase::HostFreeBytes() {
  const std::string path = HostPath();
  if (path.empty()) return std::numeric_limits<uint64_t>::max();
  MutexLock l(&host_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!host_sampled_ || now - host_sampled_at_ >= kHostSampleInterval) {
    Result<uint64_t> free = FilesystemFreeBytes(path);
    if (free.ok()) {
      host_free_ = *free;
    } else {
      CLIO_LOG_WARN("{}: {}", Describe(), free.status().ToString());
    }
    host_sampled_ = true;
    host_sampled_at_ = now;
  }
  return host_free_;
}

BdevStats BdevBase::GetStats() {
  BdevStats s;
  s.type = config_.type;
  s.persistence = config_.persistence.value_or(Persistence::kVolatile);
  s.capacity = EffectiveCapacity();
  s.used = alloc_->used();
  s.remaining = alloc_->remaining();
  s.committed = CommittedBytes();
  if (growable_) {
    // Room not yet backed must still come from the host.
    const uint64_t limit = alloc_->limit();
    const uint64_t bump = alloc_->bump();
    const uint64_t backed_room = (limit > bump ? limit - bump : 0) + alloc_->free_bytes();
    const uint64_t host = HostFreeBytes();
    const uint64_t cap = host > UINT64_MAX - backed_room ? UINT64_MAX : backed_room + host;
    s.remaining = std::min(s.remaining, cap);
  }
  s.lifetime_days = lifespan_days_.load();
  s.perf = config_.perf.value_or(DefaultPerfMetrics(config_.type));
  s.backend = BackendName();
  return s;
}

}  // namespace clio
