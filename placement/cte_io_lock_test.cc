// No stripe lock across tier I/O: a read waiting on a slow tier holds up no change to its blob
// (Cte::GetBlob), a flush copying to a slow tier holds up no read or write of its blob
// (Cte::FlushOne), and a read that raced a change never returns another blob's bytes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "placement/cte.h"
#include "placement/test_util.h"
#include "storage/objstore/test_servers.h"

using namespace clio;
using namespace clio::testing;

namespace {

// Waits (polling, up to a minute) until `f` returns true: a readiness wait, not a timing check.
template <typename F>
bool Eventually(F f) {
  for (int i = 0; i < 1200; ++i) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

// The S3 stand-in (its "hold" fault keeps a request waiting until released) and the
// environment that points an s3 tier at it.
struct HeldS3 {
  TempDir dir;
  S3Server server;
  ScopedEnv env;
  HeldS3() {
    env.Set("AWS_ACCESS_KEY_ID", server.access_key)
        .Set("AWS_SECRET_ACCESS_KEY", server.secret_key)
        .Set("S3_ENDPOINT", server.proc->url())
        .Set("S3_ALLOW_BUCKET_CREATE", "1")
        .Unset("AWS_SESSION_TOKEN")
        .Unset("AWS_DEFAULT_REGION");
  }
  TierConfig Tier(double score) const {
    TierConfig t;
    t.bdev.type = BdevType::kS3;
    t.bdev.name = "s3://heldbucket/node0";
    t.bdev.capacity = 64u << 20;
    t.bdev.alloc_log = dir.File("s3.alloc_log");
    t.bdev.retry_budget_ms = 60000;
    t.bdev.request_timeout_ms = 300000;  // a held request waits for its release
    t.score = score;
    return t;
  }
  ServerProcess& proc() { return *server.proc; }
};

// (A bound, not a timing: the call takes milliseconds. The held request's own timeout is longer,
// so it cannot give up and let a waiting call through.)
template <typename T>
bool Finishes(std::future<T>& f) {
  return f.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
}

TEST_CASE("a read waiting on its tier holds up no write to the same blob") {
  HeldS3 s3;
  if (!s3.server.standin) return;  // the hold fault is the stand-in's
  CteHarness h("clio_cte_read");
  CteConfig c;
  c.flush_interval_ms = 3600000;
  c.reorganize = false;
  c.tiers = {s3.Tier(1.0)};
  h.Start(c);

  const std::string before = Random(4096, 1), after = Random(4096, 2);
  REQUIRE(h.cte->PutBlob(7, 0, 0, before).ok());

  // The next GET waits in the server until released: the read is inside its tier I/O.
  s3.proc().Fault("hold", 1, "GET");
  std::string got(4096, '?');
  auto reader = std::async(std::launch::async, [&] { return h.cte->GetBlob(7, 0, 0, 4096, got.data()); });
  REQUIRE(Eventually([&] { return s3.proc().Held() == 1; }));

  // A write to the same blob (same stripe) finishes while the read still waits. Before, the
  // read held the stripe lock across its GET and the write waited for it.
  auto writer = std::async(std::launch::async, [&] { return h.cte->PutBlob(7, 0, 0, after); });
  CHECK_MESSAGE(Finishes(writer), "the write waited for a read's tier I/O");
  CHECK(s3.proc().Held() == 1);  // the read had not moved meanwhile
  s3.proc().Release();
  CHECK(writer.get().ok());
  Status r = reader.get();
  REQUIRE_MESSAGE(r.ok(), r.ToString());
  // The write ran during the read: the read saw the change, read again and returns the bytes
  // the blob holds after it, never a mix.
  CHECK(got == after);
  CHECK(GetBytes(h.cte.get(), 7, 0, 0, 4096) == after);
  h.Stop();
}

TEST_CASE("a flush copying to its tier holds up no read or write of the blob") {
  HeldS3 s3;
  if (!s3.server.standin) return;
  CteHarness h("clio_cte_flush");
  CteConfig c;
  c.flush_interval_ms = 3600000;  // flushed when the test says
  c.reorganize = false;
  c.tiers = {RamTier("ram::cte_flush_test_" + std::to_string(getpid()), 8u << 20, 1.0), s3.Tier(0.2)};
  h.Start(c);
  const std::string first = Random(8192, 3), second = Random(8192, 4);
  REQUIRE(h.cte->PutBlob(9, 0, 0, first).ok());  // dirty in RAM

  // The flush's PUT waits in the server: the flush is inside its copy's write.
  s3.proc().Fault("hold", 1, "PUT");
  auto flush = std::async(std::launch::async, [&] { return h.cte->FlushTag(9); });
  REQUIRE(Eventually([&] { return s3.proc().Held() == 1; }));
  std::string got(8192, '?');
  auto reader = std::async(std::launch::async, [&] { return h.cte->GetBlob(9, 0, 0, 8192, got.data()); });
  CHECK_MESSAGE(Finishes(reader), "a read waited for a flush's tier I/O");
  CHECK(got == first);
  auto writer = std::async(std::launch::async, [&] { return h.cte->PutBlob(9, 0, 0, second); });
  CHECK_MESSAGE(Finishes(writer), "a write waited for a flush's tier I/O");
  CHECK(s3.proc().Held() == 1);  // the flush had not moved meanwhile
  s3.proc().Release();
  REQUIRE(writer.get().ok());
  REQUIRE(reader.get().ok());
  // The blob changed under the copy: the copy is dropped and the flush done again, so what is
  // flushed is the blob as it is now, and only one copy stays on the tier.
  Status f = flush.get();
  REQUIRE_MESSAGE(f.ok(), f.ToString());
  auto where = h.cte->LocateBlob(9, 0);
  REQUIRE(where.ok());
  for (const CopyLocation& l : *where) CHECK_FALSE(l.dirty);
  h.Stop();
  // Reopened, the RAM copy is gone: the bytes come from the flushed copy.
  h.Start(c);
  CHECK(GetBytes(h.cte.get(), 9, 0, 0, 8192) == second);
  const uint64_t one_copy = h.Tier(BdevType::kS3).stats.used;
  CHECK(one_copy > 0);
  REQUIRE(h.cte->DelBlob(9, 0).ok());
  REQUIRE(h.kv->Sync().ok());
  CHECK(h.Tier(BdevType::kS3).stats.used == 0);  // the dropped copy did not leak
  h.Stop();
}

TEST_CASE("a drain waits for a flush copying to its tier, and the copy does not go in there") {
  // The flush picks its tier and writes its copy without the stripe lock. A drain of that tier
  // meanwhile must wait for it (the stripe barrier alone no longer covers it), and the copy,
  // on a tier now draining, must not be recorded: the flush is redone onto another tier.
  HeldS3 s3;
  if (!s3.server.standin) return;
  CteHarness h("clio_cte_drain_flush");
  CteConfig c;
  c.flush_interval_ms = 3600000;
  c.reorganize = false;
  c.tiers = {RamTier("ram::cte_drain_flush_" + std::to_string(getpid()), 8u << 20, 1.0), s3.Tier(0.5),
             FileTier(h.dir + "/tier.dat", 64u << 20, 0.2)};
  h.Start(c);
  const uint64_t s3_id = h.Tier(BdevType::kS3).tier_id;
  const std::string data = Random(8192, 5);
  REQUIRE(h.cte->PutBlob(5, 0, 0, data).ok());  // dirty in RAM; S3 ranks first to flush to

  s3.proc().Fault("hold", 1, "PUT");
  auto flush = std::async(std::launch::async, [&] { return h.cte->FlushTag(5); });
  REQUIRE(Eventually([&] { return s3.proc().Held() == 1; }));
  auto drain = std::async(std::launch::async, [&] { return h.cte->Drain(s3_id); });
  // The drain has marked the tier (readiness, not timing) while the flush still copies to it.
  REQUIRE(Eventually([&] {
    for (const TierState& t : h.cte->TierStates())
      if (t.tier_id == s3_id) return t.condition == TierCondition::kDraining || t.condition == TierCondition::kDrained;
    return false;
  }));
  CHECK(s3.proc().Held() == 1);
  s3.proc().Release();
  Status f = flush.get();
  REQUIRE_MESSAGE(f.ok(), f.ToString());
  Status d = drain.get();
  CHECK_MESSAGE(d.ok(), d.ToString());
  // The blob is flushed, and nothing of it is on the drained tier.
  auto where = h.cte->LocateBlob(5, 0);
  REQUIRE(where.ok());
  bool persistent = false;
  for (const CopyLocation& l : *where) {
    CHECK(l.tier_id != s3_id);
    CHECK_FALSE(l.dirty);
    if (l.tier_id == h.Tier(BdevType::kFile).tier_id) persistent = true;
  }
  CHECK(persistent);
  CHECK(h.Tier(BdevType::kS3).stats.used == 0);
  CHECK(GetBytes(h.cte.get(), 5, 0, 0, 8192) == data);
  h.Stop();
}

TEST_CASE("reads racing deletes and reuse of their extents never return another blob's bytes") {
  // Blob (1, 0) is deleted and written again, over and over, with 'x' bytes; blobs of tag 2,
  // with 'y' bytes, are written and deleted beside it, so the RAM tier keeps handing the
  // extents one frees to the other. Readers of (1, 0) see 'x' or zeros (deleted), never 'y'.
  CteHarness h("clio_cte_race");
  CteConfig c;
  c.flush_interval_ms = 3600000;
  c.reorganize = false;
  c.tiers = {RamTier("ram::cte_read_test_" + std::to_string(getpid()), 4u << 20, 1.0),
             FileTier(h.dir + "/tier.dat", 64u << 20, 0.2)};
  h.Start(c);
  constexpr uint64_t kBlob = 64u << 10;
  constexpr int kRounds = 3000;
  const std::string xs(kBlob, 'x'), ys(kBlob, 'y');
  std::atomic<bool> done{false};
  std::atomic<int> foreign{0}, failed{0}, reads{0};

  auto reader = [&] {
    std::string buf(kBlob, '?');
    while (!done.load()) {
      if (!h.cte->GetBlob(1, 0, 0, kBlob, buf.data()).ok()) {
        failed++;
        return;
      }
      for (char ch : buf)
        if (ch != 'x' && ch != '\0') {
          foreign++;
          break;
        }
      reads++;
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 2; ++i) readers.emplace_back(reader);
  std::thread others([&] {
    for (int i = 0; i < kRounds && !done.load(); ++i) {
      if (!h.cte->PutBlob(2, i % 8, 0, ys).ok() || !h.cte->DelBlob(2, (i + 4) % 8).ok()) failed++;
      if (i % 4 == 0 && !h.kv->Sync().ok()) failed++;  // frees what the deletes released
    }
  });
  for (int i = 0; i < kRounds; ++i) {
    if (!h.cte->DelBlob(1, 0).ok() || !h.cte->PutBlob(1, 0, 0, xs).ok()) failed++;
    if (i % 4 == 0 && !h.kv->Sync().ok()) failed++;
  }
  others.join();
  // Let the readers see the last state too, then stop them.
  REQUIRE(Eventually([&] { return reads.load() > 0; }));
  done = true;
  for (auto& t : readers) t.join();
  CHECK(failed == 0);
  CHECK(foreign == 0);
  CHECK(GetBytes(h.cte.get(), 1, 0, 0, kBlob) == xs);
  h.Stop();
}
