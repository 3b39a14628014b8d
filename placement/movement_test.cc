// Data movement between tiers: lifespan-aware placement, Drain(), access scores and the
// reorganizer. Real tiers (a shm RAM tier and file tiers in a temp dir), real RocksDB; every
// assertion is on contents, LocateBlob results and counters, never on elapsed time.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <thread>

#include "common/codec.h"
#include "daemon/config.h"
#include "placement/cte.h"
#include "placement/cte_pool.h"
#include "storage/kv.h"
#include "placement/test_util.h"

using namespace clio;
using namespace clio::testing;

namespace {

constexpr uint64_t MiB = 1u << 20;

// Three tiers: RAM (score 1.0), a fast file tier (0.6) and a slow file tier (0.2).
struct Options {
  uint64_t ram = 8 * MiB;
  uint64_t fast = 64 * MiB;
  uint64_t slow = 64 * MiB;
  bool with_ram = true;
  uint64_t dirty_limit = 0;       // RAM tier; 0: half its capacity
  uint64_t bandwidth = 64 * MiB;  // reorganizer bytes/s; a pass is 1 s of it
  double threshold = 0.35;
};

struct MoveFixture : CteHarness {
  Options o;
  std::string ram_name = "ram::move_test_" + std::to_string(getpid());

  explicit MoveFixture(Options opts = {}) : CteHarness("clio_move"), o(opts) { Start(Config()); }
  // A clean stop and start of the CTE and the metadata store.
  Result<std::unique_ptr<Cte>> Reopen() {
    Stop();
    return OpenWith(Config());
  }
  CteConfig Config() const {
    CteConfig c;
    c.flush_interval_ms = 3600000;  // tests flush explicitly
    c.reorganize = false;           // and reorganize explicitly
    c.reorganize_interval_ms = 1000;
    c.reorganize_bandwidth = o.bandwidth;
    c.reorganize_threshold = o.threshold;
    c.score_decay = 0.5;
    TierConfig ram = RamTier(ram_name, o.ram, 1.0);
    ram.dirty_limit = o.dirty_limit;
    auto file = [&](const char* name, uint64_t cap, double score) {
      return FileTier(dir + "/" + name + ".dat", cap, score);
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
    return GetBytes(cte.get(), tag, blob, off, len);
  }
};

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

TEST_CASE("drain empties a tier while other threads read and write the same blobs") {
  Options o;
  o.with_ram = false;
  MoveFixture f(o);
  constexpr uint64_t kBlobs = 16, kSize = 512 * 1024;
  std::vector<std::string> model(kBlobs);
  for (uint64_t b = 0; b < kBlobs; ++b) {
    model[b] = Random(kSize, 100 + static_cast<uint32_t>(b));
    REQUIRE(f.cte->PutBlob(3, b, 0, model[b]).ok());
    REQUIRE(f.Where(3, b) == std::vector<uint64_t>{f.Id("fast")});
  }
  const uint64_t fast = f.Id("fast");
  std::atomic<bool> drained{false};
  std::atomic<uint64_t> ops{0}, mismatches{0}, failures{0};
  // Each worker owns half the blobs, so its model is exact: it writes a random range, then
  // reads the whole blob back and compares every byte.
  auto worker = [&](uint64_t parity) {
    std::mt19937 g(static_cast<uint32_t>(parity + 7));
    uint64_t mine = 0;
    while (!drained.load() || mine < 100) {
      const uint64_t b = (g() % (kBlobs / 2)) * 2 + parity;
      const uint64_t len = 1 + g() % 65536, off = g() % (kSize - len);
      std::string data = Random(len, g());
      if (!f.cte->PutBlob(3, b, off, data).ok()) {
        failures.fetch_add(1);
        continue;
      }
      model[b].replace(off, len, data);
      std::string got(kSize, '?');
      if (!f.cte->GetBlob(3, b, 0, kSize, got.data()).ok())
        failures.fetch_add(1);
      else if (got != model[b])
        mismatches.fetch_add(1);
      ++mine;
      ops.fetch_add(1);
    }
  };
  std::thread w0(worker, 0), w1(worker, 1);
  while (ops.load() < 20) std::this_thread::yield();  // the workers are running
  Status s = f.cte->Drain(fast);
  drained.store(true);
  w0.join();
  w1.join();
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(mismatches.load() == 0);
  CHECK(failures.load() == 0);
  CHECK(ops.load() >= 200);

  // The tier holds nothing, no blob names it, and nothing new is placed on it.
  CHECK(f.Used("fast") == 0);
  auto p = f.cte->GetDrainProgress(fast);
  REQUIRE(p.ok());
  CHECK(p->draining);
  CHECK(p->bytes_left == 0);
  CHECK(p->moved_bytes >= kBlobs * kSize);  // every blob had a copy there when the drain began
  CHECK(p->moved_copies >= kBlobs);
  for (uint64_t b = 0; b < kBlobs; ++b) {
    auto w = f.Where(3, b);
    CHECK(std::find(w.begin(), w.end(), fast) == w.end());
    CHECK(f.Get(3, b, 0, kSize) == model[b]);
  }
  REQUIRE(f.cte->PutBlob(3, 99, 0, Random(4096, 9)).ok());
  CHECK(f.Where(3, 99) == std::vector<uint64_t>{f.Id("slow")});
  CHECK(f.Used("fast") == 0);
  // Undrain: the tier is used again.
  REQUIRE(f.cte->Undrain(fast).ok());
  REQUIRE(f.cte->PutBlob(3, 100, 0, Random(4096, 10)).ok());
  CHECK(f.Where(3, 100) == std::vector<uint64_t>{fast});
}

TEST_CASE("a file tier drains under RAM writers that keep dirtying the blobs being moved") {
  MoveFixture f;
  constexpr uint64_t kBlobs = 8, kSize = 256 * 1024;
  const uint64_t fast = f.Id("fast");
  std::vector<std::string> model(kBlobs);
  REQUIRE(f.cte->SetLifespan(f.Id("ram"), 0).ok());  // the blobs start on the fast tier only
  for (uint64_t b = 0; b < kBlobs; ++b) {
    model[b] = Random(kSize, 300 + static_cast<uint32_t>(b));
    REQUIRE(f.cte->PutBlob(11, b, 0, model[b]).ok());
  }
  REQUIRE(f.cte->SetLifespan(f.Id("ram"), 999999).ok());
  std::atomic<bool> drained{false};
  std::atomic<uint64_t> ops{0}, bad{0};
  std::thread w([&] {
    std::mt19937 g(11);
    while (!drained.load() || ops.load() < 100) {
      const uint64_t b = g() % kBlobs, len = 1 + g() % 8192, off = g() % (kSize - len);
      std::string data = Random(len, g());
      if (!f.cte->PutBlob(11, b, off, data).ok()) {  // lands dirty in RAM
        bad.fetch_add(1);
        continue;
      }
      model[b].replace(off, len, data);
      std::string got(kSize, '?');
      if (!f.cte->GetBlob(11, b, 0, kSize, got.data()).ok() || got != model[b]) bad.fetch_add(1);
      ops.fetch_add(1);
    }
  });
  while (ops.load() < 10) std::this_thread::yield();
  Status s = f.cte->Drain(fast);
  drained.store(true);
  w.join();
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(bad.load() == 0);
  CHECK(f.Used("fast") == 0);
  REQUIRE(f.cte->FlushAll().ok());
  for (uint64_t b = 0; b < kBlobs; ++b) {
    auto where = f.Where(11, b);
    CHECK(std::find(where.begin(), where.end(), fast) == where.end());
    CHECK(f.Get(11, b, 0, kSize) == model[b]);
  }
  CHECK(f.Used("fast") == 0);
}

TEST_CASE("draining a RAM tier flushes its dirty copies and drops its clean caches") {
  MoveFixture f;
  const uint64_t ram = f.Id("ram");
  REQUIRE(f.cte->PutBlob(4, 0, 0, Random(MiB, 40)).ok());  // dirty in RAM
  REQUIRE(f.cte->PutBlob(4, 1, 0, Random(MiB, 41)).ok());
  REQUIRE(f.cte->FlushTag(4).ok());                         // both clean: RAM cache + fast
  REQUIRE(f.cte->PutBlob(4, 1, 4096, Random(8192, 42)).ok());  // blob 1 dirty again
  REQUIRE(f.cte->PutBlob(4, 2, 0, Random(MiB, 43)).ok());      // blob 2 dirty only
  CHECK(f.cte->GetWritebackStats().dirty_blobs == 2);
  CHECK(f.Where(4, 0).at(0) == ram);

  REQUIRE(f.cte->Drain(ram).ok());
  CHECK(f.Used("ram") == 0);
  auto p = f.cte->GetDrainProgress(ram);
  REQUIRE(p.ok());
  CHECK(p->moved_copies == 3);  // two flushed off, one cache dropped; each counted once
  CHECK(f.cte->GetWritebackStats().dirty_blobs == 0);
  CHECK(f.cte->GetWritebackStats().reserved == 0);
  std::string b1 = Random(MiB, 41);
  b1.replace(4096, 8192, Random(8192, 42));
  CHECK(f.Get(4, 0, 0, MiB) == Random(MiB, 40));
  CHECK(f.Get(4, 1, 0, MiB) == b1);
  CHECK(f.Get(4, 2, 0, MiB) == Random(MiB, 43));
  for (uint64_t b = 0; b < 3; ++b) CHECK(f.Where(4, b) == std::vector<uint64_t>{f.Id("fast")});
  // While drained, writes skip RAM and land clean on the persistent tier.
  REQUIRE(f.cte->PutBlob(4, 3, 0, Random(4096, 44)).ok());
  auto l = f.cte->LocateBlob(4, 3);
  REQUIRE(l.ok());
  REQUIRE(l->size() == 1);
  CHECK(l->at(0).tier_id == f.Id("fast"));
  CHECK_FALSE(l->at(0).dirty);
}

TEST_CASE("a drain counts a dirty copy that left its tier once, whether it or the flusher flushed it") {
  MoveFixture f;
  const uint64_t ram = f.Id("ram");
  // The flusher may flush a blob before the drain is marked (the drain then drops the cache),
  // after (the flush releases the copy itself) or on the drain's behalf: one copy, each way.
  for (uint64_t b = 0; b < 40; ++b) {
    REQUIRE(f.cte->Undrain(ram).ok());
    REQUIRE(f.cte->PutBlob(5, b, 0, Random(64 * 1024, b)).ok());
    REQUIRE(f.Where(5, b).at(0) == ram);
    std::thread flusher([&] { CHECK(f.cte->FlushTag(5).ok()); });
    REQUIRE(f.cte->Drain(ram).ok());
    flusher.join();
    CHECK(f.Used("ram") == 0);
    auto p = f.cte->GetDrainProgress(ram);
    REQUIRE(p.ok());
    CHECK(p->moved_copies == b + 1);
    CHECK(f.Get(5, b, 0, 64 * 1024) == Random(64 * 1024, b));
  }
}

TEST_CASE("a tier set to 0 days can be drained onto the remaining tiers") {
  Options o;
  o.with_ram = false;
  MoveFixture f(o);
  for (uint64_t b = 0; b < 4; ++b) REQUIRE(f.cte->PutBlob(5, b, 0, Random(MiB, 50 + b)).ok());
  REQUIRE(f.cte->SetLifespan(f.Id("fast"), 0).ok());
  REQUIRE(f.cte->Drain(f.Id("fast")).ok());
  CHECK(f.Used("fast") == 0);
  CHECK(f.Used("slow") == 4 * MiB);
  for (uint64_t b = 0; b < 4; ++b) {
    CHECK(f.Where(5, b) == std::vector<uint64_t>{f.Id("slow")});
    CHECK(f.Get(5, b, 0, MiB) == Random(MiB, 50 + static_cast<uint32_t>(b)));
  }
}

TEST_CASE("a drain with no room elsewhere stops with NoSpace and every blob intact") {
  Options o;
  o.with_ram = false;
  o.slow = 2 * MiB;
  MoveFixture f(o);
  for (uint64_t b = 0; b < 4; ++b) REQUIRE(f.cte->PutBlob(6, b, 0, Random(MiB, 60 + b)).ok());
  Status s = f.cte->Drain(f.Id("fast"));
  CHECK(s.code() == Code::kNoSpace);
  CHECK_MESSAGE(s.message().find("draining tier") != std::string::npos, s.ToString());
  CHECK_MESSAGE(s.message().find("no other tier has room") != std::string::npos, s.ToString());
  REQUIRE(f.kv->Sync().ok());
  // Each blob is whole on exactly one tier; nothing leaked on either.
  uint64_t on_slow = 0;
  for (uint64_t b = 0; b < 4; ++b) {
    auto w = f.Where(6, b);
    REQUIRE(w.size() == 1);
    on_slow += w[0] == f.Id("slow");
    CHECK(f.Get(6, b, 0, MiB) == Random(MiB, 60 + static_cast<uint32_t>(b)));
  }
  CHECK(on_slow == 2);
  CHECK(f.Used("slow") == 2 * MiB);
  CHECK(f.Used("fast") == 2 * MiB);
  auto p = f.cte->GetDrainProgress(f.Id("fast"));
  REQUIRE(p.ok());
  CHECK(p->draining);
  CHECK(p->bytes_left == 2 * MiB);
  CHECK(p->moved_bytes == 2 * MiB);
  // Still marked: with the slow tier full, a new write has nowhere to go.
  CHECK(f.cte->PutBlob(6, 9, 0, Random(4096, 69)).code() == Code::kNoSpace);
  REQUIRE(f.cte->Undrain(f.Id("fast")).ok());
  REQUIRE(f.cte->PutBlob(6, 9, 0, Random(4096, 69)).ok());
  CHECK(f.Where(6, 9) == std::vector<uint64_t>{f.Id("fast")});
  CHECK(f.cte->Drain(424242).code() == Code::kNotFound);
}

TEST_CASE("ReorganizeOnce promotes a hot blob and, once its accesses decay, demotes a cold one") {
  Options o;
  o.with_ram = false;
  MoveFixture f(o);
  const uint64_t fast = f.Id("fast"), slow = f.Id("slow");
  constexpr uint64_t kSize = 256 * 1024;
  // Blobs 0 (to be hot) and 1 (lukewarm) land on the slow tier while the fast one is dying.
  REQUIRE(f.cte->SetLifespan(fast, 3).ok());
  REQUIRE(f.cte->PutBlob(7, 0, 0, Random(kSize, 70)).ok());
  REQUIRE(f.cte->PutBlob(7, 1, 0, Random(kSize, 71)).ok());
  REQUIRE(f.cte->SetLifespan(fast, 999999).ok());
  REQUIRE(f.cte->PutBlob(7, 2, 0, Random(kSize, 72)).ok());  // to go cold, on the fast tier
  REQUIRE(f.Where(7, 0) == std::vector<uint64_t>{slow});
  REQUIRE(f.Where(7, 2) == std::vector<uint64_t>{fast});
  for (int i = 0; i < 10; ++i) CHECK(f.Get(7, 0, 0, kSize) == Random(kSize, 70));

  // Pass 1: blob 0 has heat 11 (score 11/12 > 0.2 + 0.35): promoted to the fast tier, the
  // nearest to its score. Blobs 1 and 2 (heat 1, score 0.5) are within the threshold.
  auto p1 = f.cte->ReorganizeOnce();
  REQUIRE(p1.ok());
  CHECK(p1->promoted == 1);
  CHECK(p1->demoted == 0);
  CHECK(p1->moved_bytes == kSize);
  CHECK(f.Where(7, 0) == std::vector<uint64_t>{fast});
  CHECK(f.Where(7, 1) == std::vector<uint64_t>{slow});
  CHECK(f.Where(7, 2) == std::vector<uint64_t>{fast});
  CHECK(f.cte->BlobScore(7, 0) > 0.8);
  // Pass 2: blob 2 decays to heat 0.5 (score 1/3): 0.6 - 1/3 is still within 0.35.
  auto p2 = f.cte->ReorganizeOnce();
  REQUIRE(p2.ok());
  CHECK(p2->promoted + p2->demoted == 0);
  CHECK(f.Where(7, 2) == std::vector<uint64_t>{fast});
  // Pass 3: heat 0.25 (score 0.2): cold, demoted to the slow tier. Blob 0 (heat 2.75) stays.
  auto p3 = f.cte->ReorganizeOnce();
  REQUIRE(p3.ok());
  CHECK(p3->demoted == 1);
  CHECK(p3->promoted == 0);
  CHECK(f.Where(7, 2) == std::vector<uint64_t>{slow});
  CHECK(f.Where(7, 0) == std::vector<uint64_t>{fast});
  REQUIRE(f.kv->Sync().ok());
  CHECK(f.Used("fast") == kSize);
  CHECK(f.Used("slow") == 2 * kSize);
  for (uint32_t b = 0; b < 3; ++b) CHECK(f.Get(7, b, 0, kSize) == Random(kSize, 70 + b));
}

TEST_CASE("the reorganizer caches a hot blob in RAM; a cold RAM cache goes only when RAM is filling") {
  Options o;
  o.dirty_limit = 8 * MiB;  // lets dirty data fill the RAM tier past 75% below
  MoveFixture f(o);
  const uint64_t ram = f.Id("ram"), fast = f.Id("fast");
  constexpr uint64_t kSize = 256 * 1024;
  REQUIRE(f.cte->SetLifespan(ram, 0).ok());  // blob 0 goes straight to the fast tier
  REQUIRE(f.cte->PutBlob(8, 0, 0, Random(kSize, 80)).ok());
  REQUIRE(f.cte->SetLifespan(ram, 999999).ok());
  REQUIRE(f.cte->PutBlob(8, 1, 0, Random(kSize, 81)).ok());
  REQUIRE(f.cte->FlushAll().ok());  // blob 1: a clean RAM cache over its fast copy
  REQUIRE(f.Where(8, 0) == std::vector<uint64_t>{fast});
  REQUIRE(f.Where(8, 1) == (std::vector<uint64_t>{ram, fast}));
  const std::string b0 = Random(kSize, 80);
  for (int i = 0; i < 20; ++i) CHECK(f.Get(8, 0, 0, kSize) == b0);
  // Blob 0: score 21/22, RAM (1.0) is the nearest tier: a cache copy in front of the fast
  // one. Blob 1 is cold (score 0.5 < 1.0 - 0.35), but RAM has room: its cache stays.
  auto p = f.cte->ReorganizeOnce();
  REQUIRE(p.ok());
  CHECK(p->promoted == 1);
  CHECK(p->demoted == 0);
  CHECK(p->moved_bytes == kSize);
  CHECK(f.Where(8, 0) == (std::vector<uint64_t>{ram, fast}));
  CHECK(f.Where(8, 1) == (std::vector<uint64_t>{ram, fast}));
  CHECK(f.Used("ram") == 2 * kSize);
  CHECK(f.Get(8, 0, 0, kSize) == Random(kSize, 80));
  CHECK(f.Get(8, 1, 0, 4096) == Random(kSize, 81).substr(0, 4096));

  // Dirty data fills RAM past 75%: the cold cache of blob 1 is dropped (moving no bytes),
  // the hot cache of blob 0 stays, the dirty blobs are left to the flusher.
  for (uint64_t b = 0; b < 6; ++b) REQUIRE(f.cte->PutBlob(88, b, 0, Random(MiB, 880 + b)).ok());
  const std::string head = Random(kSize, 80).substr(0, 4096);
  for (int i = 0; i < 20; ++i) CHECK(f.Get(8, 0, 0, 4096) == head);
  auto q = f.cte->ReorganizeOnce();  // blob 1: two passes without enough accesses
  REQUIRE(q.ok());
  auto r = f.cte->ReorganizeOnce();
  REQUIRE(r.ok());
  CHECK(q->demoted + r->demoted == 1);
  CHECK(q->moved_bytes + r->moved_bytes == 0);
  CHECK(f.Where(8, 1) == std::vector<uint64_t>{fast});
  CHECK(f.Where(8, 0) == (std::vector<uint64_t>{ram, fast}));
  CHECK(f.Get(8, 1, 0, kSize) == Random(kSize, 81));
  for (uint64_t b = 0; b < 6; ++b) CHECK(f.Where(88, b) == std::vector<uint64_t>{ram});
  // The promoted cache is an ordinary clean copy: a write makes it dirty in place.
  REQUIRE(f.cte->PutBlob(8, 0, 0, Random(4096, 82)).ok());
  auto l = f.cte->LocateBlob(8, 0);
  REQUIRE(l.ok());
  CHECK(l->at(0).tier_id == ram);
  CHECK(l->at(0).dirty);
}

TEST_CASE("reorganizer passes while a thread reads and writes the blobs being promoted") {
  Options o;
  o.with_ram = false;
  MoveFixture f(o);
  constexpr uint64_t kBlobs = 8, kSize = 128 * 1024;
  const uint64_t fast = f.Id("fast");
  std::vector<std::string> model(kBlobs);
  REQUIRE(f.cte->SetLifespan(fast, 3).ok());  // the blobs start on the slow tier
  for (uint64_t b = 0; b < kBlobs; ++b) {
    model[b] = Random(kSize, 400 + static_cast<uint32_t>(b));
    REQUIRE(f.cte->PutBlob(13, b, 0, model[b]).ok());
  }
  REQUIRE(f.cte->SetLifespan(fast, 999999).ok());
  for (uint64_t b = 0; b < kBlobs; ++b)
    for (int i = 0; i < 5; ++i) REQUIRE(f.Get(13, b, 0, 4096) == model[b].substr(0, 4096));
  std::atomic<bool> done{false};
  std::atomic<uint64_t> ops{0}, bad{0};
  // Odd blobs are only read; even ones are also written (each write lands on the fast tier
  // and makes a move of that blob find its entry changed).
  std::thread w([&] {
    std::mt19937 g(13);
    while (!done.load() || ops.load() < 100) {
      const uint64_t b = g() % kBlobs;
      if (b % 2 == 0 && g() % 2 == 0) {
        const uint64_t len = 1 + g() % 4096, off = g() % (kSize - len);
        std::string data = Random(len, g());
        if (!f.cte->PutBlob(13, b, off, data).ok()) {
          bad.fetch_add(1);
          continue;
        }
        model[b].replace(off, len, data);
      }
      std::string got(kSize, '?');
      if (!f.cte->GetBlob(13, b, 0, kSize, got.data()).ok() || got != model[b]) bad.fetch_add(1);
      ops.fetch_add(1);
    }
  });
  while (ops.load() < 10) std::this_thread::yield();
  uint64_t promoted = 0;
  for (int pass = 0; pass < 4; ++pass) {
    auto p = f.cte->ReorganizeOnce();
    REQUIRE(p.ok());
    promoted += p->promoted;
  }
  done.store(true);
  w.join();
  CHECK(bad.load() == 0);
  CHECK(promoted >= kBlobs / 2);  // at least the read-only blobs
  for (uint64_t b = 1; b < kBlobs; b += 2) CHECK(f.Where(13, b) == std::vector<uint64_t>{fast});
  for (uint64_t b = 0; b < kBlobs; ++b) CHECK(f.Get(13, b, 0, kSize) == model[b]);
}

TEST_CASE("a reorganizer pass moves no more than its byte budget, hottest blobs first") {
  Options o;
  o.with_ram = false;
  o.bandwidth = 2 * MiB;  // a pass (1 s) moves at most 2 MiB
  MoveFixture f(o);
  const uint64_t fast = f.Id("fast");
  REQUIRE(f.cte->SetLifespan(fast, 3).ok());
  for (uint64_t b = 0; b < 6; ++b) REQUIRE(f.cte->PutBlob(9, b, 0, Random(MiB, 90 + b)).ok());
  REQUIRE(f.cte->SetLifespan(fast, 999999).ok());
  // Blobs 4 and 5 are the hottest, then 2 and 3, then 0 and 1 (7 accesses: heat 7, then 3.5,
  // then 1.75 at the third pass, whose score 0.64 still passes 0.2 + 0.35).
  for (uint64_t b = 0; b < 6; ++b) {
    const std::string head = Random(MiB, 90 + static_cast<uint32_t>(b)).substr(0, 4096);
    for (uint64_t i = 0; i < 6 + 4 * (b / 2); ++i) CHECK(f.Get(9, b, 0, 4096) == head);
  }
  std::vector<std::vector<uint64_t>> order = {{4, 5}, {2, 3}, {0, 1}};
  for (size_t pass = 0; pass < 3; ++pass) {
    auto p = f.cte->ReorganizeOnce();
    REQUIRE(p.ok());
    CHECK(p->budget == 2 * MiB);
    CHECK(p->moved_bytes == 2 * MiB);
    CHECK(p->promoted == 2);
    CHECK(p->over_budget == 4 - 2 * pass);
    for (uint64_t b : order[pass]) CHECK(f.Where(9, b) == std::vector<uint64_t>{fast});
    CHECK(f.Used("fast") == 2 * MiB * (pass + 1));
  }
  auto last = f.cte->ReorganizeOnce();
  REQUIRE(last.ok());
  CHECK(last->moved_bytes == 0);
  for (uint64_t b = 0; b < 6; ++b) CHECK(f.Get(9, b, 0, MiB) == Random(MiB, 90 + static_cast<uint32_t>(b)));
}

TEST_CASE("reorganizer keys are validated with errors naming the key") {
  auto parse = [](const std::string& pool) {
    std::string yaml = "runtime:\n  state_dir: /tmp/clio-move-parse\ncompose:\n"
                       "  - mod_name: clio_cte_core\n    pool_name: cte\n    pool_id: \"512.0\"\n" +
                       pool + "    storage:\n      - path: \"ram::t1\"\n        bdev_type: ram\n";
    auto cfg = ParseRuntimeConfig(yaml, "mv.yaml");
    REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
    return ParseCteConfig(cfg->compose.at(0), "mv.yaml");
  };
  auto ok = parse("    reorganize: false\n    reorganize_interval_ms: 5000\n    reorganize_bandwidth: 32MB\n"
                  "    reorganize_threshold: 0.25\n    score_decay: 0.75\n");
  REQUIRE_MESSAGE(ok.ok(), ok.status().ToString());
  CHECK_FALSE(ok->reorganize);
  CHECK(ok->reorganize_interval_ms == 5000);
  CHECK(ok->reorganize_bandwidth == 32 * MiB);
  CHECK(ok->reorganize_threshold == 0.25);
  CHECK(ok->score_decay == 0.75);
  auto defaults = parse("");
  REQUIRE(defaults.ok());
  CHECK(defaults->reorganize);
  CHECK(defaults->reorganize_bandwidth == 64 * MiB);

  auto expect = [](const Result<CteConfig>& r, const std::string& key, const std::string& what) {
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kConfigError);
    CHECK_MESSAGE(r.status().message().find(key) != std::string::npos, r.status().ToString());
    CHECK_MESSAGE(r.status().message().find(what) != std::string::npos, r.status().ToString());
    CHECK(r.status().message().find("mv.yaml:") != std::string::npos);
  };
  expect(parse("    reorganize_interval_ms: 500\n"), "reorganize_interval_ms", "between 1000 and");
  expect(parse("    reorganize_interval_ms: 99999999999\n"), "reorganize_interval_ms", "between 1000 and");
  expect(parse("    reorganize_bandwidth: 512K\n"), "reorganize_bandwidth", "at least 1MiB");
  expect(parse("    reorganize_bandwidth: fast\n"), "reorganize_bandwidth", "");
  expect(parse("    reorganize_threshold: 0\n"), "reorganize_threshold", "(0, 1]");
  expect(parse("    reorganize_threshold: 1.5\n"), "reorganize_threshold", "(0, 1]");
  expect(parse("    score_decay: 1\n"), "score_decay", "between 0 and 1");
  expect(parse("    reorganize: maybe\n"), "reorganize", "");

