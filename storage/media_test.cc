// The media table (storage/media.h): every medium CLIO ships answers the questions the layers
// above ask, and a medium added here, without a line outside storage/, is parsed from a
// config, opened, named per node and described like a built-in one.
#include <doctest/doctest.h>

#include <atomic>
#include <set>
#include <string>

#include "daemon/config.h"
#include "storage/bdev.h"
#include "storage/bdev_base.h"
#include "storage/bdev_config.h"
#include "storage/bdev_protocol.h"
#include "storage/media.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::TempDir;

namespace {

// A medium of its own: a local file under another name and figures, opened by the file
// transport (as a new medium reuses what fits).
constexpr BdevType kFakeType = static_cast<BdevType>(200);
std::atomic<int> g_fake_opens{0};

Result<std::unique_ptr<Bdev>> OpenFake(const BdevConfig& c) {
  ++g_fake_opens;
  return OpenFileBdev(c);
}

const Medium kFake{kFakeType, "fakedisk", MediumKind::kFile, {555, 444, 33, 22, 1111}, OpenFake};

Result<BdevConfig> ParseEntry(const std::string& name, const std::string& keys) {
  const std::string yaml = "runtime:\n  state_dir: /tmp/clio-media-test\ncompose:\n"
                           "  - mod_name: clio_bdev\n    pool_name: \"" + name + "\"\n"
                           "    pool_id: \"301.0\"\n" + keys;
  CLIO_ASSIGN_OR_RETURN(RuntimeConfig cfg, ParseRuntimeConfig(yaml, "media.yaml"));
  ConfigReader r(cfg.compose.at(0).node, "media.yaml");
  (void)r.String("mod_name", "");
  (void)r.String("pool_name", "");
  (void)r.String("pool_id", "");
  BdevConfig c;
  c.name = name;
  CLIO_RETURN_IF_ERROR(ParseBdevKeys(r, &c));
  CLIO_RETURN_IF_ERROR(r.Finish());
  return c;
}

}  // namespace

TEST_CASE("the shipped media: names, kinds and the answers placement asks") {
  std::set<std::string> names;
  for (const Medium* m : AllMedia()) {
    CAPTURE(m->name);
    names.insert(std::string(m->name));
    CHECK(FindMedium(m->type) == m);
    CHECK(FindMedium(m->name) == m);
    CHECK(DefaultPersistence(m->type) ==
          (m->kind == MediumKind::kMemory ? Persistence::kVolatile : Persistence::kTemporary));
  }
  CHECK(names.size() == AllMedia().size());
  CHECK(IsMemoryMedium(BdevType::kRam));
  CHECK(IsMemoryMedium(BdevType::kNoop));
  CHECK(IsObjectMedium(BdevType::kGcs));
  CHECK(IsFileMedium(BdevType::kFile));
  CHECK(LeavesFile(BdevType::kFile));
  CHECK_FALSE(LeavesFile(BdevType::kS3));
  BdevConfig obj;
  obj.type = BdevType::kS3;
  obj.name = "s3://b/p";
  obj.alloc_log = "/var/lib/clio/b.alloc_log";
  CHECK(LocalStateFile(obj) == "/var/lib/clio/b.alloc_log");
  BdevConfig ram;
  ram.type = BdevType::kRam;
  ram.name = "ram::x";
  CHECK(LocalStateFile(ram).empty());
  CHECK(FindMedium(static_cast<BdevType>(199)) == nullptr);
  CHECK_FALSE(IsMemoryMedium(static_cast<BdevType>(199)));
}

TEST_CASE("a medium added inside storage/ is parsed, opened, named and described like a built-in one") {
  REQUIRE(RegisterMedium(kFake).ok());
  // Taken type or name: refused.
  CHECK(RegisterMedium(kFake).code() == Code::kAlreadyExists);
  Medium same_name = kFake;
  same_name.type = static_cast<BdevType>(201);
  same_name.name = "FILE";
  CHECK(RegisterMedium(same_name).code() == Code::kAlreadyExists);

  CHECK(*ParseBdevType("FakeDisk") == kFakeType);
  CHECK(BdevTypeName(kFakeType) == "fakedisk");
  CHECK(ParseBdevType("tape").status().message().find("fakedisk") != std::string::npos);

  TempDir dir;
  const std::string path = dir.File("fake.dat");
  auto c = ParseEntry(path, "    bdev_type: fakedisk\n    capacity: 64MB\n    growth_unit: 8MB\n");
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK(c->type == kFakeType);
  // Its kind's rules: a file may be long_term (a memory medium may not).
  auto lt = ParseEntry(path, "    bdev_type: fakedisk\n    persistence_level: long_term\n");
  REQUIRE_MESSAGE(lt.ok(), lt.status().ToString());
  CHECK(*lt->persistence == Persistence::kLongTerm);
  CHECK_FALSE(ParseEntry("ram::x", "    bdev_type: ram\n    persistence_level: long_term\n").ok());

  const int before = g_fake_opens.load();
  auto b = Bdev::Open(*c);
  REQUIRE_MESSAGE(b.ok(), b.status().ToString());
  CHECK(g_fake_opens.load() == before + 1);
  const BdevStats st = (*b)->GetStats();
  CHECK(st.type == kFakeType);
  CHECK(st.persistence == Persistence::kTemporary);
  CHECK(st.perf.read_bandwidth_mbps == 555);
  CHECK(st.perf.iops == 1111);

  // Its stats cross the wire; a type this process does not know is refused, naming it.
  auto wired = DecodeBdevStats(EncodeBdevStats(st));
  REQUIRE_MESSAGE(wired.ok(), wired.status().ToString());
  CHECK(wired->type == kFakeType);
  BdevStats unknown = st;
  unknown.type = static_cast<BdevType>(199);
  auto refused = DecodeBdevStats(EncodeBdevStats(unknown));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("medium type 199") != std::string::npos);

  // What placement and the CLI ask of it.
  CHECK(DefaultPerfMetrics(kFakeType).write_bandwidth_mbps == 444);
  CHECK(LocalStateFile(*c) == path);
  CHECK(NodeTierName(path, kFakeType, 3) == path + "_node3");
  CHECK(LeavesFile(kFakeType));
  CHECK_FALSE(IsMemoryMedium(kFakeType));
}
