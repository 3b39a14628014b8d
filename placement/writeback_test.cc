// Write-back space: flush reservations, the dirty limit, eviction of clean copies, and failed
// flushes. Real tiers (a shm RAM tier and a file tier in a temp dir), real RocksDB; every
// assertion is on counters and contents, never on elapsed time.
#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "placement/cte.h"
#include "placement/cte_pool.h"
#include "storage/kv.h"
#include "placement/test_util.h"

using namespace clio;
using namespace clio::testing;

namespace {

constexpr uint64_t MiB = 1u << 20;

struct Options {
  uint64_t ram = 8 * MiB;
  uint64_t file = 64 * MiB;
  uint64_t dirty_limit = 0;  // 0: the default (half the RAM tier)
  uint32_t dirty_wait_ms = 60000;
  uint32_t flush_interval_ms = 3600000;  // the flusher runs only when a writer kicks it
  uint32_t flush_threads = 4;
};

struct WbFixture : CteHarness {
  Options o;
  std::string ram_name = "ram::wb_test_" + std::to_string(getpid());

  explicit WbFixture(Options opts = {}) : CteHarness("clio_wb"), o(opts) { Open(); }
  ~WbFixture() {
    std::filesystem::remove(FilePath() + ".fail");
    cte.reset();
  }
  std::string FilePath() const { return dir + "/tier.dat"; }
  CteConfig Config() const {
    CteConfig c;
    c.flush_interval_ms = o.flush_interval_ms;
    c.flush_threads = o.flush_threads;
    c.reorganize = false;           // no background moves under the assertions
    c.dirty_wait_ms = o.dirty_wait_ms;
    TierConfig ram = RamTier(ram_name, o.ram, 1.0);
    ram.dirty_limit = o.dirty_limit;
    c.tiers = {ram, FileTier(FilePath(), o.file, 0.2)};
    return c;
  }
  void Open() { Start(Config()); }
  void Close() { Stop(); }
  uint64_t RamId() { return Tier(BdevType::kRam).tier_id; }
  uint64_t FileId() { return Tier(BdevType::kFile).tier_id; }
  DirtyLedger::TierCounters RamDirty() {
    for (auto& t : cte->GetWritebackStats().dirty)
      if (t.tier_id == RamId()) return t;
    FAIL("the RAM tier has no dirty counters");
    return {};
  }
  std::vector<CopyLocation> Locate(uint64_t tag, uint64_t blob) {
    auto l = cte->LocateBlob(tag, blob);
    REQUIRE(l.ok());
    return *l;
  }
  std::string Get(uint64_t tag, uint64_t blob, uint64_t off, uint64_t len) {
    return GetBytes(cte.get(), tag, blob, off, len);
  }
};

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

TEST_CASE("DirtyLedger refuses a charge past the limit and wakes a waiter on release") {
  DirtyLedger d;
  d.AddTier(7, 10 * MiB);
  CHECK(d.TryCharge(7, 1, 0, 6 * MiB));
  CHECK_FALSE(d.TryCharge(7, 1, 1, 5 * MiB));  // 11 MiB: refused, nothing changed
  CHECK(d.Counters().at(0).dirty == 6 * MiB);
  CHECK(d.TryCharge(7, 1, 1, 4 * MiB));  // exactly the limit
  uint64_t prev = 0;
  CHECK(d.TryCharge(7, 1, 0, 2 * MiB, &prev));  // shrinking is always allowed
  CHECK(prev == 6 * MiB);
  CHECK(d.TryCharge(99, 1, 0, 100 * MiB));  // not a volatile tier: not counted
  // A tier with nothing else dirty takes one blob even past the limit, so it cannot stall.
  d.ReleaseBlob(1, 0);
  d.ReleaseBlob(1, 1);
  CHECK(d.Counters().at(0).dirty == 0);
  CHECK(d.TryCharge(7, 2, 0, 12 * MiB));
  CHECK(d.Counters().at(0).peak == 12 * MiB);

  // No room and a deadline already passed: false at once, counted as a wait and a timeout.
  CHECK_FALSE(d.WaitForRoom(7, MiB, std::chrono::steady_clock::now()));
  CHECK(d.waits() == 1);
  CHECK(d.timeouts() == 1);
  // A waiter with a far deadline is woken by the release, not by the clock.
  std::atomic<int> got{-1};
  std::thread waiter([&] {
    got = d.WaitForRoom(7, MiB, std::chrono::steady_clock::now() + std::chrono::minutes(10)) ? 1 : 0;
  });
  while (d.waits() < 2) std::this_thread::yield();  // the waiter is inside WaitForRoom
  d.ReleaseBlob(2, 0);
  waiter.join();
  CHECK(got == 1);
  CHECK(d.timeouts() == 1);
}

TEST_CASE("a RAM write reserves its flushed copy: NoSpace at the write when the persistent tier is full") {
  Options o;
  o.dirty_limit = 8 * MiB;
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
  // Nothing leaked: no RAM extent, no reservation, no index entry, no dirty bytes.
  CHECK(f.Tier(BdevType::kRam).stats.used == ram_used);
  CHECK(f.cte->GetWritebackStats().reserved == 2 * MiB);
  CHECK(f.RamDirty().dirty == 2 * MiB);
  CHECK(f.Locate(1, 2).empty());
  CHECK(f.Get(1, 2, 0, 4096) == std::string(4096, '\0'));

  // The two reserved blobs do flush (this is what the reservation promised).
  REQUIRE(f.cte->FlushAll().ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);
  CHECK(f.RamDirty().dirty == 0);
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
  o.dirty_limit = MiB;
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
  CHECK(f.RamDirty().dirty == 0);

  REQUIRE(f.cte->PutBlob(3, 2, 0, Random(4096, 24)).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 4096);
  REQUIRE(f.cte->TruncateBlob(3, 2, 0).ok());
  CHECK(f.cte->GetWritebackStats().reserved == 0);
  CHECK(f.RamDirty().dirty == 0);
}

TEST_CASE("kept room (fallocate) backs a blob's writes and overwrites when others filled the tier") {
  Options o;
  o.ram = 2 * MiB;
  o.dirty_limit = 2 * MiB;
  o.file = 6 * MiB;
  WbFixture f(o);
  REQUIRE(f.cte->KeepRoom(5, 0, MiB).ok());
  REQUIRE(f.cte->KeepRoom(5, 1, MiB).ok());
  CHECK(f.cte->KeptRoom() == 4 * MiB);  // each blob: its copy, and the next one's room
  CHECK(f.cte->GetWritebackStats().reserved == 4 * MiB);
  // More than what is left unkept is refused, changing nothing.
  CHECK(f.cte->KeepRoom(6, 0, 2 * MiB).code() == Code::kNoSpace);
  CHECK(f.cte->KeptRoom() == 4 * MiB);
  // Another tag fills what is not kept: the file tier has 2 MiB unkept.
  REQUIRE(f.cte->PutBlob(6, 0, 0, Random(MiB, 30)).ok());
  REQUIRE(f.cte->PutBlob(6, 1, 0, Random(MiB, 31)).ok());
  REQUIRE(f.cte->FlushAll().ok());
  CHECK(f.cte->PutBlob(6, 2, 0, Random(MiB, 32)).code() == Code::kNoSpace);
  // The kept blobs write, flush and are overwritten and flushed again (each flush writes a
  // new copy before the old one is freed) without NoSpace.
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    REQUIRE(f.cte->PutBlob(5, 0, 0, Random(MiB, 40 + round)).ok());
    REQUIRE(f.cte->PutBlob(5, 1, 0, Random(MiB, 50 + round)).ok());
    REQUIRE(f.cte->FlushTag(5).ok());
    REQUIRE(f.kv->Sync().ok());  // the old copies' extents are freed once durable
    CHECK(f.Get(5, 0, 0, MiB) == Random(MiB, 40 + round));
    CHECK(f.Get(5, 1, 0, MiB) == Random(MiB, 50 + round));
    CHECK(f.cte->PutBlob(6, 2, 0, Random(MiB, 32)).code() == Code::kNoSpace);
  }
  // Letting the room go gives it back to others.
  REQUIRE(f.cte->DelTag(5).ok());
  REQUIRE(f.kv->Sync().ok());
  REQUIRE(f.cte->KeepRoom(5, 0, 0).ok());
  REQUIRE(f.cte->KeepRoom(5, 1, 0).ok());
  CHECK(f.cte->KeptRoom() == 0);
  REQUIRE(f.cte->PutBlob(6, 2, 0, Random(MiB, 32)).ok());
  REQUIRE(f.cte->FlushAll().ok());
}

