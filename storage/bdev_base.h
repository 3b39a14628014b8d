// BdevBase: what every transport shares (internal to storage/). It owns the allocator and does
// the transport-independent work: growth of the backing store before the allocator falls back
// to fragments, extent mapping and bounds checks for Write/Read, reconciliation and stats.
// A transport supplies the byte movers and, optionally, growth, a device check and the
// allocator log.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/thread_annotations.h"
#include "storage/allocator.h"
#include "storage/bdev.h"

namespace clio {

// Logical capacity of a device configured with capacity 0 that grows as far as its host
// allows; the host's free space caps what GetStats() reports as remaining.
inline constexpr uint64_t kUnboundedCapacity = 1ull << 50;  // 1 PiB

class BdevBase : public Bdev {
 public:
  Result<ExtentList> Allocate(uint64_t bytes) override;
  Status Free(const ExtentList& extents) override;
  Status Write(const ExtentList& extents, uint64_t offset, std::string_view data) override;
  Status Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out) override;
  Status Reconcile(const ExtentList& referenced) override;
  Status FlushAllocLog() override { return Status::Ok(); }
  BdevStats GetStats() override;
  void SetLifespan(double days) override { lifespan_days_.store(days); }
  uint64_t tier_id() const override { return tier_id_; }
  const BdevConfig& config() const override { return config_; }

 protected:
  // `config` has its defaults resolved (alignment, persistence). `observer` may be null.
  BdevBase(BdevConfig config, uint64_t tier_id, uint64_t capacity, bool growable,
           AllocObserver* observer);

  // --- transport hooks ---
  // Checked before every Write/Read (file: the "<file>.fail" marker).
  virtual Status CheckDevice() { return Status::Ok(); }
  // Moves bytes at `offset` of the data area; the range lies inside one allocated extent.
  virtual Status WriteAt(uint64_t offset, std::string_view data) = 0;
  virtual Status ReadAt(uint64_t offset, uint64_t len, char* out) = 0;
  // Growable transports: backs the data area from `backed` up to at least `target` bytes and
  // returns the new backed size (<= capacity). NoSpace when the host cannot give the room.
  virtual Result<uint64_t> Grow(uint64_t backed, uint64_t target);
  // Makes allocator changes durable enough to return (file: flush the allocator log).
  virtual Status PersistAllocator() { return Status::Ok(); }
  // Filesystem whose free space caps remaining() for growable transports; empty = none.
  virtual std::string HostPath() const { return {}; }
  virtual std::string BackendName() const = 0;
  // For a grown-on-demand device, GetStats().capacity when configured as 0.
  virtual uint64_t EffectiveCapacity();
  // GetStats().committed: the backed size (growable) or the whole capacity (fixed).
  virtual uint64_t CommittedBytes() { return growable_ ? alloc_->limit() : alloc_->capacity(); }

  // Raises the allocator's limit to at least `target` (bounded by capacity), growing the
  // transport. One growth at a time; a failure is remembered for two seconds.
  Status GrowTo(uint64_t target) EXCLUDES(grow_mu_);
  // Host free space, sampled at most once a second. UINT64_MAX when HostPath() is empty.
  uint64_t HostFreeBytes() EXCLUDES(host_mu_);
  std::string Describe() const;  // "tier 'name'" for error context

  const BdevConfig config_;
  const uint64_t tier_id_;
  const bool growable_;
  const std::unique_ptr<BlockAllocator> alloc_;

  // OutOfRange unless [offset, offset+len) lies inside the extents and they inside the device.
  Status CheckRange(const ExtentList& extents, uint64_t offset, uint64_t len) const;

 private:

  std::atomic<double> lifespan_days_{999999};

  Mutex grow_mu_;  // held across the (blocking) growth itself: growth is serialized
  uint64_t failed_growth_target_ GUARDED_BY(grow_mu_) = 0;
  std::chrono::steady_clock::time_point failed_growth_at_ GUARDED_BY(grow_mu_);

  Mutex host_mu_;
  uint64_t host_free_ GUARDED_BY(host_mu_) = 0;
  std::chrono::steady_clock::time_point host_sampled_at_ GUARDED_BY(host_mu_);
  bool host_sampled_ GUARDED_BY(host_mu_) = false;
};

// One factory per transport; Bdev::Open (bdev.cc) is the one switch that calls them.
Result<std::unique_ptr<Bdev>> OpenFileBdev(const BdevConfig& config);
Result<std::unique_ptr<Bdev>> OpenRamBdev(const BdevConfig& config);
Result<std::unique_ptr<Bdev>> OpenNoopBdev(const BdevConfig& config);
// s3 and gcs, with credentials and endpoints from the environment (storage/objstore).
Result<std::unique_ptr<Bdev>> OpenObjectBdev(const BdevConfig& config);
// pinned and hbm, over `gpu` (MakeGpuRuntime() in production; tests pass a fake).
class GpuRuntime;
Result<std::unique_ptr<Bdev>> OpenGpuBdev(const BdevConfig& config,
                                          std::unique_ptr<GpuRuntime> gpu);

}  // namespace clio
