// The safe-bdev's implementation class (internal to storage/safe/): the I/O path is in
// safe_bdev.cc, opening and membership in safe_open.cc, rebuild and health in
// safe_rebuild.cc. Format and rules: docs/safe-bdev.md.
//
// Geometry: the data area is stripes x k x chunk bytes. Stripe s holds data positions
// 0..k-1 and parity positions k..k+m-1; position p lives on slot (p + s) % n, at member offset
// s x slot_bytes (a slot is the chunk followed by its trailer). Parity rotates, so reads of a
// healthy array use every member.
//
// Lock order: ckpt_mu_ (shared by stripe updates, exclusive by a checkpoint) -> stripe locks
// (ascending index) -> sb_mu_ -> layout_mu_; the journal's and allocator's locks are leaves.
// A stripe lock is held across the member I/O of that stripe: that is what keeps a stripe's
// chunks and parity in step (readers and the rebuild never see half an update).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "storage/alloc_log.h"
#include "storage/bdev_base.h"
#include "storage/safe/erasure.h"
#include "storage/safe/journal.h"
#include "storage/safe/safe_bdev.h"
#include "storage/safe/safe_format.h"

namespace clio {

// Locks the distinct stripe locks of a batch in ascending index order, so two batches never
// wait on each other in a cycle. The set is dynamic, so the analysis cannot follow it.
class StripeLocks {
 public:
  StripeLocks(Mutex* table, size_t table_size, uint64_t first, uint64_t last) NO_THREAD_SAFETY_ANALYSIS {
    for (uint64_t s = first; s <= last && idx_.size() < table_size; ++s) idx_.push_back(s % table_size);
    std::sort(idx_.begin(), idx_.end());
    idx_.erase(std::unique(idx_.begin(), idx_.end()), idx_.end());
    for (size_t i : idx_) table[i].Lock();
    table_ = table;
  }
  ~StripeLocks() NO_THREAD_SAFETY_ANALYSIS {
    for (auto it = idx_.rbegin(); it != idx_.rend(); ++it) table_[*it].Unlock();
  }
  StripeLocks(const StripeLocks&) = delete;
  StripeLocks& operator=(const StripeLocks&) = delete;

 private:
  Mutex* table_ = nullptr;
  std::vector<size_t> idx_;
};

// One device of a slot (member or rebuild target) or a spare, as the I/O path sees it.
struct SafeDevice {
  Bdev* bdev = nullptr;  // null: its pool is not composed (the slot counts as failed)
  std::string name;
  uint64_t tier_id = 0;
  uint64_t incarnation = 0;
  ExtentList extents;          // stripes x slot bytes of the device, allocated by the array
  std::vector<uint64_t> ends;  // running end offset of each extent, for lookups
  // As a rebuild target: stripes below `cursor` are rebuilt on it; below `persisted` they are
  // also durable there (what the superblock records). Kept with the device, so a stale
  // rebuild can never move the cursor of a later target of the same slot.
  mutable std::atomic<uint64_t> cursor{0};
  mutable std::atomic<uint64_t> persisted{0};
};
using DevicePtr = std::shared_ptr<const SafeDevice>;

struct SafeSlot {
  DevicePtr member;
  bool failed = false;
  std::string reason;
  DevicePtr target;  // being rebuilt (or copied, when replacing) for this slot
  bool replacing = false;
};

// Immutable snapshot of the membership; replaced whole under sb_mu_ + layout_mu_.
struct SafeLayout {
  std::vector<SafeSlot> slots;
  std::vector<DevicePtr> spares;
  std::vector<uint64_t> retired;
};

class SafeBdevImpl final : public BdevBase, public SafeArray {
 public:
  struct Geometry {
    uint32_t k = 0, m = 0;
    uint64_t chunk = 0, trailer = 0, slot = 0, stripes = 0;
    uint64_t member_capacity = 0;
  };

  SafeBdevImpl(BdevConfig config, SafeBdevConfig scfg, uint64_t array_id, Geometry g, bool persistent,
               std::unique_ptr<AllocLog> log, SafeLayout layout);
  ~SafeBdevImpl() override;

  // Restores the allocator, replays the journal and starts the background thread.
  Status Start(const AllocLog::Replay& replay);
  // Writes the superblock of the current layout (a new array's first one).
  Status RecordLayout() { return ChangeLayout([](SafeLayout&) { return Status::Ok(); }); }

  // --- Bdev ---
  Status Sync() override;
  Status FlushAllocLog() override;
  BdevStats GetStats() override;
  std::vector<metrics::Sample> SampleMetrics() override;

  // --- SafeArray (safe_rebuild.cc) ---
  Status AddSpare(const SafeMember& spare) override;
  Status RemoveMember(const std::string& name, const std::string& reason) override;
  Status Recover(const std::string& name, const SafeMember& replacement) override;
  Status CheckHealth() override;
  Status WaitRebuilds() override;
  Result<uint64_t> Verify() override;
  SafeArrayStatus ArrayStatus() override;

  // Allocates the array's space on a device and returns it as a SafeDevice (safe_open.cc).
  static Result<DevicePtr> Enlist(const SafeMember& m, uint64_t slot_bytes, uint64_t stripes);
  static DevicePtr Attach(Bdev* bdev, const SbDevice& d);

 protected:
  Status CheckDevice() override;
  Status WriteAt(uint64_t offset, std::string_view data) override;
  Status ReadAt(uint64_t offset, uint64_t len, char* out) override;
  Status PersistAllocator() override { return log_ ? log_->Flush() : Status::Ok(); }
  std::string BackendName() const override;

