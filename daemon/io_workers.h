// The client server's I/O workers (daemon/README.md, "Workers"): one io_context each, the
// threads running it, and the monitor that adds a thread to a worker stuck inside one task so
// that the connections queued behind the task move on. Private to the server: it speaks
// Boost.Asio, which only server*.cc see.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/asio.h"
#include "daemon/workers.h"

namespace clio::server_internal {

class IoWorkers {
 public:
  // `n` workers (at least one); a worker whose every thread has been inside one task for
  // `stuck_task_ms` gets one more thread (runtime.stuck_task_ms).
  IoWorkers(uint32_t n, uint32_t stuck_task_ms);
  ~IoWorkers();

  // The first worker's context: the acceptors, signals, the reaper and stop run there.
  asio::io_context& first() { return homes_[0]->ioc; }
  // A connection's home worker, round robin, and a strand on it: the coroutines of one
  // connection never run at once, even when the monitor has added threads to the worker.
  asio::strand<asio::io_context::executor_type> NextStrand();

  // Runs every worker (the first on the calling thread) and the monitor until the first
  // worker's context stops; then stops the others and joins every thread it started.
  void Run();

  // From the calling thread, when it runs a worker: a task running inline since `since_ns`
  // (NowNs), or 0 when it ended. What the monitor reads.
  static void MarkBusy(int64_t since_ns);

  uint32_t extra_threads() const;  // threads the monitor added, running now
  uint64_t added() const { return added_.load(); }  // ever

 private:
  struct Home {
    asio::io_context ioc;
    WorkerSlots slots;
  };
  // Runs `home` on the calling thread until it stops (or, with `helper`, until another of its
  // threads is free again).
  static void RunHome(Home& home, bool helper);
  // Every quarter of stuck_task_ms until Run ends.
  void Monitor();

  const uint32_t stuck_task_ms_;
  std::vector<std::unique_ptr<Home>> homes_;
  std::atomic<size_t> next_{0};  // round robin over homes_
  std::atomic<uint64_t> added_{0};
  Mutex monitor_mu_;
  CondVar monitor_cv_;
  bool monitor_stop_ GUARDED_BY(monitor_mu_) = false;
  // Threads added to stuck workers, each with a flag it sets when it retires; the monitor joins
  // those that have, Run() the rest.
  struct Helper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Helper> helpers_ GUARDED_BY(monitor_mu_);
};

}  // namespace clio::server_internal