  // Cte::Open checks the same keys for configs built in code.
  MoveFixture f;
  CteConfig c = f.Config();
  c.score_decay = 0;
  auto bad = Cte::Open(c, f.kv.get());
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message().find("score_decay") != std::string::npos);
}

TEST_CASE("the CTE pool serves SetLifespan, Drain, DrainProgress, Undrain and Reorganize") {
  Options o;
  o.with_ram = false;
  MoveFixture f(o);
  const uint64_t fast = f.Id("fast"), slow = f.Id("slow");
  REQUIRE(f.cte->PutBlob(10, 0, 0, Random(MiB, 100)).ok());
  CtePool pool(std::move(f.cte), f.kv.get(), 0);
  Cte* cte = pool.cte();
  auto call = [&](CteMethod m, const std::string& payload) {
    return pool.Handle(static_cast<uint32_t>(m), payload);
  };
  auto id = [](uint64_t v) { return Encoder().Put<uint64_t>(v).Take(); };

  REQUIRE(call(CteMethod::kSetLifespan, Encoder().Put<uint64_t>(fast).Put<double>(0).Take()).ok());
  auto stats = cte->ListTiers();
  for (auto& t : stats)
    if (t.tier_id == fast) CHECK(t.stats.lifetime_days == 0);
  CHECK(call(CteMethod::kSetLifespan, Encoder().Put<uint64_t>(fast).Put<double>(-2).Take()).status().code() ==
        Code::kInvalidArgument);
  CHECK(call(CteMethod::kSetLifespan, id(fast)).status().code() == Code::kCorruption);  // truncated

  REQUIRE(call(CteMethod::kDrain, id(fast)).ok());
  auto p = call(CteMethod::kDrainProgress, id(fast));
  REQUIRE(p.ok());
  auto progress = DecodeDrainProgress(*p);
  REQUIRE(progress.ok());
  CHECK(progress->draining);
  CHECK(progress->bytes_left == 0);
  CHECK(progress->moved_bytes == MiB);
  auto where = cte->LocateBlob(10, 0);
  REQUIRE(where.ok());
  REQUIRE(where->size() == 1);
  CHECK(where->at(0).tier_id == slow);
  CHECK(call(CteMethod::kDrain, id(777)).status().code() == Code::kNotFound);

  REQUIRE(call(CteMethod::kUndrain, id(fast)).ok());
  auto after = DecodeDrainProgress(*call(CteMethod::kDrainProgress, id(fast)));
  REQUIRE(after.ok());
  CHECK_FALSE(after->draining);

  auto r = call(CteMethod::kReorganize, "");
  REQUIRE(r.ok());
  auto rs = DecodeReorganizeStats(*r);
  REQUIRE(rs.ok());
  CHECK(rs->budget == 64 * MiB);
  CHECK(DecodeReorganizeStats("short").status().code() == Code::kCorruption);
  CHECK(DecodeDrainProgress("").status().code() == Code::kCorruption);
  f.cte.reset();  // owned by the pool now
}

