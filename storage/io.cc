// The I/O layer (io.h): one file descriptor (plus an optional O_DIRECT one) driven by an
// asynchronous engine (io_engine.h) or by pread/pwrite, and the choice of backend at open.
#include "storage/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "daemon/confine.h"
#include "storage/io_engine.h"
#include "storage/io_fault.h"

namespace clio {
namespace {

using io_internal::OpContext;

// One pread/pwrite moves at most this much (the kernel caps a call just below 2 GiB).
constexpr uint64_t kMaxIoChunk = 1ull << 30;
constexpr uint32_t kMaxIoDepth = 65536;
// A direct write is copied through at most this much aligned memory at a time; each thread
// keeps its bounce buffer (up to this size) until it exits.
constexpr uint64_t kBounceMax = 4ull << 20;

// Logs `what` once per process per flag.
void WarnOnce(std::atomic<bool>* flag, const std::string& what) {
  if (!flag->exchange(true)) CLIO_LOG_WARN("{}", what);
}
std::atomic<bool> g_open_fallback_warned{false};
std::atomic<bool> g_thread_fallback_warned{false};
std::atomic<bool> g_direct_disabled_warned{false};

// The calling thread's aligned buffer for direct writes.
class BounceBuffer {
 public:
  BounceBuffer() = default;
  BounceBuffer(const BounceBuffer&) = delete;
  BounceBuffer& operator=(const BounceBuffer&) = delete;
  ~BounceBuffer() { std::free(buf_); }
  // nullptr when the memory cannot be had (the caller writes buffered instead).
  char* Get(uint64_t len) {
    if (len > size_) {
      std::free(buf_);
      size_ = 0;
      buf_ = static_cast<char*>(std::aligned_alloc(kDirectAlign, RoundUp(len)));
      if (buf_ != nullptr) size_ = RoundUp(len);
    }
    return buf_;
  }

 private:
  static uint64_t RoundUp(uint64_t n) { return (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign; }
  char* buf_ = nullptr;
  uint64_t size_ = 0;
};
thread_local BounceBuffer t_bounce;

class FdFile final : public IoFile {
 public:
  // Takes ownership of `fd` and of `direct_fd` (-1: no direct writes).
  FdFile(int fd, int direct_fd, std::string path, IoBackend backend, uint32_t depth)
      : fd_(fd), direct_fd_(direct_fd), path_(std::move(path)), backend_(backend), depth_(depth),
        direct_on_(direct_fd >= 0) {}
  ~FdFile() override {
    ::close(fd_);
    if (direct_fd_ >= 0) ::close(direct_fd_);
  }
  FdFile(const FdFile&) = delete;
  FdFile& operator=(const FdFile&) = delete;

  Status Write(uint64_t offset, std::string_view data) override {
    CheckNoLockAcrossIo("a file write");
    if (direct_on_.load(std::memory_order_relaxed) && data.size() >= kDirectWriteMin &&
        offset % kDirectAlign == 0 && data.size() % kDirectAlign == 0) {
      return DirectWrite(offset, data);
    }
    // The engines do not modify the buffer of a write; the cast only satisfies their API.
    return DoIo(true, fd_, const_cast<char*>(data.data()), data.size(), offset);
  }

  Status Read(uint64_t offset, uint64_t len, char* out) override {
    CheckNoLockAcrossIo("a file read");
    return DoIo(false, fd_, out, len, offset);
  }

  std::string_view backend_name() const override { return IoBackendName(backend_); }

  Result<FileIdentity> Identity() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Status::FromErrno(errno, "fstat " + path_);
    return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  }

  uint64_t direct_bytes_written() const override { return direct_bytes_.load(); }

  Status Sync() override {
    CheckNoLockAcrossIo("a file sync");
    while (::fdatasync(fd_) != 0) {
      if (errno != EINTR) return Status::FromErrno(errno, "fdatasync " + path_);
    }
    return Status::Ok();
  }

  Status Allocate(uint64_t offset, uint64_t len) override {
    if (len == 0) return Status::Ok();
    CheckNoLockAcrossIo("a file allocation");
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
    CheckNoLockAcrossIo("a file truncation");
    int r;
    do {
      r = ::ftruncate(fd_, static_cast<off_t>(size));
    } while (r != 0 && errno == EINTR);
    if (r != 0) return Status::FromErrno(errno, OpContext("truncate", path_, size));
    return Status::Ok();
  }

