#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "common/metrics.h"

using namespace clio;

namespace {

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("counters and gauges are one series per name and labels, in the text format") {
  metrics::Counter a = metrics::GetCounter("t_requests_total", "Requests", {{"op", "read"}});
  metrics::Counter b = metrics::GetCounter("t_requests_total", "Requests", {{"op", "read"}});
  metrics::Counter w = metrics::GetCounter("t_requests_total", "Requests", {{"op", "write"}});
  a.Add();
  b.Add(2);
  w.Add(7);
  CHECK(a.Value() == 3);
  CHECK(b.Value() == 3);
  metrics::Gauge g = metrics::GetGauge("t_level", "Level", {});
  g.Set(10);
  g.Add(-4);
  const std::string text = metrics::Scrape();
  CHECK(Count(text, "# TYPE t_requests_total counter\n") == 1);
  CHECK(text.find("# HELP t_requests_total Requests\n") != std::string::npos);
  CHECK(text.find("t_requests_total{op=\"read\"} 3\n") != std::string::npos);
  CHECK(text.find("t_requests_total{op=\"write\"} 7\n") != std::string::npos);
  CHECK(text.find("# TYPE t_level gauge\nt_level 6\n") != std::string::npos);
  metrics::Counter none;
  none.Add();  // a default handle does nothing
  CHECK(none.Value() == 0);
}

TEST_CASE("a histogram counts observations into cumulative buckets") {
  metrics::Histogram h = metrics::GetHistogram("t_seconds", "Time", {{"op", "x"}}, metrics::LatencyBuckets());
  h.Observe(2e-6);   // in the 4 us bucket
  h.Observe(0.5);    // in the 1.048576 s bucket
  h.Observe(100);    // only +Inf
  const std::string text = metrics::Scrape();
  CHECK(text.find("t_seconds_count{op=\"x\"} 3\n") != std::string::npos);
  CHECK(text.find("t_seconds_bucket{op=\"x\",le=\"1e-06\"} 0\n") != std::string::npos);
  CHECK(text.find("t_seconds_bucket{op=\"x\",le=\"4e-06\"} 1\n") != std::string::npos);
  CHECK(text.find("t_seconds_bucket{op=\"x\",le=\"0.262144\"} 1\n") != std::string::npos);
  CHECK(text.find("t_seconds_bucket{op=\"x\",le=\"1.048576\"} 2\n") != std::string::npos);
  CHECK(text.find("t_seconds_bucket{op=\"x\",le=\"+Inf\"} 3\n") != std::string::npos);
  CHECK(metrics::LatencyBuckets().front() == doctest::Approx(1e-6));
  CHECK(metrics::LatencyBuckets().size() == 12);
}

TEST_CASE("samplers are called at each scrape, merge by name, and stop when unregistered") {
  int calls = 0;
  double level = 1;
  auto one = std::make_unique<metrics::SamplerRegistration>([&] {
    ++calls;
    return std::vector<metrics::Sample>{{"t_sampled", "Sampled", {{"dev", "a"}}, level},
                                        {"t_sampled_total", "Events", {}, 5, metrics::Sample::Kind::kCounter}};
  });
  metrics::SamplerRegistration two([] {
    return std::vector<metrics::Sample>{{"t_sampled", "Sampled", {{"dev", "b"}}, 2}};
  });
  std::string text = metrics::Scrape();
  CHECK(calls == 1);
  CHECK(Count(text, "# TYPE t_sampled gauge\n") == 1);
  CHECK(text.find("t_sampled{dev=\"a\"} 1\n") != std::string::npos);
  CHECK(text.find("t_sampled{dev=\"b\"} 2\n") != std::string::npos);
  CHECK(text.find("# TYPE t_sampled_total counter\nt_sampled_total 5\n") != std::string::npos);
  level = 9;
  text = metrics::Scrape();
  CHECK(calls == 2);
  CHECK(text.find("t_sampled{dev=\"a\"} 9\n") != std::string::npos);
  one.reset();
  text = metrics::Scrape();
  CHECK(calls == 2);
  CHECK(text.find("dev=\"a\"") == std::string::npos);
  CHECK(text.find("t_sampled{dev=\"b\"} 2\n") != std::string::npos);

  metrics::SamplerRegistration moved = std::move(two);  // the move keeps it registered
  CHECK(metrics::Scrape().find("t_sampled{dev=\"b\"} 2\n") != std::string::npos);
  moved = metrics::SamplerRegistration();
  CHECK(metrics::Scrape().find("t_sampled{") == std::string::npos);
}

TEST_CASE("a label value's series are exported while it is held, kept monotonic across holds") {
  const std::string line = "t_held_total{tier=\"ram::gone\"} ";
  metrics::Counter c;
  {
    metrics::LabelHold first("tier", "ram::gone");
    metrics::LabelHold second("tier", "ram::gone");  // the CTE's tier and its device hold it both
    c = metrics::GetCounter("t_held_total", "Held", {{"tier", "ram::gone"}});
    c.Add(5);
    CHECK(metrics::Scrape().find(line + "5\n") != std::string::npos);
    metrics::LabelHold moved = std::move(first);  // a move keeps one hold
    { metrics::LabelHold gone = std::move(second); }
    CHECK(metrics::Scrape().find(line + "5\n") != std::string::npos);
  }
  CHECK(metrics::Scrape().find(line) == std::string::npos);  // the tier is gone: so are its series
  metrics::Counter other = metrics::GetCounter("t_held_total", "Held", {{"tier", "never_held"}});
  other.Add();
  CHECK(metrics::Scrape().find("t_held_total{tier=\"never_held\"} 1\n") != std::string::npos);
  c.Add(1);  // a late increment through an old handle is safe, and stays hidden
  CHECK(metrics::Scrape().find(line) == std::string::npos);
  metrics::LabelHold again("tier", "ram::gone");
  CHECK(metrics::Scrape().find(line + "6\n") != std::string::npos);  // back, still monotonic
}

TEST_CASE("outcome labels are the status codes in snake case") {
  CHECK(metrics::OutcomeLabel(Code::kOk) == "ok");
  CHECK(metrics::OutcomeLabel(Code::kIoError) == "io_error");
  CHECK(metrics::OutcomeLabel(Code::kNoSpace) == "no_space");
  CHECK(metrics::OutcomeLabel(Code::kPermissionDenied) == "permission_denied");
  CHECK(metrics::OutcomeLabel(Code::kCount) == "unknown");
}
