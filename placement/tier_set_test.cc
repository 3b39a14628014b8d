// Tiers added and removed while the CTE runs (AddTier, RemoveTier, the recorded specs that
// bring added tiers back after a restart), and ranking by perf_metrics. Real file and shm tiers
// in a temp dir, real RocksDB; assertions on LocateBlob, contents and errors, never on time.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "placement/cte.h"
#include "placement/cte_pool.h"
#include "placement/test_util.h"
#include "storage/kv.h"

using namespace clio;
using namespace clio::testing;

namespace {

constexpr uint64_t MiB = 1u << 20;
using Keys = std::vector<std::pair<std::string, std::string>>;

// One file tier in the config ("base", score 0.2); the tests add others at run time.
struct TierSetFixture : CteHarness {
  TierSetFixture() : CteHarness("clio_tierset") { OpenCte(); }
  CteConfig Config() const {
    CteConfig c;
    c.flush_interval_ms = 3600000;
    c.reorganize = false;
    c.tiers.push_back(FileTier(dir + "/base.dat", 64 * MiB, 0.2));
    return c;
  }
  // The config plus the tiers recorded as added at run time, as the module factory builds it.
  CteConfig Restarted() {
    CteConfig c = Config();
    Status s = AddRecordedTiers(OpenKv(), "test.yaml", &c);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    return c;
  }
  // Opens the metadata store if needed and the CTE over it, with the recorded tiers.
  void OpenCte() {
    CteConfig c = Restarted();
    auto opened = Cte::Open(c, kv.get());
    REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
    cte = std::move(opened).value();
  }
  // Stops and starts again over the same metadata.
  void Restart() {
    Stop();
    OpenCte();
  }
  std::string Path(const std::string& name) const { return dir + "/" + name + ".dat"; }
  Keys FileKeys(const std::string& name, const std::string& score) const {
    return {{"path", Path(name)}, {"bdev_type", "file"}, {"capacity_limit", "64MB"},
            {"growth_unit", "4MB"}, {"score", score}};
  }
  Result<TierInfo> Add(const Keys& keys) {
    const std::string spec = EncodeTierSpec(keys);
    CLIO_ASSIGN_OR_RETURN(TierConfig tc, ParseTierSpec(spec, "clioctl tier add"));
    return cte->AddTier(tc, spec);
  }
  std::optional<TierInfo> Find(const std::string& name) {
    for (auto& t : cte->ListTiers())
      if (t.name == Path(name) || t.name == name) return t;
    return std::nullopt;
  }
  uint64_t Id(const std::string& name) {
    auto t = Find(name);
    REQUIRE_MESSAGE(t.has_value(), "no tier " << name);
    return t->tier_id;
  }
  uint64_t Newest(uint64_t tag, uint64_t blob) {
    auto l = cte->LocateBlob(tag, blob);
    REQUIRE(l.ok());
    REQUIRE(!l->empty());
    return l->front().tier_id;
  }
};

}  // namespace

TEST_CASE("a tier added at run time takes new writes at once and comes back after a restart") {
  TierSetFixture f;
  REQUIRE(f.cte->PutBlob(1, 0, 0, Random(MiB, 1)).ok());
  CHECK(f.Newest(1, 0) == f.Id("base"));

  auto added = f.Add(f.FileKeys("fast", "0.8"));
  REQUIRE_MESSAGE(added.ok(), added.status().ToString());
  CHECK(added->score == 0.8);
  CHECK(added->stats.type == BdevType::kFile);
  // Placement order: the new tier first.
  auto tiers = f.cte->ListTiers();
  REQUIRE(tiers.size() == 2);
  CHECK(tiers[0].name == f.Path("fast"));
  REQUIRE(f.cte->PutBlob(1, 1, 0, Random(MiB, 2)).ok());
  CHECK(f.Newest(1, 1) == f.Id("fast"));
  CHECK(GetBytes(f.cte.get(), 1, 0, 0, MiB) == Random(MiB, 1));

  // A name or a device already in use is refused.
  auto again = f.Add(f.FileKeys("fast", "0.5"));
  CHECK(again.status().code() == Code::kAlreadyExists);
  const uint64_t fast_id = f.Id("fast");

  // After a restart the recorded spec brings it back under its id, with its data.
  f.Restart();
  CHECK(f.Id("fast") == fast_id);
  CHECK(f.cte->ListTiers().size() == 2);
  CHECK(GetBytes(f.cte.get(), 1, 1, 0, MiB) == Random(MiB, 2));
  CHECK(GetBytes(f.cte.get(), 1, 0, 0, MiB) == Random(MiB, 1));

  // Without the record the index names a tier the config lacks: the CTE refuses to start.
  f.Stop();
  auto bare = Cte::Open(f.Config(), f.OpenKv());
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.status().code() == Code::kCorruption);
  CHECK_MESSAGE(bare.status().message().find("not in the config") != std::string::npos, bare.status().ToString());
}

