#include "daemon/io_workers.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace clio::server_internal {
namespace {

// The worker slot of the calling thread, when it runs a worker.
thread_local WorkerSlots* t_slots = nullptr;
thread_local int t_slot = -1;

}  // namespace

IoWorkers::IoWorkers(uint32_t n, uint32_t stuck_task_ms) : stuck_task_ms_(stuck_task_ms) {
  for (uint32_t i = 0; i < std::max<uint32_t>(n, 1); ++i) homes_.push_back(std::make_unique<Home>());
}

IoWorkers::~IoWorkers() = default;

asio::strand<asio::io_context::executor_type> IoWorkers::NextStrand() {
  return asio::make_strand(homes_[next_.fetch_add(1) % homes_.size()]->ioc);
}

void IoWorkers::MarkBusy(int64_t since_ns) {
  if (t_slots) t_slots->busy_since_ns[t_slot].store(since_ns);
}

uint32_t IoWorkers::extra_threads() const {
  uint32_t n = 0;
  for (const auto& h : homes_) n += static_cast<uint32_t>(std::max(h->slots.Running() - 1, 0));
  return n;
}

void IoWorkers::RunHome(Home& home, bool helper) {
  const int slot = home.slots.Claim();
  if (slot < 0) return;
  t_slots = &home.slots;
  t_slot = slot;
  if (!helper) {
    home.ioc.run();
  } else {
    while (!home.ioc.stopped()) {
      home.ioc.run_one_for(std::chrono::milliseconds(100));
      if (home.slots.AnotherIdle(slot)) break;  // the stuck thread is back: retire
    }
  }
  t_slots = nullptr;
  t_slot = -1;
  home.slots.Release(slot);
}

void IoWorkers::Run() {
  // Keeps the worker contexts running while they have no connection.
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> guards;
  for (auto& h : homes_) guards.push_back(asio::make_work_guard(h->ioc));
  std::vector<std::thread> workers;
  for (size_t i = 1; i < homes_.size(); ++i) workers.emplace_back([this, i] { RunHome(*homes_[i], false); });
  std::thread monitor([this] { Monitor(); });
  RunHome(*homes_[0], false);  // returns once the first context stops
  for (auto& h : homes_) h->ioc.stop();
  for (auto& t : workers) t.join();
  {
    MutexLock l(&monitor_mu_);
    monitor_stop_ = true;
    monitor_cv_.NotifyAll();
  }
  monitor.join();
  std::vector<Helper> helpers;
  {
    MutexLock l(&monitor_mu_);
    helpers.swap(helpers_);
  }
  for (auto& h : helpers) h.thread.join();
}

void IoWorkers::Monitor() {
  const int64_t stuck_ns = int64_t{stuck_task_ms_} * 1000000;
  const auto period = std::chrono::milliseconds(std::max<uint32_t>(stuck_task_ms_ / 4, 5));
  MutexLock l(&monitor_mu_);
  while (!monitor_stop_) {
    monitor_cv_.WaitFor(&monitor_mu_, period);
    if (monitor_stop_) break;
    for (auto it = helpers_.begin(); it != helpers_.end();) {
      if (!it->done->load()) {
        ++it;
        continue;
      }
      it->thread.join();  // it has retired: only returning
      it = helpers_.erase(it);
    }
    for (size_t i = 0; i < homes_.size(); ++i) {
      int running = 0;
      if (!homes_[i]->slots.Stuck(NowNs() - stuck_ns, &running) || running >= WorkerSlots::kMaxThreads) continue;
      Home* home = homes_[i].get();
      ++added_;
      CLIO_LOG_WARN("I/O worker {} is stuck on a task for over {} ms: a thread joins it ({} running)", i,
                    stuck_task_ms_, running + 1);
      auto done = std::make_shared<std::atomic<bool>>(false);
      helpers_.push_back({std::thread([home, done] {
                            RunHome(*home, true);
                            done->store(true);
                          }),
                          done});
    }
  }
}

}  // namespace clio::server_internal