  const std::string& path() const override { return path_; }

 private:
  // pread/pwrite loops: the kPosix backend, and the last resort when a thread cannot get an
  // engine at all.
  Status PosixWrite(int fd, uint64_t offset, const char* data, uint64_t len) {
    const char* p = data;
    uint64_t left = len;
    uint64_t off = offset;
    while (left > 0) {
      ssize_t n = ::pwrite(fd, p, std::min(left, kMaxIoChunk), static_cast<off_t>(off));
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

  Status PosixRead(int fd, uint64_t offset, uint64_t len, char* out) {
    uint64_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd, out + done, std::min(len - done, kMaxIoChunk),
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

  // One read or write of [off, off+len) on `fd` through this file's backend. A thread that
  // cannot get its own ring or context uses POSIX AIO, and pread/pwrite if even that fails.
  Status DoIo(bool write, int fd, char* buf, uint64_t len, uint64_t off) {
    if (len == 0) return Status::Ok();
    if (backend_ != IoBackend::kPosix) {
      int err = 0;
      IoBackend used = backend_;
      io_internal::Engine* engine = io_internal::ThreadEngine(backend_, depth_, &err);
      if (engine == nullptr) {
        WarnOnce(&g_thread_fallback_warned,
                 std::string(IoBackendName(backend_)) + " unavailable on a thread using " +
                     path_ + " (" + std::strerror(err) + "); that thread uses POSIX AIO");
        used = IoBackend::kPosixAio;
        engine = io_internal::ThreadEngine(used, depth_, &err);
      }
      if (engine != nullptr) {
        return io_internal::RunAsyncIo(engine, used, depth_, write, fd, buf, len, off, path_);
      }
    }
    return write ? PosixWrite(fd, off, buf, len) : PosixRead(fd, off, len, buf);
  }

  // Copies `data` into the thread's aligned buffer, kBounceMax at a time, and writes it through
  // the O_DIRECT descriptor. If the kernel refuses the direct write (EINVAL: an alignment this
  // device does not accept), direct writes are switched off for this file and the rest goes
  // through the page cache.
  Status DirectWrite(uint64_t offset, std::string_view data) {
    uint64_t pos = 0;
    while (pos < data.size()) {
      const uint64_t n = std::min<uint64_t>(kBounceMax, data.size() - pos);
      const char* src = data.data() + pos;
      char* p;
      if (reinterpret_cast<uintptr_t>(src) % kDirectAlign == 0) {
        p = const_cast<char*>(src);  // already aligned: no copy needed
      } else {
        p = t_bounce.Get(n);
        if (p == nullptr) break;
        std::memcpy(p, src, n);
      }
      Status s = DoIo(true, direct_fd_, p, n, offset + pos);
      if (!s.ok()) {
        if (s.code() != Code::kInvalidArgument) return s;
        direct_on_.store(false);
        WarnOnce(&g_direct_disabled_warned,
                 "direct writes to " + path_ + " refused (" + s.message() +
                     "); writing through the page cache");
        break;
      }
      direct_bytes_.fetch_add(n);
      pos += n;
    }
    if (pos == data.size()) return Status::Ok();
    return DoIo(true, fd_, const_cast<char*>(data.data() + pos), data.size() - pos, offset + pos);
  }

  const int fd_;
  const int direct_fd_;  // -1: none
  const std::string path_;
  const IoBackend backend_;
  const uint32_t depth_;
  std::atomic<bool> direct_on_;
  std::atomic<uint64_t> direct_bytes_{0};
};

// Opens the O_DIRECT descriptor for `path`, already open as `fd`. -1 when the filesystem does
// not support direct I/O (tmpfs on older kernels, some FUSE and network filesystems): that is
// not an error, direct writes are just skipped. Refuses a path that now names another file.
Result<int> OpenDirect(const std::string& path, int fd) {
  int dfd;
  do {
    dfd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_DIRECT);
  } while (dfd < 0 && errno == EINTR);
  if (dfd < 0) {
    CLIO_LOG_DEBUG("{}: no O_DIRECT descriptor ({}); all writes go through the page cache",
                   path, std::strerror(errno));
    return -1;
  }
  struct stat a, b;
  if (::fstat(fd, &a) != 0 || ::fstat(dfd, &b) != 0 || a.st_dev != b.st_dev ||
      a.st_ino != b.st_ino) {
    ::close(dfd);
    return IoError("open " + path + ": the path was replaced by another file while opening it");
  }
  return dfd;
}

// The backend for `path`: a forced one if it can be set up on this thread, else the first of
// io_uring, libaio, POSIX AIO that can.
Result<IoBackend> ChooseBackend(const std::string& path, IoBackend want, uint32_t depth) {
  if (want == IoBackend::kAuto) {
    if (const char* env = std::getenv(kIoBackendEnv); env != nullptr && *env != '\0') {
      Result<IoBackend> parsed = ParseIoBackend(env);
      if (!parsed.ok()) {
        return ConfigError(std::string(kIoBackendEnv) + "='" + env + "' (opening " + path +
                           "): " + parsed.status().message());
      }
      want = *parsed;
    }
  }
  if (want == IoBackend::kPosix) return want;
  int err = 0;
  if (want != IoBackend::kAuto) {
    if (io_internal::ThreadEngine(want, depth, &err) == nullptr) {
      return Status(Code::kNotSupported, std::string(IoBackendName(want)) + " requested for " +
                                             path + " but unavailable: " + std::strerror(err));
    }
    return want;
  }
  if (io_internal::ThreadEngine(IoBackend::kUring, depth, &err) != nullptr) {
    return IoBackend::kUring;
  }
  const int uring_err = err;
  IoBackend chosen = IoBackend::kPosixAio;
  std::string why = std::string("io_uring unavailable for ") + path + " (" +
                    std::strerror(uring_err) + ")";
  if (io_internal::ThreadEngine(IoBackend::kLibaio, depth, &err) != nullptr) {
    chosen = IoBackend::kLibaio;
  } else {
    why += std::string(", libaio too (") + std::strerror(err) + ")";
  }
  WarnOnce(&g_open_fallback_warned, why + "; using " + std::string(IoBackendName(chosen)));
  return chosen;
}

}  // namespace

std::string_view IoBackendName(IoBackend b) {
  switch (b) {
    case IoBackend::kAuto: return "auto";
    case IoBackend::kUring: return "io_uring";
    case IoBackend::kLibaio: return "libaio";
    case IoBackend::kPosixAio: return "posix_aio";
    case IoBackend::kPosix: return "posix";
  }
  return "unknown";
}

Result<IoBackend> ParseIoBackend(std::string_view s) {
  for (IoBackend b : {IoBackend::kAuto, IoBackend::kUring, IoBackend::kLibaio,
                      IoBackend::kPosixAio, IoBackend::kPosix}) {
    if (s == IoBackendName(b)) return b;
  }
  return InvalidArgument("unknown I/O backend '" + std::string(s) +
                         "' (expected auto, io_uring, libaio, posix_aio or posix)");
}

bool FaultInjectionFromEnv() {
  const char* v = std::getenv("CLIO_IO_FAULT_INJECTION");
  return v != nullptr && std::string_view(v) == "1";
}

Result<std::unique_ptr<IoFile>> OpenIoFile(const std::string& path, const IoOptions& options) {
  if (options.io_depth == 0 || options.io_depth > kMaxIoDepth) {
    return InvalidArgument("io_depth " + std::to_string(options.io_depth) + " for " + path +
                           " is out of range (1.." + std::to_string(kMaxIoDepth) + ")");
  }
  CLIO_ASSIGN_OR_RETURN(IoBackend backend,
                        ChooseBackend(path, options.backend, options.io_depth));

  int flags = O_RDWR | O_CLOEXEC;
  if (options.create) flags |= O_CREAT;
  if (options.exclusive) flags |= O_EXCL;
  // Beneath the allowed directories when a client's request creates the file (daemon/confine.h).
  CLIO_ASSIGN_OR_RETURN(const int fd, OpenBeneath(path, flags, static_cast<mode_t>(options.mode)));

  const bool fault = options.fault_injection || FaultInjectionFromEnv();
  int direct_fd = -1;
  if (options.direct_writes && !fault) {
    Result<int> d = OpenDirect(path, fd);
    if (!d.ok()) {
      ::close(fd);
      return d.status();
    }
    direct_fd = *d;
  }
  std::unique_ptr<IoFile> file =
      std::make_unique<FdFile>(fd, direct_fd, path, backend, options.io_depth);
  if (fault) {
    CLIO_ASSIGN_OR_RETURN(uint64_t size, file->Size());
    file = io_internal::NewFaultFile(std::move(file), size);
  }
  return file;
}

}  // namespace clio
