// Metrics primitives: counters, gauges and histograms in one process-wide registry, exported in
// the Prometheus text format by Scrape() (the runtime serves it at /metrics). Built on
// prometheus-cpp core; its headers stay in metrics.cc.
//
// The one rule that keeps a single dashboard working (seeds/umbp-add-backend.txt): a metric is
// named for what it measures, never for the tier, device or module that produced it; specifics
// go in labels (tier="...", type="file", op="write", outcome="io_error").
//
// Series live as long as the process: counters stay monotonic even when the thing they count
// (a tier) is closed and opened again. What a scrape shows follows the thing's life, though:
// while a label value is held (LabelHold, by a tier from creation to destruction) its series
// are exported, and once the last holder lets go they leave Scrape() until it is held again. State that only its owner can see (how full a device is)
// is published by a sampler called at each scrape instead of being pushed on every change.
//
// Thread safety: everything here may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace clio::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

// A handle to one series; cheap to copy. Default-constructed handles do nothing.
class Counter {
 public:
  Counter() = default;
  void Add(double v = 1) const;
  double Value() const;

 private:
  friend Counter GetCounter(std::string_view, std::string_view, const Labels&);
  explicit Counter(prometheus::Counter* c) : c_(c) {}
  prometheus::Counter* c_ = nullptr;
};

class Gauge {
 public:
  Gauge() = default;
  void Set(double v) const;
  void Add(double v) const;
  double Value() const;

 private:
  friend Gauge GetGauge(std::string_view, std::string_view, const Labels&);
  explicit Gauge(prometheus::Gauge* g) : g_(g) {}
  prometheus::Gauge* g_ = nullptr;
};

class Histogram {
 public:
  Histogram() = default;
  void Observe(double v) const;

 private:
  friend Histogram GetHistogram(std::string_view, std::string_view, const Labels&,
                                const std::vector<double>&);
  explicit Histogram(prometheus::Histogram* h) : h_(h) {}
  prometheus::Histogram* h_ = nullptr;
};

// The series `name` with `labels`, created on first use. All series of one name must share a
// kind and help text. Names and label names must match Prometheus' rules; a bad one is a
// programming error and aborts.
Counter GetCounter(std::string_view name, std::string_view help, const Labels& labels);
Gauge GetGauge(std::string_view name, std::string_view help, const Labels& labels);
Histogram GetHistogram(std::string_view name, std::string_view help, const Labels& labels,
                       const std::vector<double>& buckets);

// Latency buckets in seconds: 1 us to 4.2 s, a factor of 4 apart.
const std::vector<double>& LatencyBuckets();

// A value computed when the metrics are scraped.
struct Sample {
  enum class Kind : uint8_t { kGauge, kCounter };
  std::string name;
  std::string help;
  Labels labels;
  double value = 0;
  Kind kind = Kind::kGauge;
};
using Sampler = std::function<std::vector<Sample>()>;

// Registers a sampler, called at every Scrape() until the returned registration is destroyed
// (which waits for a running call of it to finish).
class SamplerRegistration {
 public:
  SamplerRegistration() = default;
  explicit SamplerRegistration(Sampler s);
  ~SamplerRegistration();
  SamplerRegistration(SamplerRegistration&& o) noexcept : id_(std::exchange(o.id_, 0)) {}
  SamplerRegistration& operator=(SamplerRegistration&& o) noexcept;
  SamplerRegistration(const SamplerRegistration&) = delete;
  SamplerRegistration& operator=(const SamplerRegistration&) = delete;

 private:
  uint64_t id_ = 0;
};

// Holds `label`=`value` (tier="ram::fast") for as long as it lives: series with that label pair
// are exported while anyone holds it, and hidden (kept, not deleted: handles stay valid) once
// the last holder is gone. A label value that was never held is always exported.
class LabelHold {
 public:
  LabelHold() = default;
  LabelHold(std::string label, std::string value);
  ~LabelHold();
  LabelHold(LabelHold&& o) noexcept : key_(std::move(o.key_)) { o.key_.first.clear(); }
  LabelHold& operator=(LabelHold&& o) noexcept;
  LabelHold(const LabelHold&) = delete;
  LabelHold& operator=(const LabelHold&) = delete;

 private:
  std::pair<std::string, std::string> key_;  // empty label: holds nothing
};

// Every series, in the Prometheus text exposition format (version 0.0.4).
std::string Scrape();

// The label value of an outcome: the status code's name in snake case ("ok", "io_error",
// "no_space").
std::string_view OutcomeLabel(Code code);

}  // namespace clio::metrics
