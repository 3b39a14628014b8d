// The s3 and gcs bdev transports against the stand-ins: blocks as objects, zero-fill of
// never-written blocks, a missing object of a live block -> IoError, frees delete objects,
// and the allocator state surviving a restart.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "storage/bdev.h"
#include "storage/objstore/object_store.h"
#include "storage/objstore/test_servers.h"

using namespace clio;
using namespace clio::testing;

namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// The stand-in, or s3rver when CLIO_OBJSTORE_SERVER=s3rver (see test_servers.h).
struct S3Fixture {
  TempDir dir;
  S3Server server;
  ServerProcess* srv = server.proc.get();
  ScopedEnv env;

  S3Fixture() {
    env.Set("AWS_ACCESS_KEY_ID", server.access_key)
        .Set("AWS_SECRET_ACCESS_KEY", server.secret_key)
        .Set("S3_ENDPOINT", srv->url())
        .Set("S3_ALLOW_BUCKET_CREATE", "1")
        .Unset("AWS_SESSION_TOKEN")
        .Unset("AWS_DEFAULT_REGION");
  }
  BdevConfig Config(const std::string& name = "s3://tierbucket/node0") const {
    BdevConfig c;
    c.type = BdevType::kS3;
    c.name = name;
    c.alloc_log = dir.File("s3.alloc_log");
    c.retry_budget_ms = 5000;
    return c;
  }
  // A second client of the same bucket, to look at and tamper with objects.
  std::unique_ptr<ObjectStore> Peek() const {
    auto store = OpenS3Store(*ParseObjectLocation("tierbucket", "s3"), server.Settings(),
                             ObjectStoreOptions{});
    REQUIRE(store.ok());
    return std::move(store).value();
  }
};

std::string ReadAll(Bdev* b, const ExtentList& ex, uint64_t off, uint64_t len) {
  std::string out(len, '\x55');
  Status s = b->Read(ex, off, len, out.data());
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  return out;
}

std::string BlockKey(uint64_t offset) { return "node0/block_" + std::to_string(offset); }

