// clio_stats: an example external module (docs/write-a-module.md). It stands in front of
// another pool (next_pool_id), counts every request by method (calls, errors, bytes in and
// out, time spent), and forwards it; it answers two methods itself: Monitor (9), its counters
// with the next pool's own Monitor under "next", and ResetStats (30). In front of a clio_bdev
// pool it is a statistics layer for that device, speaking the bdev protocol unchanged.
//
//   - mod_name: clio_stats
//     pool_name: "stats::disk"
//     pool_id: "320.0"
//     next_pool_id: "301.0"
//
// Built as libclio_stats.so; the runtime loads it from runtime.module_dir.
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "daemon/config.h"
#include "daemon/module.h"
#include "daemon/pool.h"

namespace {

constexpr uint32_t kMonitor = 9;
constexpr uint32_t kResetStats = 30;

class StatsPool final : public clio::Pool {
 public:
  explicit StatsPool(clio::Pool* next) : next_(next) {}

  clio::Result<std::string> Handle(uint32_t method, std::string_view payload) override {
    if (method == kResetStats) {
      std::lock_guard<std::mutex> l(mu_);
      by_method_.clear();
      return std::string();
    }
    if (method == kMonitor) return MonitorJson();
    // Everything else goes to the next pool, timed and counted.
    const auto t0 = std::chrono::steady_clock::now();
    clio::Result<std::string> r = next_->Handle(method, payload);
    Count(method, payload.size(), r, t0);
    return r;
  }

  // A method the next pool runs asynchronously stays asynchronous through this one: the
  // request's coroutine yields until the next pool's task ends, and is counted then.
  bool IsAsync(uint32_t method) const override {
    return method != kMonitor && method != kResetStats && next_->IsAsync(method);
  }
  void HandleAsync(uint32_t method, std::string payload, Done done) override {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t in = payload.size();
    next_->HandleAsync(method, std::move(payload), [this, method, in, t0, done](clio::Result<std::string> r) {
      Count(method, in, r, t0);
      done(std::move(r));
    });
  }

  std::string MonitorJson() const override {
    nlohmann::json methods = nlohmann::json::object();
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const auto& [m, c] : by_method_)
        methods[std::to_string(m)] = {{"calls", c.calls},
                                      {"errors", c.errors},
                                      {"bytes_in", c.bytes_in},
                                      {"bytes_out", c.bytes_out},
                                      {"mean_us", c.calls ? c.total_us / static_cast<double>(c.calls) : 0.0}};
    }
    nlohmann::json next = nlohmann::json::parse(next_->MonitorJson(), nullptr, false);
    return nlohmann::json{{"pool", name()},
                          {"module", "clio_stats"},
                          {"next_pool", next_->name()},
                          {"methods", methods},
                          {"next", next.is_discarded() ? nlohmann::json(nullptr) : next}}
        .dump();
  }

  std::string Describe() const override { return "statistics in front of " + next_->name(); }

 private:
  void Count(uint32_t method, size_t in, const clio::Result<std::string>& r, std::chrono::steady_clock::time_point t0) {
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> l(mu_);
    Counters& c = by_method_[method];
    ++c.calls;
    if (!r.ok()) ++c.errors;
    c.bytes_in += in;
    c.bytes_out += r.ok() ? r->size() : 0;
    c.total_us += us;
  }

  struct Counters {
    uint64_t calls = 0, errors = 0, bytes_in = 0, bytes_out = 0;
    double total_us = 0;
  };
  clio::Pool* const next_;  // found through the registry: the runtime keeps it alive longer
  mutable std::mutex mu_;
  std::map<uint32_t, Counters> by_method_;
};

clio::ModuleFactory MakeStatsFactory() {
  return [](const clio::ComposeEntry& entry, const std::string& file,
            clio::PoolRegistry& registry) -> clio::Result<std::unique_ptr<clio::Pool>> {
    clio::ConfigReader r = clio::ModuleKeys(entry, file);
    CLIO_ASSIGN_OR_RETURN(std::string next_id, r.String("next_pool_id", ""));
    CLIO_RETURN_IF_ERROR(r.Finish());
    if (next_id.empty()) return r.Error("next_pool_id", "required: the pool this one stands in front of");
    auto id = clio::ParsePoolId(next_id);
    if (!id.ok()) return r.Error("next_pool_id", id.status().message());
    // The lookup is recorded: the next pool is stopped after this one and cannot be destroyed
    // before it.
    clio::Pool* next = registry.FindById(id->first);
    if (!next) return r.Error("next_pool_id", "no pool " + next_id + " (it must be created before this one)");
    return std::unique_ptr<clio::Pool>(new StatsPool(next));
  };
}

}  // namespace

CLIO_DEFINE_MODULE("clio_stats", "counts the requests of the pool it stands in front of", MakeStatsFactory)
