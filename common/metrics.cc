#include "common/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "common/thread_annotations.h"

namespace clio::metrics {
namespace {

prometheus::Labels ToPrometheus(const Labels& labels) {
  prometheus::Labels out;
  for (const auto& [k, v] : labels) out[k] = v;
  return out;
}

// The process's registry. Never destroyed, so handles held by static objects stay valid at exit.
struct State {
  prometheus::Registry registry;
  std::mutex families_mu;
  std::map<std::string, prometheus::Family<prometheus::Counter>*, std::less<>> counters;
  std::map<std::string, prometheus::Family<prometheus::Gauge>*, std::less<>> gauges;
  std::map<std::string, prometheus::Family<prometheus::Histogram>*, std::less<>> histograms;

  // Label pairs ever held (LabelHold), with how many hold each now: 0 hides their series.
  std::mutex holds_mu;
  std::map<std::pair<std::string, std::string>, int> holds;

  std::shared_mutex samplers_mu;  // shared while a scrape calls them
  std::map<uint64_t, Sampler> samplers;
  uint64_t next_sampler = 1;
};

State& GetState() {
  static State* state = new State();
  return *state;
}

template <typename Builder, typename Map>
auto& FamilyFor(Map& map, std::string_view name, std::string_view help, Builder builder,
                prometheus::Registry& registry) {
  auto it = map.find(name);
  if (it == map.end())
    it = map.emplace(std::string(name), &builder.Name(std::string(name)).Help(std::string(help)).Register(registry)).first;
  return *it->second;
}

}  // namespace

void Counter::Add(double v) const {
  if (c_) c_->Increment(v);
}
double Counter::Value() const { return c_ ? c_->Value() : 0; }

void Gauge::Set(double v) const {
  if (g_) g_->Set(v);
}
void Gauge::Add(double v) const {
  if (g_) g_->Increment(v);
}
double Gauge::Value() const { return g_ ? g_->Value() : 0; }

void Histogram::Observe(double v) const {
  if (h_) h_->Observe(v);
}

Counter GetCounter(std::string_view name, std::string_view help, const Labels& labels) {
  State& s = GetState();
  std::lock_guard l(s.families_mu);
  auto& family = FamilyFor(s.counters, name, help, prometheus::BuildCounter(), s.registry);
  return Counter(&family.Add(ToPrometheus(labels)));
}

Gauge GetGauge(std::string_view name, std::string_view help, const Labels& labels) {
  State& s = GetState();
  std::lock_guard l(s.families_mu);
  auto& family = FamilyFor(s.gauges, name, help, prometheus::BuildGauge(), s.registry);
  return Gauge(&family.Add(ToPrometheus(labels)));
}

Histogram GetHistogram(std::string_view name, std::string_view help, const Labels& labels,
                       const std::vector<double>& buckets) {
  State& s = GetState();
  std::lock_guard l(s.families_mu);
  auto& family = FamilyFor(s.histograms, name, help, prometheus::BuildHistogram(), s.registry);
  return Histogram(&family.Add(ToPrometheus(labels), prometheus::Histogram::BucketBoundaries(buckets)));
}

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> buckets = [] {
    std::vector<double> b;
    for (double v = 1e-6; v <= 16.1; v *= 4) b.push_back(v);
    return b;
  }();
  return buckets;
}

SamplerRegistration::SamplerRegistration(Sampler sampler) {
  State& s = GetState();
  std::unique_lock l(s.samplers_mu);
  id_ = s.next_sampler++;
  s.samplers.emplace(id_, std::move(sampler));
}

SamplerRegistration::~SamplerRegistration() {
  if (id_ == 0) return;
  State& s = GetState();
  std::unique_lock l(s.samplers_mu);
  s.samplers.erase(id_);
}

SamplerRegistration& SamplerRegistration::operator=(SamplerRegistration&& o) noexcept {
  if (this != &o) {
    SamplerRegistration gone(std::move(*this));
    id_ = std::exchange(o.id_, 0);
  }
  return *this;
}

LabelHold::LabelHold(std::string label, std::string value) : key_(std::move(label), std::move(value)) {
  if (key_.first.empty()) return;
  State& s = GetState();
  std::lock_guard l(s.holds_mu);
  ++s.holds[key_];
}

LabelHold::~LabelHold() {
  if (key_.first.empty()) return;
  State& s = GetState();
  std::lock_guard l(s.holds_mu);
  --s.holds[key_];
}

LabelHold& LabelHold::operator=(LabelHold&& o) noexcept {
  if (this != &o) {
    LabelHold gone(std::move(*this));
    key_ = std::move(o.key_);
    o.key_.first.clear();
  }
  return *this;
}

std::string Scrape() {
  State& s = GetState();
  std::vector<prometheus::MetricFamily> families = s.registry.Collect();
  {
    // The series of a label value no one holds any more (a removed tier) leave the export.
    std::lock_guard l(s.holds_mu);
    bool any = false;
    for (const auto& [key, n] : s.holds) any |= n <= 0;
    if (any) {
      for (auto& f : families) {
        std::erase_if(f.metric, [&](const prometheus::ClientMetric& m) {
          for (const auto& label : m.label) {
            auto it = s.holds.find({label.name, label.value});
            if (it != s.holds.end() && it->second <= 0) return true;
          }
          return false;
        });
      }
    }
  }
  // Samples of one name from every sampler form one family.
  std::map<std::string, prometheus::MetricFamily> sampled;
  {
    std::shared_lock l(s.samplers_mu);
    for (const auto& [id, sampler] : s.samplers) {
      for (Sample& sample : sampler()) {
        auto& f = sampled[sample.name];
        if (f.name.empty()) {
          f.name = sample.name;
          f.help = sample.help;
          f.type = sample.kind == Sample::Kind::kCounter ? prometheus::MetricType::Counter
                                                         : prometheus::MetricType::Gauge;
        }
        prometheus::ClientMetric m;
        for (auto& [k, v] : sample.labels) m.label.push_back({k, v});
        std::sort(m.label.begin(), m.label.end());
        if (f.type == prometheus::MetricType::Counter) m.counter.value = sample.value;
        else m.gauge.value = sample.value;
        f.metric.push_back(std::move(m));
      }
    }
  }
  for (auto& [name, f] : sampled) families.push_back(std::move(f));
  std::sort(families.begin(), families.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return prometheus::TextSerializer().Serialize(families);
}

std::string_view OutcomeLabel(Code code) {
  static const auto table = [] {
    std::array<std::string, static_cast<size_t>(Code::kCount)> t;
    for (size_t i = 0; i < t.size(); ++i) {
      for (char c : CodeName(static_cast<Code>(i))) {
        if (std::isupper(static_cast<unsigned char>(c)) && !t[i].empty()) t[i] += '_';
        t[i] += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
    }
    return t;
  }();
  const auto i = static_cast<size_t>(code);
  return i < table.size() ? std::string_view(table[i]) : std::string_view("unknown");
}

}  // namespace clio::metrics
