// Tiers added and removed while the CTE runs (AddTier, RemoveTier, the recorded specs that
// bring added tiers back after a restart), and ranking by perf_metrics. Real file and shm tiers
// in a temp dir, real RocksDB; assertions on LocateBlob, contents and errors, never on time.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "placement/cte.h"
#include "common/codec.h"
#include "placement/cte_pool.h"
#include "placement/test_util.h"
#include "daemon/config.h"
#include "storage/bdev_pool.h"
#include "storage/kv.h"
#include "storage/objstore/object_store.h"

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
    Status s = AddRecordedTiers(OpenKv(), "test.yaml", nullptr, &c);
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
  REQUIRE(AddRecordedTiers(f.OpenKv(), "test.yaml", nullptr, &c).ok());
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

TEST_CASE("TierStates: what placement does with each tier, and whether the config opened it") {
  TierSetFixture f;
  REQUIRE(f.Add(f.FileKeys("fast", "0.8")).ok());
  for (uint64_t b = 0; b < 4; ++b) REQUIRE(f.cte->PutBlob(3, b, 0, Random(MiB / 2, 20 + b)).ok());
  auto state = [&](const std::string& name) {
    const uint64_t id = f.Id(name);
    const std::vector<TierState> all = f.cte->TierStates();
    REQUIRE(all.size() == f.cte->ListTiers().size());
    for (const TierState& s : all)
      if (s.tier_id == id) return s;
    FAIL("no state for tier " << name);
    return TierState{};
  };
  CHECK(state("base").condition == TierCondition::kActive);
  CHECK(state("base").from_config);
  CHECK(state("fast").condition == TierCondition::kActive);
  CHECK_FALSE(state("fast").from_config);
  CHECK(state("fast").bytes_left > 0);
  const uint64_t fast = f.Id("fast");
  REQUIRE(f.cte->SetLifespan(fast, 3).ok());
  CHECK(state("fast").condition == TierCondition::kDying);
  REQUIRE(f.cte->SetLifespan(fast, 0.5).ok());
  CHECK(state("fast").condition == TierCondition::kDead);
  REQUIRE(f.cte->SetLifespan(fast, 1000).ok());
  CHECK(state("fast").condition == TierCondition::kActive);
  REQUIRE(f.cte->Drain(fast).ok());
  CHECK(state("fast").condition == TierCondition::kDrained);
  CHECK(state("fast").bytes_left == 0);
  // The last tier cannot drain: it stays marked, holding the data, until undrained.
  REQUIRE(f.cte->Drain(f.Id("base")).code() == Code::kNoSpace);
  CHECK(state("base").condition == TierCondition::kDraining);
  CHECK(state("base").bytes_left > 0);
  REQUIRE(f.cte->Undrain(f.Id("base")).ok());
  CHECK(state("base").condition == TierCondition::kActive);
  // The recorded tier comes back after a restart still as added, not configured.
  f.Restart();
  CHECK_FALSE(state("fast").from_config);
  CHECK(state("base").from_config);

  // Over the pool's protocol, with its codec.
  CtePool pool(std::move(f.cte), f.kv.get(), 0);
  auto raw = pool.Handle(static_cast<uint32_t>(CteMethod::kTierStates), "");
  REQUIRE_MESSAGE(raw.ok(), raw.status().ToString());
  auto reply = wire::DecodeReply<cteproto::TierStatesReply>(std::move(*raw));
  REQUIRE_MESSAGE(reply.ok(), reply.status().ToString());
  REQUIRE(reply->states.size() == 2);
  CHECK(reply->states[0].from_config != reply->states[1].from_config);
  std::string bad = wire::Encode(cteproto::TierStatesReply{{TierState{1, TierCondition::kActive, 0, true}}});
  bad[4 + 8] = 9;  // u32 count, u64 id, then the condition
  CHECK(wire::DecodeReply<cteproto::TierStatesReply>(std::move(bad)).status().code() == Code::kCorruption);
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

TEST_CASE("tier pool names end in _node<N>; on object tiers the suffix lands on the key prefix") {
  CHECK(NodeTierName("/var/lib/clio/tiers/disk.dat", BdevType::kFile, 0) == "/var/lib/clio/tiers/disk.dat_node0");
  CHECK(NodeTierName("ram::cte_ram_tier1", BdevType::kRam, 7) == "ram::cte_ram_tier1_node7");
  CHECK(NodeTierName("s3://bucket/clio", BdevType::kS3, 3) == "s3://bucket/clio_node3");
  CHECK(NodeTierName("bucket/a/b/", BdevType::kS3, 0) == "bucket/a/b_node0");
  CHECK(NodeTierName("s3://bucket", BdevType::kS3, 2) == "s3://bucket/node2");
  CHECK(NodeTierName("gcs://bucket/", BdevType::kGcs, 0) == "gcs://bucket/node0");
  CHECK(NodeTierName("bucket", BdevType::kGcs, 12) == "bucket/node12");
  for (const char* p : {"s3://bucket/node2", "bucket/a/b_node0", "s3://bucket/clio_node3"})
    CHECK_MESSAGE(ParseObjectLocation(p, "s3").ok(), p);
}

TEST_CASE("a tier recorded under its bare path keeps that name; new ones get the node suffix") {
  TierSetFixture f;  // base.dat was opened under its bare name by the fixture (no naming)
  TierConfig old_tier = FileTier(f.Path("base"), 64 * MiB, 0.2);
  REQUIRE(NameTierForNode(f.kv.get(), 0, &old_tier).ok());
  CHECK(old_tier.bdev.name == f.Path("base"));
  TierConfig new_tier = FileTier(f.Path("fresh"), 64 * MiB, 0.2);
  REQUIRE(NameTierForNode(f.kv.get(), 4, &new_tier).ok());
  CHECK(new_tier.bdev.name == f.Path("fresh") + "_node4");
}

TEST_CASE("the CTE pool adds a tier under its node name and removes it") {
  TierSetFixture f;
  CtePool pool(std::move(f.cte), f.kv.get(), 5);
  auto call = [&](CteMethod m, const std::string& payload) { return pool.Handle(static_cast<uint32_t>(m), payload); };
  auto r = call(CteMethod::kAddTier, EncodeTierSpec(f.FileKeys("pooled", "0.6")));
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  auto added = DecodeTierList(*r);
  REQUIRE(added.ok());
  REQUIRE(added->size() == 1);
  CHECK(added->front().name == f.Path("pooled") + "_node5");
  CHECK(std::filesystem::exists(f.Path("pooled") + "_node5"));
  auto specs = Cte::AddedTierSpecs(f.kv.get());
  REQUIRE(specs.ok());
  REQUIRE(specs->size() == 1);
  CHECK(specs->front().first == f.Path("pooled") + "_node5");
  // A bad key comes back as the config parser's error; nothing is added.
  auto bad = call(CteMethod::kAddTier, EncodeTierSpec({{"path", f.Path("x")}, {"capacity_limit", "huge"}}));
  CHECK(bad.status().code() == Code::kConfigError);
  CHECK(call(CteMethod::kAddTier, "garbage").status().code() == Code::kCorruption);
  CHECK(pool.cte()->ListTiers().size() == 2);

  const std::string id = Encoder().Put<uint64_t>(added->front().tier_id).Take();
  CHECK(call(CteMethod::kRemoveTier, id).status().code() == Code::kBusy);
  REQUIRE(call(CteMethod::kDrain, id).ok());
  REQUIRE(call(CteMethod::kRemoveTier, id).ok());
  CHECK(pool.cte()->ListTiers().size() == 1);
  CHECK(call(CteMethod::kRemoveTier, "x").status().code() == Code::kCorruption);
  f.cte = nullptr;
  REQUIRE(pool.Stop().ok());
}

namespace {

// The runtime's pool registry, holding real bdev pools composed "before" the CTE (in a temp
// dir of their own). Declared before the CTE fixture, so it outlives the tiers attached to it.
struct ComposedPools : PoolRegistry {
  std::string dir;
  std::vector<std::unique_ptr<Pool>> pools;
  ComposedPools() {
    std::string tmpl = "/tmp/clio_pools_XXXXXX";
    dir = mkdtemp(tmpl.data());
  }
  ~ComposedPools() override {
    pools.clear();
    std::filesystem::remove_all(dir);
  }
  BdevPool* AddFile(const std::string& name, uint32_t id) {
    BdevConfig c;
    c.name = dir + "/" + name;
    c.type = BdevType::kFile;
    c.capacity = 64 * MiB;
    c.growth_unit = 4 * MiB;
    auto b = Bdev::Open(c);
    REQUIRE_MESSAGE(b.ok(), b.status().ToString());
    auto pool = std::make_unique<BdevPool>(std::move(b).value());
    pool->SetIdentity("clio_bdev", c.name, id);
    pools.push_back(std::move(pool));
    return static_cast<BdevPool*>(pools.back().get());
  }
  Pool* FindByName(std::string_view n) override {
    for (auto& p : pools)
      if (p->name() == n) return p.get();
    return nullptr;
  }
  Pool* FindById(uint32_t id) override {
    for (auto& p : pools)
      if (p->id() == id) return p.get();
    return nullptr;
  }
  std::vector<uint32_t> PoolIds() override {
    std::vector<uint32_t> out;
    for (auto& p : pools) out.push_back(p->id());
    return out;
  }
  // As the runtime: pools made at run time without --restart do not last; uses are recorded
  // by lookups (here: counted) and given back by Release.
  std::set<uint32_t> passing;  // ids that do not come back at the next start
  std::multiset<uint32_t> released;
  bool Lasting(uint32_t id) override { return !passing.count(id); }
  void Release(uint32_t id) override { released.insert(id); }
};

}  // namespace

TEST_CASE("a storage entry with existing_pool_id attaches to a bdev pool composed earlier") {
  ComposedPools pools;
  BdevPool* bp = pools.AddFile("array.dat", 301);
  TierSetFixture f;
  const Keys keys = {{"existing_pool_id", "301.0"}, {"existing_pool_module", "clio_bdev"}, {"score", "0.9"}};
  const std::string spec = EncodeTierSpec(keys);
  auto tc = ParseTierSpec(spec, "clioctl tier add", &pools);
  REQUIRE_MESSAGE(tc.ok(), tc.status().ToString());
  CHECK(tc->attached == bp->bdev());
  CHECK(tc->bdev.name == pools.dir + "/array.dat");
  REQUIRE(NameTierForNode(f.kv.get(), 3, &*tc).ok());
  CHECK(tc->bdev.name == pools.dir + "/array.dat");  // the pool named it: no node suffix
  auto added = f.cte->AddTier(*tc, spec);
  REQUIRE_MESSAGE(added.ok(), added.status().ToString());
  CHECK(added->tier_id == bp->bdev()->tier_id());
  REQUIRE(f.cte->PutBlob(6, 0, 0, Random(MiB, 60)).ok());
  CHECK(f.Newest(6, 0) == bp->bdev()->tier_id());
  CHECK(bp->bdev()->GetStats().used >= MiB);

  // Restarted with the same pools: the recorded tier attaches again and its data is there.
  f.Stop();
  CteConfig c = f.Config();
  REQUIRE(AddRecordedTiers(f.OpenKv(), "test.yaml", &pools, &c).ok());
  REQUIRE(c.tiers.size() == 2);
  CHECK(c.tiers[1].attached == bp->bdev());
  auto opened = Cte::Open(c, f.kv.get());
  REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
  f.cte = std::move(opened).value();
  CHECK(GetBytes(f.cte.get(), 6, 0, 0, MiB) == Random(MiB, 60));
  // Another device in the pool's place is refused: the metadata recorded the old one's id.
  f.Stop();
  ComposedPools others;
  others.AddFile("array.dat", 301);
  CteConfig c2 = f.Config();
  REQUIRE(AddRecordedTiers(f.OpenKv(), "test.yaml", &others, &c2).ok());
  auto wrong = Cte::Open(c2, f.kv.get());
  REQUIRE_FALSE(wrong.ok());
  // The tier is left out, and the start refused because the index names it, saying why.
  CHECK(wrong.status().code() == Code::kCorruption);
  CHECK_MESSAGE(wrong.status().message().find("attach the pool that held this tier") != std::string::npos,
                wrong.status().ToString());
}

TEST_CASE("existing_pool_id errors name the key, the pool and what is wrong") {
  ComposedPools pools;
  pools.AddFile("array.dat", 301);
  auto parse = [&](const Keys& k, PoolRegistry* r) { return ParseTierSpec(EncodeTierSpec(k), "t", r); };
  auto err = [&](const Keys& k, PoolRegistry* r = nullptr) {
    auto x = parse(k, r);
    REQUIRE_FALSE(x.ok());
    return x.status().message();
  };
  PoolRegistry* p = &pools;
  CHECK(err({{"existing_pool_id", "301.0"}}, p).find("existing_pool_module: required") != std::string::npos);
  CHECK(err({{"existing_pool_id", "302.0"}, {"existing_pool_module", "clio_bdev"}}, p).find("no pool 302.0") !=
        std::string::npos);
  CHECK(err({{"existing_pool_id", "301.0"}, {"existing_pool_module", "clio_safe_bdev"}}, p)
            .find("is a clio_bdev pool, not clio_safe_bdev") != std::string::npos);
  CHECK(err({{"existing_pool_id", "x"}, {"existing_pool_module", "clio_bdev"}}, p).find("bad pool_id") !=
        std::string::npos);
  CHECK(err({{"existing_pool_id", "301.0"}, {"existing_pool_module", "clio_bdev"}, {"path", "/x"}}, p)
            .find("leave path out") != std::string::npos);
  CHECK(err({{"existing_pool_id", "301.0"}, {"existing_pool_module", "clio_bdev"}, {"capacity_limit", "1G"}}, p)
            .find("capacity_limit: unknown key") != std::string::npos);
  CHECK(err({{"existing_pool_id", "301.0"}, {"existing_pool_module", "clio_bdev"}}).find("compose list") !=
        std::string::npos);

  // From a config file: file and line named.
  auto cfg = ParseRuntimeConfig(
      "compose:\n"
      "  - mod_name: clio_cte_core\n"
      "    pool_name: clio_cte_core\n"
      "    pool_id: \"512.0\"\n"
      "    storage:\n"
      "      - existing_pool_id: \"303.0\"\n"
      "        existing_pool_module: clio_bdev\n",
      "c.yaml");
  REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
  auto cte = ParseCteConfig(cfg->compose[0], "c.yaml", &pools);
  REQUIRE_FALSE(cte.ok());
  CHECK_MESSAGE(cte.status().message().find("c.yaml:6: compose[0].storage[0].existing_pool_id: no pool 303.0") == 0,
                cte.status().ToString());
}

TEST_CASE("at run time a tier attaches to a pool that lasts; a refused or removed tier gives the pool back") {
  ComposedPools pools;
  pools.AddFile("before.dat", 301);
  TierSetFixture f;
  CtePool pool(std::move(f.cte), f.kv.get(), 0, &pools);
  pools.AddFile("later.dat", 302);   // made at run time with --restart: it lasts
  pools.AddFile("passing.dat", 303);  // made at run time without it
  pools.passing.insert(303);
  auto call = [&](const Keys& k) { return pool.Handle(static_cast<uint32_t>(CteMethod::kAddTier), EncodeTierSpec(k)); };
  auto passing = call({{"existing_pool_id", "303.0"}, {"existing_pool_module", "clio_bdev"}});
  REQUIRE_FALSE(passing.ok());
  CHECK_MESSAGE(passing.status().message().find("without --restart and would not come back") != std::string::npos,
                passing.status().ToString());
  CHECK(pools.released.count(303) == 1);  // the refused add's lookup is given back
  auto wrong = call({{"existing_pool_id", "302.0"}, {"existing_pool_module", "clio_safe_bdev"}});
  REQUIRE_FALSE(wrong.ok());
  CHECK(pools.released.count(302) == 1);
  auto later = call({{"existing_pool_id", "302.0"}, {"existing_pool_module", "clio_bdev"}});
  REQUIRE_MESSAGE(later.ok(), later.status().ToString());
  auto early = call({{"existing_pool_id", "301.0"}, {"existing_pool_module", "clio_bdev"}});
  REQUIRE_MESSAGE(early.ok(), early.status().ToString());
  CHECK(pool.cte()->ListTiers().size() == 3);
  // A second tier on a pool that is a tier already is refused, and the first keeps its use.
  auto twice = call({{"existing_pool_id", "302.0"}, {"existing_pool_module", "clio_bdev"}});
  REQUIRE_FALSE(twice.ok());
  CHECK(pools.released.count(302) == 1);
  // Removed (drained first), the tier gives its pool back.
  auto tiers = DecodeTierList(*later);
  REQUIRE(tiers.ok());
  const uint64_t id = tiers->at(0).tier_id;
  REQUIRE(pool.cte()->Drain(id).ok());
  Encoder rm;
  rm.Put<uint64_t>(id);
  REQUIRE(pool.Handle(static_cast<uint32_t>(CteMethod::kRemoveTier), rm.buffer()).ok());
  CHECK(pools.released.count(302) == 2);
  CHECK(pools.released.count(301) == 0);
  REQUIRE(pool.Stop().ok());
}

TEST_CASE("a run-time tier whose device is gone is left out at start when it holds nothing") {
  TierSetFixture f;
  REQUIRE(f.Add(f.FileKeys("gone", "0.1")).ok());  // lower than base: takes no writes
  REQUIRE(f.cte->PutBlob(11, 0, 0, Random(4096, 110)).ok());
  CHECK(f.Newest(11, 0) == f.Id("base"));
  f.Stop();
  std::filesystem::remove(f.Path("gone"));
  f.OpenCte();  // starts: the tier is left out with a warning, its record kept for next time
  CHECK(f.cte->ListTiers().size() == 1);
  CHECK(GetBytes(f.cte.get(), 11, 0, 0, 4096) == Random(4096, 110));
  auto specs = Cte::AddedTierSpecs(f.kv.get());
  REQUIRE(specs.ok());
  CHECK(specs->size() == 1);
}
