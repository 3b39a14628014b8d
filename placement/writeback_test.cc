// Write-back space: flush reservations and failed flushes. Real tiers (a shm RAM tier and a file tier in a temp dir), real RocksDB; every
// assertion is on counters and contents, never on elapsed time.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "placement/cte.h"
#include "placement/cte_pool.h"
#include "storage/kv.h"

using namespace clio;

namespace {

constexpr uint64_t MiB = 1u << 20;

struct Options {
  uint64_t ram = 8 * MiB;
  uint64_t file = 64 * MiB;
};

struct WbFixture {
  Options o;
  std::string dir;
  std::string ram_name = "ram::wb_test_" + std::to_string(getpid());
  std::unique_ptr<KvStore> kv;
  std::unique_ptr<Cte> cte;

  explicit WbFixture(Options opts = {}) : o(opts) {
    char tmpl[] = "/tmp/clio_wb_XXXXXX";
    dir = mkdtemp(tmpl);
    Open();
  }
  ~WbFixture() {
    std::filesystem::remove(FilePath() + ".fail");
    cte.reset();
    kv.reset();
    std::filesystem::remove_all(dir);
  }
  std::string FilePath() const { return dir + "/tier.dat"; }
  CteConfig Config() const {
    CteConfig c;
    c.flush_interval_ms = 3600000;  // the flusher runs only when a writer kicks it
    TierConfig ram;
    ram.bdev.name = ram_name;
    ram.bdev.type = BdevType::kRam;
    ram.bdev.capacity = o.ram;
    ram.score = 1.0;
    TierConfig file;
    file.bdev.name = FilePath();
    file.bdev.type = BdevType::kFile;
    file.bdev.capacity = o.file;
    file.bdev.growth_unit = 4 * MiB;
    file.score = 0.2;
    c.tiers = {ram, file};
    return c;
  }
  void Open() {
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
  void Close() {
    REQUIRE(cte->Stop().ok());
    cte.reset();
    REQUIRE(kv->Close().ok());
    kv.reset();
  }
  TierInfo Tier(BdevType t) {
    for (auto& i : cte->ListTiers())
      if (i.stats.type == t) return i;
    FAIL("no such tier");
    return {};
  }
  uint64_t RamId() { return Tier(BdevType::kRam).tier_id; }
  uint64_t FileId() { return Tier(BdevType::kFile).tier_id; }
  std::vector<CopyLocation> Locate(uint64_t tag, uint64_t blob) {
    auto l = cte->LocateBlob(tag, blob);
    REQUIRE(l.ok());
    return *l;
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

TEST_CASE("AllocationFootprint follows the allocator's block sizes") {
  CHECK(AllocationFootprint(0, 4096) == 0);
  CHECK(AllocationFootprint(100, 4096) == 4096);
  CHECK(AllocationFootprint(100, 512) == 512);
  CHECK(AllocationFootprint(300000, 4096) == 512 * 1024);
  CHECK(AllocationFootprint(MiB, 4096) == MiB);
  CHECK(AllocationFootprint(MiB + 1, 4096) == MiB + 4096);
  CHECK(AllocationFootprint(3 * MiB + 600000, 4096) == 4 * MiB);
}

TEST_CASE("a RAM write reserves its flushed copy: NoSpace at the write when the persistent tier is full") {
  Options o;
  o.file = 2 * MiB;
  WbFixture f(o);
  REQUIRE(f.cte->PutBlob(1, 0, 0, Random(MiB, 1)).ok());
  CHECK(f.cte->GetWritebackStats().reserved == MiB);
  REQUIRE(f.cte->PutBlob(1, 1, 0, Random(MiB, 2)).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 2 * MiB);
  const uint64_t ram_used = f.Tier(BdevType::kRam).stats.used;

  // RAM has room, but the file tier could not take a third flushed copy.
  Status s = f.cte->PutBlob(1, 2, 0, Random(MiB, 3));
  CHECK(s.code() == Code::kNoSpace);
  CHECK(s.message().find("persistent tiers cannot hold the flushed copy") != std::string::npos);
  // Nothing leaked: no RAM extent, no reservation, no index entry.
  CHECK(f.Tier(BdevType::kRam).stats.used == ram_used);
  CHECK(f.cte->GetWritebackStats().reserved == 2 * MiB);
  CHECK(f.Locate(1, 2).empty());
  CHECK(f.Get(1, 2, 0, 4096) == std::string(4096, '\0'));

  // The two reserved blobs do flush (this is what the reservation promised).
  REQUIRE(f.cte->FlushAll().ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);
  CHECK(f.Tier(BdevType::kFile).stats.used == 2 * MiB);
  CHECK(f.Get(1, 0, 0, MiB) == Random(MiB, 1));
  CHECK(f.Get(1, 1, 0, MiB) == Random(MiB, 2));

  // Deleting a blob makes room again once the deletion is durable.
  REQUIRE(f.cte->DelBlob(1, 0).ok());
  REQUIRE(f.kv->Sync().ok());
  REQUIRE(f.cte->PutBlob(1, 2, 0, Random(MiB, 3)).ok());
  REQUIRE(f.cte->FlushAll().ok());
  CHECK(f.Get(1, 2, 0, MiB) == Random(MiB, 3));
}

TEST_CASE("a spill to the persistent tier cannot take room reserved for a flush") {
  Options o;
  o.ram = MiB;
  o.file = 2 * MiB;
  WbFixture f(o);
  REQUIRE(f.cte->PutBlob(2, 0, 0, Random(MiB, 10)).ok());  // RAM, reserves 1 MiB of the file tier
  REQUIRE(f.cte->PutBlob(2, 1, 0, Random(MiB, 11)).ok());  // RAM full: straight to the file tier
  CHECK(f.Locate(2, 1).at(0).tier_id == f.FileId());
  // 1 MiB is still free on the file tier, but it is blob 0's.
  CHECK(f.Tier(BdevType::kFile).stats.remaining == MiB);
  CHECK(f.cte->PutBlob(2, 2, 0, Random(MiB, 12)).code() == Code::kNoSpace);
  REQUIRE(f.cte->FlushAll().ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);
  for (uint32_t b = 0; b < 2; ++b) CHECK(f.Get(2, b, 0, MiB) == Random(MiB, 10 + b));
}

TEST_CASE("reservations follow the blob: growth, overwrite, flush, delete and truncate") {
  WbFixture f;
  REQUIRE(f.cte->PutBlob(3, 0, 0, Random(300000, 20)).ok());
  // A 300000-byte copy takes one 512 KiB block on the file tier.
  CHECK(f.cte->GetWritebackStats().reserved == 512 * 1024);
  REQUIRE(f.cte->PutBlob(3, 0, 300000, Random(700000, 21)).ok());  // grows to 1000000 bytes
  CHECK(f.cte->GetWritebackStats().reserved == MiB);
  REQUIRE(f.cte->PutBlob(3, 0, 0, Random(1000, 22)).ok());  // an overwrite adds nothing
  CHECK(f.cte->GetWritebackStats().reserved == MiB);
  REQUIRE(f.cte->PutBlob(3, 1, 0, Random(MiB, 23)).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 2 * MiB);

  REQUIRE(f.cte->FlushTag(3).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);
  CHECK(f.cte->GetWritebackStats().dirty_blobs == 0);

  // Writing over the clean RAM copy makes it dirty again: it needs a new persistent copy.
  auto before = f.Locate(3, 0);
  REQUIRE(before.size() == 2);
  CHECK(before[0].tier_id == f.RamId());
  CHECK_FALSE(before[0].dirty);
  REQUIRE(f.cte->PutBlob(3, 0, 0, "x").ok());
  CHECK(f.Locate(3, 0).at(0).dirty);
  CHECK(f.cte->GetWritebackStats().reserved == MiB);
  REQUIRE(f.cte->DelBlob(3, 0).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);

  REQUIRE(f.cte->PutBlob(3, 2, 0, Random(4096, 24)).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 4096);
  REQUIRE(f.cte->TruncateBlob(3, 2, 0).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);
}

TEST_CASE("a failed flush keeps the data dirty and reserved, and it flushes once the tier recovers") {
  WbFixture f;
  std::string data = Random(MiB, 60);
  REQUIRE(f.cte->PutBlob(6, 0, 0, data).ok());
  { std::ofstream(f.FilePath() + ".fail") << "x"; }
  Status s = f.cte->FlushTag(6);
  CHECK(s.code() == Code::kIoError);
  auto l = f.Locate(6, 0);
  REQUIRE(l.size() == 1);
  CHECK(l[0].tier_id == f.RamId());
  CHECK(l[0].dirty);
  WritebackStats st = f.cte->GetWritebackStats();
  CHECK(st.dirty_blobs == 1);
  CHECK(st.reserved == MiB);
  CHECK(f.Tier(BdevType::kFile).stats.used == 0);  // the failed copy's extents were given back
  CHECK(f.Get(6, 0, 0, MiB) == data);

  std::filesystem::remove(f.FilePath() + ".fail");
  REQUIRE(f.cte->FlushTag(6).ok());
  REQUIRE(f.kv->Sync().ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);
  CHECK(f.cte->GetWritebackStats().dirty_blobs == 0);
  f.Close();
  f.Open();
  CHECK(f.Get(6, 0, 0, MiB) == data);
}
