// FUSE over io_uring (Linux 6.14+, module parameter fuse.enable_uring=1) for a mounted libfuse
// session. The kernel queues each request on the ring queue of the CPU that made it and hands
// it to an idle entry there; the entry's thread answers it and fetches the next request in one
// submission, where /dev/fuse takes a read and a write. Measured on the 2-core VM it is not
// yet a clear win (renames faster, small files slower; bench/README), so it is opt-in.
//
// It takes libfuse's reads and writes of /dev/fuse over (fuse_session_custom_io): a read sees
// FUSE_INIT (whether the kernel offers io_uring), the INIT reply asks for it and then starts
// the ring threads. A request from a ring is handed to libfuse as if read from /dev/fuse, and
// its reply (libfuse's writev) goes back to the ring entry. /dev/fuse keeps carrying what the
// kernel does not send through rings (FORGET, INTERRUPT) and everything when the kernel did
// not take the ring. libfuse's headers stay out of here: the session passes a callback.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace clio {

enum class FuseUringMode {
  kAuto,  // when the kernel offers it (fuse.enable_uring=1), else /dev/fuse alone
  kOn,    // required: the mount is refused when the kernel does not offer it (checked before
          // mounting); rings that fail later leave the mount on /dev/fuse, logged
  kOff,   // /dev/fuse alone
};

// "auto", "on", "off"; InvalidArgument otherwise.
Result<FuseUringMode> ParseFuseUringMode(const std::string& text);
// Ok when this kernel serves FUSE over io_uring now (loading the fuse module first, as an
// open of /dev/fuse does); otherwise NotSupported saying why and what to do (the kernel is
// too old, or the module parameter is off).
Status FuseUringAvailable();

class FuseUring {
 public:
  // Hands one request (a fuse_in_header and its arguments, contiguous) to libfuse, which
  // answers it through Writev on the same thread.
  using Process = std::function<void(const void* request, size_t size)>;

  FuseUring(int dev_fd, FuseUringMode mode, int threads_per_queue, Process process);
  ~FuseUring();  // Stop()
  FuseUring(const FuseUring&) = delete;
  FuseUring& operator=(const FuseUring&) = delete;

  // libfuse's custom I/O on /dev/fuse (the session installs trampolines).
  ssize_t Read(int fd, void* buf, size_t len);
  ssize_t Writev(int fd, struct iovec* iov, int count);

  // Ends the ring threads (their pending commands are cancelled as each ring closes); after
  // the session loop ended, when the kernel sends nothing more.
  void Stop();

  // Requests answered through the rings and through /dev/fuse.
  uint64_t ring_requests() const { return ring_requests_.load(std::memory_order_relaxed); }
  uint64_t dev_requests() const { return dev_requests_.load(std::memory_order_relaxed); }

 private:
  struct Ring;
  struct Entry;
  // Makes one ring and entry per thread (before the INIT reply asks for the ring); false
  // when a ring cannot be made.
  bool PrepareRings(size_t payload_size);
  // Starts the threads; each registers its entry (after the INIT reply).
  void LaunchRings();
  void RingLoop(Ring* ring);

  const int dev_fd_;
  const FuseUringMode mode_;
  const int threads_per_queue_;
  const Process process_;
  std::atomic<uint64_t> init_unique_{0};  // FUSE_INIT's, while its reply is pending
  std::atomic<bool> kernel_offers_{false};
  std::unique_ptr<Ring[]> rings_;
  size_t num_rings_ = 0;
  std::atomic<bool> active_{false};  // a request came through a ring: logged once
  std::atomic<bool> failed_{false};  // a fallback to /dev/fuse was logged
  std::atomic<uint64_t> ring_requests_{0};
  std::atomic<uint64_t> dev_requests_{0};
};

}  // namespace clio
