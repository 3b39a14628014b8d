// ram transport: one sparse POSIX shared-memory segment, mapped MAP_SHARED so client
// processes can map it too and read blob payloads without a round trip.
//
// The segment is ftruncate'd to the capacity and committed with fallocate, so a full /dev/shm
// fails with NoSpace instead of a SIGBUS on first touch. The `alloc` policy says when: eager
// commits the whole capacity at Open (a full /dev/shm fails the pool's creation); lazy commits
// one populate_unit at a time as the allocator's high-water mark advances, so committed memory
// tracks allocations; auto is eager when a capacity was configured, else lazy.
// Segments are named "clio.<pid>.<name>"; ones left by dead processes are removed at Open.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "common/size.h"
#include "storage/bdev_base.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

constexpr const char* kShmDir = "/dev/shm";
constexpr double kDefaultDramFraction = 0.8;

std::string SanitizeSegmentName(std::string_view name) {
  std::string out;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.size() > 200) out.resize(200);
  return out;
}

// Removes "clio.<pid>.*" segments whose process is gone.
void RemoveStaleSegments() {
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return;
  const pid_t self = ::getpid();
  while (dirent* ent = ::readdir(dir)) {
    std::string_view name(ent->d_name);
    if (name.substr(0, 5) != "clio.") continue;
    std::string_view rest = name.substr(5);
    size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string_view::npos) continue;
    std::string_view digits = rest.substr(0, dot);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        digits.size() > 9) {
      continue;
    }
    pid_t pid = static_cast<pid_t>(std::atol(std::string(digits).c_str()));
    if (pid <= 0 || pid == self) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::string seg = "/" + std::string(name);
    if (::shm_unlink(seg.c_str()) == 0) {
      CLIO_LOG_INFO("removed stale shared-memory segment {} of dead process {}", seg, pid);
    }
  }
  ::closedir(dir);
}

class RamBdev final : public BdevBase {
 public:
  RamBdev(BdevConfig config, uint64_t tier_id, uint64_t capacity, std::string segment, int fd,
          char* base)
      : BdevBase(std::move(config), tier_id, capacity, /*growable=*/true, nullptr),
        segment_(std::move(segment)),
        fd_(fd),
        base_(base),
        mapped_(capacity) {}

  ~RamBdev() override {
    ::munmap(base_, mapped_);
    ::close(fd_);
    ::shm_unlink(segment_.c_str());
  }

  Status Sync() override { return Status::Ok(); }
  std::string shm_name() const override { return segment_; }

  // Commits the whole segment at creation (alloc: eager).
  Status CommitAll() { return GrowTo(mapped_); }

  // Commits a prefix at creation (CLIO_PREFAULT).
  Status Prefault(uint64_t bytes) {
    bytes = std::min<uint64_t>(bytes == 0 ? mapped_ : bytes, mapped_);
    CLIO_RETURN_IF_ERROR(GrowTo(bytes));
#ifdef MADV_POPULATE_WRITE
    ::madvise(base_, committed_.load(), MADV_POPULATE_WRITE);  // best effort
#endif
    return Status::Ok();
  }

 protected:
  Status WriteAt(uint64_t offset, std::string_view data) override {
    CLIO_RETURN_IF_ERROR(CheckCommitted(offset, data.size()));
    std::memcpy(base_ + offset, data.data(), data.size());
    return Status::Ok();
  }
  Status ReadAt(uint64_t offset, uint64_t len, char* out) override {
    CLIO_RETURN_IF_ERROR(CheckCommitted(offset, len));
    std::memcpy(out, base_ + offset, len);
    return Status::Ok();
  }

  Result<uint64_t> Grow(uint64_t backed, uint64_t target) override {
    const uint64_t unit = std::max<uint64_t>(config_.populate_unit, alloc_->min_class());
    uint64_t want = std::min(RoundUpTo(target, unit), mapped_);
    Status s = Commit(backed, want);
    if (!s.ok() && s.code() == Code::kNoSpace && want > target) {
      want = target;  // a whole unit does not fit; commit just what this request needs
      s = Commit(backed, want);
    }
    CLIO_RETURN_IF_ERROR(s);
    committed_.store(want);
    return want;
  }

  std::string HostPath() const override { return kShmDir; }
  std::string BackendName() const override { return "shm"; }

 private:
  Status Commit(uint64_t from, uint64_t to) {
    int r;
    do {
      r = ::fallocate(fd_, 0, static_cast<off_t>(from), static_cast<off_t>(to - from));
    } while (r != 0 && errno == EINTR);
    if (r != 0) {
      return Status::FromErrno(errno, Describe() + ": commit shared memory " + segment_ +
                                          " up to " + std::to_string(to));
    }
#ifdef MADV_POPULATE_WRITE
    // Map the committed pages now, in one call: otherwise each first write to a 4 KiB page
    // takes a page fault, which cost a third of the RAM tier's write time on a VM. Best effort
    // (older kernels say EINVAL): the pages are committed either way.
    const uint64_t page = 4096;  // madvise wants a page-aligned start; base_ is one (mmap)
    const uint64_t start = from / page * page;
    ::madvise(base_ + start, to - start, MADV_POPULATE_WRITE);
#endif
    return Status::Ok();
  }

