// Micro-benchmarks of the bdev layer (Google Benchmark). bench/bdev_bench.sh runs this binary
// and fio on the same filesystem and prints the ratios the bdev issue asks for:
//   ram Write/Read vs memcpy of the same sizes, file Write/Read vs fio, allocator ops/s.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "storage/bdev.h"

namespace {

std::string BenchDir() {
  const char* d = std::getenv("CLIO_BENCH_DIR");  // the filesystem fio also runs on
  return d && *d ? d : "/tmp";
}

void BM_Memcpy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::string src(n, 'x'), dst(n, '\0');
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n));
}

std::unique_ptr<clio::Bdev> OpenRam(uint64_t capacity) {
  static std::atomic<int> seq{0};
  clio::BdevConfig c;
  c.name = "ram::bench_" + std::to_string(getpid()) + "_" + std::to_string(seq++);
  c.type = clio::BdevType::kRam;
  c.capacity = capacity;
  auto b = clio::Bdev::Open(c);
  if (!b.ok()) {
    std::fprintf(stderr, "bench: %s\n", b.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(b).value();
}

void BM_RamWrite(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  auto bdev = OpenRam(64u << 20);
  auto ext = bdev->Allocate(n);
  std::string src(n, 'w');
  for (auto _ : state) {
    if (!bdev->Write(*ext, 0, src).ok()) state.SkipWithError("write failed");
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

void BM_RamRead(benchmark::State& state) {
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  auto bdev = OpenRam(64u << 20);
  auto ext = bdev->Allocate(n);
  std::string buf(n, 'r');
  (void)bdev->Write(*ext, 0, buf);
  for (auto _ : state) {
    if (!bdev->Read(*ext, 0, n, buf.data()).ok()) state.SkipWithError("read failed");
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * n));
}

// Sequential 1 MiB writes over a 256 MiB region, then reads of it: what fio's
// `--rw=write/read --bs=1m --size=256m` does on the same filesystem.
constexpr uint64_t kFileRegion = 256u << 20;

struct FileFixture {
  std::string dir;
  std::unique_ptr<clio::Bdev> bdev;
  std::vector<clio::ExtentList> blocks;
  FileFixture() {
    char tmpl[4096];
    std::snprintf(tmpl, sizeof tmpl, "%s/clio_bdev_bench_XXXXXX", BenchDir().c_str());
    dir = mkdtemp(tmpl);
    clio::BdevConfig c;
    c.name = dir + "/tier.dat";
    c.capacity = kFileRegion + (64u << 20);
    c.growth_unit = 64u << 20;
    auto b = clio::Bdev::Open(c);
    if (!b.ok()) {
      std::fprintf(stderr, "bench: %s\n", b.status().ToString().c_str());
      std::exit(1);
    }
    bdev = std::move(b).value();
    for (uint64_t off = 0; off < kFileRegion; off += 1u << 20) blocks.push_back(*bdev->Allocate(1u << 20));
  }
  ~FileFixture() {
    bdev.reset();
    std::filesystem::remove_all(dir);
  }
};

void BM_FileWrite1M(benchmark::State& state) {
  FileFixture f;
  std::string src(1u << 20, 'f');
  size_t i = 0;
  for (auto _ : state) {
    if (!f.bdev->Write(f.blocks[i], 0, src).ok()) state.SkipWithError("write failed");
    if (++i == f.blocks.size()) {
      i = 0;
      (void)f.bdev->Sync();  // fio's end_fsync, once per pass
    }
  }
  (void)f.bdev->Sync();
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) << 20);
}

void BM_FileRead1M(benchmark::State& state) {
  FileFixture f;
  std::string buf(1u << 20, 'f');
  for (auto& b : f.blocks) (void)f.bdev->Write(b, 0, buf);
  (void)f.bdev->Sync();
  size_t i = 0;
  for (auto _ : state) {
    if (!f.bdev->Read(f.blocks[i], 0, buf.size(), buf.data()).ok()) state.SkipWithError("read failed");
    if (++i == f.blocks.size()) i = 0;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) << 20);
}

void BM_AllocFree(benchmark::State& state) {
  // One device shared by all threads of a multi-threaded run: that is the contention measured.
  static std::unique_ptr<clio::Bdev> shared = OpenRam(1u << 30);
  clio::Bdev* bdev = shared.get();
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {
    auto e = bdev->Allocate(n);
    if (!e.ok() || !bdev->Free(*e).ok()) state.SkipWithError("alloc/free failed");
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * 2);
}

BENCHMARK(BM_Memcpy)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK(BM_RamWrite)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK(BM_RamRead)->Arg(4096)->Arg(64 << 10)->Arg(1 << 20);
BENCHMARK(BM_FileWrite1M)->UseRealTime();
BENCHMARK(BM_FileRead1M)->UseRealTime();
BENCHMARK(BM_AllocFree)->Arg(4096)->Arg(1 << 20)->ThreadRange(1, 2);

}  // namespace

BENCHMARK_MAIN();
