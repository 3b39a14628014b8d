// file transport: a backing file driven through the I/O layer (io_uring, libaio or POSIX AIO,
// with the fault-injection mode; see io.h), plus the allocator log.
//
// Layout: a 4 KiB header at offset 0, the data area from kDataStart. Header (little-endian):
//   magic "CLIOTIER" | version u32 | reserved u32 | tier id u64 | alignment u64 |
//   created (unix ns) u64 | xxh3-64 of the preceding 40 bytes u64 | zeros to 4096.
// The file grows in growth_unit steps with fallocate, so a full disk fails at Allocate().
// Large aligned writes go through an O_DIRECT descriptor where the filesystem has one
// (IoOptions::direct_writes). The identity (st_dev, st_ino) of the opened file is recorded;
// Write, growth and Sync refuse to go on once the path names another file.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <utility>

#include "common/log.h"
#include "daemon/confine.h"
#include "storage/alloc_log.h"
#include "storage/bdev_base.h"
#include "storage/sys_util.h"
#include "storage/tier_header.h"

namespace clio {
namespace {

constexpr uint64_t kDataStart = 4096;
constexpr uint32_t kTierFormatVersion = 1;
constexpr char kTierMagic[8] = {'C', 'L', 'I', 'O', 'T', 'I', 'E', 'R'};
constexpr auto kLogSyncInterval = std::chrono::milliseconds(50);

std::string EncodeFileTierHeader(const TierHeader& h) {
  std::string out = EncodeTierHeader(std::string_view(kTierMagic, sizeof(kTierMagic)),
                                     kTierFormatVersion, h);
  out.resize(kDataStart, '\0');
  return out;
}

// An exclusive flock on a tier file, held while a bdev has it open: a second runtime (or a
// second pool of this one) naming the same file would allocate over the first's blocks.
class TierFileLock {
 public:
  TierFileLock() = default;
  explicit TierFileLock(int fd) : fd_(fd) {}
  TierFileLock(TierFileLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  TierFileLock& operator=(TierFileLock&&) = delete;
  ~TierFileLock() {
    if (fd_ >= 0) ::close(fd_);  // the lock goes with its descriptor
  }

  // Locks the file `io` has open (by its path, checked to be the same file).
  static Result<TierFileLock> Take(const std::string& path, IoFile& io) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return Status::FromErrno(errno, "tier file " + path + ": opening it to lock it");
    TierFileLock lock(fd);
    struct stat st {};
    CLIO_ASSIGN_OR_RETURN(FileIdentity opened, io.Identity());
    if (::fstat(fd, &st) != 0 || FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)} != opened)
      return Status(Code::kBusy, "tier file " + path + " was replaced while it was being opened");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK)
        return Status(Code::kBusy, "tier file " + path +
                                       " is in use: another runtime, or another pool of this one, has it open "
                                       "(each tier needs a file of its own)");
      return Status::FromErrno(errno, "tier file " + path + ": flock");
    }
    return lock;
  }

 private:
  int fd_ = -1;
};

class FileBdev final : public BdevBase {
 public:
  FileBdev(BdevConfig config, uint64_t tier_id, uint64_t capacity, std::unique_ptr<IoFile> io,
           std::unique_ptr<AllocLog> log, FileIdentity identity, TierFileLock lock)
      : BdevBase(std::move(config), tier_id, capacity, /*growable=*/true, log.get()),
        lock_(std::move(lock)),
        io_(std::move(io)),
        log_(std::move(log)),
        fail_marker_(config_.name + ".fail"),
        identity_(identity) {}

  ~FileBdev() override {
    if (sync_thread_.joinable()) {
      {
        MutexLock l(&bg_mu_);
        stop_ = true;
      }
      bg_cv_.NotifyAll();
      sync_thread_.join();
    }
  }

  // Restores the replayed allocator state and makes sure the data area backs it.
  Status Start(const AllocLog::Replay& replay, uint64_t backed) {
    CLIO_RETURN_IF_ERROR(alloc_->Restore(replay.live, replay.free).WithContext(Describe()));
    alloc_->SetLimit(backed);
    if (alloc_->bump() > backed) {
      Status s = GrowTo(alloc_->bump());
      if (!s.ok()) {
        CLIO_LOG_WARN("{}: cannot back replayed extents up to {}: {}", Describe(), alloc_->bump(),
                      s.ToString());
      }
    }
    if (log_ != nullptr) sync_thread_ = std::thread([this] { SyncLoop(); });
    return Status::Ok();
  }

  Status Sync() override {
    CLIO_RETURN_IF_ERROR(CheckDevice());
    CLIO_RETURN_IF_ERROR(CheckIdentity());
    // Order of durability: bytes on the tier, then the allocator log (then, in the CTE, the
    // index).
    CLIO_RETURN_IF_ERROR(io_->Sync().WithContext(Describe()));
    if (log_ != nullptr) CLIO_RETURN_IF_ERROR(log_->Sync().WithContext(Describe()));
    return Status::Ok();
  }

