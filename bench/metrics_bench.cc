// What the metrics decorator costs (storage/bdev_metrics.h): 4 KiB and 64 KiB writes and reads
// of one ram device, bare (the transport's own object) and instrumented (as Bdev::Open returns
// it), alternated in one process so both see the same machine; then how long a scrape of 16
// instrumented devices takes. Prints each figure and the ratio instrumented / bare.
//   build-release/bench/metrics_bench [seconds per phase, default 0.5]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "storage/bdev_base.h"
#include "storage/bdev_metrics.h"

using namespace clio;
using Clock = std::chrono::steady_clock;

namespace {

BdevConfig RamConfig(const std::string& tag) {
  BdevConfig c;
  c.name = "ram::metrics_bench_" + std::to_string(getpid()) + "_" + tag;
  c.type = BdevType::kRam;
  c.capacity = 64u << 20;
  return c;
}

std::unique_ptr<Bdev> Must(Result<std::unique_ptr<Bdev>> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "metrics_bench: %s\n", r.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

// Operations per second of `write ? Write : Read` of `size` bytes for `seconds`.
double OpsPerSecond(Bdev* b, const ExtentList& e, size_t size, bool write, double seconds) {
  std::string buf(size, 'm');
  uint64_t n = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    for (int i = 0; i < 256; ++i) {
      Status s = write ? b->Write(e, 0, buf) : b->Read(e, 0, size, buf.data());
      if (!s.ok()) {
        std::fprintf(stderr, "metrics_bench: %s\n", s.ToString().c_str());
        std::exit(1);
      }
    }
    n += 256;
  }
  return static_cast<double>(n) / std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 0.5;
  auto bare = Must(OpenRamBdev(RamConfig("bare")));
  auto inst = Instrument(Must(OpenRamBdev(RamConfig("inst"))));
  const ExtentList eb = *bare->Allocate(1u << 20);
  const ExtentList ei = *inst->Allocate(1u << 20);
  std::printf("%-22s %14s %14s %8s\n", "ram device, 1 thread", "bare ops/s", "metered ops/s", "ratio");
  for (size_t size : {size_t{4096}, size_t{65536}}) {
    for (bool write : {true, false}) {
      std::vector<double> b, m;
      for (int round = 0; round < 5; ++round) {  // alternate, so drift hits both alike
        b.push_back(OpsPerSecond(bare.get(), eb, size, write, seconds / 5));
        m.push_back(OpsPerSecond(inst.get(), ei, size, write, seconds / 5));
      }
      const double mb = Median(b), mm = Median(m);
      std::printf("%-22s %14.0f %14.0f %8.2f\n",
                  ((write ? "write " : "read ") + std::to_string(size / 1024) + " KiB").c_str(), mb, mm, mm / mb);
    }
  }
  std::vector<std::unique_ptr<Bdev>> many;
  for (int i = 0; i < 16; ++i) many.push_back(Instrument(Must(OpenRamBdev(RamConfig("t" + std::to_string(i))))));
  std::vector<double> times;
  size_t bytes = 0;
  for (int i = 0; i < 21; ++i) {
    const auto start = Clock::now();
    bytes = metrics::Scrape().size();
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::printf("scrape of %zu metered devices: median %.2f ms, %zu bytes of text\n", many.size() + 1,
              Median(times), bytes);
  return 0;
}