TEST_CASE("a tier the config lists itself replaces its run-time record") {
  TierSetFixture f;
  REQUIRE(f.Add(f.FileKeys("fast", "0.8")).ok());
  f.Stop();
  // The operator moved the tier into the config, with another score.
  CteConfig c = f.Config();
  c.tiers.push_back(FileTier(f.Path("fast"), 64 * MiB, 0.4));
  REQUIRE(AddRecordedTiers(f.OpenKv(), "test.yaml", &c).ok());
  CHECK(c.tiers.size() == 2);
  auto specs = Cte::AddedTierSpecs(f.kv.get());
  REQUIRE(specs.ok());
  CHECK(specs->empty());
  auto opened = Cte::Open(c, f.kv.get());
  REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
  f.cte = std::move(opened).value();
  CHECK(f.Find("fast")->score == 0.4);
}

TEST_CASE("RemoveTier refuses a tier until it is drained and empty, then forgets it for good") {
  TierSetFixture f;
  REQUIRE(f.Add(f.FileKeys("fast", "0.8")).ok());
  for (uint64_t b = 0; b < 6; ++b) REQUIRE(f.cte->PutBlob(2, b, 0, Random(MiB / 2 + b, 10 + b)).ok());
  const uint64_t fast = f.Id("fast");
  CHECK(f.Find("fast")->stats.used > 0);

  Status s = f.cte->RemoveTier(fast);
  CHECK(s.code() == Code::kBusy);
  CHECK_MESSAGE(s.message().find("drain it first") != std::string::npos, s.ToString());
  CHECK(f.cte->RemoveTier(987654321).code() == Code::kNotFound);

  REQUIRE(f.cte->Drain(fast).ok());
  CHECK(f.Find("fast")->stats.used == 0);
  s = f.cte->RemoveTier(fast);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK_FALSE(f.Find("fast").has_value());
  CHECK(f.cte->Undrain(fast).code() == Code::kNotFound);
  CHECK(f.cte->SetLifespan(fast, 3).code() == Code::kNotFound);
  for (uint64_t b = 0; b < 6; ++b) {
    CHECK(f.Newest(2, b) == f.Id("base"));
    CHECK(GetBytes(f.cte.get(), 2, b, 0, MiB / 2 + b) == Random(MiB / 2 + b, 10 + b));
  }
  // The only tier left is refused, drained or not.
  REQUIRE(f.cte->Drain(f.Id("base")).code() == Code::kNoSpace);
  s = f.cte->RemoveTier(f.Id("base"));
  CHECK(s.code() == Code::kBusy);
  REQUIRE(f.cte->Undrain(f.Id("base")).ok());

  // Gone after a restart too; its file stays where it was and can be added again, empty.
  f.Restart();
  CHECK(f.cte->ListTiers().size() == 1);
  CHECK(std::filesystem::exists(f.Path("fast")));
  auto back = f.Add(f.FileKeys("fast", "0.7"));
  REQUIRE_MESSAGE(back.ok(), back.status().ToString());
  CHECK(back->stats.used == 0);
  CHECK_FALSE(back->stats.lifetime_days < 999999);  // the old drain mark left with the tier
  REQUIRE(f.cte->PutBlob(2, 100, 0, Random(4096, 99)).ok());
  CHECK(f.Newest(2, 100) == back->tier_id);
}

