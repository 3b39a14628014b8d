// The runtime's worker roles (daemon/README.md, "Workers"): the I/O workers run the client
// connections and the tasks that are cheap, inline; tasks whose observed cost is high run on the
// slow class, a pool of threads that grows while saturated and retires idle extra threads; the
// monitor (in server.cc) adds a thread to an I/O worker stuck on one task, so the connections
// queued behind it move on. No Asio here: server.cc binds these to its io_contexts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"

namespace clio {

// Predicted cost of each (pool, method), learned from observed run times (an exponentially
// weighted mean). Thread safety: all methods.
class CostModel {
 public:
  explicit CostModel(uint64_t slow_us) : slow_us_(slow_us) {}
  // Whether the task is predicted to take slow_us or more (never, before it was seen once).
  bool Slow(uint32_t pool, uint32_t method);
  // Only requests that ran: the caller leaves out NotFound/NotSupported answers.
  void Observe(uint32_t pool, uint32_t method, double us);
  double Predicted(uint32_t pool, uint32_t method);

 private:
  static uint64_t Key(uint32_t pool, uint32_t method) { return (uint64_t{pool} << 32) | method; }
  const uint64_t slow_us_;
  // At most this many (pool, method) pairs are learned: clients choose them, and the table
  // must not grow at their will. Pairs past it are never predicted slow.
  static constexpr size_t kMaxEntries = 4096;
  Mutex mu_;
  std::unordered_map<uint64_t, double> ewma_us_ GUARDED_BY(mu_);
};

// A class of worker threads for slow tasks: between `min` and `max` threads. Submit() starts a
// thread when every thread is busy (the class is saturated) and the class is below `max`; a
// thread above `min` idle for `idle_retire` ends. Thread safety: all methods.
class TaskClass {
 public:
  TaskClass(uint32_t min, uint32_t max, std::chrono::milliseconds idle_retire);
  ~TaskClass();  // Stop()
  void Submit(std::function<void()> task);
  // Runs what is queued, then ends every thread (joined).
  void Stop();
  uint32_t threads() const { return threads_.load(); }
  uint64_t tasks_run() const { return tasks_run_.load(); }
  uint64_t threads_started() const { return started_.load(); }

 private:
  void Loop();
  const uint32_t min_, max_;
  const std::chrono::milliseconds idle_retire_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> queue_ GUARDED_BY(mu_);
  uint32_t idle_ GUARDED_BY(mu_) = 0;  // threads waiting for a task
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> all_ GUARDED_BY(mu_);
  std::vector<std::thread> retired_ GUARDED_BY(mu_);  // ended threads, joined by the next Submit
  std::atomic<uint32_t> threads_{0};
  std::atomic<uint64_t> tasks_run_{0}, started_{0};
};

// What the monitor reads of one I/O worker (an io_context): for each thread running it, since
// when it has been inside one task (0: between tasks; -1: slot unused). Lock-free.
struct WorkerSlots {
  static constexpr int kMaxThreads = 16;
  WorkerSlots() {
    for (auto& s : busy_since_ns) s.store(-1);
  }
  // The calling thread takes a slot (its index, -1 when all are taken) / gives it back.
  int Claim();
  void Release(int slot) { busy_since_ns[slot].store(-1); }
  // Threads running the worker now, and how many of them are inside a task since before
  // `stuck_before_ns` (all of them: the worker is stuck).
  bool Stuck(int64_t stuck_before_ns, int* running) const;
  // Threads running the worker now.
  int Running() const;
  // Whether a thread other than `slot` is running the worker and between tasks.
  bool AnotherIdle(int slot) const;
  std::atomic<int64_t> busy_since_ns[kMaxThreads];
};

int64_t NowNs();

}  // namespace clio