TEST_CASE("kept room holds overwrites flushed back to back, with no commit between them") {
  Options o;
  o.ram = 2 * MiB;
  o.dirty_limit = 2 * MiB;
  o.file = 4 * MiB;
  WbFixture f(o);  // its metadata commits only when synced
  REQUIRE(f.cte->KeepRoom(7, 0, MiB).ok());
  REQUIRE(f.cte->PutBlob(8, 0, 0, Random(MiB, 60)).ok());
  REQUIRE(f.cte->PutBlob(8, 1, 0, Random(MiB, 61)).ok());
  REQUIRE(f.cte->FlushAll().ok());
  CHECK(f.cte->PutBlob(8, 2, 0, Random(MiB, 62)).code() == Code::kNoSpace);  // the rest is kept
  // Each flush's old copy is freed only once a commit makes the release durable; the next
  // flush of the same blob finds its room there after one commit.
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round);
    REQUIRE(f.cte->PutBlob(7, 0, 0, Random(MiB, 70 + round)).ok());
    Status s = f.cte->FlushTag(7);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    CHECK(f.Get(7, 0, 0, MiB) == Random(MiB, 70 + round));
  }
}

TEST_CASE("a kept blob that grows past its kept span reserves the difference") {
  Options o;
  o.ram = 2 * MiB;
  o.dirty_limit = 2 * MiB;
  o.file = 4 * MiB;
  WbFixture f(o);
  REQUIRE(f.cte->KeepRoom(9, 0, 400 * 1024).ok());  // 512 KiB a copy, 1 MiB kept
  CHECK(f.cte->KeptRoom() == MiB);
  // A 1 MiB write: the room of its next copy (512 KiB) is kept, the other 512 KiB reserved.
  REQUIRE(f.cte->PutBlob(9, 0, 0, Random(MiB, 80)).ok());
  CHECK(f.cte->GetWritebackStats().reserved == MiB + 512 * 1024);
  REQUIRE(f.cte->FlushTag(9).ok());
  REQUIRE(f.kv->Sync().ok());
  // Others fill what is not kept or reserved: 4 MiB, less the 1 MiB copy, less the kept room
  // its copy does not fill (512 KiB): 2.5 MiB, five 512 KiB blobs.
  uint64_t others = 0;
  while (f.cte->PutBlob(10, others, 0, Random(512 * 1024, 90)).ok()) {
    ++others;
    REQUIRE(f.cte->FlushAll().ok());
  }
  CHECK(others == 5);
  // The grown blob's next copy needs 1 MiB, only 512 KiB of it kept: the overwrite is refused
  // at the write, never accepted and then failed in a flush.
  CHECK(f.cte->PutBlob(9, 0, 0, Random(MiB, 81)).code() == Code::kNoSpace);
  CHECK(f.Get(9, 0, 0, MiB) == Random(MiB, 80));
}

