// The one I/O layer: every file and device access of CLIO's storage goes through IoFile.
//
// Backends (IoBackend): asynchronous io_uring (one lazily created ring per thread), libaio (one
// io_context_t per thread, io_submit + io_getevents), POSIX AIO (aio_read/aio_write, waiting
// with aio_suspend), and plain synchronous pread/pwrite (kPosix). The asynchronous backends
// split a call into chunks and keep up to IoOptions::io_depth of them in flight; a call returns
// when all of them completed. kAuto takes the first that works in the order io_uring, libaio,
// POSIX AIO, and CLIO_IO_BACKEND in the environment overrides kAuto (see ParseIoBackend).
//
// Fault-injection mode (IoOptions::fault_injection, or CLIO_IO_FAULT_INJECTION=1 in the
// environment) keeps every write in memory until Sync(): a process killed in that mode loses
// exactly the writes it had not synced, which is what a power cut does to a real disk. Like
// leveldb's FaultInjectionTestEnv, this is how crash tests check the durability contract. It
// wraps any backend.
//
// Thread safety: IoFile methods may be called concurrently from many threads. A process that
// forks gets fresh per-thread rings/contexts in the child on first use.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

enum class IoBackend { kAuto, kUring, kLibaio, kPosixAio, kPosix };

// "auto", "io_uring", "libaio", "posix_aio", "posix".
std::string_view IoBackendName(IoBackend b);
// Inverse of IoBackendName. InvalidArgument naming `s` and the accepted values otherwise.
Result<IoBackend> ParseIoBackend(std::string_view s);

// Environment variable that picks the backend when IoOptions::backend is kAuto; one of the
// IoBackendName() values. An unknown value makes OpenIoFile fail with ConfigError naming it.
inline constexpr const char* kIoBackendEnv = "CLIO_IO_BACKEND";

// Smallest write that takes the O_DIRECT path (see IoOptions::direct_writes), and the
// alignment its file offset and length must have.
inline constexpr uint64_t kDirectWriteMin = 64 * 1024;
inline constexpr uint64_t kDirectAlign = 4096;

struct IoOptions {
  IoBackend backend = IoBackend::kAuto;
  bool fault_injection = false;  // also enabled by CLIO_IO_FAULT_INJECTION=1
  bool create = true;            // O_CREAT
  bool exclusive = false;        // O_EXCL
  int mode = 0600;
  // Asynchronous backends: operations in flight per call, and the size of the calling thread's
  // io_uring ring / libaio context (grown when a file asks for more). 1..65536.
  uint32_t io_depth = 32;
  // Also open an O_DIRECT descriptor where the filesystem supports it (silently skipped where
  // it does not, and in fault-injection mode). Writes of at least kDirectWriteMin bytes whose
  // offset and length are multiples of kDirectAlign are copied into an aligned buffer and
  // written through it, bypassing the page cache. Reads stay buffered; Linux invalidates the
  // cached pages a direct write covers, so they see the new bytes.
  bool direct_writes = false;
};

// Which file an open IoFile refers to (st_dev, st_ino of its descriptor).
struct FileIdentity {
  uint64_t dev = 0;
  uint64_t ino = 0;
  bool operator==(const FileIdentity&) const = default;
};

class IoFile {
 public:
  virtual ~IoFile() = default;
  // Writes all of `data` at `offset`. Short writes are retried; an error returns IoError/NoSpace
  // naming the file.
  virtual Status Write(uint64_t offset, std::string_view data) = 0;
  // Reads exactly `len` bytes at `offset` into `out`. Bytes past end of file read as zeros.
  virtual Status Read(uint64_t offset, uint64_t len, char* out) = 0;
  // Makes all completed writes durable (fdatasync).
  virtual Status Sync() = 0;
  // Reserves disk blocks for [offset, offset+len) (fallocate); NoSpace when the disk is full.
  virtual Status Allocate(uint64_t offset, uint64_t len) = 0;
  // Logical size including unsynced writes.
  virtual Result<uint64_t> Size() = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual const std::string& path() const = 0;
  // Which backend serves this file: "io_uring", "libaio", "posix_aio", "posix", with "+fault"
  // in fault-injection mode. A thread that cannot get its own io_uring ring or libaio context
  // (memlock or aio-max-nr limits) does its I/O through POSIX AIO; the name stays.
  virtual std::string_view backend_name() const = 0;
  // st_dev/st_ino of the open descriptor (not of whatever the path names now).
  virtual Result<FileIdentity> Identity() const = 0;
  // Bytes written through the O_DIRECT descriptor so far; 0 when direct writes are off.
  virtual uint64_t direct_bytes_written() const { return 0; }
};

// Opens `path` read-write. The backend is options.backend, or with kAuto the one named by
// CLIO_IO_BACKEND, or else the first of io_uring, libaio, POSIX AIO that can be set up (a
// warning naming the file and the reason is logged once per process when io_uring cannot, for
// example under a container seccomp profile). A forced backend that cannot be set up is
// NotSupported naming the file. An unknown CLIO_IO_BACKEND is ConfigError naming the value;
// an io_depth out of range is InvalidArgument.
Result<std::unique_ptr<IoFile>> OpenIoFile(const std::string& path, const IoOptions& options);

// True when CLIO_IO_FAULT_INJECTION=1 is set in the environment.
bool FaultInjectionFromEnv();

}  // namespace clio