// The objects of freed blocks are deleted in the background: waits (polling, up to a minute)
// until `key` is gone. A readiness wait, not a timing assertion.
bool EventuallyGone(ObjectStore* peek, const std::string& key) {
  for (int i = 0; i < 1200; ++i) {
    auto r = peek->GetAll(key);
    if (r.ok() && !r->has_value()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

TEST_CASE("s3 bdev: configuration errors") {
  S3Fixture f;
  BdevConfig c = f.Config();
  c.alloc_log.clear();
  auto r = Bdev::Open(c);
  CHECK(r.status().code() == Code::kConfigError);
  CHECK(r.status().message().find("alloc_log") != std::string::npos);

  c = f.Config("s3://Bad_Bucket/x");
  CHECK(Bdev::Open(c).status().message().find("Bad_Bucket") != std::string::npos);

  {
    ScopedEnv e;
    e.Unset("AWS_SECRET_ACCESS_KEY");
    auto m = Bdev::Open(f.Config());
    CHECK(m.status().code() == Code::kPermissionDenied);
    CHECK(m.status().message().find("AWS_SECRET_ACCESS_KEY") != std::string::npos);
  }
  {
    ScopedEnv e;
    // s3rver does not compare signatures: there, an unknown access key stands in.
    if (f.server.standin) e.Set("AWS_SECRET_ACCESS_KEY", "wrong");
    else e.Set("AWS_ACCESS_KEY_ID", "NOSUCHKEY");
    auto w = Bdev::Open(f.Config());
    CHECK(w.status().code() == Code::kPermissionDenied);
    CHECK(w.status().message().find("403") != std::string::npos);
  }
  {
    ScopedEnv e;
    e.Unset("S3_ALLOW_BUCKET_CREATE");
    auto n = Bdev::Open(f.Config());
    CHECK(n.status().code() == Code::kNotFound);
    CHECK(n.status().message().find("tierbucket") != std::string::npos);
  }
  c = f.Config();
  c.persistence = Persistence::kVolatile;
  CHECK(Bdev::Open(c).status().code() == Code::kConfigError);
}

TEST_CASE("s3 bdev: blocks round trip, unwritten blocks read as zeros without requests") {
  S3Fixture f;
  auto b = MustOpen(f.Config());
  auto peek = f.Peek();
  BdevStats st = b->GetStats();
  CHECK(st.capacity == (1ull << 40));
  CHECK(st.persistence == Persistence::kLongTerm);
  CHECK(st.backend == "s3");

  std::vector<std::pair<ExtentList, std::string>> written;
  uint32_t seed = 1;
  for (uint64_t n : {uint64_t{1}, uint64_t{512}, 4 * kKiB, 5000 * uint64_t{1}, 64 * kKiB, kMiB,
                     3 * kMiB + 100}) {
    CAPTURE(n);
    auto ex = b->Allocate(n);
    REQUIRE(ex.ok());
    const std::string data = RandomBytes(n, seed++);
    REQUIRE(b->Write(*ex, 0, data).ok());
    CHECK(ReadAll(b.get(), *ex, 0, n) == data);
    if (n > 10) CHECK(ReadAll(b.get(), *ex, n / 3, n / 3) == data.substr(n / 3, n / 3));
    written.emplace_back(*ex, data);
  }
  for (auto& [ex, data] : written) CHECK(ReadAll(b.get(), ex, 0, data.size()) == data);

  // Allocated, never written: zeros, and no object is created by reading.
  auto fresh = b->Allocate(8 * kKiB);
  REQUIRE(fresh.ok());
  CHECK(ReadAll(b.get(), *fresh, 0, 8 * kKiB) == std::string(8 * kKiB, '\0'));
  CHECK_FALSE(peek->GetAll(BlockKey(fresh->front().offset))->has_value());

  // A partial first write stores the whole block, zero-filled around the data.
  REQUIRE(b->Write(*fresh, 1000, "hello").ok());
  auto obj = peek->GetAll(BlockKey(fresh->front().offset));
  REQUIRE(obj->has_value());
  CHECK((*obj)->size() == fresh->front().size);
  std::string expect(8 * kKiB, '\0');
  expect.replace(1000, 5, "hello");
  CHECK(ReadAll(b.get(), *fresh, 0, 8 * kKiB) == expect);
  // A partial write to a written block merges with what is there.
  REQUIRE(b->Write(*fresh, 1003, "LO world").ok());
  expect.replace(1003, 8, "LO world");
  CHECK(ReadAll(b.get(), *fresh, 0, 8 * kKiB) == expect);

  // Past the extents: OutOfRange, nothing sent.
  CHECK(b->Write(*fresh, 8 * kKiB - 1, "xx").code() == Code::kOutOfRange);
}

TEST_CASE("s3 bdev: a written block whose object is missing is an error, never zeros") {
  S3Fixture f;
  auto b = MustOpen(f.Config());
  auto ex = b->Allocate(4 * kKiB);
  REQUIRE(ex.ok());
  REQUIRE(b->Write(*ex, 0, RandomBytes(4 * kKiB, 9)).ok());
  REQUIRE(f.Peek()->Delete(BlockKey(ex->front().offset)).ok());
  std::string out(4 * kKiB, '\0');
  Status s = b->Read(*ex, 0, out.size(), out.data());
  CHECK(s.code() == Code::kIoError);
  CHECK(s.message().find("missing") != std::string::npos);
  CHECK(s.message().find(BlockKey(ex->front().offset)) != std::string::npos);
  // A partial write cannot merge with lost bytes either.
  CHECK(b->Write(*ex, 10, "x").code() == Code::kIoError);
}

TEST_CASE("s3 bdev: a failed write leaves the block unwritten") {
  S3Fixture f;
  if (!f.server.standin) {
    MESSAGE("SKIPPED under s3rver: fault injection needs the stand-in's admin API");
    return;
  }
  auto b = MustOpen(f.Config());
  auto ex = b->Allocate(4 * kKiB);
  REQUIRE(ex.ok());
  f.srv->Fault("500", 1000000, "PUT");
  Status s = b->Write(*ex, 0, RandomBytes(4 * kKiB, 2));
  CHECK(s.code() == Code::kIoError);
  CHECK(s.message().find("HTTP 500") != std::string::npos);
  REQUIRE(f.srv->Admin("POST", "/_admin/clear_faults").ok());
  // Still reads as zeros (not an error: nothing was ever stored).
  CHECK(ReadAll(b.get(), *ex, 0, 4 * kKiB) == std::string(4 * kKiB, '\0'));
}

TEST_CASE("s3 bdev: freeing a block deletes its object; a reused offset starts as zeros") {
  S3Fixture f;
  auto b = MustOpen(f.Config());
  auto peek = f.Peek();
  auto ex = b->Allocate(4 * kKiB);
  REQUIRE(ex.ok());
  const uint64_t off = ex->front().offset;
  REQUIRE(b->Write(*ex, 0, RandomBytes(4 * kKiB, 4)).ok());
  REQUIRE(peek->GetAll(BlockKey(off))->has_value());
  REQUIRE(b->Free(*ex).ok());
  CHECK(EventuallyGone(peek.get(), BlockKey(off)));
  // Even when a stale object is left behind (here planted), a new life of the offset never
  // shows it.
  REQUIRE(peek->Put(BlockKey(off), RandomBytes(4 * kKiB, 5)).ok());
  auto again = b->Allocate(4 * kKiB);
  REQUIRE(again.ok());
  REQUIRE(again->front().offset == off);
  CHECK(ReadAll(b.get(), *again, 0, 4 * kKiB) == std::string(4 * kKiB, '\0'));
  REQUIRE(b->Write(*again, 100, "new").ok());
  std::string expect(4 * kKiB, '\0');
  expect.replace(100, 3, "new");
  CHECK(ReadAll(b.get(), *again, 0, 4 * kKiB) == expect);
}

TEST_CASE("s3 bdev: blocks freed and allocated again by concurrent writers show only their own bytes") {
  S3Fixture f;
  constexpr int kThreads = 4, kRounds = 60;
  std::vector<std::pair<ExtentList, std::string>> kept(kThreads);
  std::vector<std::string> errors(kThreads);
  {
    auto b = MustOpen(f.Config());
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        const std::string zeros(4 * kKiB, '\0');
        for (int i = 0; i < kRounds && errors[t].empty(); ++i) {
          auto ex = b->Allocate(4 * kKiB);
          if (!ex.ok()) return (void)(errors[t] = ex.status().ToString());
          std::string got(4 * kKiB, '\x55');
          Status r = b->Read(*ex, 0, got.size(), got.data());
          if (!r.ok() || got != zeros) return (void)(errors[t] = "a new block is not zeros: " + r.ToString());
          // Half the rounds a partial first write (zero-filled around it), half a whole one.
          std::string data = RandomBytes(4 * kKiB, static_cast<uint32_t>(t * 1000 + i));
          if (i % 2 == 1) data.replace(0, 1000, 1000, '\0');
          Status w = i % 2 == 1 ? b->Write(*ex, 1000, std::string_view(data).substr(1000))
                                : b->Write(*ex, 0, data);
          if (!w.ok()) return (void)(errors[t] = w.ToString());
          r = b->Read(*ex, 0, got.size(), got.data());
          if (!r.ok() || got != data) return (void)(errors[t] = "read back other bytes: " + r.ToString());
          if (i == kRounds - 1) {
            kept[t] = {*ex, data};
          } else if (Status fr = b->Free(*ex); !fr.ok()) {
            errors[t] = fr.ToString();
          }
        }
      });
    }
    for (auto& th : ts) th.join();
    for (int t = 0; t < kThreads; ++t) CHECK_MESSAGE(errors[t].empty(), errors[t]);
    // Every live block still holds its bytes once the background deletes are done.
    REQUIRE(b->Sync().ok());
  }
  auto b = MustOpen(f.Config());
  for (const auto& [ex, data] : kept) CHECK(ReadAll(b.get(), ex, 0, data.size()) == data);
}