TEST_CASE("the dirty limit holds under writers faster than the flusher") {
  Options o;
  o.ram = 16 * MiB;
  o.dirty_limit = 4 * MiB;
  WbFixture f(o);
  // The flusher's interval is an hour: only a writer at the limit makes it run.
  constexpr int kWriters = 3, kBlobs = 12;
  std::vector<std::thread> ts;
  std::atomic<int> on_ram{0}, failed{0};
  const uint64_t ram_id = f.RamId();
  for (int w = 0; w < kWriters; ++w)
    ts.emplace_back([&, w] {
      for (int b = 0; b < kBlobs; ++b) {
        Status s = f.cte->PutBlob(static_cast<uint64_t>(10 + w), static_cast<uint64_t>(b), 0,
                                  Random(MiB, static_cast<uint32_t>(w * 100 + b)));
        if (!s.ok()) {
          ++failed;
          continue;
        }
        auto loc = f.cte->LocateBlob(static_cast<uint64_t>(10 + w), static_cast<uint64_t>(b));
        if (loc.ok() && !loc->empty() && loc->front().tier_id == ram_id) ++on_ram;
      }
    });
  for (auto& t : ts) t.join();
  CHECK(failed == 0);
  WritebackStats st = f.cte->GetWritebackStats();
  DirtyLedger::TierCounters ram = f.RamDirty();
  CHECK(ram.limit == 4 * MiB);
  CHECK(ram.peak <= 4 * MiB);  // never past the limit, at any moment
  CHECK(ram.peak >= 3 * MiB);  // and it was reached: the writers did outrun the flusher
  CHECK(st.dirty_waits >= 1);  // writers blocked ...
  CHECK(st.dirty_wait_timeouts == 0);  // ... and went on once the kicked flusher made room
  // Every write landed on RAM (none was pushed to the slow tier by the limit)...
  CHECK(on_ram == kWriters * kBlobs);
  // ... and 36 MiB went through a 16 MiB RAM tier, so the flusher moved most of it.
  CHECK(f.Tier(BdevType::kFile).stats.used >= 20 * MiB);
  REQUIRE(f.cte->FlushAll().ok());
  for (int w = 0; w < kWriters; ++w)
    for (int b = 0; b < kBlobs; ++b)
      CHECK(f.Get(static_cast<uint64_t>(10 + w), static_cast<uint64_t>(b), 0, MiB) ==
            Random(MiB, static_cast<uint32_t>(w * 100 + b)));
}

