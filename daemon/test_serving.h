// Tests only: a Runtime served on a thread of its own, from the moment its socket accepts
// clients until Stop() (or destruction): RequestStop, then the serving thread joined. Pools
// are the test's to stop (Runtime::StopPools) afterwards.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>

#include "daemon/runtime.h"

namespace clio::testing {

// A module factory making a new P (constructed from `args`) for each compose entry: test pools
// that read no keys.
template <typename P, typename... Args>
ModuleFactory Makes(Args... args) {
  return [=](const ComposeEntry&, const std::string&, PoolRegistry&) -> Result<std::unique_ptr<Pool>> {
    return std::unique_ptr<Pool>(new P(args...));
  };
}

class ServingThread {
 public:
  ServingThread() = default;
  explicit ServingThread(Runtime* rt) { Start(rt); }
  ~ServingThread() { Stop(); }
  void Start(Runtime* rt) {
    rt_ = rt;
    ready_ = false;
    failed_ = false;
    thread_ = std::thread([this] {
      Status s = rt_->Serve([this] { ready_ = true; });
      if (!s.ok() && !ready_) {
        failure_ = s.ToString();
        failed_ = true;
      }
    });
    while (!ready_ && !failed_) std::this_thread::yield();
    if (failed_) {
      thread_.join();
      throw std::runtime_error("the runtime did not start serving: " + failure_);
    }
  }
  void Stop() {
    if (!thread_.joinable()) return;
    rt_->RequestStop();
    thread_.join();
  }
  bool serving() const { return thread_.joinable(); }

 private:
  Runtime* rt_ = nullptr;
  std::atomic<bool> ready_{false}, failed_{false};
  std::string failure_;  // written before failed_ is set
  std::thread thread_;
};

// A loopback TCP port nothing listens on now (bound to 0, read, closed).
inline uint32_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("no free loopback port");
  ::close(fd);
  return ntohs(a.sin_port);
}

// A blocking TCP connection to 127.0.0.1:port.
inline int ConnectLoopback(uint32_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  return fd;
}

}  // namespace clio::testing
