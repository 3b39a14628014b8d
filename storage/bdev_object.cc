// s3 and gcs transports: each allocated block is one object "[prefix/]block_<offset>" in a
// bucket (storage/objstore), the allocator's state is an allocator log on local disk, and a
// small tier header object "[prefix/]clio_tier" names the tier.
//
// Rules that keep a block from ever showing bytes it should not:
//  - The log records, per live block, whether it was written since its allocation ("written"
//    records, format version 3). A block never written reads as zeros without a request, and
//    its first write stores the whole block (zero-filled around the data), so an object left
//    behind by an earlier life of the offset is never read, only replaced.
//  - A written block whose object is missing is an IoError, never zeros.
//  - Free() deletes the objects of written blocks before the blocks can be handed out again;
//    start-up reconciliation deletes the objects of blocks nobody references.
//  - A partial write to a written block reads the object, merges and stores it whole, under a
//    per-block lock.
// The written records reach the disk at Sync(), which the CTE calls before every metadata
// commit: an index entry never names a block whose written record could be lost.

#include <array>
#include <chrono>
#include <deque>
#include <cstring>
#include <filesystem>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "daemon/confine.h"
#include "storage/alloc_log.h"
#include "storage/bdev_base.h"
#include "storage/objstore/object_store.h"
#include "storage/sys_util.h"
#include "storage/tier_header.h"

namespace clio {
namespace {

constexpr uint64_t kDefaultObjectCapacity = 1ull << 40;  // 1 TiB of address space
constexpr std::string_view kHeaderMagic = "CLIOOBJT";
constexpr uint32_t kHeaderVersion = 1;
constexpr size_t kBlockLocks = 64;

class ObjectBdev final : public BdevBase {
 public:
  ObjectBdev(BdevConfig config, uint64_t tier_id, std::unique_ptr<ObjectStore> store,
             ObjectLocation location, std::unique_ptr<AllocLog> log)
      : BdevBase(config, tier_id, config.capacity, /*growable=*/false, log.get()),
        store_(std::move(store)),
        location_(std::move(location)),
        log_(std::move(log)) {}

  ~ObjectBdev() override {
    {
      MutexLock l(&queue_mu_);
      stopping_ = true;
      queue_cv_.NotifyAll();
    }
    if (deleter_.joinable()) deleter_.join();
    size_t left = 0;
    {
      MutexLock l(&queue_mu_);
      left = queue_.size();
    }
    if (left > 0) {
      CLIO_LOG_INFO("{}: {} objects of freed blocks not deleted at stop (never read; replaced "
                    "when their blocks are written again)", Describe(), left);
    }
    Status s = log_->Sync();
    if (!s.ok()) CLIO_LOG_WARN("{}: final alloc log sync: {}", Describe(), s.ToString());
  }

  Status Start(const AllocLog::Replay& replay) {
    CLIO_RETURN_IF_ERROR(alloc_->Restore(replay.live, replay.free).WithContext(Describe()));
    {
      MutexLock l(&written_mu_);
      for (const auto& e : replay.written) written_.emplace(e.offset, e.size);
    }
    deleter_ = std::thread([this] { DeleterLoop(); });
    return Status::Ok();
  }

  // A block's new life starts unwritten, whatever an earlier life left behind, and a delete
  // of the earlier life's object still queued is dropped (the first write replaces it).
  Result<ExtentList> Allocate(uint64_t bytes) override {
    CLIO_ASSIGN_OR_RETURN(ExtentList got, BdevBase::Allocate(bytes));
    MutexLock l(&written_mu_);
    for (const auto& e : got) {
      written_.erase(e.offset);
      pending_.erase(e.offset);
    }
    return got;
  }

  Status Write(const ExtentList& extents, uint64_t offset, std::string_view data) override {
    CLIO_RETURN_IF_ERROR(CheckRange(extents, offset, data.size()));
    return ForEachPiece(extents, offset, data.size(),
                        [&](const Extent& e, uint64_t skip, uint64_t pos, uint64_t n) {
                          return WriteBlock(e, skip, data.substr(pos, n));
                        });
  }