TEST_CASE("a drain cut short resumes by itself at the next start and empties the tier") {
  Options o;
  o.with_ram = false;
  o.slow = 2 * MiB;
  MoveFixture f(o);
  for (uint64_t b = 0; b < 4; ++b) REQUIRE(f.cte->PutBlob(7, b, 0, Random(MiB, 70 + b)).ok());
  REQUIRE(f.cte->Drain(f.Id("fast")).code() == Code::kNoSpace);  // the slow tier filled up
  REQUIRE(f.kv->Sync().ok());  // extents a move released are freed once that is durable
  CHECK(f.Used("fast") == 2 * MiB);
  const uint64_t fast = f.Id("fast");
  // The operator adds room (a tier in the config) and restarts: nobody runs `tier drain` again.
  CteConfig c = f.Config();
  c.tiers.push_back(FileTier(f.dir + "/extra.dat", 64 * MiB, 0.4));
  f.Stop();
  auto opened = f.OpenWith(c);
  REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
  f.cte = std::move(opened).value();
  Status resumed = f.cte->WaitResumedDrains();
  CHECK_MESSAGE(resumed.ok(), resumed.ToString());
  auto p = f.cte->GetDrainProgress(fast);
  REQUIRE(p.ok());
  CHECK(p->draining);
  CHECK(p->bytes_left == 0);
  CHECK(p->moved_bytes == 2 * MiB);
  CHECK(f.Used("extra") == 2 * MiB);
  for (uint64_t b = 0; b < 4; ++b) {
    CHECK(f.Where(7, b) != std::vector<uint64_t>{fast});
    CHECK(f.Get(7, b, 0, MiB) == Random(MiB, 70 + static_cast<uint32_t>(b)));
  }
  // Nothing to resume at the next start: an empty drained tier stays marked, and idle.
  f.Stop();
  auto again = f.OpenWith(c);
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  f.cte = std::move(again).value();
  CHECK(f.cte->WaitResumedDrains().ok());
  CHECK(f.cte->GetDrainProgress(fast)->moved_bytes == 0);
}

