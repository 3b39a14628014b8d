// The safe-bdev as a pool: composed from a config over clio_bdev pools, serving the bdev task
// interface and its own methods (AddBdev, RemoveBdev, RecoverBdev, Monitor), and compose
// errors that name the file, line, key and member.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "daemon/config.h"
#include "storage/bdev_protocol.h"
#include "storage/safe/safe_pool.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::RandomBytes;
using clio::testing::TempDir;

namespace {

// The runtime's registry in miniature: pools in compose order, found by name or id.
class Registry : public PoolRegistry {
 public:
  Pool* FindByName(std::string_view name) override {
    for (auto& p : pools_)
      if (p->name() == name) return p.get();
    return nullptr;
  }
  Pool* FindById(uint32_t id) override {
    for (auto& p : pools_)
      if (p->id() == id) return p.get();
    return nullptr;
  }
  // Composes every entry of `yaml` in order; returns the first error.
  Status Compose(const std::string& yaml) {
    auto cfg = ParseRuntimeConfig(yaml, "safe.yaml");
    if (!cfg.ok()) return cfg.status();
    cfg_ = std::move(cfg).value();
    for (const ComposeEntry& e : cfg_.compose) {
      ModuleFactory f = e.mod_name == "clio_bdev" ? MakeBdevModuleFactory() : MakeSafeBdevModuleFactory();
      auto p = f(e, "safe.yaml", *this);
      if (!p.ok()) return p.status();
      (*p)->SetIdentity(e.mod_name, e.pool_name, e.pool_major);
      pools_.push_back(std::move(p).value());
    }
    return Status::Ok();
  }
  ~Registry() override {
    while (!pools_.empty()) pools_.pop_back();  // reverse compose order, as the runtime stops them
  }

 private:
  RuntimeConfig cfg_;
  std::vector<std::unique_ptr<Pool>> pools_;
};

std::string Members(const TempDir& dir, int count, const std::string& capacity = "4MB") {
  std::string out;
  for (int i = 0; i < count; ++i) {
    out += "  - mod_name: clio_bdev\n    pool_name: \"" + dir.File("m" + std::to_string(i)) + "\"\n    pool_id: \"30" +
           std::to_string(i + 1) + ".0\"\n    bdev_type: file\n    capacity: \"" + (i == 4 ? "4MB" : capacity) + "\"\n";
  }
  return out;
}

std::string Yaml(const TempDir& dir, const std::string& members, const std::string& safe_keys) {
  return "runtime:\n  state_dir: \"" + dir.path() + "\"\ncompose:\n" + members +
         "  - mod_name: clio_safe_bdev\n    pool_name: \"safe::array0\"\n    pool_id: \"310.0\"\n" + safe_keys;
}

const std::string kKeys =
    "    members: [\"301.0\", \"302.0\", \"303.0\", \"304.0\"]\n"
    "    spares: []\n"
    "    max_failures: 1\n"
    "    chunk_size: \"16KB\"\n"
    "    journal_size: \"8MB\"\n"
    "    rebuild_bandwidth: 0\n"
    "    health_interval_ms: 3600000\n";

}  // namespace

