// Helpers shared by the placement tests (cte_test, writeback_test, movement_test).
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "placement/cte.h"
#include "storage/kv.h"

namespace clio::testing {

// `n` pseudo-random bytes of stream `seed`.
inline std::string Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

// Bytes [off, off+len) of a blob; the test fails if the read does.
inline std::string GetBytes(Cte* cte, uint64_t tag, uint64_t blob, uint64_t off, uint64_t len) {
  std::string out(len, '?');
  REQUIRE(cte->GetBlob(tag, blob, off, len, out.data()).ok());
  return out;
}

// A metadata store and a CTE in a temporary directory; the fixtures derived from it say which
// tiers. The store commits only when asked (the tests call Sync or stop the CTE).
struct CteHarness {
  std::string dir;
  std::unique_ptr<KvStore> kv;
  std::unique_ptr<Cte> cte;

  explicit CteHarness(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "_XXXXXX";
    dir = mkdtemp(tmpl.data());
  }
  ~CteHarness() {
    cte.reset();
    kv.reset();
    std::filesystem::remove_all(dir);
  }
  CteHarness(const CteHarness&) = delete;
  CteHarness& operator=(const CteHarness&) = delete;

  // The metadata store, opened first if it is not open.
  KvStore* OpenKv() {
    if (!kv) {
      KvOptions ko;
      ko.path = dir + "/md";
      ko.commit_interval_ms = 3600000;
      auto k = OpenRocksDbKv(ko);
      REQUIRE(k.ok());
      kv = std::move(k).value();
    }
    return kv.get();
  }
  // Opens the metadata store and a CTE over it, returning the CTE (or its error).
  Result<std::unique_ptr<Cte>> OpenWith(const CteConfig& config) { return Cte::Open(config, OpenKv()); }
  // OpenWith, and the CTE must open.
  void Start(const CteConfig& config) {
    auto c = OpenWith(config);
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    cte = std::move(c).value();
  }
  // The (first) tier of type `t`.
  TierInfo Tier(BdevType t) {
    for (auto& i : cte->ListTiers())
      if (i.stats.type == t) return i;
    FAIL("no such tier");
    return {};
  }
  // A clean stop of the CTE and the metadata store.
  void Stop() {
    REQUIRE(cte->Stop().ok());
    cte.reset();
    REQUIRE(kv->Close().ok());
    kv.reset();
  }
};

inline TierConfig RamTier(const std::string& name, uint64_t capacity, double score) {
  TierConfig t;
  t.bdev.name = name;
  t.bdev.type = BdevType::kRam;
  t.bdev.capacity = capacity;
  t.score = score;
  return t;
}

inline TierConfig FileTier(const std::string& path, uint64_t capacity, double score) {
  TierConfig t;
  t.bdev.name = path;
  t.bdev.type = BdevType::kFile;
  t.bdev.capacity = capacity;
  t.bdev.growth_unit = 4u << 20;
  t.score = score;
  return t;
}

}  // namespace clio::testing