TEST_CASE("the default dirty limit is half the volatile tier's capacity") {
  WbFixture f;  // 8 MiB RAM
  CHECK(f.RamDirty().limit == 4 * MiB);
}

TEST_CASE("clean copies on a full RAM tier are evicted least recently used first") {
  Options o;
  o.dirty_limit = 8 * MiB;
  o.flush_threads = 1;  // flushes in blob order, so the LRU order below is known
  WbFixture f(o);  // 8 MiB RAM
  for (uint32_t b = 0; b < 4; ++b) REQUIRE(f.cte->PutBlob(4, b, 0, Random(MiB, 40 + b)).ok());
  REQUIRE(f.cte->FlushAll().ok());  // RAM half full: the four stay as clean cached copies
  for (uint32_t b = 0; b < 4; ++b) {
    auto l = f.Locate(4, b);
    REQUIRE(l.size() == 2);
    CHECK(l[0].tier_id == f.RamId());
    CHECK_FALSE(l[0].dirty);
  }
  for (uint32_t b = 4; b < 8; ++b) REQUIRE(f.cte->PutBlob(4, b, 0, Random(MiB, 40 + b)).ok());
  CHECK(f.Tier(BdevType::kRam).stats.remaining == 0);
  // Reading blob 0 makes blob 1 the least recently used clean copy.
  CHECK(f.Get(4, 0, 0, MiB) == Random(MiB, 40));
  const uint64_t file_used = f.Tier(BdevType::kFile).stats.used;

  REQUIRE(f.cte->PutBlob(4, 8, 0, Random(MiB, 48)).ok());
  auto l8 = f.Locate(4, 8);
  REQUIRE(l8.size() == 1);
  CHECK(l8[0].tier_id == f.RamId());  // stayed on RAM instead of spilling
  CHECK(l8[0].dirty);
  CHECK(f.Tier(BdevType::kFile).stats.used == file_used);
  WritebackStats st = f.cte->GetWritebackStats();
  CHECK(st.evictions == 1);
  CHECK(st.evicted_bytes == MiB);
  auto l1 = f.Locate(4, 1);
  REQUIRE(l1.size() == 1);
  CHECK(l1[0].tier_id == f.FileId());  // the persistent copy stays and serves reads
  CHECK(f.Get(4, 1, 0, MiB) == Random(MiB, 41));
  CHECK(f.Locate(4, 0).at(0).tier_id == f.RamId());  // recently read: kept
  // Blobs 2 and 3 go next, in flush order; blob 0, read last, goes last.
  for (uint32_t b = 9; b < 11; ++b) REQUIRE(f.cte->PutBlob(4, b, 0, Random(MiB, 40 + b)).ok());
  CHECK(f.cte->GetWritebackStats().evictions == 3);
  CHECK(f.Locate(4, 0).at(0).tier_id == f.RamId());
  REQUIRE(f.cte->PutBlob(4, 11, 0, Random(MiB, 51)).ok());
  CHECK(f.Locate(4, 0).at(0).tier_id == f.FileId());
  CHECK(f.Locate(4, 11).at(0).tier_id == f.RamId());
  // Dirty copies are never evicted: with no clean copy left, a full RAM tier spills.
  REQUIRE(f.cte->PutBlob(4, 12, 0, Random(MiB, 52)).ok());
  CHECK(f.Locate(4, 12).at(0).tier_id == f.FileId());
  CHECK(f.cte->GetWritebackStats().evictions == 4);
  REQUIRE(f.cte->FlushAll().ok());
  for (uint32_t b = 0; b < 13; ++b) CHECK(f.Get(4, b, 0, MiB) == Random(MiB, 40 + b));
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
  CHECK(f.RamDirty().dirty == MiB);
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

TEST_CASE("a writer stuck at the dirty limit behind a failing flush gives up after dirty_wait_ms") {
  Options o;
  o.dirty_limit = MiB;
  o.dirty_wait_ms = 200;
  WbFixture f(o);
  REQUIRE(f.cte->PutBlob(7, 0, 0, Random(MiB, 70)).ok());
  { std::ofstream(f.FilePath() + ".fail") << "x"; }
  // RAM is at its limit and the flusher cannot make room; the writer waits, then tries the
  // file tier, which fails too. It must come back with that error, not hang.
  Status s = f.cte->PutBlob(7, 1, 0, Random(MiB, 71));
  CHECK(s.code() == Code::kIoError);
  WritebackStats st = f.cte->GetWritebackStats();
  CHECK(st.dirty_waits == 1);
  CHECK(st.dirty_wait_timeouts == 1);
  CHECK(f.RamDirty().peak == MiB);
  CHECK(f.Locate(7, 1).empty());
  CHECK(f.cte->GetWritebackStats().reserved == MiB);  // blob 1's reservation was undone
  std::filesystem::remove(f.FilePath() + ".fail");
  REQUIRE(f.cte->FlushAll().ok());
  REQUIRE(f.cte->PutBlob(7, 1, 0, Random(MiB, 71)).ok());
  CHECK(f.Locate(7, 1).at(0).tier_id == f.RamId());
  CHECK(f.Get(7, 0, 0, MiB) == Random(MiB, 70));
}

TEST_CASE("dirty_limit and dirty_wait_ms are validated with errors naming the key") {
  auto parse = [](const std::string& pool, const std::string& tiers) {
    std::string yaml = "runtime:\n  state_dir: /tmp/clio-wb-parse\ncompose:\n"
                       "  - mod_name: clio_cte_core\n    pool_name: cte\n    pool_id: \"512.0\"\n" +
                       pool + "    storage:\n" + tiers;
    auto cfg = ParseRuntimeConfig(yaml, "wb.yaml");
    REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
    return ParseCteConfig(cfg->compose.at(0), "wb.yaml");
  };
  const std::string ram = "      - path: \"ram::t1\"\n        bdev_type: ram\n        capacity_limit: 64MB\n";
  auto ok = parse("    dirty_wait_ms: 500\n", ram + "        dirty_limit: 16MB\n");
  REQUIRE_MESSAGE(ok.ok(), ok.status().ToString());
  CHECK(ok->dirty_wait_ms == 500);
  CHECK(ok->tiers[0].dirty_limit == 16 * MiB);
  CHECK(parse("", ram)->tiers[0].dirty_limit == 0);  // default: half the capacity, at Open

  auto expect = [](const Result<CteConfig>& r, const std::string& key, const std::string& what) {
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kConfigError);
    CHECK_MESSAGE(r.status().message().find(key) != std::string::npos, r.status().ToString());
    CHECK_MESSAGE(r.status().message().find(what) != std::string::npos, r.status().ToString());
    CHECK(r.status().message().find("wb.yaml:") != std::string::npos);
  };
  expect(parse("", ram + "        dirty_limit: 512K\n"), "dirty_limit", "at least 1MiB");
  expect(parse("", ram + "        dirty_limit: 65MB\n"), "dirty_limit", "capacity_limit");
  expect(parse("", ram + "        dirty_limit: lots\n"), "dirty_limit", "");
  expect(parse("", "      - path: /tmp/clio-wb-parse/t.dat\n        dirty_limit: 8MB\n"), "dirty_limit",
         "only to volatile tiers");
  expect(parse("    dirty_wait_ms: 0\n", ram), "dirty_wait_ms", "between 1 and");
  CHECK(parse("", ram)->flush_threads == 4);
  CHECK(parse("    flush_threads: 1\n", ram)->flush_threads == 1);
  expect(parse("    flush_threads: 0\n", ram), "flush_threads", "between 1 and 64");
  expect(parse("    flush_threads: 65\n", ram), "flush_threads", "between 1 and 64");
}

