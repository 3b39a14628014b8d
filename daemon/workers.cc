#include "daemon/workers.h"

#include "common/log.h"

namespace clio {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool CostModel::Slow(uint32_t pool, uint32_t method) { return Predicted(pool, method) >= static_cast<double>(slow_us_); }

double CostModel::Predicted(uint32_t pool, uint32_t method) {
  MutexLock l(&mu_);
  auto it = ewma_us_.find(Key(pool, method));
  return it == ewma_us_.end() ? 0 : it->second;
}

void CostModel::Observe(uint32_t pool, uint32_t method, double us) {
  MutexLock l(&mu_);
  if (ewma_us_.size() >= kMaxEntries && !ewma_us_.count(Key(pool, method))) return;
  auto [it, fresh] = ewma_us_.try_emplace(Key(pool, method), us);
  // Recent runs weigh most: a method that turns cheap (a cache warmed) comes back inline.
  if (!fresh) it->second = 0.75 * it->second + 0.25 * us;
}

TaskClass::TaskClass(uint32_t min, uint32_t max, std::chrono::milliseconds idle_retire)
    : min_(min), max_(std::max(min, max)), idle_retire_(idle_retire) {
  MutexLock l(&mu_);
  for (uint32_t i = 0; i < min_; ++i) {
    ++threads_;
    ++started_;
    all_.emplace_back([this] { Loop(); });
  }
}

TaskClass::~TaskClass() { Stop(); }

void TaskClass::Submit(std::function<void()> task) {
  MutexLock l(&mu_);
  for (auto& t : retired_) t.join();  // they hold no lock any more: only returning
  retired_.clear();
  queue_.push_back(std::move(task));
  // Saturated: more tasks waiting than threads waiting for them (a waiter already notified by
  // an earlier Submit still counts as idle until it wakes).
  if (queue_.size() > idle_ && threads_.load() < max_ && !stopping_) {
    ++threads_;
    ++started_;
    all_.emplace_back([this] { Loop(); });
  }
  cv_.NotifyOne();
}

void TaskClass::Stop() {
  std::vector<std::thread> join;
  {
    MutexLock l(&mu_);
    stopping_ = true;
    cv_.NotifyAll();
    join.swap(all_);
    for (auto& t : retired_) join.push_back(std::move(t));
    retired_.clear();
  }
  for (auto& t : join)
    if (t.joinable()) t.join();
}

void TaskClass::Loop() {
  MutexLock l(&mu_);
  while (true) {
    if (!queue_.empty()) {
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      mu_.Unlock();
      task();
      ++tasks_run_;
      mu_.Lock();
      continue;
    }
    if (stopping_) break;
    ++idle_;
    const auto deadline = std::chrono::steady_clock::now() + idle_retire_;
    while (queue_.empty() && !stopping_ && std::chrono::steady_clock::now() < deadline)
      cv_.WaitFor(&mu_, deadline - std::chrono::steady_clock::now());
    --idle_;
    if (queue_.empty() && !stopping_ && threads_.load() > min_) {
      // An idle extra thread retires: its std::thread moves to retired_, where the next
      // Submit (or Stop) joins it.
      --threads_;
      const auto me = std::this_thread::get_id();
      for (auto it = all_.begin(); it != all_.end(); ++it) {
        if (it->get_id() != me) continue;
        retired_.push_back(std::move(*it));
        all_.erase(it);
        break;
      }
      return;
    }
  }
  --threads_;
}

int WorkerSlots::Claim() {
  for (int i = 0; i < kMaxThreads; ++i) {
    int64_t unused = -1;
    if (busy_since_ns[i].compare_exchange_strong(unused, 0)) return i;
  }
  return -1;
}

bool WorkerSlots::Stuck(int64_t stuck_before_ns, int* running) const {
  int run = 0, stuck = 0;
  for (const auto& s : busy_since_ns) {
    const int64_t v = s.load();
    if (v < 0) continue;
    ++run;
    if (v > 0 && v < stuck_before_ns) ++stuck;
  }
  *running = run;
  return run > 0 && stuck == run;
}

int WorkerSlots::Running() const {
  int n = 0;
  for (const auto& s : busy_since_ns) n += s.load() >= 0;
  return n;
}

bool WorkerSlots::AnotherIdle(int slot) const {
  for (int i = 0; i < kMaxThreads; ++i)
    if (i != slot && busy_since_ns[i].load() == 0) return true;
  return false;
}

}  // namespace clio
