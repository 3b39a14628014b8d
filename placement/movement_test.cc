// Data movement between tiers: lifespan-aware placement, Drain(), access scores and the
// reorganizer. Real tiers (a shm RAM tier and file tiers in a temp dir), real RocksDB; every
// assertion is on contents, LocateBlob results and counters, never on elapsed time.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "daemon/config.h"
#include "placement/cte.h"
#include "placement/cte_pool.h"
#include "storage/kv.h"

using namespace clio;

namespace {

constexpr uint64_t MiB = 1u << 20;

// Three tiers: RAM (score 1.0), a fast file tier (0.6) and a slow file tier (0.2).
struct Options {
  uint64_t ram = 8 * MiB;
  uint64_t fast = 64 * MiB;
  uint64_t slow = 64 * MiB;
  bool with_ram = true;
};

struct MoveFixture {
  Options o;
  std::string dir;
  std::string ram_name = "ram::move_test_" + std::to_string(getpid());
  std::unique_ptr<KvStore> kv;
  std::unique_ptr<Cte> cte;

  explicit MoveFixture(Options opts = {}) : o(opts) {
    char tmpl[] = "/tmp/clio_move_XXXXXX";
    dir = mkdtemp(tmpl);
    KvOptions ko;
    ko.path = dir + "/md";
    ko.commit_interval_ms = 3600000;
    auto k = OpenRocksDbKv(ko);
    REQUIRE(k.ok());
    kv = std::move(k).value();
    auto c = Cte::Open(Config(), kv.get());
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    cte = std::move(c).value();
  }
  ~MoveFixture() {
    cte.reset();
    kv.reset();
    std::filesystem::remove_all(dir);
  }
  CteConfig Config() const {
    CteConfig c;
    c.flush_interval_ms = 3600000;  // tests flush explicitly
    TierConfig ram;
    ram.bdev.name = ram_name;
    ram.bdev.type = BdevType::kRam;
    ram.bdev.capacity = o.ram;
    ram.score = 1.0;
    auto file = [&](const char* name, uint64_t cap, double score) {
      TierConfig t;
      t.bdev.name = dir + "/" + name + ".dat";
      t.bdev.type = BdevType::kFile;
      t.bdev.capacity = cap;
      t.bdev.growth_unit = 4 * MiB;
      t.score = score;
      return t;
    };
    if (o.with_ram) c.tiers.push_back(ram);
    c.tiers.push_back(file("fast", o.fast, 0.6));
    c.tiers.push_back(file("slow", o.slow, 0.2));
    return c;
  }
  TierInfo Tier(const std::string& which) {
    for (auto& i : cte->ListTiers())
      if ((which == "ram" && i.stats.type == BdevType::kRam) ||
          i.name.find("/" + which + ".dat") != std::string::npos)
        return i;
    FAIL("no such tier " << which);
    return {};
  }
  uint64_t Id(const std::string& which) { return Tier(which).tier_id; }
  uint64_t Used(const std::string& which) { return Tier(which).stats.used; }
  std::vector<uint64_t> Where(uint64_t tag, uint64_t blob) {
    auto l = cte->LocateBlob(tag, blob);
    REQUIRE(l.ok());
    std::vector<uint64_t> out;
    for (auto& c : *l) out.push_back(c.tier_id);
    return out;
  }
  std::string Get(uint64_t tag, uint64_t blob, uint64_t off, uint64_t len) {
    std::string out(len, '?');
    REQUIRE(cte->GetBlob(tag, blob, off, len, out.data()).ok());
    return out;
  }
};

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

}  // namespace

