// safe-bdev benchmark: array write and read MiB/s, healthy and with one member failed, beside
// one member bdev alone and beside raw ISA-L encoding, as ratios, all in one run.
//
//   build-release/bench/safe_bdev_bench [DIR] [MiB] [k] [m] [chunk KiB]
//
// DIR (default /tmp) holds k + m member files of the same filesystem; MiB (default 256) is
// what each phase writes and reads in 1 MiB blocks, synced at the end of each write phase.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "storage/bdev.h"
#include "storage/safe/erasure.h"
#include "storage/safe/safe_bdev.h"

using namespace clio;

namespace {

constexpr uint64_t kMiB = 1 << 20;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

[[noreturn]] void Die(const std::string& what, const Status& s) {
  std::fprintf(stderr, "safe_bdev_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

std::unique_ptr<Bdev> OpenFile(const std::string& path, uint64_t capacity) {
  BdevConfig c;
  c.name = path;
  c.type = BdevType::kFile;
  c.capacity = capacity;
  c.growth_unit = 64 * kMiB;
  auto b = Bdev::Open(c);
  if (!b.ok()) Die("open " + path, b.status());
  return std::move(b).value();
}

// Writes `mib` 1 MiB blocks (then Sync), and reads them back: MiB/s of each.
struct Figures {
  double write = 0, read = 0;
};
Figures WriteRead(Bdev* b, uint64_t mib, std::vector<ExtentList>* blocks) {
  std::string buf(kMiB, '\0');
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<char>(i * 2654435761u >> 24);
  Figures f;
  auto t0 = std::chrono::steady_clock::now();
  if (blocks->empty()) {
    for (uint64_t i = 0; i < mib; ++i) {
      auto e = b->Allocate(kMiB);
      if (!e.ok()) Die("allocate", e.status());
      blocks->push_back(std::move(e).value());
    }
    t0 = std::chrono::steady_clock::now();
  }
  for (const ExtentList& e : *blocks) {
    Status s = b->Write(e, 0, buf);
    if (!s.ok()) Die("write", s);
  }
  Status s = b->Sync();
  if (!s.ok()) Die("sync", s);
  f.write = static_cast<double>(blocks->size()) / Seconds(t0);
  t0 = std::chrono::steady_clock::now();
  for (const ExtentList& e : *blocks) {
    s = b->Read(e, 0, kMiB, buf.data());
    if (!s.ok()) Die("read", s);
  }
  f.read = static_cast<double>(blocks->size()) / Seconds(t0);
  return f;
}

double EncodeMiBs(int k, int m, uint64_t chunk, uint64_t mib) {
  auto ec = ErasureCode::Make(k, m);
  if (!ec.ok()) Die("erasure code", ec.status());
  std::vector<std::string> data(k, std::string(chunk, 'x')), parity(m, std::string(chunk, '\0'));
  std::vector<const uint8_t*> dp;
  std::vector<uint8_t*> pp;
  for (auto& d : data) dp.push_back(reinterpret_cast<const uint8_t*>(d.data()));
  for (auto& p : parity) pp.push_back(reinterpret_cast<uint8_t*>(p.data()));
  const uint64_t stripes = mib * kMiB / (k * chunk);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t i = 0; i < stripes; ++i) ec->Encode(chunk, dp.data(), pp.data());
  return static_cast<double>(stripes * k * chunk) / kMiB / Seconds(t0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "/tmp";
  const uint64_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 256;
  const int k = argc > 3 ? std::atoi(argv[3]) : 3;
  const int m = argc > 4 ? std::atoi(argv[4]) : 1;
  const uint64_t chunk = (argc > 5 ? std::strtoull(argv[5], nullptr, 10) : 64) * 1024;
  const std::string work = dir + "/safe_bdev_bench." + std::to_string(::getpid());
  std::filesystem::create_directories(work);
  // Each member holds its share of the data, its parity, trailers, and room for the
  // degraded-write phase.
  const uint64_t member_capacity = (2 * mib / k + 16) * kMiB * 11 / 10;

  Figures one;
  {
    auto member = OpenFile(work + "/alone.dat", (mib + 16) * kMiB);
    std::vector<ExtentList> blocks;
    one = WriteRead(member.get(), mib, &blocks);
  }
  std::filesystem::remove(work + "/alone.dat");
  std::filesystem::remove(work + "/alone.dat.alloc_log");
  const double encode = EncodeMiBs(k, m, chunk, 4 * mib);

  std::vector<std::unique_ptr<Bdev>> devs;
  std::vector<SafeMember> members;
  for (int i = 0; i < k + m; ++i) {
    const std::string p = work + "/m" + std::to_string(i) + ".dat";
    devs.push_back(OpenFile(p, member_capacity));
    members.push_back({p, devs.back().get()});
  }
  SafeBdevConfig c;
  c.name = "safe::bench";
  c.max_failures = static_cast<uint32_t>(m);
  c.chunk_size = chunk;
  c.alloc_log = work + "/array.alloc_log";
  c.health_interval_ms = 3600000;
  Figures healthy, healthy_again, degraded, degraded_new;
  {
    auto arr = OpenSafeBdev(c, members, {});
    if (!arr.ok()) Die("open the array", arr.status());
    std::vector<ExtentList> blocks;
    healthy = WriteRead(arr->bdev.get(), mib, &blocks);
    healthy_again = WriteRead(arr->bdev.get(), mib, &blocks);  // the same blocks again
    std::ofstream(members[1].name + ".fail") << "bench";
    degraded = WriteRead(arr->bdev.get(), mib, &blocks);  // overwrite and read the same blocks
    std::vector<ExtentList> fresh;
    degraded_new = WriteRead(arr->bdev.get(), mib / 2, &fresh);
  }
  devs.clear();
  std::filesystem::remove_all(work);

  std::printf("safe-bdev %d+%d, chunk %llu KiB, %llu MiB per phase, members in %s\n", k, m,
              static_cast<unsigned long long>(chunk / 1024), static_cast<unsigned long long>(mib), dir.c_str());
  std::printf("%-40s %10s %12s %12s\n", "figure", "MiB/s", "/ member", "/ ISA-L enc");
  auto row = [&](const char* name, double v, double member) {
    std::printf("%-40s %10.0f %12.2f %12.3f\n", name, v, member > 0 ? v / member : 0, v / encode);
  };
  row("ISA-L encode (data bytes)", encode, 0);
  row("one member bdev: write + sync", one.write, one.write);
  row("one member bdev: read", one.read, one.read);
  row("array healthy: first write + sync", healthy.write, one.write);
  row("array healthy: read", healthy.read, one.read);
  row("array healthy: overwrite + sync", healthy_again.write, one.write);
  row("array healthy: read again", healthy_again.read, one.read);
  row("array 1 failed: overwrite + sync", degraded.write, one.write);
  row("array 1 failed: read (reconstructing)", degraded.read, one.read);
  row("array 1 failed: new write + sync", degraded_new.write, one.write);
  return 0;
}
