// The I/O layer (io.h): POSIX and io_uring backends over one file descriptor, and the
// fault-injection wrapper that keeps unsynced writes in memory.
#include "storage/io.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace clio {
namespace {

// One syscall moves at most this much (pread/pwrite and io_uring take 32-bit-ish lengths).
constexpr uint64_t kMaxIoChunk = 1ull << 30;
constexpr unsigned kRingEntries = 64;

std::string OpContext(std::string_view op, const std::string& path, uint64_t off) {
  std::string s(op);
  s += ' ';
  s += path;
  s += " at ";
  s += std::to_string(off);
  return s;
}

// Everything but the data path is the same for both backends.
class FdFile : public IoFile {
 public:
  FdFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~FdFile() override { ::close(fd_); }
  FdFile(const FdFile&) = delete;
  FdFile& operator=(const FdFile&) = delete;

  Status Sync() override {
    while (::fdatasync(fd_) != 0) {
      if (errno != EINTR) return Status::FromErrno(errno, "fdatasync " + path_);
    }
    return Status::Ok();
  }

  Status Allocate(uint64_t offset, uint64_t len) override {
    if (len == 0) return Status::Ok();
    int r;
    do {
      r = ::fallocate(fd_, 0, static_cast<off_t>(offset), static_cast<off_t>(len));
    } while (r != 0 && errno == EINTR);
    if (r == 0) return Status::Ok();
    int err = errno;
    if (err == EOPNOTSUPP) {
      // A filesystem without fallocate: extend the size only (no reservation). Emulating the
      // reservation by writing zeros could fill the disk on a large growth step.
      CLIO_ASSIGN_OR_RETURN(uint64_t size, Size());
      if (size >= offset + len) return Status::Ok();
      return Truncate(offset + len);
    }
    return Status::FromErrno(err, OpContext("fallocate", path_, offset) + " len " +
                                      std::to_string(len));
  }

  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
    return static_cast<uint64_t>(st.st_size);
  }

  Status Truncate(uint64_t size) override {
    int r;
    do {
      r = ::ftruncate(fd_, static_cast<off_t>(size));
    } while (r != 0 && errno == EINTR);
    if (r != 0) return Status::FromErrno(errno, OpContext("truncate", path_, size));
    return Status::Ok();
  }

  const std::string& path() const override { return path_; }

 protected:
  // pread/pwrite loops; shared by the POSIX backend and the io_uring fallback.
  Status PosixWrite(uint64_t offset, std::string_view data) {
    const char* p = data.data();
    uint64_t left = data.size();
    uint64_t off = offset;
    while (left > 0) {
      ssize_t n = ::pwrite(fd_, p, std::min(left, kMaxIoChunk), static_cast<off_t>(off));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, OpContext("write", path_, off));
      }
      if (n == 0) return IoError(OpContext("write", path_, off) + ": wrote nothing");
      p += n;
      off += static_cast<uint64_t>(n);
      left -= static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  Status PosixRead(uint64_t offset, uint64_t len, char* out) {
    uint64_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd_, out + done, std::min(len - done, kMaxIoChunk),
                          static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::FromErrno(errno, OpContext("read", path_, offset + done));
      }
      if (n == 0) {  // end of file: the rest reads as zeros
        std::memset(out + done, 0, len - done);
        return Status::Ok();
      }
      done += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  const int fd_;
  const std::string path_;
};

class PosixFile final : public FdFile {
 public:
  using FdFile::FdFile;
  Status Write(uint64_t offset, std::string_view data) override { return PosixWrite(offset, data); }
  Status Read(uint64_t offset, uint64_t len, char* out) override {
    return PosixRead(offset, len, out);
  }
  std::string_view backend_name() const override { return "posix"; }
};

