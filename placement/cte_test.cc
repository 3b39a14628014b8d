#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <random>
#include <thread>

#include "placement/cte.h"
#include "placement/cte_pool.h"
#include "storage/kv.h"
#include "placement/test_util.h"

using namespace clio;
using namespace clio::testing;

namespace {

struct CteFixture : CteHarness {
  uint64_t ram_capacity;
  std::string ram_name = "ram::cte_test_" + std::to_string(getpid());

  explicit CteFixture(uint64_t ram_cap = 8u << 20, uint64_t file_cap = 64u << 20)
      : CteHarness("clio_cte"), ram_capacity(ram_cap) {
    Open(file_cap);
  }
  CteConfig Config(uint64_t file_cap) const {
    CteConfig c;
    c.flush_interval_ms = 3600000;  // tests flush explicitly
    c.reorganize = false;           // no background moves under the assertions
    c.tiers = {RamTier(ram_name, ram_capacity, 1.0), FileTier(dir + "/tier.dat", file_cap, 0.2)};
    return c;
  }
  void Open(uint64_t file_cap = 64u << 20) { Start(Config(file_cap)); }
  void Close() { Stop(); }
  std::string Get(uint64_t tag, uint64_t blob, uint64_t off, uint64_t len) {
    return GetBytes(cte.get(), tag, blob, off, len);
  }
};

}  // namespace

TEST_CASE("put and get round trip; unwritten bytes read as zeros") {
  CteFixture f;
  std::string data = Random(10000, 1);
  REQUIRE(f.cte->PutBlob(1, 0, 500, data).ok());
  CHECK(f.Get(1, 0, 500, 10000) == data);
  CHECK(f.Get(1, 0, 0, 500) == std::string(500, '\0'));
  CHECK(f.Get(1, 0, 10500, 100) == std::string(100, '\0'));
  CHECK(f.Get(2, 0, 0, 64) == std::string(64, '\0'));  // a blob never written
  // Overwrite a middle piece; neighbours keep their bytes.
  REQUIRE(f.cte->PutBlob(1, 0, 1000, "HELLO").ok());
  std::string expect = data;
  expect.replace(500, 5, "HELLO");
  CHECK(f.Get(1, 0, 500, 10000) == expect);
}

TEST_CASE("placement prefers the highest-score tier and falls through when it is full") {
  CteFixture f(2u << 20);
  REQUIRE(f.cte->PutBlob(1, 0, 0, Random(1 << 20, 2)).ok());
  CHECK(f.Tier(BdevType::kRam).stats.used >= (1u << 20));
  CHECK(f.Tier(BdevType::kFile).stats.used == 0);
  // RAM is 2 MiB: the third 1 MiB blob lands on the file tier.
  REQUIRE(f.cte->PutBlob(1, 1, 0, Random(1 << 20, 3)).ok());
  REQUIRE(f.cte->PutBlob(1, 2, 0, Random(1 << 20, 4)).ok());
  CHECK(f.Tier(BdevType::kFile).stats.used >= (1u << 20));
  for (uint32_t b = 0; b < 3; ++b) CHECK(f.Get(1, b, 0, 1 << 20) == Random(1 << 20, 2 + b));
}

TEST_CASE("no tier with room is NoSpace, and nothing leaks") {
  CteFixture f(1u << 20, 2u << 20);
  Status s;
  int stored = 0;
  for (int i = 0; i < 10 && s.ok(); ++i) {
    s = f.cte->PutBlob(1, static_cast<uint64_t>(i), 0, Random(1 << 20, 10 + i));
    if (s.ok()) ++stored;
  }
  CHECK(s.code() == Code::kNoSpace);
  CHECK(stored >= 2);
  for (int i = 0; i < stored; ++i) CHECK(f.Get(1, static_cast<uint64_t>(i), 0, 1 << 20) == Random(1 << 20, 10 + i));
}

TEST_CASE("FlushTag moves dirty RAM data to the persistent tier and it survives a restart") {
  CteFixture f;
  std::string a = Random(300000, 5), b = Random(70000, 6);
  REQUIRE(f.cte->PutBlob(9, 0, 0, a).ok());
  REQUIRE(f.cte->PutBlob(9, 3, 1000, b).ok());
  CHECK(f.Tier(BdevType::kFile).stats.used == 0);
  REQUIRE(f.cte->FlushTag(9).ok());
  REQUIRE(f.kv->Sync().ok());
  CHECK(f.Tier(BdevType::kFile).stats.used >= 300000 + 71000);
  f.Close();
  f.Open();
  CHECK(f.Get(9, 0, 0, 300000) == a);
  CHECK(f.Get(9, 3, 1000, 70000) == b);
  CHECK(f.Tier(BdevType::kRam).stats.used == 0);  // volatile copies were dropped at start
}

