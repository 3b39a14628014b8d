#include "storage/bdev_metrics.h"

#include <array>
#include <chrono>
#include <utility>

namespace clio {
namespace {

enum class Op : uint8_t { kAllocate, kFree, kWrite, kRead, kSync, kCount };
constexpr std::array<const char*, static_cast<size_t>(Op::kCount)> kOpNames = {
    "allocate", "free", "write", "read", "sync"};

constexpr const char* kOpsName = "clio_bdev_operations_total";
constexpr const char* kOpsHelp = "Device operations by op and outcome";
constexpr const char* kBytesName = "clio_bdev_bytes_total";
constexpr const char* kBytesHelp = "Bytes written, read, allocated and freed by successful operations";

class InstrumentedBdev final : public Bdev {
 public:
  InstrumentedBdev(std::unique_ptr<Bdev> inner, std::string type_label)
      : inner_(std::move(inner)),
        hold_("tier", inner_->config().name),
        labels_{{"tier", inner_->config().name},
                {"type", type_label.empty() ? std::string(BdevTypeName(inner_->config().type))
                                            : std::move(type_label)}} {
    for (size_t i = 0; i < kOpNames.size(); ++i) {
      metrics::Labels l = WithOp(static_cast<Op>(i));
      l.emplace_back("outcome", "ok");
      ok_[i] = metrics::GetCounter(kOpsName, kOpsHelp, l);
      if (static_cast<Op>(i) != Op::kSync)
        bytes_[i] = metrics::GetCounter(kBytesName, kBytesHelp, WithOp(static_cast<Op>(i)));
      latency_[i] = metrics::GetHistogram("clio_bdev_operation_seconds",
                                          "Time spent in device operations, in seconds",
                                          WithOp(static_cast<Op>(i)), metrics::LatencyBuckets());
    }
    sampler_ = metrics::SamplerRegistration([this] { return Sample(); });
  }

  Result<ExtentList> Allocate(uint64_t bytes) override {
    const auto start = Clock::now();
    Result<ExtentList> r = inner_->Allocate(bytes);
    Record(Op::kAllocate, start, r.status(), r.ok() ? TotalSize(*r) : 0);
    return r;
  }
  Status Free(const ExtentList& extents) override {
    const auto start = Clock::now();
    Status s = inner_->Free(extents);
    return Done(Op::kFree, start, std::move(s), TotalSize(extents));
  }
  Status Write(const ExtentList& extents, uint64_t offset, std::string_view data) override {
    const auto start = Clock::now();
    Status s = inner_->Write(extents, offset, data);
    return Done(Op::kWrite, start, std::move(s), data.size());
  }
  Status Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out) override {
    const auto start = Clock::now();
    Status s = inner_->Read(extents, offset, len, out);
    return Done(Op::kRead, start, std::move(s), len);
  }
  Status Sync() override {
    const auto start = Clock::now();
    return Done(Op::kSync, start, inner_->Sync(), 0);
  }
  Status Reconcile(const ExtentList& referenced) override { return inner_->Reconcile(referenced); }
  Status FlushAllocLog() override { return inner_->FlushAllocLog(); }
  BdevStats GetStats() override { return inner_->GetStats(); }
  void SetLifespan(double days) override { inner_->SetLifespan(days); }
  uint64_t tier_id() const override { return inner_->tier_id(); }
  const BdevConfig& config() const override { return inner_->config(); }
  std::string shm_name() const override { return inner_->shm_name(); }
  Result<GpuMemoryInfo> GpuMemory() const override { return inner_->GpuMemory(); }
  std::vector<metrics::Sample> SampleMetrics() override { return inner_->SampleMetrics(); }

  // The sampler goes first, so no scrape reaches a device being destroyed.
  ~InstrumentedBdev() override { sampler_ = metrics::SamplerRegistration(); }

 private:
  using Clock = std::chrono::steady_clock;

  metrics::Labels WithOp(Op op) const {
    metrics::Labels l = labels_;
    l.emplace_back("op", kOpNames[static_cast<size_t>(op)]);
    return l;
  }

  Status Done(Op op, Clock::time_point start, Status s, uint64_t bytes) {
    Record(op, start, s, bytes);
    return s;
  }

  void Record(Op op, Clock::time_point start, const Status& s, uint64_t bytes) {
    const size_t i = static_cast<size_t>(op);
    latency_[i].Observe(std::chrono::duration<double>(Clock::now() - start).count());
    if (s.ok()) {
      ok_[i].Add();
      if (bytes) bytes_[i].Add(static_cast<double>(bytes));
    } else {
      metrics::Labels l = WithOp(op);
      l.emplace_back("outcome", std::string(metrics::OutcomeLabel(s.code())));
      metrics::GetCounter(kOpsName, kOpsHelp, l).Add();  // the slow path: errors are rare
    }
  }

  std::vector<metrics::Sample> Sample() {
    const BdevStats st = inner_->GetStats();
    std::vector<metrics::Sample> out;
    auto gauge = [&](const char* name, const char* help, double v) {
      out.push_back({name, help, labels_, v, metrics::Sample::Kind::kGauge});
    };
    gauge("clio_bdev_capacity_bytes", "Device capacity in bytes", static_cast<double>(st.capacity));
    gauge("clio_bdev_used_bytes", "Bytes in allocated blocks", static_cast<double>(st.used));
    gauge("clio_bdev_remaining_bytes", "Allocatable bytes left", static_cast<double>(st.remaining));
    gauge("clio_bdev_committed_bytes", "Bytes of the device actually backed",
          static_cast<double>(st.committed));
    gauge("clio_bdev_lifespan_days", "Remaining lifespan in days (999999: healthy)", st.lifetime_days);
    gauge("clio_bdev_healthy", "1 unless the device reports itself degraded or failed",
          st.health.empty() || st.health == "ok" ? 1 : 0);
    out.push_back({"clio_bdev_info", "Device description; the value is always 1", labels_, 1,
                   metrics::Sample::Kind::kGauge});
    out.back().labels.emplace_back("persistence", std::string(PersistenceName(st.persistence)));
    out.back().labels.emplace_back("backend", st.backend);
    for (metrics::Sample& s : inner_->SampleMetrics()) {
      s.labels.insert(s.labels.begin(), labels_.begin(), labels_.end());
      out.push_back(std::move(s));
    }
    return out;
  }

  const std::unique_ptr<Bdev> inner_;
  const metrics::LabelHold hold_;  // this tier's series are exported while it lives
  const metrics::Labels labels_;
  std::array<metrics::Counter, kOpNames.size()> ok_;
  std::array<metrics::Counter, kOpNames.size()> bytes_;
  std::array<metrics::Histogram, kOpNames.size()> latency_;
  metrics::SamplerRegistration sampler_;
};

}  // namespace

std::unique_ptr<Bdev> Instrument(std::unique_ptr<Bdev> inner, std::string type_label) {
  return std::make_unique<InstrumentedBdev>(std::move(inner), std::move(type_label));
}

}  // namespace clio
