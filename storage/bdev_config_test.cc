// ParseBdevKeys (storage/bdev_config.h) and the clio_bdev factory: every seed key with its
// default and validator, and bad input refused with the pool and the key named.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "daemon/config.h"
#include "storage/bdev_config.h"
#include "storage/bdev_pool.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::TempDir;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// A runtime config whose only compose entry is a clio_bdev pool with `keys` (YAML lines,
// indented by 4) added. Parsed config stays alive in `holder`.
struct Entry {
  RuntimeConfig cfg;
  const ComposeEntry& entry() const { return cfg.compose.at(0); }
};

Entry Compose(const std::string& pool_name, const std::string& keys) {
  std::string yaml = "runtime:\n  state_dir: /tmp/clio-bdev-config-test\ncompose:\n"
                     "  - mod_name: clio_bdev\n    pool_name: \"" + pool_name + "\"\n"
                     "    pool_id: \"301.0\"\n" + keys;
  auto r = ParseRuntimeConfig(yaml, "bdev.yaml");
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return Entry{std::move(r).value()};
}

// Parses through ParseBdevKeys directly, as the CTE does for a storage entry.
Result<BdevConfig> Keys(const std::string& name, const std::string& keys) {
  Entry e = Compose(name, keys);
  ConfigReader r(e.entry().node, "bdev.yaml");
  (void)r.String("mod_name", "");
  (void)r.String("pool_name", "");
  (void)r.String("pool_id", "");
  BdevConfig c;
  c.name = name;
  CLIO_RETURN_IF_ERROR(ParseBdevKeys(r, &c));
  CLIO_RETURN_IF_ERROR(r.Finish());
  return c;
}

// The error must name the config file, the pool, the key and (when given) the bad value.
void CheckRefused(const Status& s, const std::string& pool, const std::string& key,
                  const std::string& value = "") {
  CAPTURE(s.ToString());
  CHECK_FALSE(s.ok());
  CHECK(s.message().find("bdev.yaml:") != std::string::npos);
  CHECK(s.message().find(pool) != std::string::npos);
  CHECK(s.message().find(key) != std::string::npos);
  if (!value.empty()) CHECK(s.message().find(value) != std::string::npos);
}

}  // namespace

TEST_CASE("ParseBdevKeys: seed defaults when only the location is given") {
  auto c = Keys("/tmp/clio-bdev-config-test/t.dat", "");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->type == BdevType::kFile);
  CHECK(c->capacity == 0);
  CHECK(c->alloc == AllocPolicy::kAuto);
  CHECK(c->io_depth == 32);
  CHECK(c->alignment == 4096);
  CHECK(c->growth_unit == 1024 * kMiB);
  CHECK(c->populate_unit == 64 * kMiB);
  CHECK(c->alloc_log.empty());
  CHECK_FALSE(c->persistence.has_value());
  CHECK_FALSE(c->perf.has_value());
}

TEST_CASE("ParseBdevKeys: every key read") {
  TempDir dir;
  auto c = Keys(dir.File("t.dat"),
                "    bdev_type: FILE\n    capacity: 2GB\n    alloc: lazy\n    io_depth: 64\n"
                "    alignment: 8k\n    growth_unit: 256MiB\n    populate_unit: 4m\n"
                "    alloc_log: " + dir.File("t.log") + "\n    persistence_level: long_term\n"
                "    perf_metrics:\n      read_bandwidth_mbps: 3000\n      iops: 12.5\n");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->type == BdevType::kFile);
  CHECK(c->capacity == 2048 * kMiB);
  CHECK(c->alloc == AllocPolicy::kLazy);
  CHECK(c->io_depth == 64);
  CHECK(c->alignment == 8192);
  CHECK(c->growth_unit == 256 * kMiB);
  CHECK(c->populate_unit == 4 * kMiB);
  CHECK(c->alloc_log == dir.File("t.log"));
  CHECK(*c->persistence == Persistence::kLongTerm);
  REQUIRE(c->perf.has_value());
  CHECK(c->perf->read_bandwidth_mbps == 3000);
  CHECK(c->perf->iops == 12.5);
  // Sub-keys not given keep the type's default.
  CHECK(c->perf->write_bandwidth_mbps == DefaultPerfMetrics(BdevType::kFile).write_bandwidth_mbps);

  auto ram = Keys("ram::t", "    bdev_type: ram\n    capacity_limit: 0g\n    alloc: eager\n");
  REQUIRE_MESSAGE(ram.ok(), ram.status().ToString());
  CHECK(ram->type == BdevType::kRam);
  CHECK(ram->capacity == 0);
  CHECK(ram->alloc == AllocPolicy::kEager);
  auto lim = Keys("ram::t", "    bdev_type: ram\n    capacity_limit: 16MB\n    alignment: 0\n");
  REQUIRE(lim.ok());
  CHECK(lim->capacity == 16 * kMiB);
  CHECK(lim->alignment == 0);  // the transport's default
}