TEST_CASE("after a crash, unflushed RAM data is gone and the persistent copy underneath remains") {
  CteFixture f;
  std::string old = Random(8192, 7);
  REQUIRE(f.cte->PutBlob(3, 0, 0, old).ok());
  REQUIRE(f.cte->FlushTag(3).ok());
  f.Close();
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Child: overwrite in RAM, make the index entry naming the RAM copy durable, and die
    // before any flush, as kill -9 would.
    f.Open();
    if (!f.cte->PutBlob(3, 0, 0, std::string(8192, 'N')).ok()) _exit(3);
    if (!f.kv->Sync().ok()) _exit(4);
    kill(getpid(), SIGKILL);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  REQUIRE(WIFSIGNALED(st));
  f.Open();
  CHECK(f.Get(3, 0, 0, 8192) == old);
  CHECK(f.Tier(BdevType::kRam).stats.used == 0);
}

TEST_CASE("DelBlob frees extents only after the deletion is durable") {
  CteFixture f;
  REQUIRE(f.cte->PutBlob(4, 0, 0, Random(1 << 20, 8)).ok());
  REQUIRE(f.cte->FlushTag(4).ok());
  REQUIRE(f.kv->Sync().ok());
  uint64_t used = f.Tier(BdevType::kFile).stats.used;
  REQUIRE(used >= (1u << 20));
  REQUIRE(f.cte->DelBlob(4, 0).ok());
  CHECK(f.Get(4, 0, 0, 16) == std::string(16, '\0'));
  CHECK(f.Tier(BdevType::kFile).stats.used == used);  // not yet: deletion not durable
  REQUIRE(f.kv->Sync().ok());
  CHECK(f.Tier(BdevType::kFile).stats.used < used);
}

TEST_CASE("TruncateBlob forgets bytes past the new end") {
  CteFixture f;
  REQUIRE(f.cte->PutBlob(5, 0, 0, std::string(5000, 'x')).ok());
  REQUIRE(f.cte->TruncateBlob(5, 0, 1000).ok());
  CHECK(f.Get(5, 0, 0, 1000) == std::string(1000, 'x'));
  CHECK(f.Get(5, 0, 1000, 4000) == std::string(4000, '\0'));
  auto blobs = f.cte->ListBlobs(5);
  REQUIRE(blobs.ok());
  CHECK(*blobs == std::vector<uint64_t>{0});
  REQUIRE(f.cte->DelTag(5).ok());
  CHECK(f.cte->ListBlobs(5)->empty());
}

TEST_CASE("restart reconciles: extents named by the index are never handed out again") {
  CteFixture f(1u << 20);  // small RAM: most data goes to the file tier directly
  std::vector<std::string> data;
  for (int i = 0; i < 6; ++i) {
    data.push_back(Random(200000, 20 + i));
    REQUIRE(f.cte->PutBlob(6, static_cast<uint64_t>(i), 0, data.back()).ok());
  }
  REQUIRE(f.cte->FlushTag(6).ok());
  REQUIRE(f.kv->Sync().ok());
  f.Close();
  f.Open();
  // New writes after restart must not overwrite any existing blob.
  for (int i = 0; i < 6; ++i) REQUIRE(f.cte->PutBlob(7, static_cast<uint64_t>(i), 0, Random(200000, 40 + i)).ok());
  REQUIRE(f.cte->FlushTag(7).ok());
  for (int i = 0; i < 6; ++i) CHECK(f.Get(6, static_cast<uint64_t>(i), 0, 200000) == data[static_cast<size_t>(i)]);
}

TEST_CASE("a tier whose id does not match the metadata is refused") {
  CteFixture f;
  REQUIRE(f.cte->PutBlob(1, 0, 0, "x").ok());
  f.Close();
  std::filesystem::remove(f.dir + "/tier.dat");
  std::filesystem::remove(f.dir + "/tier.dat.alloc_log");
  KvOptions ko;
  ko.path = f.dir + "/md";
  auto kv = OpenRocksDbKv(ko);
  REQUIRE(kv.ok());
  auto c = Cte::Open(f.Config(64u << 20), kv->get());
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("file is missing") != std::string::npos);
}

TEST_CASE("concurrent writers to different blobs and the flusher agree") {
  CteFixture f(4u << 20);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        std::string d = Random(100000, static_cast<uint32_t>(t * 100 + i));
        CHECK(f.cte->PutBlob(static_cast<uint64_t>(t), static_cast<uint64_t>(i), 0, d).ok());
        if (i % 3 == 0) CHECK(f.cte->FlushTag(static_cast<uint64_t>(t)).ok());
      }
    });
  for (auto& t : ts) t.join();
  REQUIRE(f.cte->FlushAll().ok());
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 8; ++i)
      CHECK(f.Get(static_cast<uint64_t>(t), static_cast<uint64_t>(i), 0, 100000) ==
            Random(100000, static_cast<uint32_t>(t * 100 + i)));
}

