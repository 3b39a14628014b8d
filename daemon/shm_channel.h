// The shared-memory client transport (docs/ipc.md, "Shared-memory channels"): one segment per
// client connection, holding one request or one response at a time, with a futex word for the
// runtime's answer and an eventfd for the client's call. The runtime makes the segment (a
// memfd: it has no name, so nothing is left in /dev/shm by a crash, and only the two processes
// can map it; sealed at its size, so a client cannot shrink it under the runtime's mapping and
// turn an access into SIGBUS) and hands its fd and the eventfd to the client over the Unix socket the channel
// belongs to (SCM_RIGHTS). That socket stays open: the runtime learns that the client is gone
// when it closes, and the client that the runtime is gone when it hangs up.
//
// Both sides treat the segment as untrusted input: every length is bounded by the capacity
// fixed at creation, and the runtime copies a request out of the segment before decoding it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "daemon/defaults.h"
#include "daemon/ipc.h"

namespace clio {

inline constexpr uint32_t kShmChannelMagic = 0x4d484343;  // "CCHM"
inline constexpr uint32_t kShmChannelVersion = 1;
// The largest data area of one channel (runtime.shm_channel_size; the default,
// kDefaultShmChannelBytes in daemon/defaults.h, fits a 1 MiB FUSE write with its arguments);
// bigger messages travel over the channel's socket.
inline constexpr uint32_t kMaxShmChannelBytes = 64u << 20;
inline constexpr uint32_t kMinShmChannelBytes = 4096;

// The futex word's states. The client moves idle -> request, the runtime request -> response,
// the client response -> idle.
enum class ShmState : uint32_t { kIdle = 0, kRequest = 1, kResponse = 2 };

// At offset 0 of the segment; the data area starts at kShmDataOffset.
struct ShmChannelHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t capacity;  // bytes of the data area
  uint32_t reserved;
  alignas(64) std::atomic<uint32_t> state;  // ShmState; the futex word
  alignas(64) RequestHeader request;        // written by the client before state = kRequest
  ResponseHeader response;                  // written by the runtime before state = kResponse
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);
inline constexpr size_t kShmDataOffset = 4096;
static_assert(sizeof(ShmChannelHeader) <= kShmDataOffset);

// A mapped channel segment. Not copyable; unmaps and closes on destruction.
class ShmSegment {
 public:
  // Makes a new memfd segment with `capacity` data bytes (runtime side).
  static Result<ShmSegment> Create(uint32_t capacity);
  // Maps a segment received from the runtime (client side); checks magic, version and that
  // the fd is as large as the capacity the header claims.
  static Result<ShmSegment> Attach(int fd);
  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ~ShmSegment();

  ShmChannelHeader* header() const { return static_cast<ShmChannelHeader*>(base_); }
  char* data() const { return static_cast<char*>(base_) + kShmDataOffset; }
  uint32_t capacity() const { return capacity_; }
  int fd() const { return fd_; }

 private:
  void* base_ = nullptr;
  size_t size_ = 0;
  uint32_t capacity_ = 0;
  int fd_ = -1;
};

// The runtime's side of a call: when the segment holds a request (state kRequest), copies its
// header and payload out (the client may write the segment at any time) and checks them:
// Corruption for a bad magic, version or a payload past the capacity or kMaxPayload. NotFound
// when the state is not kRequest (a spurious wake-up).
Result<RequestHeader> TakeChannelRequest(const ShmSegment& segment, std::string* payload);

// Waits while *word == expected, at most `timeout_ms` (futex on a shared mapping). Returns
// false on timeout; spurious returns are possible (check the word again).
bool FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint32_t timeout_ms);
// Wakes every waiter on the word.
void FutexWake(std::atomic<uint32_t>* word);

// Sends `fds` with a one-byte message over a Unix socket / receives them (SCM_RIGHTS).
Status SendFds(int sock, const int* fds, int n);
Status ReceiveFds(int sock, int* fds, int n);

}  // namespace clio