// One ring per thread, created on first use and torn down at thread exit. A ring is used for
// one operation at a time (submit, then wait), so it never holds more than one SQE.
class ThreadRing {
 public:
  ThreadRing() = default;
  ThreadRing(const ThreadRing&) = delete;
  ThreadRing& operator=(const ThreadRing&) = delete;
  ~ThreadRing() {
    if (ok_) io_uring_queue_exit(&ring_);
  }
  // nullptr when this thread cannot have a ring; init_error() says why.
  io_uring* Get() {
    // A forked child shares the parent's ring memory: using it would corrupt both. Each
    // process makes its own (the inherited mapping is left alone).
    if (tried_ && owner_ != getpid()) {
      tried_ = false;
      ok_ = false;
    }
    if (!tried_) {
      tried_ = true;
      owner_ = getpid();
      int r = io_uring_queue_init(kRingEntries, &ring_, 0);
      ok_ = (r == 0);
      init_error_ = ok_ ? 0 : -r;
    }
    return ok_ ? &ring_ : nullptr;
  }
  int init_error() const { return init_error_; }

 private:
  io_uring ring_{};
  bool tried_ = false;
  bool ok_ = false;
  int init_error_ = 0;
  pid_t owner_ = 0;
};

thread_local ThreadRing t_ring;

// One read or write through the ring. Returns bytes moved or -errno.
int64_t RingOp(io_uring* ring, bool write, int fd, char* buf, unsigned len, uint64_t off) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (sqe == nullptr) return -EBUSY;  // cannot happen: one op in flight per ring
  if (write) {
    io_uring_prep_write(sqe, fd, buf, len, off);
  } else {
    io_uring_prep_read(sqe, fd, buf, len, off);
  }
  int r;
  do {
    r = io_uring_submit_and_wait(ring, 1);
  } while (r == -EINTR);
  if (r < 0) return r;
  io_uring_cqe* cqe = nullptr;
  do {
    r = io_uring_wait_cqe(ring, &cqe);
  } while (r == -EINTR);
  if (r < 0) return r;
  int64_t res = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  return res;
}

std::atomic<bool> g_ring_fallback_warned{false};

void WarnRingFallbackOnce(int err) {
  if (!g_ring_fallback_warned.exchange(true)) {
    CLIO_LOG_WARN("io_uring unavailable ({}); using POSIX pread/pwrite", std::strerror(err));
  }
}

class UringFile final : public FdFile {
 public:
  using FdFile::FdFile;