TEST_CASE("lifespans and drain marks survive a restart; a corrupt record is refused") {
  Options o;
  o.with_ram = false;
  MoveFixture f(o);
  REQUIRE(f.cte->SetLifespan(f.Id("fast"), 3.5).ok());
  REQUIRE(f.cte->Drain(f.Id("slow")).ok());  // empty: done at once, but marked
  auto c = f.Reopen();
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  f.cte = std::move(c).value();
  CHECK(f.Tier("fast").stats.lifetime_days == 3.5);
  CHECK(f.Tier("slow").stats.lifetime_days == 999999);
  auto p = f.cte->GetDrainProgress(f.Id("slow"));
  REQUIRE(p.ok());
  CHECK(p->draining);
  CHECK_FALSE(f.cte->GetDrainProgress(f.Id("fast"))->draining);
  // Neither tier takes persistent data now.
  CHECK(f.cte->PutBlob(12, 0, 0, Random(4096, 120)).code() == Code::kNoSpace);

  REQUIRE(f.cte->Undrain(f.Id("slow")).ok());
  REQUIRE(f.cte->SetLifespan(f.Id("fast"), 999999).ok());
  c = f.Reopen();
  REQUIRE(c.ok());
  f.cte = std::move(c).value();
  CHECK(f.Tier("fast").stats.lifetime_days == 999999);
  CHECK_FALSE(f.cte->GetDrainProgress(f.Id("slow"))->draining);
  REQUIRE(f.cte->PutBlob(12, 0, 0, Random(4096, 120)).ok());
  CHECK(f.Where(12, 0) == std::vector<uint64_t>{f.Id("fast")});

  // A record that does not decode stops the start, naming the tier.
  const std::string fast_name = f.Tier("fast").name;
  KvBatch bad;
  bad.Put("tm/" + fast_name, "garbage");
  REQUIRE(f.kv->Apply(std::move(bad)).ok());
  c = f.Reopen();
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kCorruption);
  CHECK_MESSAGE(c.status().message().find(fast_name) != std::string::npos, c.status().ToString());
  f.cte.reset();
}