  Status Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out) override {
    CLIO_RETURN_IF_ERROR(CheckRange(extents, offset, len));
    return ForEachPiece(extents, offset, len,
                        [&](const Extent& e, uint64_t skip, uint64_t pos, uint64_t n) {
                          return ReadBlock(e, skip, n, out + pos);
                        });
  }

  // No network I/O here (frees run on the metadata commit path): the blocks become unwritten
  // before the allocator can hand them out again, and their objects are deleted in the
  // background (DeleterLoop).
  Status Free(const ExtentList& extents) override {
    std::vector<std::pair<Extent, uint64_t>> dropped;  // written blocks and their delete tokens
    {
      MutexLock l(&written_mu_);
      for (const auto& e : extents) {
        auto it = written_.find(e.offset);
        if (it == written_.end() || it->second != e.size) continue;
        written_.erase(it);
        dropped.emplace_back(e, ++next_token_);
        pending_[e.offset] = next_token_;
      }
    }
    Status freed = alloc_->Free(extents).WithContext(Describe());
    if (!freed.ok()) {
      // Refused as a whole (not allocated blocks): nothing was freed, so nothing changes.
      MutexLock l(&written_mu_);
      for (const auto& [e, token] : dropped) {
        written_.emplace(e.offset, e.size);
        pending_.erase(e.offset);
      }
      return freed;
    }
    QueueDeletes(dropped);
    return PersistAllocator().WithContext(Describe());
  }

  Status Reconcile(const ExtentList& referenced) override {
    std::unordered_set<uint64_t> keep;
    for (const auto& e : referenced) keep.insert(e.offset);
    ExtentList orphans;
    std::unordered_set<uint64_t> was_live;
    for (const auto& e : alloc_->LiveExtents()) {
      was_live.insert(e.offset);
      if (keep.count(e.offset) == 0) orphans.push_back(e);
    }
    // An orphan may have an object even without a written record (the record was not yet
    // durable): delete them all, in the background.
    std::vector<std::pair<Extent, uint64_t>> dropped;
    {
      MutexLock l(&written_mu_);
      for (const auto& e : orphans) {
        written_.erase(e.offset);
        dropped.emplace_back(e, ++next_token_);
        pending_[e.offset] = next_token_;
      }
    }
    CLIO_RETURN_IF_ERROR(BdevBase::Reconcile(referenced));
    QueueDeletes(dropped);
    // A referenced block the log did not hold live: whether it holds data is unknown, so a
    // missing object must be an error rather than zeros.
    MutexLock l(&written_mu_);
    for (const auto& e : referenced) {
      if (was_live.count(e.offset) == 0 && written_.emplace(e.offset, e.size).second) {
        log_->OnWritten({e});
      }
    }
    return PersistAllocator().WithContext(Describe());
  }

  Status Sync() override { return log_->Sync().WithContext(Describe()); }

  Status FlushAllocLog() override {
    return alloc_
        ->WithSnapshot([this](const ExtentList& live, const ExtentList& free) {
          MutexLock l(&written_mu_);
          ExtentList written;
          for (const auto& e : live) {
            auto it = written_.find(e.offset);
            if (it != written_.end() && it->second == e.size) written.push_back(e);
          }
          return log_->Compact(live, free, written);
        })
        .WithContext(Describe());
  }

  BdevStats GetStats() override {
    BdevStats s = BdevBase::GetStats();
    s.persistence = config_.persistence.value_or(Persistence::kLongTerm);
    return s;
  }

 protected:
  // Write and Read are overridden whole: a block is an object, not a byte range.
  Status WriteAt(uint64_t, std::string_view) override { return Internal("object tier WriteAt"); }
  Status ReadAt(uint64_t, uint64_t, char*) override { return Internal("object tier ReadAt"); }
  Status PersistAllocator() override { return log_->Flush(); }
  std::string BackendName() const override { return std::string(BdevTypeName(config_.type)); }
  uint64_t CommittedBytes() override { return alloc_->used(); }

