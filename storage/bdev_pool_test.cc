// The bdev module as a pool: its request handler, BdevClient inline (same process) and over
// the runtime's socket, and malformed requests answered with errors.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <limits>
#include <thread>

#include "common/codec.h"
#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/test_serving.h"
#include "storage/bdev_client.h"
#include "storage/bdev_pool.h"
#include "storage/bdev_protocol.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Pattern;
using clio::testing::TempDir;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

std::unique_ptr<BdevPool> RamPool(const std::string& tag, uint64_t capacity = 16 * kMiB) {
  BdevConfig c;
  c.name = "ram::pool_test_" + tag + "_" + std::to_string(::getpid());
  c.type = BdevType::kRam;
  c.capacity = capacity;
  c.alloc = AllocPolicy::kLazy;
  c.populate_unit = kMiB;
  auto b = Bdev::Open(c);
  REQUIRE_MESSAGE(b.ok(), b.status().ToString());
  return std::make_unique<BdevPool>(std::move(b).value());
}

// Drives every task of the interface through `client`.
void ExerciseClient(BdevClient& client, BdevType type) {
  auto e = client.Allocate(2 * kMiB + 100);
  REQUIRE_MESSAGE(e.ok(), e.status().ToString());
  CHECK(e->size() == 3);
  const std::string data = Pattern(2 * kMiB + 100, 5);
  auto w = client.Write(*e, 0, data);
  REQUIRE_MESSAGE(w.ok(), w.status().ToString());
  CHECK(*w == data.size());
  std::string back(data.size(), '\0');
  REQUIRE(client.Read(*e, 0, back.size(), back.data()).ok());
  CHECK(back == data);
  CHECK(client.Read(*e, TotalSize(*e), 1, back.data()).code() == Code::kOutOfRange);

  auto st = client.GetStats();
  REQUIRE_MESSAGE(st.ok(), st.status().ToString());
  CHECK(st->type == type);
  CHECK(st->used == TotalSize(*e));
  CHECK(st->committed >= st->used);
  REQUIRE(client.SetLifespan(42.5).ok());
  CHECK(client.GetStats()->lifetime_days == 42.5);
  CHECK(client.SetLifespan(-1).code() == Code::kInvalidArgument);
  CHECK(client.Sync().ok());
  CHECK(client.FlushAllocLog().ok());
  auto mon = client.Monitor();
  REQUIRE(mon.ok());
  CHECK(mon->find("\"used\":" + std::to_string(TotalSize(*e))) != std::string::npos);
  CHECK(mon->find("\"lifetime_days\":42.5") != std::string::npos);
  REQUIRE(client.Free(*e).ok());
  CHECK(client.Free(*e).code() == Code::kInternal);  // not allocated any more
  CHECK(client.GetStats()->used == 0);
}

}  // namespace

TEST_CASE("BdevClient in the runtime's process runs allocate/free/read/write inline") {
  auto pool = RamPool("inline");
  BdevClient client(pool.get());
  CHECK(client.inline_io());
  ExerciseClient(client, BdevType::kRam);
  // Update: a ram device holds no GPU memory.
  CHECK(client.Update().status().code() == Code::kNotSupported);
}

TEST_CASE("bdev pool: Update publishes pinned and hbm memory") {
  for (BdevType type : {BdevType::kPinned, BdevType::kHbm}) {
    BdevConfig c;
    c.name = std::string(BdevTypeName(type)) + "::update";
    c.type = type;
    c.capacity = 4 * kMiB;
    auto b = Bdev::Open(c);
    REQUIRE_MESSAGE(b.ok(), b.status().ToString());
    BdevPool pool(std::move(b).value());
    BdevClient client(&pool);
    auto g = client.Update();
    REQUIRE_MESSAGE(g.ok(), g.status().ToString());
    CHECK(g->size == 4 * kMiB);
    CHECK(g->address != 0);
    ExerciseClient(client, type);
  }
}