 private:
  enum class Got { kOk, kBlank, kBad, kMissing };
  // One stripe read into memory: n slot images (chunk + trailer) side by side.
  struct StripeBuf {
    std::unique_ptr<char[]> bytes;
    std::vector<Got> got;
    std::vector<ChunkTrailer> trailers;
    bool blank = false;  // never written: every readable slot is blank
  };

  char* Chunk(StripeBuf& b, uint32_t pos) const { return b.bytes.get() + pos * g_.slot; }
  uint32_t SlotOf(uint64_t stripe, uint32_t pos) const { return static_cast<uint32_t>((pos + stripe) % n_); }
  uint32_t PosOf(uint64_t stripe, uint32_t slot) const {
    return static_cast<uint32_t>((slot + n_ - stripe % n_) % n_);
  }
  Mutex& StripeLock(uint64_t stripe) { return stripe_mu_[stripe % kStripeLocks]; }

  std::shared_ptr<const SafeLayout> Layout() EXCLUDES(layout_mu_);
  // Copies the layout, lets `change` edit it, records it in the superblock and publishes it.
  // When the superblock cannot be written the change is not published, unless `always` (a
  // failure that happened whether or not it can be recorded): then it is published and the
  // error still returned.
  Status ChangeLayout(const std::function<Status(SafeLayout&)>& change, bool always = false)
      EXCLUDES(sb_mu_, layout_mu_);
  Superblock BuildSuperblock(const SafeLayout& l);
  // Marks a slot's member (or its rebuild target) failed after an I/O error.
  void FailDevice(uint32_t slot, const DevicePtr& dev, const Status& why);
  uint32_t FailedSlots(const SafeLayout& l, uint64_t stripe) const;
  // The device a read of `slot` in `stripe` uses, or null.
  DevicePtr ReadDevice(const SafeLayout& l, uint32_t slot, uint64_t stripe) const;

  // Writes slot images of consecutive stripes from `stripe` on (image: a multiple of slot bytes).
  Status DeviceWrite(const SafeDevice& d, uint64_t stripe, std::string_view image);
  Status DeviceRead(const SafeDevice& d, uint64_t stripe, char* out);
  Got ReadPosition(const SafeLayout& l, uint64_t stripe, uint32_t pos, StripeBuf& b);
  // Reads positions `need` of `stripe` into `b` (reconstructing and repairing bad chunks; a
  // never-written stripe reads as zeros). Reuses `b`'s buffer. Caller holds the stripe lock.
  Status LoadStripe(const SafeLayout& l, uint64_t stripe, const std::vector<uint32_t>& need, StripeBuf& b);
  void BuildImage(uint64_t stripe, uint32_t pos, StripeBuf& b,
                  const std::vector<uint32_t>& data_crcs, uint64_t incarnation, std::string* image) const;
  // The same into `out` (slot bytes).
  void BuildImage(uint64_t stripe, uint32_t pos, StripeBuf& b,
                  const std::vector<uint32_t>& data_crcs, uint64_t incarnation, char* out) const;
  std::vector<uint32_t> DataCrcs(StripeBuf& b) const;
  // Updates stripes [first, last] with `data` starting at array byte `offset`.
  Status UpdateStripes(uint64_t first, uint64_t last, uint64_t offset, std::string_view data);
  Status Checkpoint() EXCLUDES(ckpt_mu_);
  Status SyncDevices(const SafeLayout& l);
  Status ReplayEntry(const StripeJournal::Entry& e);

  // safe_rebuild.cc
  void BackgroundLoop();
  Status RebuildSlot(uint32_t slot, const DevicePtr& target);
  // Starts rebuilding `slot` onto the first spare (replacing: a copy while the member works).
  Status StartTarget(uint32_t slot, bool replacing) EXCLUDES(sb_mu_, layout_mu_);
  // Failed slots without a rebuild get one onto a spare.
  void AssignSpares();
  // Refuses a device already in the array, or of another shape.
  Status CheckNewDevice(const SafeMember& m, const SafeLayout& l) const;
  void Wake();

  static constexpr size_t kStripeLocks = 1024;
  // Stripes one journal record may cover: bounded by the journal, so a record always fits
  // after a checkpoint.
  uint64_t max_batch_ = 1;

  const SafeBdevConfig scfg_;
  const uint64_t array_id_;
  const Geometry g_;
  const uint32_t n_;
  const bool persistent_;
  const std::string sb_path_;
  const ErasureCode ec_;
  const std::unique_ptr<AllocLog> log_;  // null for a volatile array
  std::unique_ptr<StripeJournal> journal_;  // null for a volatile array; set by Start()

  SharedMutex ckpt_mu_;
  Mutex stripe_mu_[kStripeLocks];

  Mutex sb_mu_;  // serializes layout changes and superblock writes
  Mutex layout_mu_;
  std::shared_ptr<const SafeLayout> layout_ GUARDED_BY(layout_mu_);


  std::atomic<uint64_t> checksum_errors_{0};
  std::atomic<uint64_t> repaired_{0};
  std::atomic<uint64_t> reconstructed_{0};
  std::atomic<uint64_t> replayed_{0};
  std::atomic<uint64_t> rebuilt_stripes_{0};  // stripes written by rebuilds since open
  std::atomic<uint64_t> lost_stripes_{0};     // stripes a rebuild could not rebuild

  Mutex bg_mu_;
  CondVar bg_cv_;
  bool stop_ GUARDED_BY(bg_mu_) = false;
  bool work_ GUARDED_BY(bg_mu_) = true;  // at start: resume a recorded rebuild
  bool rebuilding_ GUARDED_BY(bg_mu_) = false;
  uint64_t rebuilds_done_ GUARDED_BY(bg_mu_) = 0;
  Status last_rebuild_ GUARDED_BY(bg_mu_);
  std::thread bg_;
};

}  // namespace clio