 private:
  template <typename Fn>
  Status ForEachPiece(const ExtentList& extents, uint64_t offset, uint64_t len, Fn&& fn) {
    uint64_t pos = 0, skip = offset;
    for (const auto& e : extents) {
      if (pos == len) break;
      if (skip >= e.size) {
        skip -= e.size;
        continue;
      }
      const uint64_t n = std::min<uint64_t>(e.size - skip, len - pos);
      CLIO_RETURN_IF_ERROR(fn(e, skip, pos, n));
      pos += n;
      skip = 0;
    }
    return Status::Ok();
  }

  std::string Key(uint64_t offset) const {
    return location_.Key("block_" + std::to_string(offset));
  }

  bool IsWritten(uint64_t offset) {
    MutexLock l(&written_mu_);
    return written_.count(offset) != 0;
  }

  // The stripe of a block's lock. Offsets are multiples of large powers of two (a 1 MiB block
  // class puts every block at a multiple of 1 MiB), so the offset is hashed, not reduced.
  Mutex& BlockLock(uint64_t offset) {
    const uint64_t h = (offset / alloc_->min_class()) * 0x9E3779B97F4A7C15ull;
    return block_mu_[(h >> 32) % kBlockLocks];
  }

  Status WriteBlock(const Extent& e, uint64_t skip, std::string_view piece) {
    MutexLock bl(&BlockLock(e.offset));
    const bool was_written = IsWritten(e.offset);
    const std::string key = Key(e.offset);
    if (skip == 0 && piece.size() == e.size) {
      CLIO_RETURN_IF_ERROR(store_->Put(key, piece).WithContext(Describe()));
    } else {
      std::string block(e.size, '\0');
      if (was_written) {
        Status g = store_->Get(key, 0, e.size, block.data());
        if (!g.ok()) return MissingOrError(g, e).WithContext("updating part of a block");
      }
      std::memcpy(block.data() + skip, piece.data(), piece.size());
      CLIO_RETURN_IF_ERROR(store_->Put(key, block).WithContext(Describe()));
    }
    if (!was_written) {
      MutexLock l(&written_mu_);
      written_.emplace(e.offset, e.size);
      log_->OnWritten({e});
    }
    return Status::Ok();
  }

  Status ReadBlock(const Extent& e, uint64_t skip, uint64_t n, char* out) {
    if (!IsWritten(e.offset)) {
      std::memset(out, 0, n);  // never written since its allocation: zeros, no request
      return Status::Ok();
    }
    Status g = store_->Get(Key(e.offset), skip, n, out);
    return g.ok() ? g : MissingOrError(g, e);
  }

  // A 404 for a written block is lost data, reported as such.
  Status MissingOrError(const Status& s, const Extent& e) const {
    if (s.code() != Code::kNotFound) return s.WithContext(Describe());
    return IoError(Describe() + ": the object of live block " + std::to_string(e.offset) + " (" +
                   std::to_string(e.size) + " bytes) is missing: " + s.message());
  }

  void QueueDeletes(const std::vector<std::pair<Extent, uint64_t>>& dropped) {
    if (dropped.empty()) return;
    MutexLock l(&queue_mu_);
    for (const auto& [e, token] : dropped) queue_.push_back({e.offset, token});
    queue_cv_.NotifyOne();
  }

