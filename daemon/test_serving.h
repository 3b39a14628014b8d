// Tests only: a Runtime served on a thread of its own, from the moment its socket accepts
// clients until Stop() (or destruction): RequestStop, then the serving thread joined. Pools
// are the test's to stop (Runtime::StopPools) afterwards.
#pragma once

#include <atomic>
#include <thread>

#include "daemon/runtime.h"

namespace clio::testing {

class ServingThread {
 public:
  ServingThread() = default;
  explicit ServingThread(Runtime* rt) { Start(rt); }
  ~ServingThread() { Stop(); }
  void Start(Runtime* rt) {
    rt_ = rt;
    ready_ = false;
    thread_ = std::thread([this] { (void)rt_->Serve([this] { ready_ = true; }); });
    while (!ready_) std::this_thread::yield();
  }
  void Stop() {
    if (!thread_.joinable()) return;
    rt_->RequestStop();
    thread_.join();
  }
  bool serving() const { return thread_.joinable(); }

 private:
  Runtime* rt_ = nullptr;
  std::atomic<bool> ready_{false};
  std::thread thread_;
};

}  // namespace clio::testing
