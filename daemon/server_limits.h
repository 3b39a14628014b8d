// The client server's limits (docs/ipc.md, "Limits"): the in-flight payload budget
// (runtime.max_inflight) and connection counts per holder (a uid, an address). Private to the
// server: it speaks Boost.Asio, which only server*.cc see.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/asio.h"

namespace clio::server_internal {

// Connections per holder: at most `max` each. An empty holder is not counted (the
// administrators). Thread safety: all methods.
class HolderCounts {
 public:
  explicit HolderCounts(int max) : max_(max) {}
  // Counts one more for `holder`: false, counting nothing, when it holds `max` already.
  bool Admit(const std::string& holder);
  void Release(const std::string& holder);

 private:
  const int max_;
  Mutex mu_;
  std::map<std::string, int> counts_ GUARDED_BY(mu_);
};

// Payload bytes read and run at once. A frame is admitted whole (n is at most the frame limit,
// which the budget is never below), so waiting frames hold none of it, and in order: a frame
// that does not fit waits in a FIFO, and later frames queue behind it (a big frame is not
// starved by small ones). A waiter sleeps on its timer; Release admits from the head of the
// queue and wakes those it admitted (a cancel posted to the waiter's executor, where it runs
// only once the waiter sleeps). Thread safety: all methods.
class InflightBudget {
 public:
  explicit InflightBudget(uint64_t bytes) : bytes_(bytes) {}
  // Waits until `n` bytes fit: true; false when the wait ended otherwise (`open` says the
  // connection closed, or Stop). `*wait` holds the waiter's timer meanwhile: closing the
  // connection cancels it, so that the wait ends with it. Run on the connection's executor.
  asio::awaitable<bool> Admit(uint64_t n, std::shared_ptr<asio::steady_timer>* wait, std::function<bool()> open);
  // Gives `n` admitted bytes back and admits the waiters that fit now.
  void Release(uint64_t n);
  // The server has stopped serving: no waiter is woken any more (their contexts are going).
  void Stop();
  uint64_t inflight() const;
  uint64_t waits() const;  // frames that waited, ever

 private:
  struct Waiter {
    std::shared_ptr<asio::steady_timer> timer;
    uint64_t n = 0;
    bool admitted = false;  // under mu_
  };
  // Admits waiters from the head of the queue while they fit; returns their timers, to wake.
  std::vector<std::shared_ptr<asio::steady_timer>> AdmitWaiting() REQUIRES(mu_);
  static void Wake(const std::vector<std::shared_ptr<asio::steady_timer>>& timers);
  const uint64_t bytes_;
  mutable Mutex mu_;
  uint64_t inflight_ GUARDED_BY(mu_) = 0;
  uint64_t waits_ GUARDED_BY(mu_) = 0;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::deque<std::shared_ptr<Waiter>> queue_ GUARDED_BY(mu_);  // FIFO
};

}  // namespace clio::server_internal