TEST_CASE("the last persistent tier under a RAM tier cannot be removed") {
  TierSetFixture f;
  const std::string ram = "ram::tierset_" + std::to_string(getpid());
  REQUIRE(f.Add({{"path", ram}, {"bdev_type", "ram"}, {"capacity_limit", "8MB"}, {"score", "1"}}).ok());
  REQUIRE(f.cte->PutBlob(3, 0, 0, Random(MiB, 30)).ok());
  CHECK(f.Newest(3, 0) == f.Id(ram));
  const uint64_t base = f.Id("base");
  // Drained (it holds nothing: the blob is dirty in RAM), but its room backs that blob's flush
  // and every fsync: refused.
  REQUIRE(f.cte->Drain(base).ok());
  Status s = f.cte->RemoveTier(base);
  CHECK(s.code() == Code::kBusy);
  CHECK_MESSAGE(s.message().find("last persistent tier") != std::string::npos, s.ToString());
  REQUIRE(f.cte->Undrain(base).ok());
  // The RAM tier itself drains (its dirty copy is flushed to base) and goes.
  REQUIRE(f.cte->Drain(f.Id(ram)).ok());
  s = f.cte->RemoveTier(f.Id(ram));
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(GetBytes(f.cte.get(), 3, 0, 0, MiB) == Random(MiB, 30));
  CHECK(f.cte->GetWritebackStats().dirty.empty());
}

TEST_CASE("a device holding data the metadata has no record of is refused, not reused") {
  TierSetFixture f;
  // Another filesystem's tier, with one blob on it.
  {
    CteHarness other("clio_tierset_other");
    CteConfig c;
    c.reorganize = false;
    c.tiers.push_back(FileTier(f.Path("foreign"), 64 * MiB, 0.5));
    other.Start(c);
    REQUIRE(other.cte->PutBlob(9, 0, 0, Random(MiB, 90)).ok());
    other.Stop();
  }
  auto r = f.Add(f.FileKeys("foreign", "0.5"));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kBusy);
  CHECK_MESSAGE(r.status().message().find("no record of") != std::string::npos, r.status().ToString());
  CHECK(f.cte->ListTiers().size() == 1);
  auto specs = Cte::AddedTierSpecs(f.kv.get());
  REQUIRE(specs.ok());
  CHECK(specs->empty());
}

TEST_CASE("tiers come and go while threads write and read other blobs") {
  TierSetFixture f;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<uint64_t> rounds{0};
  auto worker = [&](uint64_t tag) {
    uint32_t gen = 0;
    while (!stop.load()) {
      ++gen;
      for (uint64_t b = 0; b < 4; ++b) {
        const std::string data = Random(64 * 1024 + b, tag * 1000 + gen * 4 + static_cast<uint32_t>(b));
        if (!f.cte->PutBlob(tag, b, 0, data).ok()) ++failures;
        std::string back(data.size(), '\0');
        if (!f.cte->GetBlob(tag, b, 0, data.size(), back.data()).ok() || back != data) ++failures;
      }
      rounds.fetch_add(1);
    }
  };
  std::thread a(worker, 10), b(worker, 11);
  for (int cycle = 0; cycle < 3; ++cycle) {
    auto t = f.Add(f.FileKeys("churn" + std::to_string(cycle), "0.9"));
    REQUIRE_MESSAGE(t.ok(), t.status().ToString());
    // Let the writers land on the new tier, then move everything off it and remove it.
    const uint64_t seen = rounds.load();
    while (rounds.load() < seen + 4) std::this_thread::yield();
    Status d = f.cte->Drain(t->tier_id);
    REQUIRE_MESSAGE(d.ok(), d.ToString());
    Status r = f.cte->RemoveTier(t->tier_id);
    REQUIRE_MESSAGE(r.ok(), r.ToString());
  }
  stop.store(true);
  a.join();
  b.join();
  CHECK(failures.load() == 0);
  CHECK(f.cte->ListTiers().size() == 1);
  for (uint64_t tag : {10, 11})
    for (uint64_t blob = 0; blob < 4; ++blob) CHECK(f.Newest(tag, blob) == f.Id("base"));
}

