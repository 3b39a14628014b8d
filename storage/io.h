// The one I/O layer: every file and device access of CLIO's storage goes through IoFile.
//
// Backends: io_uring (per-thread rings) when the kernel allows it, POSIX pread/pwrite otherwise.
// Fault-injection mode (IoOptions::fault_injection, or CLIO_IO_FAULT_INJECTION=1 in the
// environment) keeps every write in memory until Sync(): a process killed in that mode loses
// exactly the writes it had not synced, which is what a power cut does to a real disk. Like
// leveldb's FaultInjectionTestEnv, this is how crash tests check the durability contract.
//
// Thread safety: IoFile methods may be called concurrently from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

enum class IoBackend { kAuto, kUring, kPosix };

struct IoOptions {
  IoBackend backend = IoBackend::kAuto;
  bool fault_injection = false;  // also enabled by CLIO_IO_FAULT_INJECTION=1
  bool create = true;            // O_CREAT
  bool exclusive = false;        // O_EXCL
  int mode = 0600;
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
  // Which backend serves this file: "io_uring", "posix", with "+fault" in fault-injection mode.
  virtual std::string_view backend_name() const = 0;
};

// Opens `path` read-write. The backend is chosen by options.backend; kAuto tries io_uring and
// falls back to POSIX when io_uring cannot be set up (old kernel, seccomp).
Result<std::unique_ptr<IoFile>> OpenIoFile(const std::string& path, const IoOptions& options);

// True when CLIO_IO_FAULT_INJECTION=1 is set in the environment.
bool FaultInjectionFromEnv();

}  // namespace clio
