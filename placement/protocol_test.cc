// The typed CTE, bdev, safe-bdev and admin messages keep the bytes the hand-built encoders
// sent (docs/ipc.md), so a client and a runtime of either side of the change understand each
// other; and every method has a caller class.
#include <doctest/doctest.h>

#include "daemon/admin_protocol.h"
#include "placement/cte_protocol.h"
#include "storage/bdev_protocol.h"
#include "storage/safe/safe_protocol.h"

namespace clio {
namespace {

std::string U64(uint64_t v) { return Encoder().Put(v).Take(); }

TEST_CASE("bdev requests and replies keep their wire bytes") {
  const ExtentList extents{{4096, 4096}, {1 << 20, 512}};
  Encoder x;
  x.Put<uint32_t>(2).Put<uint64_t>(4096).Put<uint64_t>(4096).Put<uint8_t>(12);
  x.Put<uint64_t>(1 << 20).Put<uint64_t>(512).Put<uint8_t>(9);
  const std::string ext = x.Take();

  CHECK(wire::Encode(bdevproto::Write{{extents}, 100, "data"}) == ext + U64(100) + Encoder().PutBytes("data").Take());
  CHECK(wire::Encode(bdevproto::Read{{extents}, 7, 9}) == ext + U64(7) + U64(9));
  CHECK(wire::Encode(bdevproto::FreeBlocks{{extents}}) == ext);
  CHECK(wire::Encode(bdevproto::AllocateBlocks{8192}) == U64(8192));
  CHECK(wire::Encode(bdevproto::SetLifespan{1.5}) == Encoder().Put<double>(1.5).Take());
  CHECK(wire::Encode(bdevproto::Monitor{}).empty());
  CHECK(wire::Encode(bdevproto::Monitor{{"stats"}}) == Encoder().PutBytes("stats").Take());
  CHECK(wire::Encode(bdevproto::ExtentsReply{{extents}}) == ext);
  CHECK(wire::Encode(bdevproto::WriteReply{4}) == U64(4));

  const std::string write = ext + U64(100) + Encoder().PutBytes("data").Take();
  auto back = wire::Decode<bdevproto::Write>(write);  // its data is a view into `write`
  REQUIRE(back.ok());
  CHECK(back->extents.list == extents);
  CHECK(back->data == "data");
  // An extent whose size does not match its class is refused as such, naming the request.
  Encoder bad;
  bad.Put<uint32_t>(1).Put<uint64_t>(0).Put<uint64_t>(4096).Put<uint8_t>(11);
  auto refused = wire::Decode<bdevproto::FreeBlocks>(bad.buffer());
  CHECK(refused.status().code() == Code::kInvalidArgument);
  CHECK(refused.status().message().find("clio_bdev FreeBlocks: extent 0") == 0);
}

TEST_CASE("CTE requests and replies keep their wire bytes") {
  CHECK(wire::Encode(cteproto::SetLifespan{3, 2.0}) == U64(3) + Encoder().Put<double>(2.0).Take());
  for (const std::string& w : {wire::Encode(cteproto::Drain{5}), wire::Encode(cteproto::Undrain{5}),
                               wire::Encode(cteproto::GetDrainProgress{5}), wire::Encode(cteproto::RemoveTier{5})})
    CHECK(w == U64(5));
  CHECK(wire::Encode(cteproto::ListTiers{}).empty());
  // A tier spec travels as it is, with no length in front.
  const std::string spec = "\x01 any spec bytes";
  CHECK(wire::Encode(cteproto::AddTier{{spec}}) == spec);
  CHECK(wire::Decode<cteproto::AddTier>(spec)->spec.bytes == spec);

  TierInfo t;
  t.name = "ram::fast";
  t.tier_id = 2;
  t.score = 0.9;
  t.stats.type = BdevType::kRam;
  t.stats.persistence = Persistence::kVolatile;
  t.stats.capacity = 100;
  t.stats.remaining = 60;
  t.stats.used = 40;
  t.stats.lifetime_days = 3;
  t.stats.backend = "shm";
  t.stats.health = "ok";
  Encoder e;
  e.Put<uint32_t>(1).PutBytes("ram::fast").Put<uint64_t>(2).Put<double>(0.9);
  e.Put<uint8_t>(static_cast<uint8_t>(BdevType::kRam)).Put<uint8_t>(static_cast<uint8_t>(Persistence::kVolatile));
  e.Put<uint64_t>(100).Put<uint64_t>(60).Put<uint64_t>(40).Put<double>(3).PutBytes("shm").PutBytes("ok");
  CHECK(wire::Encode(cteproto::TierListReply{{t}}) == e.buffer());
  auto tiers = DecodeTierList(e.buffer());
  REQUIRE(tiers.ok());
  REQUIRE(tiers->size() == 1);
  CHECK(tiers->front().name == "ram::fast");
  CHECK(tiers->front().stats.used == 40);
  // A medium this build does not know: refused, not guessed.
  std::string unknown = e.buffer();
  unknown[4 + 4 + 9 + 8 + 8] = static_cast<char>(250);
  CHECK(DecodeTierList(unknown).status().message().find("tier list: medium type 250 is unknown") == 0);
  // A count the payload cannot hold.
  CHECK(DecodeTierList(Encoder().Put<uint32_t>(1000).Take()).status().code() == Code::kCorruption);

  DrainProgress p{true, 10, 20, 30};
  CHECK(wire::Encode(cteproto::DrainProgressReply{p}) == Encoder().Put<uint8_t>(1).Take() + U64(10) + U64(20) + U64(30));
  CHECK(DecodeDrainProgress(Encoder().Put<uint8_t>(2).Take() + U64(0) + U64(0) + U64(0)).status().code() ==
        Code::kCorruption);
}

TEST_CASE("admin and safe-bdev requests and replies keep their wire bytes") {
  CHECK(wire::Encode(adminproto::CreatePools{"src", "yaml: 1"}) == Encoder().PutBytes("src").PutBytes("yaml: 1").Take());
  CHECK(wire::Encode(adminproto::FindPool{"clio_fs"}) == Encoder().PutBytes("clio_fs").Take());
  CHECK(wire::Encode(adminproto::Hello{"nonce"}) == Encoder().PutBytes("nonce").Take());
  CHECK(wire::Encode(adminproto::Prove{"proof"}) == Encoder().PutBytes("proof").Take());
  CHECK(wire::Encode(adminproto::OpenChannel{1 << 20}) == Encoder().Put<uint32_t>(1 << 20).Take());
  CHECK(wire::Encode(adminproto::PoolListReply{{{7, "a", "m", "d"}}}) ==
        Encoder().Put<uint32_t>(1).Put<uint32_t>(7).PutBytes("a").PutBytes("m").PutBytes("d").Take());
  RuntimeStats s;
  s.pid = 1;
  s.worker_threads = 2;
  s.async_tasks = 3;
  const std::string stats = wire::Encode(adminproto::RuntimeStatsReply{s});
  CHECK(stats.size() == 8 + 8 + 4 + 8 + 4 + 8 * 4 + 4 + 8 + 4 + 8 + 8);
  CHECK(DecodeRuntimeStats(stats)->async_tasks == 3);
  CHECK(DecodeRuntimeStats(stats.substr(1)).status().code() == Code::kCorruption);

  CHECK(wire::Encode(safeproto::RemoveBdev{"m1", "worn"}) == Encoder().PutBytes("m1").PutBytes("worn").Take());
  CHECK(wire::Encode(safeproto::VerifyReply{4}) == U64(4));
}

TEST_CASE("every method of every protocol has a caller class, and changes are the admin's") {
  // The reports; everything else that names a method is the admin's.
  CHECK(DeclaredCaller<bdevproto::AllRequests>(static_cast<uint32_t>(BdevMethod::kGetStats)) == CallerClass::kReader);
  CHECK(DeclaredCaller<bdevproto::AllRequests>(static_cast<uint32_t>(BdevMethod::kRead)) == CallerClass::kAdmin);
  CHECK(DeclaredCaller<cteproto::AllRequests>(static_cast<uint32_t>(CteMethod::kListTiers)) == CallerClass::kReader);
  CHECK(DeclaredCaller<cteproto::AllRequests>(static_cast<uint32_t>(CteMethod::kAddTier)) == CallerClass::kAdmin);
  CHECK(AdminCallerOf(static_cast<uint32_t>(AdminMethod::kPing)) == CallerClass::kReader);
  CHECK(AdminCallerOf(static_cast<uint32_t>(AdminMethod::kCreatePools)) == CallerClass::kAdmin);
  CHECK(AdminCallerOf(999) == CallerClass::kAdmin);
  for (uint32_t m = 0; m < 40; ++m) {
    bool named = false;
    wire::VisitRequest<safeproto::AllRequests>(m, [&](auto t) { named = decltype(t)::type::kCaller == CallerClass::kAdmin; });
    CHECK(named == (m >= 20 && m <= 23));
  }
}

}  // namespace
}  // namespace clio