  // Deletes the objects of freed blocks, one at a time. Best effort: a delete that fails after
  // its retries leaves the object behind, which is safe because the block's next life starts
  // unwritten (never read, replaced by its first write). A delete whose block was allocated
  // again since is skipped; one in flight holds the block's lock, so the new life's first
  // write cannot land before it.
  void DeleterLoop() {
    for (;;) {
      PendingDelete d;
      {
        MutexLock l(&queue_mu_);
        while (queue_.empty() && !stopping_) queue_cv_.Wait(&queue_mu_);
        if (stopping_) return;
        d = queue_.front();
        queue_.pop_front();
      }
      MutexLock bl(&BlockLock(d.offset));
      {
        MutexLock l(&written_mu_);
        auto it = pending_.find(d.offset);
        if (it == pending_.end() || it->second != d.token) continue;
      }
      Status s = store_->Delete(Key(d.offset));
      {
        MutexLock l(&written_mu_);
        auto it = pending_.find(d.offset);
        if (it != pending_.end() && it->second == d.token) pending_.erase(it);
      }
      if (!s.ok()) {
        CLIO_LOG_WARN("{}: deleting the object of freed block {}: {} (left behind; it is never "
                      "read and is replaced when the block is written again)",
                      Describe(), d.offset, s.ToString());
      }
    }
  }

  const std::unique_ptr<ObjectStore> store_;
  const ObjectLocation location_;
  const std::unique_ptr<AllocLog> log_;
  std::array<Mutex, kBlockLocks> block_mu_;
  // Lock order: a block lock -> allocator -> written_mu_ -> the log's locks; queue_mu_ alone.
  Mutex written_mu_;
  std::unordered_map<uint64_t, uint64_t> written_ GUARDED_BY(written_mu_);  // offset -> size
  // Freed blocks whose object is still to be deleted: offset -> the token of that delete.
  std::unordered_map<uint64_t, uint64_t> pending_ GUARDED_BY(written_mu_);
  uint64_t next_token_ GUARDED_BY(written_mu_) = 0;
  struct PendingDelete {
    uint64_t offset = 0;
    uint64_t token = 0;
  };
  Mutex queue_mu_;
  CondVar queue_cv_;
  std::deque<PendingDelete> queue_ GUARDED_BY(queue_mu_);
  bool stopping_ GUARDED_BY(queue_mu_) = false;
  std::thread deleter_;
};

Result<std::unique_ptr<ObjectStore>> OpenStore(const BdevConfig& c, const ObjectLocation& loc,
                                               bool* allow_create) {
  ObjectStoreOptions opts;
  opts.request_timeout = std::chrono::milliseconds(c.request_timeout_ms);
  opts.retry.budget = std::chrono::milliseconds(c.retry_budget_ms);
  if (c.type == BdevType::kS3) {
    CLIO_ASSIGN_OR_RETURN(S3Settings s, S3SettingsFromEnv());
    *allow_create = s.allow_bucket_create;
    return OpenS3Store(loc, s, opts);
  }
  CLIO_ASSIGN_OR_RETURN(GcsSettings s, GcsSettingsFromEnv());
  *allow_create = s.allow_bucket_create;
  return OpenGcsStore(loc, s, opts);
}

}  // namespace