TEST_CASE("ParseBdevKeys: an unknown alloc policy falls back to auto (with a warning)") {
  auto c = Keys("ram::t", "    bdev_type: ram\n    alloc: sometimes\n");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->alloc == AllocPolicy::kAuto);
  CHECK(ResolveAllocPolicy(AllocPolicy::kAuto, 0) == AllocPolicy::kLazy);
  CHECK(ResolveAllocPolicy(AllocPolicy::kAuto, kMiB) == AllocPolicy::kEager);
  CHECK(ResolveAllocPolicy(AllocPolicy::kLazy, kMiB) == AllocPolicy::kLazy);
  CHECK(*ParseAllocPolicy("EAGER") == AllocPolicy::kEager);
  for (AllocPolicy p : {AllocPolicy::kAuto, AllocPolicy::kEager, AllocPolicy::kLazy})
    CHECK(*ParseAllocPolicy(AllocPolicyName(p)) == p);
}

TEST_CASE("ParseBdevKeys: bad input names the pool and the key") {
  CheckRefused(Keys("ram::p1", "    bdev_type: tape\n").status(), "ram::p1", "bdev_type", "tape");
  CheckRefused(Keys("ram::p1", "    bdev_type: s3\n").status(), "ram::p1", "pool_name",
               "bucket name 'ram::p1'");
  CheckRefused(Keys("bkt/pre", "    bdev_type: gcs\n").status(), "bkt/pre", "alloc_log",
               "required for gcs");
  CheckRefused(Keys("bkt", "    bdev_type: s3\n    alloc_log: /tmp/x.log\n"
                           "    persistence_level: volatile\n").status(),
               "bkt", "persistence_level", "cannot be volatile");
  CheckRefused(Keys("bkt", "    bdev_type: s3\n    alloc_log: /tmp/x.log\n"
                           "    request_timeout_ms: 0\n").status(),
               "bkt", "request_timeout_ms", "between 1 and");
  CheckRefused(Keys("bkt", "    bdev_type: s3\n    alloc_log: /tmp/x.log\n"
                           "    retry_budget_ms: 99999999\n").status(),
               "bkt", "retry_budget_ms", "at most");
  {
    auto ok = Keys("s3://bkt/p", "    bdev_type: s3\n    alloc_log: /tmp/x.log\n"
                                 "    request_timeout_ms: 1500\n    retry_budget_ms: 0\n");
    REQUIRE_MESSAGE(ok.ok(), ok.status().ToString());
    CHECK(ok->type == BdevType::kS3);
    CHECK(ok->request_timeout_ms == 1500);
    CHECK(ok->retry_budget_ms == 0);
  }
  CheckRefused(Keys("ram::p2", "    bdev_type: ram\n    capacity: 12XB\n").status(), "ram::p2",
               "capacity", "12XB");
  CheckRefused(Keys("ram::p2", "    bdev_type: ram\n    capacity: -1G\n").status(), "ram::p2",
               "capacity", "negative");
  CheckRefused(Keys("ram::p2", "    bdev_type: ram\n    capacity_limit: -5\n").status(),
               "ram::p2", "capacity_limit", "negative");
  CheckRefused(Keys("ram::p2", "    capacity: 1G\n    capacity_limit: 1G\n").status(), "ram::p2",
               "capacity_limit");
  CheckRefused(Keys("ram::p2", "    bdev_type: ram\n    populate_unit: lots\n").status(),
               "ram::p2", "populate_unit", "lots");
  CheckRefused(Keys("/tmp/x.dat", "    growth_unit: 0\n").status(), "/tmp/x.dat", "growth_unit");
  CheckRefused(Keys("ram::p3", "    bdev_type: ram\n    alignment: 3000\n").status(), "ram::p3",
               "alignment", "power of two");
  CheckRefused(Keys("ram::p3", "    bdev_type: ram\n    alignment: 256\n").status(), "ram::p3",
               "alignment");
  CheckRefused(Keys("ram::p3", "    bdev_type: ram\n    alignment: 2m\n").status(), "ram::p3",
               "alignment");
  CheckRefused(Keys("ram::p4", "    io_depth: 0\n").status(), "ram::p4", "io_depth");
  CheckRefused(Keys("ram::p4", "    io_depth: -3\n").status(), "ram::p4", "io_depth", "-3");
  CheckRefused(Keys("ram::p4", "    io_depth: 99999\n").status(), "ram::p4", "io_depth");
  CheckRefused(Keys("ram::p5", "    persistence_level: forever\n").status(), "ram::p5",
               "persistence_level", "forever");
  CheckRefused(Keys("ram::p5", "    bdev_type: ram\n    persistence_level: temporary\n").status(),
               "ram::p5", "persistence_level", "volatile");
  CheckRefused(Keys("ram::p6", "    bdev_type: ram\n    perf_metrics:\n      speed: 3\n").status(),
               "ram::p6", "speed");
  CheckRefused(Keys("ram::p6", "    bdev_type: ram\n    perf_metrics: fast\n").status(),
               "ram::p6", "perf_metrics");
  CheckRefused(
      Keys("ram::p6", "    bdev_type: ram\n    perf_metrics:\n      iops: -1\n").status(),
      "ram::p6", "iops", "negative");
  CheckRefused(
      Keys("ram::p6", "    bdev_type: ram\n    perf_metrics:\n      iops: many\n").status(),
      "ram::p6", "iops", "many");
  // An unknown key is refused by the caller's Finish().
  CheckRefused(Keys("ram::p7", "    bdev_type: ram\n    capacityy: 1G\n").status(), "", "capacityy");
}