TEST_CASE("a clio_safe_bdev pool serves the bdev tasks and AddBdev, RemoveBdev, RecoverBdev, Monitor") {
  TempDir dir;
  Registry reg;
  const std::string keys = kKeys + "    alloc_log: \"" + dir.File("safe.alloc_log") + "\"\n";
  Status s = reg.Compose(Yaml(dir, Members(dir, 5), keys));
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  auto* pool = dynamic_cast<SafeBdevPool*>(reg.FindById(310));
  REQUIRE(pool != nullptr);
  Bdev* b = pool->bdev();

  // The bdev task interface, over the wire format.
  Encoder alloc;
  alloc.Put<uint64_t>(100000);
  auto extents_bytes = pool->Handle(static_cast<uint32_t>(BdevMethod::kAllocateBlocks), alloc.buffer());
  REQUIRE(extents_bytes.ok());
  Decoder ed(*extents_bytes);
  ExtentList extents;
  REQUIRE(DecodeExtents(ed, &extents).ok());
  const std::string data = RandomBytes(100000, 3);
  Encoder w;
  EncodeExtents(w, extents);
  w.Put<uint64_t>(0).PutBytes(data);
  REQUIRE(pool->Handle(static_cast<uint32_t>(BdevMethod::kWrite), w.buffer()).ok());
  auto stats = DecodeBdevStats(*pool->Handle(static_cast<uint32_t>(BdevMethod::kGetStats), ""));
  REQUIRE(stats.ok());
  CHECK(stats->health == "ok");
  CHECK(stats->backend == "safe 3+1");

  auto monitor = [&] {
    auto j = pool->Handle(static_cast<uint32_t>(BdevMethod::kMonitor), "");
    REQUIRE(j.ok());
    return nlohmann::json::parse(*j);
  };
  nlohmann::json j = monitor();
  CHECK(j["k"] == 3);
  CHECK(j["m"] == 1);
  CHECK(j["members"].size() == 4);
  CHECK(j["members"][2]["name"] == dir.File("m2"));
  CHECK(j["degraded"] == false);

  Encoder rm;
  rm.PutBytes(dir.File("m2")).PutBytes("replaced by the test");
  REQUIRE(pool->Handle(static_cast<uint32_t>(SafeBdevMethod::kRemoveBdev), rm.buffer()).ok());
  j = monitor();
  CHECK(j["degraded"] == true);
  CHECK(j["members"][2]["state"] == "failed");
  stats = DecodeBdevStats(*pool->Handle(static_cast<uint32_t>(BdevMethod::kGetStats), ""));
  CHECK(stats->health.find("degraded: member '" + dir.File("m2") + "' failed (removed by the operator: replaced by "
                           "the test)") == 0);
  std::string back(data.size(), '\0');
  REQUIRE(b->Read(extents, 0, back.size(), back.data()).ok());
  CHECK(back == data);

  // AddBdev by pool id: the failed slot rebuilds onto it.
  Encoder add;
  add.PutBytes("305.0");
  REQUIRE(pool->Handle(static_cast<uint32_t>(SafeBdevMethod::kAddBdev), add.buffer()).ok());
  REQUIRE(pool->array()->WaitRebuilds().ok());
  j = monitor();
  CHECK(j["degraded"] == false);
  CHECK(j["members"][2]["name"] == dir.File("m4"));
  CHECK(j["rebuilds_done"] == 1);
  REQUIRE(b->Read(extents, 0, back.size(), back.data()).ok());
  CHECK(back == data);

  // Errors name what is wrong; malformed payloads are refused.
  Encoder rec;
  rec.PutBytes("/no/member").PutBytes("301.0");
  auto r = pool->Handle(static_cast<uint32_t>(SafeBdevMethod::kRecoverBdev), rec.buffer());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(r.status().message().find("no member '/no/member'") != std::string::npos);
  Encoder ghost;
  ghost.PutBytes("399.0");
  r = pool->Handle(static_cast<uint32_t>(SafeBdevMethod::kAddBdev), ghost.buffer());
  CHECK(r.status().message().find("no pool 399.0") != std::string::npos);
  Encoder self;
  self.PutBytes("310.0");
  r = pool->Handle(static_cast<uint32_t>(SafeBdevMethod::kAddBdev), self.buffer());
  CHECK(r.status().message().find("members are clio_bdev pools") != std::string::npos);
  CHECK(pool->Handle(static_cast<uint32_t>(SafeBdevMethod::kRecoverBdev), "\x05").status().code() == Code::kCorruption);
  CHECK(pool->Handle(static_cast<uint32_t>(BdevMethod::kMonitor), std::string("\x03\0\0\0abc", 7)).status().code() ==
        Code::kInvalidArgument);
}

TEST_CASE("clio_safe_bdev compose errors name the file, line, key and member") {
  TempDir dir;
  const std::string log = "    alloc_log: \"" + dir.File("safe.alloc_log") + "\"\n";
  auto err = [&](const std::string& members, const std::string& keys) {
    Registry reg;
    Status s = reg.Compose(Yaml(dir, members, keys));
    REQUIRE(!s.ok());
    return s.message();
  };
  auto replace = [](std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
  };
  const std::string four = Members(dir, 4);
  std::string m = err(four, replace(kKeys, "    members: [\"301.0\", \"302.0\", \"303.0\", \"304.0\"]\n", "") + log);
  CHECK(m.find("safe.yaml:") == 0);
  CHECK(m.find("compose[4].members: required") != std::string::npos);
  m = err(four, replace(kKeys, "\"304.0\"]", "\"309.0\"]") + log);
  CHECK(m.find("compose[4].members: no pool 309.0 is composed before this one") != std::string::npos);
  m = err(four, replace(kKeys, "max_failures: 1", "max_failures: 0") + log);
  CHECK(m.find("compose[4].max_failures: must be at least 1") != std::string::npos);
  m = err(four, replace(kKeys, "max_failures: 1", "max_failures: 4") + log);
  CHECK(m.find("max_failures: 4 leaves no data member among 4 members") != std::string::npos);
  m = err(four, replace(kKeys, "\"16KB\"", "\"1KB\"") + log);
  CHECK(m.find("chunk_size: must be between 4KB and 16MB") != std::string::npos);
  m = err(four, kKeys + log + "    stripe_size: 4\n");
  CHECK(m.find("stripe_size") != std::string::npos);
  m = err(four, kKeys);  // no alloc_log for file members
  CHECK(m.find("compose[4].alloc_log: safe-bdev 'safe::array0': required") != std::string::npos);
  m = err(four, replace(kKeys, "\"302.0\", \"303.0\"", "\"302.0\", \"302.0\"") + log);
  CHECK(m.find("compose[4].members: safe-bdev 'safe::array0': '" + dir.File("m1") + "' is listed twice") !=
        std::string::npos);
  // Members of unequal size: the odd one is named.
  std::string odd = Members(dir, 3) + "  - mod_name: clio_bdev\n    pool_name: \"" + dir.File("big") +
                    "\"\n    pool_id: \"304.0\"\n    bdev_type: file\n    capacity: \"8MB\"\n";
  m = err(odd, kKeys + log);
  CHECK(m.find("compose[4].members: safe-bdev 'safe::array0': '" + dir.File("big") + "' has capacity 8388608") !=
        std::string::npos);
}