TEST_CASE("a tier under 7 days takes no new persistent data; one at 0 days takes nothing") {
  MoveFixture f;
  // Dying file tier: direct writes and flushed copies go to the next persistent tier.
  REQUIRE(f.cte->SetLifespan(f.Id("fast"), 6.5).ok());
  CHECK(f.Tier("fast").stats.lifetime_days == 6.5);
  REQUIRE(f.cte->PutBlob(1, 0, 0, Random(MiB, 1)).ok());
  CHECK(f.Where(1, 0) == std::vector<uint64_t>{f.Id("ram")});  // RAM is volatile: still taken
  REQUIRE(f.cte->FlushAll().ok());
  auto where = f.Where(1, 0);
  CHECK(std::find(where.begin(), where.end(), f.Id("slow")) != where.end());
  CHECK(std::find(where.begin(), where.end(), f.Id("fast")) == where.end());
  CHECK(f.Used("fast") == 0);

  // A dying RAM tier (< 7 days) still takes volatile copies; at 0 days it takes nothing and a
  // write goes straight to the first healthy persistent tier.
  REQUIRE(f.cte->SetLifespan(f.Id("ram"), 3).ok());
  REQUIRE(f.cte->PutBlob(1, 1, 0, Random(MiB, 2)).ok());
  CHECK(f.Where(1, 1).at(0) == f.Id("ram"));
  REQUIRE(f.cte->SetLifespan(f.Id("ram"), 0).ok());
  const uint64_t ram_used = f.Used("ram");
  REQUIRE(f.cte->PutBlob(1, 2, 0, Random(MiB, 3)).ok());
  CHECK(f.Where(1, 2) == std::vector<uint64_t>{f.Id("slow")});
  CHECK(f.Used("ram") == ram_used);
  // A healthy lifespan again: the fast tier is preferred over the slow one.
  REQUIRE(f.cte->SetLifespan(f.Id("fast"), 999999).ok());
  REQUIRE(f.cte->PutBlob(1, 3, 0, Random(MiB, 4)).ok());
  CHECK(f.Where(1, 3) == std::vector<uint64_t>{f.Id("fast")});

  // No tier can take the bytes: NoSpace naming why.
  REQUIRE(f.cte->SetLifespan(f.Id("fast"), 0).ok());
  REQUIRE(f.cte->SetLifespan(f.Id("slow"), 2).ok());
  Status s = f.cte->PutBlob(1, 4, 0, Random(4096, 5));
  CHECK(s.code() == Code::kNoSpace);
  CHECK_MESSAGE(s.message().find("dying") != std::string::npos, s.ToString());
  CHECK(f.Where(1, 4).empty());
  // Every blob written before is intact.
  CHECK(f.Get(1, 0, 0, MiB) == Random(MiB, 1));
  CHECK(f.Get(1, 1, 0, MiB) == Random(MiB, 2));
  CHECK(f.Get(1, 2, 0, MiB) == Random(MiB, 3));
  CHECK(f.Get(1, 3, 0, MiB) == Random(MiB, 4));
}

TEST_CASE("a RAM write is refused when every persistent tier is dying: no room for its flush") {
  MoveFixture f;
  REQUIRE(f.cte->SetLifespan(f.Id("fast"), 1).ok());
  REQUIRE(f.cte->SetLifespan(f.Id("slow"), 6).ok());
  Status s = f.cte->PutBlob(2, 0, 0, Random(MiB, 6));
  CHECK(s.code() == Code::kNoSpace);
  CHECK(f.Where(2, 0).empty());
  CHECK(f.Used("ram") == 0);
  CHECK(f.cte->GetWritebackStats().reserved == 0);
}

TEST_CASE("SetLifespan refuses bad values and unknown tiers") {
  MoveFixture f;
  CHECK(f.cte->SetLifespan(f.Id("slow"), -1).code() == Code::kInvalidArgument);
  CHECK(f.cte->SetLifespan(f.Id("slow"), std::nan("")).code() == Code::kInvalidArgument);
  CHECK(f.cte->SetLifespan(f.Id("slow"), HUGE_VAL).code() == Code::kInvalidArgument);
  CHECK(f.cte->SetLifespan(12345, 10).code() == Code::kNotFound);
  CHECK(f.Tier("slow").stats.lifetime_days == 999999);
}
