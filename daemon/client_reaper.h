// Clients that died while their connection lives on (a child they forked holds the socket):
// the server watches each Unix connection's pid and closes the connection once the process
// has been gone (a zombie counts as gone) for runtime.client_reap_grace_s and no request of
// it is running. A client that forks keeps its connections to itself (RuntimeClient drops
// those of another pid), so a child never uses a reaped connection.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "common/thread_annotations.h"

namespace clio {

class ClientReaper {
 public:
  explicit ClientReaper(uint32_t grace_s) : grace_(grace_s) {}
  struct Client {
    pid_t pid = 0;
    std::function<bool()> busy;   // a request of it runs now
    std::function<void()> close;  // closes its connection (called outside the reaper's lock)
  };
  // Watches connection `id` (a pid of 0 or less: nothing to watch). Thread safety: all methods.
  void Watch(uint64_t id, Client client);
  void Forget(uint64_t id);
  // One look, at `now`: closes and forgets the connections whose client has been gone for the
  // grace; how many.
  size_t Reap(std::chrono::steady_clock::time_point now);

 private:
  struct Watched {
    Client client;
    std::optional<std::chrono::steady_clock::time_point> dead_since;
  };
  const std::chrono::seconds grace_;
  Mutex mu_;
  std::map<uint64_t, Watched> watched_ GUARDED_BY(mu_);
};

}  // namespace clio