  // A write to a file the path no longer names would be lost to everyone who opens the path.
  Status Write(const ExtentList& extents, uint64_t offset, std::string_view data) override {
    CLIO_RETURN_IF_ERROR(CheckIdentity());
    return BdevBase::Write(extents, offset, data);
  }

  Status FlushAllocLog() override {
    if (log_ == nullptr) return Status::Ok();
    return alloc_
        ->WithSnapshot([this](const ExtentList& live, const ExtentList& free) {
          return log_->Compact(live, free);
        })
        .WithContext(Describe());
  }

 protected:
  Status CheckDevice() override {
    // Test-only fault marker; one access() per call is cheap next to the I/O itself.
    if (::access(fail_marker_.c_str(), F_OK) == 0) {
      return IoError(Describe() + ": device fault injected by " + fail_marker_);
    }
    return Status::Ok();
  }

  Status WriteAt(uint64_t offset, std::string_view data) override {
    return io_->Write(kDataStart + offset, data);
  }
  Status ReadAt(uint64_t offset, uint64_t len, char* out) override {
    return io_->Read(kDataStart + offset, len, out);
  }

  Result<uint64_t> Grow(uint64_t backed, uint64_t target) override {
    CLIO_RETURN_IF_ERROR(CheckIdentity());
    Result<uint64_t> grown = GrowFile(backed, target);
    if (!grown.ok() && grown.status().code() == Code::kNoSpace) {
      // BdevBase remembers the failure for 2 s, so this is logged at most once per 2 s.
      CLIO_LOG_WARN("{}: cannot grow the data area from {} to {} bytes ({}); growth past {} "
                    "fails fast for 2 s",
                    Describe(), backed, target, grown.status().message(), backed);
    }
    return grown;
  }

  Status PersistAllocator() override { return log_ != nullptr ? log_->Flush() : Status::Ok(); }

  std::string HostPath() const override {
    auto slash = config_.name.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : config_.name.substr(0, slash);
  }

  std::string BackendName() const override { return std::string(io_->backend_name()); }

  uint64_t EffectiveCapacity() override {
    if (config_.capacity != 0) return alloc_->capacity();
    // Grows as far as the host allows: what is backed plus what the host can still give.
    const uint64_t backed = alloc_->limit();
    const uint64_t host = HostFreeBytes();
    return host > UINT64_MAX - backed ? UINT64_MAX : backed + host;
  }

 private:
  // Reserves the data area up to at least `target` (a whole growth unit when it fits).
  Result<uint64_t> GrowFile(uint64_t backed, uint64_t target) {
    const uint64_t unit = std::max<uint64_t>(config_.growth_unit, alloc_->min_class());
    uint64_t want = std::min(RoundUpTo(target, unit), alloc_->capacity());
    // Ask the filesystem first: a fallocate that runs out of space part way may keep what it
    // reserved (ext4 does), so a hopeless growth must not be attempted at all.
    Result<uint64_t> host = FilesystemFreeBytes(HostPath());
    if (host.ok()) {
      if (want - backed > *host) want = target;
      if (target - backed > *host) {
        return NoSpace(Describe() + ": growing the file by " + std::to_string(target - backed) +
                       " bytes: the host filesystem has " + std::to_string(*host) + " free");
      }
    }
    Status s = io_->Allocate(kDataStart + backed, want - backed);
    if (!s.ok() && s.code() == Code::kNoSpace && want > target) {
      want = target;  // a whole growth unit does not fit; reserve just what is needed
      s = io_->Allocate(kDataStart + backed, want - backed);
    }
    if (!s.ok()) return s.WithContext(Describe() + ": growing the file");
    return want;
  }

  // The path must still name the file we opened; a deleted or replaced backing file means
  // nothing written since is durable.
  Status CheckIdentity() {
    struct stat st;
    if (::stat(config_.name.c_str(), &st) != 0) {
      return IoError(Describe() + ": backing file " + config_.name + " is gone (" +
                     std::strerror(errno) + ")");
    }
    if (FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)} !=
        identity_) {
      return IoError(Describe() + ": backing file " + config_.name +
                     " was replaced by another file (the transport never writes to or reopens "
                     "a swapped file)");
    }
    return Status::Ok();
  }

  // Background fsync of the allocator log every 50 ms, so allocations become durable soon
  // even without a Sync() from the CTE.
  void SyncLoop() {
    for (;;) {
      {
        MutexLock l(&bg_mu_);
        if (!stop_) bg_cv_.WaitFor(&bg_mu_, kLogSyncInterval);
        if (stop_) return;
      }
      if (log_->NeedsSync()) {
        Status s = log_->Sync();
        if (!s.ok()) CLIO_LOG_WARN("{}: background alloc log sync: {}", Describe(), s.ToString());
      }
    }
  }

  const TierFileLock lock_;  // before io_: held until the file is closed
  const std::unique_ptr<IoFile> io_;
  const std::unique_ptr<AllocLog> log_;  // null for an explicitly volatile file tier
  const std::string fail_marker_;
  const FileIdentity identity_;  // of the file opened at Open()

  Mutex bg_mu_;
  CondVar bg_cv_;
  bool stop_ GUARDED_BY(bg_mu_) = false;
  std::thread sync_thread_;
};

}  // namespace