TEST_CASE("s3 bdev: allocator state survives a restart; orphans are deleted") {
  S3Fixture f;
  auto peek = f.Peek();
  ExtentList kept, unwritten, orphan;
  const std::string data = RandomBytes(64 * kKiB, 11);
  {
    auto b = MustOpen(f.Config());
    kept = *b->Allocate(64 * kKiB);
    unwritten = *b->Allocate(4 * kKiB);
    orphan = *b->Allocate(4 * kKiB);
    REQUIRE(b->Write(kept, 0, data).ok());
    REQUIRE(b->Write(orphan, 0, "orphan").ok());
    REQUIRE(b->Sync().ok());
  }
  {
    auto b = MustOpen(f.Config());
    // Nothing live is handed out again.
    for (int i = 0; i < 20; ++i) {
      auto n = b->Allocate(4 * kKiB);
      REQUIRE(n.ok());
      for (const auto& live : {kept, unwritten, orphan}) {
        for (const auto& e : live) {
          CHECK((n->front().offset + n->front().size <= e.offset ||
                 e.offset + e.size <= n->front().offset));
        }
      }
      REQUIRE(b->Free(*n).ok());
    }
    CHECK(ReadAll(b.get(), kept, 0, data.size()) == data);
    CHECK(ReadAll(b.get(), unwritten, 0, 4 * kKiB) == std::string(4 * kKiB, '\0'));
    // The index references `kept` and `unwritten` only: the orphan's object goes.
    ExtentList referenced = kept;
    referenced.insert(referenced.end(), unwritten.begin(), unwritten.end());
    REQUIRE(b->Reconcile(referenced).ok());
    REQUIRE(b->FlushAllocLog().ok());
    CHECK(EventuallyGone(peek.get(), BlockKey(orphan.front().offset)));
    CHECK(peek->GetAll(BlockKey(kept.front().offset))->has_value());
  }
  {
    // After compaction the written state is still known: a missing object is an error.
    auto b = MustOpen(f.Config());
    CHECK(ReadAll(b.get(), kept, 0, data.size()) == data);
    REQUIRE(peek->Delete(BlockKey(kept.front().offset)).ok());
    std::string out(16, '\0');
    CHECK(b->Read(kept, 0, 16, out.data()).code() == Code::kIoError);
    CHECK(ReadAll(b.get(), unwritten, 0, 16) == std::string(16, '\0'));
  }
}

