#include "daemon/server_limits.h"

#include <algorithm>
#include <vector>

namespace clio::server_internal {

bool HolderCounts::Admit(const std::string& holder) {
  if (holder.empty()) return true;
  MutexLock l(&mu_);
  int& n = counts_[holder];
  if (n >= max_) return false;
  ++n;
  return true;
}

void HolderCounts::Release(const std::string& holder) {
  if (holder.empty()) return;
  MutexLock l(&mu_);
  auto it = counts_.find(holder);
  if (it != counts_.end() && --it->second <= 0) counts_.erase(it);
}

asio::awaitable<bool> InflightBudget::Admit(uint64_t n, std::shared_ptr<asio::steady_timer>* wait,
                                            std::function<bool()> open) {
  if (n == 0) co_return true;
  auto ex = co_await asio::this_coro::executor;
  auto waiter = std::make_shared<Waiter>();
  {
    MutexLock l(&mu_);
    if (queue_.empty() && inflight_ + n <= bytes_) {
      inflight_ += n;
      co_return true;
    }
    waiter->timer = std::make_shared<asio::steady_timer>(ex, asio::steady_timer::time_point::max());
    waiter->n = n;
    queue_.push_back(waiter);
    ++waits_;
  }
  *wait = waiter->timer;
  boost::system::error_code ec;
  bool admitted = false;
  std::vector<std::shared_ptr<asio::steady_timer>> woken;
  while (true) {
    // A plain co_await statement (g++ 12).
    co_await waiter->timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    MutexLock l(&mu_);
    if (waiter->admitted) {
      admitted = true;
      break;
    }
    if (!open() || stopped_) {
      // Its place given up, those behind it may fit now.
      std::erase(queue_, waiter);
      if (!stopped_) woken = AdmitWaiting();
      break;
    }
  }
  wait->reset();
  Wake(woken);
  co_return admitted;
}

std::vector<std::shared_ptr<asio::steady_timer>> InflightBudget::AdmitWaiting() {
  std::vector<std::shared_ptr<asio::steady_timer>> woken;
  while (!queue_.empty() && inflight_ + queue_.front()->n <= bytes_) {
    const std::shared_ptr<Waiter> w = queue_.front();
    queue_.pop_front();
    inflight_ += w->n;
    w->admitted = true;
    woken.push_back(w->timer);
  }
  return woken;
}

void InflightBudget::Wake(const std::vector<std::shared_ptr<asio::steady_timer>>& timers) {
  for (const auto& t : timers) asio::post(t->get_executor(), [t] { t->cancel(); });
}

void InflightBudget::Release(uint64_t n) {
  if (n == 0) return;
  std::vector<std::shared_ptr<asio::steady_timer>> woken;
  {
    MutexLock l(&mu_);
    inflight_ -= n;
    if (stopped_) return;  // the server's contexts are going
    woken = AdmitWaiting();
  }
  Wake(woken);
}

void InflightBudget::Stop() {
  MutexLock l(&mu_);
  stopped_ = true;
  queue_.clear();
}

uint64_t InflightBudget::inflight() const {
  MutexLock l(&mu_);
  return inflight_;
}

uint64_t InflightBudget::waits() const {
  MutexLock l(&mu_);
  return waits_;
}

}  // namespace clio::server_internal