TEST_CASE("ParseBdevKeys: a file path below a file, or in a directory not writable") {
  TempDir dir;
  { std::ofstream(dir.File("plain")) << "x"; }
  // A file used as a directory.
  const std::string below_file = dir.File("plain") + "/sub/tier.dat";
  CheckRefused(Keys(below_file, "").status(), below_file, "pool_name", "not a directory");
  CheckRefused(Keys("ram::x", "    bdev_type: ram\n    alloc_log: " + below_file + "\n").status(),
               "ram::x", "alloc_log", "not a directory");
  // A read-only directory (root passes access(), so only an unprivileged run can see it).
  if (::geteuid() != 0) {
    const std::string ro = dir.File("ro");
    REQUIRE(::mkdir(ro.c_str(), 0555) == 0);
    CheckRefused(Keys(ro + "/tier.dat", "").status(), ro, "pool_name", "not writable");
  }
  // A missing directory whose parent can be created is fine: it is created at Open.
  CHECK(Keys(dir.File("new/deeper/tier.dat"), "").ok());
}

TEST_CASE("clio_bdev factory: a compose entry becomes a pool; bad devices name pool and key") {
  TempDir dir;
  struct NoRegistry : PoolRegistry {
    Pool* FindByName(std::string_view) override { return nullptr; }
    Pool* FindById(uint32_t) override { return nullptr; }
  } registry;
  ModuleFactory factory = MakeBdevModuleFactory();

  Entry ok = Compose("ram::factory_" + std::to_string(::getpid()),
                     "    bdev_type: ram\n    capacity: 4MB\n    alloc: lazy\n");
  auto pool = factory(ok.entry(), "bdev.yaml", registry);
  REQUIRE_MESSAGE(pool.ok(), pool.status().ToString());
  auto* bp = dynamic_cast<BdevPool*>(pool->get());
  REQUIRE(bp != nullptr);
  CHECK(bp->bdev()->GetStats().capacity == 4 * kMiB);
  CHECK(bp->bdev()->config().alloc == AllocPolicy::kLazy);

  Entry file = Compose(dir.File("tiers/t.dat"), "    bdev_type: file\n    capacity: 8MB\n"
                                                "    growth_unit: 1MB\n");
  auto fp = factory(file.entry(), "bdev.yaml", registry);
  REQUIRE_MESSAGE(fp.ok(), fp.status().ToString());

  auto refused = [&](const std::string& name, const std::string& keys, const std::string& key,
                     const std::string& value) {
    Entry e = Compose(name, keys);
    auto p = factory(e.entry(), "bdev.yaml", registry);
    CheckRefused(p.status(), name, key, value);
  };
  refused("ram::bad1", "    bdev_type: tape\n", "bdev_type", "tape");
  refused("ram::bad2", "    bdev_type: ram\n    capacity: 1.5.2G\n", "capacity", "1.5.2G");
  refused("ram::bad3", "    bdev_type: ram\n    capacity: -2G\n", "capacity", "negative");
  refused("ram::bad4", "    bdev_type: ram\n    alignment: 1000\n", "alignment", "power of two");
  refused("ram::bad5", "    bdev_type: ram\n    mystery: 1\n", "mystery", "unknown key");
  refused("gpu::h0", "    bdev_type: hbm\n", "pool_name", "capacity");  // hbm needs a capacity
  // A file used as a directory: refused while parsing.
  { std::ofstream(dir.File("plain")) << "x"; }
  refused(dir.File("plain") + "/t.dat", "", "pool_name", "not a directory");
  // A directory nobody can create files in, even root: refused by the open at creation.
  refused("/proc/clio-bdev-test/t.dat", "    bdev_type: file\n", "pool_name", "/proc/clio-bdev-test");
}