  Status Write(uint64_t offset, std::string_view data) override {
    io_uring* ring = t_ring.Get();
    if (ring == nullptr) {  // this thread could not get a ring (e.g. memlock limit)
      WarnRingFallbackOnce(t_ring.init_error());
      return PosixWrite(offset, data);
    }
    // io_uring does not modify the buffer on a write; the cast only satisfies the prep API.
    char* p = const_cast<char*>(data.data());
    uint64_t left = data.size();
    uint64_t off = offset;
    while (left > 0) {
      int64_t n = RingOp(ring, true, fd_, p, static_cast<unsigned>(std::min(left, kMaxIoChunk)),
                         off);
      if (n == -EINTR || n == -EAGAIN) continue;
      if (n < 0) return Status::FromErrno(static_cast<int>(-n), OpContext("write", path_, off));
      if (n == 0) return IoError(OpContext("write", path_, off) + ": wrote nothing");
      p += n;
      off += static_cast<uint64_t>(n);
      left -= static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  Status Read(uint64_t offset, uint64_t len, char* out) override {
    io_uring* ring = t_ring.Get();
    if (ring == nullptr) {
      WarnRingFallbackOnce(t_ring.init_error());
      return PosixRead(offset, len, out);
    }
    uint64_t done = 0;
    while (done < len) {
      int64_t n = RingOp(ring, false, fd_, out + done,
                         static_cast<unsigned>(std::min(len - done, kMaxIoChunk)), offset + done);
      if (n == -EINTR || n == -EAGAIN) continue;
      if (n < 0) {
        return Status::FromErrno(static_cast<int>(-n), OpContext("read", path_, offset + done));
      }
      if (n == 0) {
        std::memset(out + done, 0, len - done);
        return Status::Ok();
      }
      done += static_cast<uint64_t>(n);
    }
    return Status::Ok();
  }

  std::string_view backend_name() const override { return "io_uring"; }
};

// Fault-injection mode: a power-cut simulation. Every write lands in an in-memory page map;
// reads merge the map over the file; Sync() writes the map out and fdatasyncs. Destroying the
// object without Sync() loses exactly the unsynced writes.
//
// Invariants (under mu_):
//  - logical_size_ is the size the caller sees (writes, truncates and allocates applied).
//  - bytes of the underlying file at offsets >= base_valid_ are stale (cut by a Truncate not
//    yet synced) and read as zeros.
//  - a page in pages_ holds the whole 4 KiB page as the caller sees it; bytes past
//    logical_size_ in it are zero.
// This is a test mode: one mutex is held across the underlying I/O for simplicity.
class FaultFile final : public IoFile {
 public:
  static constexpr uint64_t kPage = 4096;

  FaultFile(std::unique_ptr<IoFile> base, uint64_t size)
      : base_(std::move(base)),
        name_(std::string(base_->backend_name()) + "+fault"),
        logical_size_(size) {}

  Status Write(uint64_t offset, std::string_view data) override {
    MutexLock l(&mu_);
    uint64_t pos = 0;
    while (pos < data.size()) {
      uint64_t off = offset + pos;
      uint64_t page = off / kPage;
      uint64_t in_page = off % kPage;
      uint64_t n = std::min<uint64_t>(kPage - in_page, data.size() - pos);
      auto it = pages_.find(page);
      if (it == pages_.end()) {
        std::string buf(kPage, '\0');
        if (n != kPage) CLIO_RETURN_IF_ERROR(ReadBase(page * kPage, kPage, buf.data()));
        it = pages_.emplace(page, std::move(buf)).first;
      }
      std::memcpy(it->second.data() + in_page, data.data() + pos, n);
      pos += n;
    }
    logical_size_ = std::max(logical_size_, offset + data.size());
    return Status::Ok();
  }

  Status Read(uint64_t offset, uint64_t len, char* out) override {
    MutexLock l(&mu_);
    uint64_t pos = 0;
    while (pos < len) {
      uint64_t off = offset + pos;
      uint64_t page = off / kPage;
      uint64_t in_page = off % kPage;
      auto it = pages_.find(page);
      if (it != pages_.end()) {
        uint64_t n = std::min<uint64_t>(kPage - in_page, len - pos);
        std::memcpy(out + pos, it->second.data() + in_page, n);
        pos += n;
        continue;
      }
      // A run of pages not in the map: one read of the underlying file.
      uint64_t end_page = page + 1;
      uint64_t last_page = (offset + len - 1) / kPage;
      while (end_page <= last_page && pages_.find(end_page) == pages_.end()) ++end_page;
      uint64_t n = std::min(end_page * kPage - off, len - pos);
      CLIO_RETURN_IF_ERROR(ReadBase(off, n, out + pos));
      pos += n;
    }
    return Status::Ok();
  }

  Status Sync() override {
    MutexLock l(&mu_);
    CLIO_ASSIGN_OR_RETURN(uint64_t base_size, base_->Size());
    if (base_valid_ < base_size) {
      // Cut the stale bytes first, so a later extension reads as zeros. (A reservation made
      // by Allocate() past the cut in this same epoch becomes a sparse extension.)
      CLIO_RETURN_IF_ERROR(base_->Truncate(base_valid_));
      base_size = base_valid_;
    }
    if (base_size != logical_size_) CLIO_RETURN_IF_ERROR(base_->Truncate(logical_size_));
    for (const auto& [page, buf] : pages_) {
      uint64_t start = page * kPage;
      if (start >= logical_size_) continue;
      uint64_t n = std::min<uint64_t>(kPage, logical_size_ - start);
      CLIO_RETURN_IF_ERROR(base_->Write(start, std::string_view(buf.data(), n)));
    }
    CLIO_RETURN_IF_ERROR(base_->Sync());
    pages_.clear();
    base_valid_ = kAllValid;
    return Status::Ok();
  }

  Status Allocate(uint64_t offset, uint64_t len) override {
    // Reserving blocks changes no bytes; pass it through so a full disk still fails here.
    MutexLock l(&mu_);
    CLIO_RETURN_IF_ERROR(base_->Allocate(offset, len));
    logical_size_ = std::max(logical_size_, offset + len);
    return Status::Ok();
  }

  Result<uint64_t> Size() override {
    MutexLock l(&mu_);
    return logical_size_;
  }

  Status Truncate(uint64_t size) override {
    MutexLock l(&mu_);
    if (size < logical_size_) {
      base_valid_ = std::min(base_valid_, size);
      // Drop whole pages past the end; zero the tail of the page the new end falls in.
      for (auto it = pages_.lower_bound((size + kPage - 1) / kPage); it != pages_.end();) {
        it = pages_.erase(it);
      }
      if (size % kPage != 0) {
        uint64_t page = size / kPage;
        auto it = pages_.find(page);
        if (it == pages_.end()) {
          std::string buf(kPage, '\0');
          CLIO_RETURN_IF_ERROR(ReadBase(page * kPage, kPage, buf.data()));
          it = pages_.emplace(page, std::move(buf)).first;
        }
        std::memset(it->second.data() + size % kPage, 0, kPage - size % kPage);
      }
    }
    logical_size_ = size;
    return Status::Ok();
  }

  const std::string& path() const override { return base_->path(); }
  std::string_view backend_name() const override { return name_; }

 private:
  static constexpr uint64_t kAllValid = std::numeric_limits<uint64_t>::max();

  // Reads the underlying file, with bytes cut by an unsynced Truncate reading as zeros.
  Status ReadBase(uint64_t offset, uint64_t len, char* out) REQUIRES(mu_) {
    CLIO_RETURN_IF_ERROR(base_->Read(offset, len, out));
    if (offset + len > base_valid_) {
      uint64_t from = std::max(offset, base_valid_);
      std::memset(out + (from - offset), 0, offset + len - from);
    }
    return Status::Ok();
  }

  const std::unique_ptr<IoFile> base_;
  const std::string name_;
  Mutex mu_;
  std::map<uint64_t, std::string> pages_ GUARDED_BY(mu_);
  uint64_t logical_size_ GUARDED_BY(mu_);
  uint64_t base_valid_ GUARDED_BY(mu_) = kAllValid;
};

}  // namespace

bool FaultInjectionFromEnv() {
  const char* v = std::getenv("CLIO_IO_FAULT_INJECTION");
  return v != nullptr && std::string_view(v) == "1";
}

Result<std::unique_ptr<IoFile>> OpenIoFile(const std::string& path, const IoOptions& options) {
  bool use_uring = false;
  if (options.backend != IoBackend::kPosix) {
    use_uring = t_ring.Get() != nullptr;
    if (!use_uring) {
      if (options.backend == IoBackend::kUring) {
        return Status(Code::kNotSupported,
                      "io_uring requested for " + path + " but unavailable: " +
                          std::strerror(t_ring.init_error()));
      }
      WarnRingFallbackOnce(t_ring.init_error());
    }
  }

  int flags = O_RDWR | O_CLOEXEC;
  if (options.create) flags |= O_CREAT;
  if (options.exclusive) flags |= O_EXCL;
  int fd;
  do {
    fd = ::open(path.c_str(), flags, static_cast<mode_t>(options.mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::FromErrno(errno, "open " + path);

  std::unique_ptr<IoFile> file;
  if (use_uring) {
    file = std::make_unique<UringFile>(fd, path);
  } else {
    file = std::make_unique<PosixFile>(fd, path);
  }
  if (options.fault_injection || FaultInjectionFromEnv()) {
    CLIO_ASSIGN_OR_RETURN(uint64_t size, file->Size());
    file = std::make_unique<FaultFile>(std::move(file), size);
  }
  return file;
}

}  // namespace clio
