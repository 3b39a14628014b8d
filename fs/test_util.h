// Tests of fs/: a namespace over a real CTE (a RAM tier and a file tier in a temp dir) and
// real RocksDB, restartable.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fs/namespace.h"
#include "placement/cte.h"
#include "storage/kv.h"

namespace clio::testing {

struct NsFixture {
  uint32_t flush_ms = 0;
  std::string dir;
  std::unique_ptr<KvStore> kv;
  std::unique_ptr<Cte> cte;
  std::unique_ptr<Namespace> ns;
  // flush_interval_ms: the CTE flusher's interval (0: the default).
  explicit NsFixture(uint32_t flush_interval_ms = 0) : flush_ms(flush_interval_ms) {
    char tmpl[] = "/tmp/clio_ns_XXXXXX";
    dir = mkdtemp(tmpl);
    Open();
  }
  void Open() {
    KvOptions ko;
    ko.path = dir + "/md";
    auto k = OpenRocksDbKv(ko);
    REQUIRE(k.ok());
    kv = std::move(k).value();
    CteConfig c;
    TierConfig ram;
    ram.bdev.name = "ram::ns_test_" + std::to_string(getpid());
    ram.bdev.type = BdevType::kRam;
    ram.bdev.capacity = 16u << 20;
    ram.score = 1;
    TierConfig file;
    file.bdev.name = dir + "/tier.dat";
    file.bdev.type = BdevType::kFile;
    file.bdev.capacity = 128u << 20;
    file.bdev.growth_unit = 8u << 20;
    file.score = 0.2;
    c.tiers = {ram, file};
    if (flush_ms != 0) c.flush_interval_ms = flush_ms;
    auto ct = Cte::Open(c, kv.get());
    REQUIRE_MESSAGE(ct.ok(), ct.status().ToString());
    cte = std::move(ct).value();
    auto n = Namespace::Open(kv.get(), cte.get(), 1u << 20);
    REQUIRE(n.ok());
    ns = std::move(n).value();
  }
  void Restart() {
    ns.reset();
    REQUIRE(cte->Stop().ok());
    cte.reset();
    REQUIRE(kv->Close().ok());
    kv.reset();
    Open();
  }
  ~NsFixture() {
    ns.reset();
    cte.reset();
    kv.reset();
    std::filesystem::remove_all(dir);
  }
  uint64_t Create(uint64_t parent, const char* name) {
    auto a = ns->Create(parent, name, 0644, 1000, 1000);
    REQUIRE_MESSAGE(a.ok(), a.status().ToString());
    REQUIRE(ns->Release(a->ino).ok());
    return a->ino;
  }
  std::vector<std::string> List(uint64_t dir_ino) {
    auto r = ns->ReadDir(dir_ino, "", 0);
    REQUIRE(r.ok());
    std::vector<std::string> names;
    for (auto& e : *r) names.push_back(e.name);
    return names;
  }
};

}  // namespace clio::testing
