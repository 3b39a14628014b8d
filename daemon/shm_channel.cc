#include "daemon/shm_channel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <utility>

namespace clio {

Result<ShmSegment> ShmSegment::Create(uint32_t capacity) {
  if (capacity < kMinShmChannelBytes || capacity > kMaxShmChannelBytes)
    return InvalidArgument("shared-memory channel of " + std::to_string(capacity) + " bytes (must be " +
                           std::to_string(kMinShmChannelBytes) + ".." + std::to_string(kMaxShmChannelBytes) + ")");
  ShmSegment s;
  s.fd_ = ::memfd_create("clio-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s.fd_ < 0) return Status::FromErrno(errno, "memfd_create for a shared-memory channel");
  s.size_ = kShmDataOffset + capacity;
  if (::ftruncate(s.fd_, static_cast<off_t>(s.size_)) != 0)
    return Status::FromErrno(errno, "sizing a shared-memory channel");
  // Sealed at its size: a client that shrank the file would make the runtime's next access of
  // the mapping a SIGBUS.
  if (::fcntl(s.fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return Status::FromErrno(errno, "sealing a shared-memory channel");
  void* p = ::mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping a shared-memory channel");
  s.base_ = p;
  s.capacity_ = capacity;
  auto* h = new (p) ShmChannelHeader{};
  h->magic = kShmChannelMagic;
  h->version = kShmChannelVersion;
  h->capacity = capacity;
  h->state.store(static_cast<uint32_t>(ShmState::kIdle), std::memory_order_release);
  return s;
}

Result<ShmSegment> ShmSegment::Attach(int fd) {
  ShmSegment s;
  s.fd_ = fd;
  struct stat st{};
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "fstat of a shared-memory channel");
  if (st.st_size < static_cast<off_t>(kShmDataOffset + kMinShmChannelBytes) ||
      st.st_size > static_cast<off_t>(kShmDataOffset + kMaxShmChannelBytes))
    return Corruption("shared-memory channel of " + std::to_string(st.st_size) + " bytes");
  s.size_ = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mapping a shared-memory channel");
  s.base_ = p;
  const ShmChannelHeader* h = s.header();
  if (h->magic != kShmChannelMagic || h->version != kShmChannelVersion)
    return Corruption("not a CLIO shared-memory channel of version " + std::to_string(kShmChannelVersion));
  if (h->capacity != s.size_ - kShmDataOffset) return Corruption("shared-memory channel size and header disagree");
  s.capacity_ = h->capacity;
  return s;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    this->~ShmSegment();
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    capacity_ = std::exchange(o.capacity_, 0);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (base_) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

Result<RequestHeader> TakeChannelRequest(const ShmSegment& segment, std::string* payload) {
  const ShmChannelHeader* sh = segment.header();
  if (sh->state.load(std::memory_order_acquire) != static_cast<uint32_t>(ShmState::kRequest))
    return NotFound("no request in the channel");
  const RequestHeader h = sh->request;
  CLIO_RETURN_IF_ERROR(ValidateRequestHeader(h));
  if (h.payload_len > segment.capacity())
    return Corruption("request of " + std::to_string(h.payload_len) + " bytes in a channel of " +
                      std::to_string(segment.capacity()));
  payload->assign(segment.data(), h.payload_len);
  return h;
}

bool FutexWait(std::atomic<uint32_t>* word, uint32_t expected, uint32_t timeout_ms) {
  timespec ts{static_cast<time_t>(timeout_ms / 1000), static_cast<long>(timeout_ms % 1000) * 1000000L};
  // Not FUTEX_PRIVATE_FLAG: the word is shared with another process.
  long r = ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
  return !(r != 0 && errno == ETIMEDOUT);
}

void FutexWake(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

Status SendFds(int sock, const int* fds, int n) {
  char byte = 'F';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  if (n < 1 || n > 4) return InvalidArgument("SendFds: 1..4 descriptors");
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<size_t>(n));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<size_t>(n));
  std::memcpy(CMSG_DATA(c), fds, sizeof(int) * static_cast<size_t>(n));
  while (true) {
    ssize_t r = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (r == 1) return Status::Ok();
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // A non-blocking socket with a full buffer (a client that does not read): give up
      // rather than block a worker.
      return Unavailable("the client does not read its socket");
    }
    return Status::FromErrno(errno, "sending descriptors");
  }
}

Status ReceiveFds(int sock, int* fds, int n) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  if (n < 1 || n > 4) return InvalidArgument("ReceiveFds: 1..4 descriptors");
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t r;
  do {
    r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return Unavailable("runtime closed the connection");
  if (r < 0) return Unavailable(std::string("receiving descriptors: ") + std::strerror(errno));
  int got = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int count = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + sizeof(int) * static_cast<size_t>(i), sizeof fd);
      if (got < n) fds[got++] = fd;
      else ::close(fd);
    }
  }
  if (got != n || byte != 'F') {
    for (int i = 0; i < got; ++i) ::close(fds[i]);
    return Corruption("expected " + std::to_string(n) + " descriptors from the runtime, got " + std::to_string(got));
  }
  return Status::Ok();
}

}  // namespace clio
