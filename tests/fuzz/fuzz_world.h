// Fuzz targets only: a real CTE over RocksDB in a temporary directory, with an 8 MiB RAM tier and
// a 32 MiB file tier, for the targets that drive the CTE or the filesystem above it.
#pragma once

#include <unistd.h>

#include <memory>
#include <string>

#include "placement/cte.h"
#include "storage/kv.h"

namespace clio::fuzz {

struct CteWorld {
  std::string dir;
  std::unique_ptr<KvStore> kv;
  std::unique_ptr<Cte> cte;
  explicit CteWorld(const std::string& name) {
    std::string tmpl = "/tmp/clio_fuzz_" + name + "_XXXXXX";
    dir = mkdtemp(tmpl.data());
    KvOptions ko;
    ko.path = dir + "/md";
    kv = std::move(OpenRocksDbKv(ko)).value();
    CteConfig c;
    TierConfig ram;
    ram.bdev.name = "ram::fuzz_" + name + "_" + std::to_string(getpid());
    ram.bdev.type = BdevType::kRam;
    ram.bdev.capacity = 8u << 20;
    ram.score = 1;
    TierConfig file;
    file.bdev.name = dir + "/tier.dat";
    file.bdev.capacity = 32u << 20;
    file.bdev.growth_unit = 4u << 20;
    file.score = 0.2;
    c.tiers = {ram, file};
    cte = std::move(Cte::Open(c, kv.get())).value();
  }
};

}  // namespace clio::fuzz