  // Touching an uncommitted page could SIGBUS when /dev/shm is full; refuse instead.
  Status CheckCommitted(uint64_t offset, uint64_t len) const {
    if (offset > committed_.load() || len > committed_.load() - offset) {
      return Status(Code::kOutOfRange, Describe() + ": range at " + std::to_string(offset) +
                                           " is past the committed part of the segment");
    }
    return Status::Ok();
  }

  const std::string segment_;
  const int fd_;
  char* const base_;
  const uint64_t mapped_;
  std::atomic<uint64_t> committed_{0};
};

}  // namespace

Result<std::unique_ptr<Bdev>> OpenRamBdev(const BdevConfig& config) {
  BdevConfig c = config;
  if (c.alignment == 0 || c.alignment == 4096) c.alignment = 512;
  CLIO_RETURN_IF_ERROR(BlockAllocator::ValidateAlignment(c.alignment).WithContext("ram bdev"));
  if (c.persistence.value_or(Persistence::kVolatile) != Persistence::kVolatile) {
    return ConfigError("ram bdev '" + c.name + "' can only be volatile");
  }
  c.persistence = Persistence::kVolatile;
  const uint64_t min_class = std::max(BlockAllocator::kMinClass, c.alignment);

  RemoveStaleSegments();

  uint64_t capacity = c.capacity;
  if (capacity == 0) {
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page_size = ::sysconf(_SC_PAGESIZE);
    capacity = static_cast<uint64_t>(static_cast<double>(pages) * static_cast<double>(page_size) *
                                     kDefaultDramFraction);
  }
  CLIO_ASSIGN_OR_RETURN(uint64_t shm_free, FilesystemFreeBytes(kShmDir));
  // /dev/shm is the host's memory: a capacity it cannot hold is refused, not quietly made
  // smaller (committed eagerly, what is left of /dev/shm would be taken whole).
  if (c.capacity > shm_free)
    return ConfigError("ram bdev '" + c.name + "': capacity " + FormatSize(c.capacity) + " (a tier's capacity_limit, a "
                       "bdev's capacity) is more than " + kShmDir + " holds (" + FormatSize(shm_free) +
                       " free): lower it, or grow " + kShmDir + " (a container's --shm-size)");
  if (capacity > shm_free)
    CLIO_LOG_WARN("ram bdev '{}': the default capacity ({}) is more than {} holds: {} ({} free)", c.name,
                  FormatSize(capacity), kShmDir, FormatSize(shm_free), FormatSize(shm_free));
  capacity = std::min(capacity, shm_free);
  capacity -= capacity % min_class;
  if (capacity < min_class) {
    return NoSpace("ram bdev '" + c.name + "': " + kShmDir + " has only " + FormatSize(shm_free) +
                   " free");
  }

  std::string segment = c.shm_name;
  while (!segment.empty() && segment.front() == '/') segment.erase(0, 1);
  if (segment.empty()) {
    segment = "clio." + std::to_string(::getpid()) + "." + SanitizeSegmentName(c.name);
  }
  segment = "/" + segment;

  int fd = ::shm_open(segment.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno(errno, "ram bdev '" + c.name + "': shm_open " + segment);
  auto fail = [&](Status s) {
    ::close(fd);
    ::shm_unlink(segment.c_str());
    return s;
  };
  if (::ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    return fail(Status::FromErrno(errno, "ram bdev: ftruncate " + segment));
  }
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (p == MAP_FAILED) return fail(Status::FromErrno(errno, "ram bdev: mmap " + segment));

  const uint64_t id = c.tier_id != 0 ? c.tier_id : RandomTierId();
  const AllocPolicy policy = ResolveAllocPolicy(c.alloc, config.capacity);
  auto bdev = std::make_unique<RamBdev>(std::move(c), id, capacity, segment, fd,
                                        static_cast<char*>(p));
  if (policy == AllocPolicy::kEager) {
    Status s = bdev->CommitAll();
    if (!s.ok()) return s.WithContext("ram bdev '" + config.name + "': alloc: eager");
  }
  if (const char* pre = std::getenv("CLIO_PREFAULT"); pre != nullptr && *pre != '\0') {
    Result<uint64_t> bytes = ParseSize(pre);
    if (!bytes.ok()) return bytes.status().WithContext("CLIO_PREFAULT");
    CLIO_RETURN_IF_ERROR(bdev->Prefault(*bytes));
  }
  return std::unique_ptr<Bdev>(std::move(bdev));
}

}  // namespace clio