TEST_CASE("flushes of many blobs in parallel keep every blob whole, with one thread or many") {
  for (uint32_t threads : {1u, 4u, 16u}) {
    CAPTURE(threads);
    Options o;
    o.dirty_limit = o.ram;
    o.flush_threads = threads;
    WbFixture f(o);
    for (uint64_t b = 0; b < 7; ++b) REQUIRE(f.cte->PutBlob(9, b, 0, Random(MiB - 4096 * b, 900 + b)).ok());
    REQUIRE(f.cte->PutBlob(10, 0, 0, Random(5000, 1000)).ok());
    REQUIRE(f.cte->FlushTag(9).ok());  // tag 9 only
    WritebackStats w = f.cte->GetWritebackStats();
    CHECK(w.dirty_blobs == 1);
    for (uint64_t b = 0; b < 7; ++b) {
      for (const CopyLocation& l : f.Locate(9, b)) CHECK_FALSE(l.dirty);
      CHECK(f.Get(9, b, 0, MiB - 4096 * b) == Random(MiB - 4096 * b, 900 + b));
    }
    REQUIRE(f.cte->FlushAll().ok());
    CHECK(f.cte->GetWritebackStats().dirty_blobs == 0);
    CHECK(f.cte->GetWritebackStats().reserved == 0);
  }
}

