// Tests only: a Runtime served on a thread of its own, from the moment its socket accepts
// clients until Stop() (or destruction): RequestStop, then the serving thread joined. Pools
// are the test's to stop (Runtime::StopPools) afterwards.
#pragma once

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

}  // namespace clio::testing