TEST_CASE("bdev pool: malformed requests are errors and change nothing") {
  auto pool = RamPool("bad");
  auto call = [&](BdevMethod m, std::string_view payload) {
    return pool->Handle(static_cast<uint32_t>(m), payload).status().code();
  };
  CHECK(call(BdevMethod::kAllocateBlocks, "") == Code::kCorruption);
  CHECK(call(BdevMethod::kAllocateBlocks, std::string(9, '\1')) == Code::kCorruption);
  Encoder zero;
  zero.Put<uint64_t>(0);
  CHECK(call(BdevMethod::kAllocateBlocks, zero.buffer()) == Code::kInvalidArgument);
  Encoder huge;
  huge.Put<uint64_t>(UINT64_MAX);
  CHECK(call(BdevMethod::kAllocateBlocks, huge.buffer()) == Code::kNoSpace);

  // An extent count larger than the message, a size that is not its class, overflow.
  Encoder many;
  many.Put<uint32_t>(0xffffffff);
  CHECK(call(BdevMethod::kFreeBlocks, many.buffer()) == Code::kCorruption);
  Encoder odd;
  odd.Put<uint32_t>(1).Put<uint64_t>(0).Put<uint64_t>(1000).Put<uint8_t>(10);
  CHECK(call(BdevMethod::kFreeBlocks, odd.buffer()) == Code::kInvalidArgument);
  Encoder wrap;
  wrap.Put<uint32_t>(1).Put<uint64_t>(UINT64_MAX - 10).Put<uint64_t>(512).Put<uint8_t>(9);
  CHECK(call(BdevMethod::kFreeBlocks, wrap.buffer()) == Code::kInvalidArgument);

  // A read of 1 TiB is refused before any buffer is made; one past the extents too.
  auto e = pool->bdev()->Allocate(4096);
  REQUIRE(e.ok());
  Encoder big;
  EncodeExtents(big, *e);
  big.Put<uint64_t>(0).Put<uint64_t>(1ull << 40);
  CHECK(call(BdevMethod::kRead, big.buffer()) == Code::kOutOfRange);
  Encoder past;
  EncodeExtents(past, *e);
  past.Put<uint64_t>(4000).Put<uint64_t>(200);
  CHECK(call(BdevMethod::kRead, past.buffer()) == Code::kOutOfRange);
  // A write whose extent lies past the device.
  Encoder far;
  EncodeExtents(far, ExtentList{{1ull << 40, 512}});
  far.Put<uint64_t>(0).PutBytes("hello");
  CHECK(call(BdevMethod::kWrite, far.buffer()) == Code::kOutOfRange);
  // Trailing bytes, unknown methods, unknown Monitor queries, bad lifespans.
  CHECK(call(BdevMethod::kGetStats, "x") == Code::kCorruption);
  CHECK(pool->Handle(99, "").status().code() == Code::kNotSupported);
  CHECK(pool->Handle(0, "").status().code() == Code::kNotSupported);
  Encoder q;
  q.PutBytes("everything");
  CHECK(call(BdevMethod::kMonitor, q.buffer()) == Code::kInvalidArgument);
  CHECK(pool->Handle(static_cast<uint32_t>(BdevMethod::kMonitor), "").ok());
  Encoder nan;
  nan.Put<double>(std::numeric_limits<double>::quiet_NaN());
  CHECK(call(BdevMethod::kSetLifespan, nan.buffer()) == Code::kInvalidArgument);
  // Nothing changed: only the one allocation above is live.
  CHECK(pool->bdev()->GetStats().used == TotalSize(*e));
}

TEST_CASE("BdevClient over the runtime's socket, to a pool composed from the config") {
  TempDir dir;
  const std::string ram = "ram::socket_" + std::to_string(::getpid());
  const std::string yaml = "runtime:\n  state_dir: " + dir.path() +
                           "\ncompose:\n"
                           "  - mod_name: clio_bdev\n    pool_name: \"" + ram + "\"\n"
                           "    pool_id: \"301.0\"\n    bdev_type: ram\n    capacity: 64MB\n"
                           "    alloc: lazy\n    populate_unit: 1MB\n"
                           "  - mod_name: clio_bdev\n    pool_name: \"" + dir.File("t.dat") + "\"\n"
                           "    pool_id: \"302.0\"\n    bdev_type: file\n    capacity: 128MB\n"
                           "    growth_unit: 4MB\n";
  auto cfg = ParseRuntimeConfig(yaml, "test.yaml");
  REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
  Runtime rt(std::move(cfg).value());
  rt.RegisterModule("clio_bdev", MakeBdevModuleFactory());
  REQUIRE(rt.Compose().ok());
  testing::ServingThread serve(&rt);

  {
    RuntimeClient::Options o;
    o.socket_path = rt.config().socket_path;
    auto rpc = RuntimeClient::Connect(o);
    REQUIRE(rpc.ok());
    auto client = BdevClient::Connect(rpc->get(), ram);
    REQUIRE_MESSAGE(client.ok(), client.status().ToString());
    CHECK_FALSE(client->inline_io());
    ExerciseClient(*client, BdevType::kRam);
    CHECK(client->Update().status().code() == Code::kNotSupported);

    // A write and a read larger than one request's limit are split by the client.
    auto e = client->Allocate(kMaxBdevIoBytes + 3 * kMiB);
    REQUIRE(e.ok());
    const std::string data = Pattern(kMaxBdevIoBytes + 2 * kMiB, 8);
    auto w = client->Write(*e, 1000, data);
    REQUIRE_MESSAGE(w.ok(), w.status().ToString());
    std::string back(data.size(), '\0');
    REQUIRE(client->Read(*e, 1000, back.size(), back.data()).ok());
    CHECK(back == data);
    REQUIRE(client->Free(*e).ok());

    auto file = BdevClient::Connect(rpc->get(), dir.File("t.dat"));
    REQUIRE(file.ok());
    ExerciseClient(*file, BdevType::kFile);
    CHECK(BdevClient::Connect(rpc->get(), "ram::nope").status().code() == Code::kNotFound);
  }
  serve.Stop();
  CHECK(rt.StopPools().ok());
}

TEST_CASE("a bdev pool's stats are readers'; its bytes, extents and settings the admin's") {
  auto pool = RamPool("callers");
  CHECK(pool->CallerOf(static_cast<uint32_t>(BdevMethod::kGetStats)) == CallerClass::kReader);
  CHECK(pool->CallerOf(static_cast<uint32_t>(BdevMethod::kMonitor)) == CallerClass::kReader);
  for (BdevMethod m : {BdevMethod::kRead, BdevMethod::kWrite, BdevMethod::kAllocateBlocks, BdevMethod::kFreeBlocks,
                       BdevMethod::kSetLifespan, BdevMethod::kSync})
    CHECK(pool->CallerOf(static_cast<uint32_t>(m)) == CallerClass::kAdmin);
}