TEST_CASE("Open refuses a dirty_limit larger than the tier or on a persistent tier") {
  Options o;
  WbFixture f(o);
  CteConfig c = f.Config();
  f.Close();
  KvOptions ko;
  ko.path = f.dir + "/md";
  auto kv = OpenRocksDbKv(ko);
  REQUIRE(kv.ok());
  c.tiers[0].dirty_limit = 9 * MiB;  // the RAM tier is 8 MiB
  auto big = Cte::Open(c, kv->get());
  REQUIRE_FALSE(big.ok());
  CHECK(big.status().message().find("dirty_limit") != std::string::npos);
  CHECK(big.status().message().find("larger than the tier's capacity") != std::string::npos);
  c.tiers[0].dirty_limit = 0;
  c.tiers[1].dirty_limit = 8 * MiB;
  auto pers = Cte::Open(c, kv->get());
  REQUIRE_FALSE(pers.ok());
  CHECK(pers.status().message().find("only to volatile tiers") != std::string::npos);
}

TEST_CASE("the background flusher copies dirty RAM data to the persistent tier with no fsync") {
  Options o;
  o.flush_interval_ms = 50;
  WbFixture f(o);
  for (uint64_t b = 0; b < 4; ++b) REQUIRE(f.cte->PutBlob(7, b, 0, Random(MiB / 2 + b, 70 + b)).ok());
  // Each pass flushes every blob dirty when it began; the second pass after the writes surely
  // began after them. Waiting on the pass counter, not on a clock (the bound only stops a hang).
  const uint64_t passes = f.cte->GetWritebackStats().flush_passes;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (f.cte->GetWritebackStats().flush_passes < passes + 2) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up, "the flusher ran no pass");
    std::this_thread::yield();
  }
  WritebackStats w = f.cte->GetWritebackStats();
  CHECK(w.dirty_blobs == 0);
  CHECK(w.reserved == 0);
  CHECK(f.RamDirty().dirty == 0);
  for (uint64_t b = 0; b < 4; ++b) {
    bool on_file = false;
    for (const CopyLocation& c : f.Locate(7, b)) {
      CHECK_FALSE(c.dirty);
      on_file |= c.tier_id == f.FileId() && c.bytes == MiB / 2 + b;
    }
    CHECK_MESSAGE(on_file, "blob " << b << " has no persistent copy");
    CHECK(f.Get(7, b, 0, MiB / 2 + b) == Random(MiB / 2 + b, 70 + b));
  }
}