TEST_CASE("s3 bdev: a lost allocator log or an emptied bucket is refused") {
  S3Fixture f;
  uint64_t id = 0;
  {
    auto b = MustOpen(f.Config());
    id = b->tier_id();
    auto ex = b->Allocate(4 * kKiB);
    REQUIRE(b->Write(*ex, 0, "x").ok());
    REQUIRE(b->Sync().ok());
  }
  SUBCASE("the log is gone") {
    std::filesystem::remove(f.Config().alloc_log);
    auto r = Bdev::Open(f.Config());
    CHECK(r.status().code() == Code::kCorruption);
    CHECK(r.status().message().find("no allocator log") != std::string::npos);
  }
  SUBCASE("the bucket lost its tier header") {
    REQUIRE(f.Peek()->Delete("node0/clio_tier").ok());
    auto r = Bdev::Open(f.Config());
    CHECK(r.status().code() == Code::kCorruption);
    CHECK_MESSAGE(r.status().message().find("no tier header") != std::string::npos, r.status().ToString());
  }
  SUBCASE("a damaged or foreign tier header") {
    auto peek = f.Peek();
    auto bytes = peek->GetAll("node0/clio_tier");
    REQUIRE(bytes.ok());
    REQUIRE(bytes->has_value());
    std::string damaged = **bytes;
    damaged[20] ^= 0x01;  // a bit of the tier id
    REQUIRE(peek->Put("node0/clio_tier", damaged).ok());
    auto r = Bdev::Open(f.Config());
    CHECK(r.status().code() == Code::kCorruption);
    CHECK_MESSAGE(r.status().message().find("checksum mismatch") != std::string::npos,
                  r.status().ToString());
    std::string foreign = **bytes;
    foreign.replace(0, 8, "CLIOTIER");  // a file tier's magic
    REQUIRE(peek->Put("node0/clio_tier", foreign).ok());
    r = Bdev::Open(f.Config());
    CHECK(r.status().code() == Code::kCorruption);
    CHECK(r.status().message().find("not a CLIO object tier header") != std::string::npos);
    CHECK(r.status().message().find("clio_tier") != std::string::npos);
  }
  SUBCASE("another tier id") {
    BdevConfig c = f.Config();
    c.tier_id = id + 1;
    CHECK(Bdev::Open(c).status().code() == Code::kCorruption);
    c.tier_id = id;
    CHECK(Bdev::Open(c).ok());
  }
}

TEST_CASE("gcs bdev: round trip and restart") {
  TempDir dir;
  auto srv = StartGcsStandin(dir);
  REQUIRE(srv->running());
  ScopedEnv env;
  env.Set("GCS_ACCESS_TOKEN", kTestGcsToken).Set("GCS_ENDPOINT", srv->url())
      .Set("GCS_ALLOW_BUCKET_CREATE", "1");
  BdevConfig c;
  c.type = BdevType::kGcs;
  c.name = "gcs://gbucket/tier";
  c.alloc_log = dir.File("gcs.alloc_log");
  const std::string data = RandomBytes(200 * kKiB, 21);
  ExtentList ex;
  {
    auto b = MustOpen(c);
    CHECK(b->GetStats().backend == "gcs");
    ex = *b->Allocate(data.size());
    REQUIRE(b->Write(ex, 0, data).ok());
    REQUIRE(b->Sync().ok());
  }
  auto b = MustOpen(c);
  CHECK(ReadAll(b.get(), ex, 0, data.size()) == data);
  env.Set("GCS_ACCESS_TOKEN", "wrong");
  auto denied = Bdev::Open(c);
  CHECK(denied.status().code() == Code::kPermissionDenied);
}