TEST_CASE("tiers without a score rank by perf_metrics; equal scores by write bandwidth") {
  CHECK(PerfScore(DefaultPerfMetrics(BdevType::kHbm)) > PerfScore(DefaultPerfMetrics(BdevType::kRam)));
  CHECK(PerfScore(DefaultPerfMetrics(BdevType::kRam)) > PerfScore(DefaultPerfMetrics(BdevType::kPinned)));
  CHECK(PerfScore(DefaultPerfMetrics(BdevType::kPinned)) > PerfScore(DefaultPerfMetrics(BdevType::kFile)));
  CHECK(PerfScore(DefaultPerfMetrics(BdevType::kFile)) > PerfScore(DefaultPerfMetrics(BdevType::kS3)));
  CHECK(PerfScore(PerfMetrics{}) == 0);

  TierSetFixture f;
  // Same score as base (0.2), faster by its perf_metrics: placement prefers it.
  Keys k = f.FileKeys("nvme", "0.2");
  k.push_back({"perf_metrics.write_bandwidth_mbps", "3000"});
  k.push_back({"perf_metrics.read_bandwidth_mbps", "6000"});
  REQUIRE(f.Add(k).ok());
  CHECK(f.cte->ListTiers()[0].name == f.Path("nvme"));
  REQUIRE(f.cte->PutBlob(4, 0, 0, Random(4096, 40)).ok());
  CHECK(f.Newest(4, 0) == f.Id("nvme"));
  // No score at all: from perf_metrics (5000 MB/s both ways: log10(5000)/5).
  Keys fast = {{"path", f.Path("unscored")}, {"bdev_type", "file"}, {"capacity_limit", "64MB"},
               {"growth_unit", "4MB"}, {"perf_metrics.write_bandwidth_mbps", "5000"},
               {"perf_metrics.read_bandwidth_mbps", "5000"}};
  auto t = f.Add(fast);
  REQUIRE(t.ok());
  CHECK(t->score == doctest::Approx(0.7398).epsilon(0.001));
  CHECK(f.cte->ListTiers()[0].name == f.Path("unscored"));
}

TEST_CASE("tier specs are checked by the config parser, with errors naming the key") {
  auto parse = [](const Keys& k) { return ParseTierSpec(EncodeTierSpec(k), "clioctl tier add"); };
  auto ok = parse({{"path", "/tmp/x.dat"}, {"capacity_limit", "2GB"}, {"perf_metrics.iops", "1000"}});
  REQUIRE_MESSAGE(ok.ok(), ok.status().ToString());
  CHECK(ok->bdev.capacity == 2ull << 30);
  REQUIRE(ok->bdev.perf.has_value());
  CHECK(ok->bdev.perf->iops == 1000);
  CHECK_FALSE(ok->score.has_value());

  auto bad_size = parse({{"path", "/tmp/x.dat"}, {"capacity_limit", "lots"}});
  CHECK(bad_size.status().code() == Code::kConfigError);
  CHECK_MESSAGE(bad_size.status().message().find("clioctl tier add: capacity_limit") == 0, bad_size.status().ToString());
  auto unknown = parse({{"path", "/tmp/x.dat"}, {"capcity_limit", "1G"}});
  CHECK_MESSAGE(unknown.status().message().find("capcity_limit") != std::string::npos, unknown.status().ToString());
  auto no_path = parse({{"bdev_type", "ram"}});
  CHECK_MESSAGE(no_path.status().message().find("missing path") != std::string::npos, no_path.status().ToString());
  auto score = parse({{"path", "/tmp/x.dat"}, {"score", "1.5"}});
  CHECK_MESSAGE(score.status().message().find("score") != std::string::npos, score.status().ToString());
  auto twice = parse({{"path", "/tmp/x.dat"}, {"score", "0.5"}, {"score", "0.6"}});
  CHECK_MESSAGE(twice.status().message().find("given twice") != std::string::npos, twice.status().ToString());
  auto both = parse({{"path", "/tmp/x.dat"}, {"perf_metrics", "1"}, {"perf_metrics.iops", "1"}});
  CHECK_FALSE(both.ok());
  auto empty_part = parse({{"path", "/tmp/x.dat"}, {"perf_metrics.", "1"}});
  CHECK_FALSE(empty_part.ok());
  // Not a spec at all, or one of a newer version.
  CHECK(ParseTierSpec("xyz", "t").status().code() == Code::kCorruption);
  std::string v2 = EncodeTierSpec({{"path", "/tmp/x.dat"}});
  v2[0] = 2;
  CHECK(ParseTierSpec(v2, "t").status().code() == Code::kCorruption);
}