TEST_CASE("a dirty blob truncated to nothing is removed, not left unflushable") {
  CteFixture f;
  REQUIRE(f.cte->PutBlob(8, 0, 8192, std::string(4096, 'd')).ok());  // RAM, dirty
  REQUIRE(f.cte->TruncateBlob(8, 0, 4096).ok());                     // clips every written byte
  CHECK(f.cte->FlushTag(8).ok());
  CHECK(f.cte->ListBlobs(8)->empty());
  CHECK(f.Get(8, 0, 0, 16384) == std::string(16384, '\0'));
}

TEST_CASE("once the CTE is closed, no index change can commit") {
  CteFixture f;
  REQUIRE(f.cte->PutBlob(1, 0, 0, "x").ok());
  REQUIRE(f.cte->Stop().ok());
  f.cte.reset();
  KvBatch b;
  b.Put(BlobKey(1, 1), "would name unsynced bytes");
  REQUIRE(f.kv->Apply(std::move(b)).ok());
  Status s = f.kv->Sync();
  CHECK(s.code() == Code::kUnavailable);
  CHECK(s.message().find("tiers are closed") != std::string::npos);
}

TEST_CASE("the allocator log is compacted at every start") {
  CteFixture f(1u << 20);
  std::string log = f.dir + "/tier.dat.alloc_log";
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 20; ++i) {
      REQUIRE(f.cte->PutBlob(2, static_cast<uint64_t>(i), 0, Random(50000, static_cast<uint32_t>(round * 100 + i))).ok());
      REQUIRE(f.cte->FlushTag(2).ok());
    }
    f.Close();
    f.Open();
  }
  uint64_t after_three = std::filesystem::file_size(log);
  f.Close();
  f.Open();
  CHECK(std::filesystem::file_size(log) == after_three);  // live set unchanged: same size
  for (int i = 0; i < 20; ++i) CHECK(f.Get(2, static_cast<uint64_t>(i), 0, 50000) == Random(50000, static_cast<uint32_t>(200 + i)));
}

TEST_CASE("CTE storage entries: bdev keys parsed by ParseBdevKeys, path and score by the CTE") {
  auto parse = [](const std::string& tiers) {
    std::string yaml = "runtime:\n  state_dir: /tmp/clio-cte-parse\ncompose:\n"
                       "  - mod_name: clio_cte_core\n    pool_name: cte\n    pool_id: \"512.0\"\n"
                       "    storage:\n" + tiers;
    auto cfg = ParseRuntimeConfig(yaml, "cte.yaml");
    REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
    return ParseCteConfig(cfg->compose.at(0), "cte.yaml");
  };
  auto ok = parse("      - path: \"ram::t1\"\n        bdev_type: ram\n        capacity_limit: 16MB\n"
                  "        alloc: lazy\n        score: 0.9\n        perf_metrics:\n"
                  "          iops: 7\n"
                  "      - path: /tmp/clio-cte-parse/tiers/t.dat\n        growth_unit: 4MB\n"
                  "        io_depth: 8\n        persistence_level: long_term\n");
  REQUIRE_MESSAGE(ok.ok(), ok.status().ToString());
  REQUIRE(ok->tiers.size() == 2);
  CHECK(ok->tiers[0].bdev.type == BdevType::kRam);
  CHECK(ok->tiers[0].bdev.capacity == (16u << 20));
  CHECK(ok->tiers[0].bdev.alloc == AllocPolicy::kLazy);
  CHECK(ok->tiers[0].bdev.perf->iops == 7);
  CHECK(ok->tiers[0].score == 0.9);
  CHECK(ok->tiers[1].bdev.type == BdevType::kFile);
  CHECK(ok->tiers[1].bdev.io_depth == 8);
  CHECK(*ok->tiers[1].bdev.persistence == Persistence::kLongTerm);

  auto bad = parse("      - path: \"ram::t1\"\n        bdev_type: ram\n        alignment: 1000\n");
  CHECK(bad.status().code() == Code::kConfigError);
  CHECK(bad.status().message().find("cte.yaml:") != std::string::npos);
  CHECK(bad.status().message().find("storage[0].alignment") != std::string::npos);
  CHECK(bad.status().message().find("ram::t1") != std::string::npos);
  auto score = parse("      - path: \"ram::t1\"\n        bdev_type: ram\n        score: 2\n");
  CHECK(score.status().message().find("score") != std::string::npos);

  // The compiled-in default config (etc/clio.yaml) stays valid for the CTE.
  auto def = ParseRuntimeConfig(DefaultConfigYaml(), "(defaults)");
  REQUIRE(def.ok());
  for (const ComposeEntry& e : def->compose) {
    if (e.mod_name != "clio_cte_core") continue;
    auto cte = ParseCteConfig(e, "(defaults)");
    REQUIRE_MESSAGE(cte.ok(), cte.status().ToString());
    CHECK(cte->tiers.size() == 2);
    CHECK(cte->tiers[0].bdev.alloc == AllocPolicy::kLazy);
    CHECK(cte->dirty_wait_ms == 10000);
    CHECK(cte->tiers[0].dirty_limit == (512ull << 20));
  }
}