Result<std::unique_ptr<Bdev>> OpenFileBdev(const BdevConfig& config) {
  BdevConfig c = config;
  if (c.alignment == 0) c.alignment = 4096;
  CLIO_RETURN_IF_ERROR(BlockAllocator::ValidateAlignment(c.alignment).WithContext("file bdev"));
  if (c.growth_unit == 0) return ConfigError("file bdev '" + c.name + "': growth_unit is 0");
  if (!c.persistence) c.persistence = Persistence::kTemporary;

  // The tier's directory is created on first use, like the state directory above it.
  std::filesystem::path parent = std::filesystem::path(c.name).parent_path();
  if (!parent.empty()) CLIO_RETURN_IF_ERROR(MakeDirsBeneath(parent.string()).WithContext("file bdev '" + c.name + "'"));
  // io_depth is the seed key; it sizes the per-thread rings / contexts of the tier's I/O.
  c.io.io_depth = c.io_depth;
  IoOptions data_io = c.io;
  data_io.direct_writes = true;  // skipped where unsupported and in fault-injection mode
  CLIO_ASSIGN_OR_RETURN(auto io, OpenIoFile(c.name, data_io));
  // Locked before its header is read or written.
  CLIO_ASSIGN_OR_RETURN(TierFileLock lock, TierFileLock::Take(c.name, *io));
  CLIO_ASSIGN_OR_RETURN(uint64_t size, io->Size());
  TierHeader hdr;
  if (size == 0) {
    hdr.tier_id = c.tier_id != 0 ? c.tier_id : RandomTierId();
    hdr.alignment = c.alignment;
    hdr.created_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                               std::chrono::system_clock::now().time_since_epoch())
                                               .count());
    CLIO_RETURN_IF_ERROR(io->Write(0, EncodeFileTierHeader(hdr)));
    CLIO_RETURN_IF_ERROR(io->Sync());
    CLIO_RETURN_IF_ERROR(SyncParentDir(c.name));
    size = kDataStart;
  } else {
    if (size < kDataStart) {
      return Corruption("tier file " + c.name + ": header truncated (" + std::to_string(size) +
                        " bytes)");
    }
    std::string buf(kDataStart, '\0');
    CLIO_RETURN_IF_ERROR(io->Read(0, kDataStart, buf.data()));
    CLIO_ASSIGN_OR_RETURN(hdr, DecodeTierHeader(std::string_view(buf.data(), kTierHeaderSize),
                                          std::string_view(kTierMagic, sizeof(kTierMagic)),
                                          kTierFormatVersion, "tier file " + c.name,
                                          "CLIO tier file"));
    if (c.tier_id != 0 && c.tier_id != hdr.tier_id) {
      return Corruption("tier file " + c.name + " holds tier id " + std::to_string(hdr.tier_id) +
                        ", but the configuration names tier id " + std::to_string(c.tier_id));
    }
    if (BlockAllocator::ValidateAlignment(hdr.alignment).ok() && hdr.alignment != c.alignment) {
      CLIO_LOG_WARN("tier file {}: keeping its alignment {} (configured {})", c.name,
                    hdr.alignment, c.alignment);
      c.alignment = hdr.alignment;
    } else if (!BlockAllocator::ValidateAlignment(hdr.alignment).ok()) {
      return Corruption("tier file " + c.name + ": bad alignment " +
                        std::to_string(hdr.alignment) + " in header");
    }
  }
  c.tier_id = hdr.tier_id;

  const uint64_t min_class = std::max(BlockAllocator::kMinClass, c.alignment);
  uint64_t capacity = c.capacity == 0 ? kUnboundedCapacity : c.capacity - c.capacity % min_class;
  if (capacity < min_class) {
    return ConfigError("file bdev '" + c.name + "': capacity " + std::to_string(c.capacity) +
                       " is smaller than one block");
  }

  // The identity of the descriptor, not of the path: the path may already name another file.
  CLIO_ASSIGN_OR_RETURN(FileIdentity identity, io->Identity());

  std::unique_ptr<AllocLog> log;
  AllocLog::Replay replay;
  if (*c.persistence != Persistence::kVolatile) {
    if (c.alloc_log.empty()) c.alloc_log = c.name + ".alloc_log";
    CLIO_ASSIGN_OR_RETURN(log, AllocLog::Open(c.alloc_log, hdr.tier_id, c.io, &replay));
    if (replay.records > 0) {
      CLIO_LOG_INFO("tier file {}: replayed {} alloc log records: {} live, {} free extents",
                    c.name, replay.records, replay.live.size(), replay.free.size());
    }
  }

  const uint64_t id = hdr.tier_id;
  auto bdev = std::make_unique<FileBdev>(std::move(c), id, capacity, std::move(io),
                                         std::move(log), identity, std::move(lock));
  CLIO_RETURN_IF_ERROR(bdev->Start(replay, size - kDataStart));
  return std::unique_ptr<Bdev>(std::move(bdev));
}

}  // namespace clio