Result<std::unique_ptr<Bdev>> OpenObjectBdev(const BdevConfig& config) {
  BdevConfig c = config;
  const std::string scheme(BdevTypeName(c.type));
  CLIO_ASSIGN_OR_RETURN(ObjectLocation loc, ParseObjectLocation(c.name, scheme));
  if (c.alignment == 0) c.alignment = 4096;
  if (c.capacity == 0) c.capacity = kDefaultObjectCapacity;
  if (c.persistence == Persistence::kVolatile) {
    return ConfigError("bdev '" + c.name + "': an object tier cannot be volatile");
  }
  if (c.alloc_log.empty()) {
    return ConfigError("bdev '" + c.name + "': alloc_log is required for " + scheme +
                       " tiers (a local path, e.g. ${CLIO_STATE_DIR}/tiers/" + loc.bucket +
                       ".alloc_log): the allocator state of the bucket lives there");
  }
  bool allow_create = false;
  CLIO_ASSIGN_OR_RETURN(auto store, OpenStore(c, loc, &allow_create));
  const std::string where = store->Describe();
  CLIO_RETURN_IF_ERROR(store->EnsureBucket(allow_create).WithContext("opening tier " + where));

  const std::string header_key = loc.Key("clio_tier");
  auto header_read = store->GetAll(header_key);
  if (!header_read.ok()) return header_read.status().WithContext("opening tier " + where);
  std::optional<std::string> header_bytes = std::move(header_read).value();
  std::optional<TierHeader> header;
  if (header_bytes) {
    CLIO_ASSIGN_OR_RETURN(header, DecodeTierHeader(*header_bytes, kHeaderMagic, kHeaderVersion,
                                                   "tier " + where + " object " + header_key,
                                                   "CLIO object tier header"));
  }
  const std::filesystem::path log_dir = std::filesystem::path(c.alloc_log).parent_path();
  if (!log_dir.empty())
    CLIO_RETURN_IF_ERROR(MakeDirsBeneath(log_dir.string()).WithContext("tier " + where + ": the directory of alloc_log"));
  // A log shorter than its header is a creation torn by a crash: it holds nothing.
  std::error_code ec;
  const uint64_t log_size = std::filesystem::file_size(c.alloc_log, ec);
  const bool log_exists = !ec && log_size >= AllocLog::kHeaderSize;

  if (header && !log_exists) {
    return Corruption("tier " + where + " (id " + std::to_string(header->tier_id) +
                      ") has no allocator log at " + c.alloc_log +
                      ": which blocks hold data is unknown, so no block can be handed out; "
                      "restore the log, or empty the bucket prefix to start the tier over");
  }
  if (header && c.tier_id != 0 && header->tier_id != c.tier_id) {
    return Corruption("tier " + where + " holds tier id " + std::to_string(header->tier_id) +
                      ", but the configuration names tier id " + std::to_string(c.tier_id));
  }
  if (!header && c.tier_id != 0) {
    return Corruption("tier " + where + " (id " + std::to_string(c.tier_id) +
                      ") is recorded in the metadata but the bucket holds no tier header "
                      "object " + header_key + ": its data is gone or this is another bucket");
  }
  if (header && header->alignment != c.alignment) {
    return Corruption("tier " + where + " was created with alignment " +
                      std::to_string(header->alignment) + ", the configuration says " +
                      std::to_string(c.alignment));
  }
  uint64_t tier_id = 0;
  if (header) {
    tier_id = header->tier_id;
  } else if (log_exists) {
    CLIO_ASSIGN_OR_RETURN(tier_id, ReadAllocLogTierId(c.alloc_log));
  } else {
    tier_id = RandomTierId();
  }
  AllocLog::Replay replay;
  CLIO_ASSIGN_OR_RETURN(auto log, AllocLog::Open(c.alloc_log, tier_id, c.io, &replay));
  if (!header) {
    if (!replay.live.empty()) {
      return Corruption("tier " + where + ": the allocator log " + c.alloc_log + " holds " +
                        std::to_string(replay.live.size()) +
                        " live blocks but the bucket has no tier header: the bucket was "
                        "emptied or is not this tier's");
    }
    // The log exists before the header: a crash between the two leaves an empty log, which
    // is taken over here.
    TierHeader h{tier_id, c.alignment, static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch()).count())};
    CLIO_RETURN_IF_ERROR(store->Put(header_key, EncodeTierHeader(kHeaderMagic, kHeaderVersion, h))
                             .WithContext("creating tier " + where));
    CLIO_LOG_INFO("tier {}: new object tier, id {}", where, tier_id);
  } else if (replay.records > 0) {
    CLIO_LOG_INFO("tier {}: replayed {} alloc log records: {} live ({} written), {} free", where,
                  replay.records, replay.live.size(), replay.written.size(), replay.free.size());
  }
  c.tier_id = tier_id;
  auto bdev = std::make_unique<ObjectBdev>(c, tier_id, std::move(store), std::move(loc),
                                           std::move(log));
  CLIO_RETURN_IF_ERROR(bdev->Start(replay));
  return std::unique_ptr<Bdev>(std::move(bdev));
}

}  // namespace clio