TEST_CASE("a clean stop flushes every dirty blob; after the restart each is whole on the file tier") {
  Options o;
  o.dirty_limit = o.ram;  // no writer reaches the limit (which would kick the flusher)
  WbFixture f(o);
  for (uint64_t b = 0; b < 6; ++b) REQUIRE(f.cte->PutBlob(8, b, 0, Random(MiB, 80 + b)).ok());
  REQUIRE(f.cte->PutBlob(8, 2, 4096, Random(10000, 99)).ok());  // a partial overwrite, dirty too
  CHECK(f.cte->GetWritebackStats().dirty_blobs == 6);
  f.Close();
  f.Open();
  std::string two = Random(MiB, 82);
  two.replace(4096, 10000, Random(10000, 99));
  for (uint64_t b = 0; b < 6; ++b) {
    auto where = f.Locate(8, b);
    REQUIRE(where.size() == 1);  // the RAM copies went with the old process
    CHECK(where[0].tier_id == f.FileId());
    CHECK_FALSE(where[0].dirty);
    CHECK(f.Get(8, b, 0, MiB) == (b == 2 ? two : Random(MiB, 80 + b)));
  }
  CHECK(f.cte->GetWritebackStats().dirty_blobs == 0);
}

TEST_CASE("the CTE pool serves Writeback and FlushAll: dirty counters, then nothing dirty") {
  WbFixture f;
  for (uint64_t b = 0; b < 3; ++b) REQUIRE(f.cte->PutBlob(5, b, 0, std::string(300000, 'w')).ok());
  const uint64_t ram = f.RamId(), file = f.FileId();
  CtePool pool(std::move(f.cte), f.kv.get(), 0);
  auto call = [&](CteMethod m, const std::string& payload = "") {
    return pool.Handle(static_cast<uint32_t>(m), payload);
  };
  auto before = DecodeWritebackStats(*call(CteMethod::kWriteback));
  REQUIRE(before.ok());
  CHECK(before->dirty_blobs == 3);
  REQUIRE(before->dirty.size() == 1);  // the one volatile tier
  CHECK(before->dirty[0].tier_id == ram);
  CHECK(before->dirty[0].dirty >= 3 * 300000);
  CHECK(before->dirty[0].limit == 4 * MiB);  // half the RAM tier
  CHECK(before->reserved >= 3 * 300000);     // room held on the file tier for the flushes

  REQUIRE(call(CteMethod::kFlushAll).ok());
  auto after = DecodeWritebackStats(*call(CteMethod::kWriteback));
  REQUIRE(after.ok());
  CHECK(after->dirty_blobs == 0);
  CHECK(after->dirty[0].dirty == 0);
  CHECK(after->dirty[0].peak == before->dirty[0].dirty);
  CHECK(after->oldest_dirty_s == 0);
  for (uint64_t b = 0; b < 3; ++b) {
    auto where = pool.cte()->LocateBlob(5, b);
    REQUIRE(where.ok());
    bool on_file = false;
    for (const CopyLocation& c : *where) {
      CHECK_FALSE(c.dirty);
      on_file |= c.tier_id == file && c.bytes == 300000 && TotalSize(c.extents) >= 300000;
    }
    CHECK_MESSAGE(on_file, "blob " << b << " has no clean copy on the file tier");
  }
  // Requests with a payload they do not take, and cut replies, are refused.
  CHECK(call(CteMethod::kWriteback, "x").status().code() == Code::kCorruption);
  CHECK(call(CteMethod::kFlushAll, "x").status().code() == Code::kCorruption);
  const std::string wire = *call(CteMethod::kWriteback);
  CHECK(DecodeWritebackStats(std::string_view(wire).substr(0, wire.size() - 1)).status().code() == Code::kCorruption);
  CHECK(DecodeWritebackStats("").status().code() == Code::kCorruption);
}
