// Tests of the RocksDB metadata store (kv.h) against a real RocksDB in a temporary directory.

#include "storage/kv.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace clio {
namespace {

// Commits only when a test asks (Sync, Close), so the tests decide what is durable.
constexpr uint32_t kNeverMs = 600000;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/clio-kv-test-XXXXXX";
    const char* p = mkdtemp(tmpl);
    REQUIRE(p != nullptr);
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string db() const { return path_ + "/db"; }

 private:
  std::string path_;
};

std::unique_ptr<KvStore> Open(const std::string& path, uint32_t interval_ms = kNeverMs) {
  auto r = OpenRocksDbKv(KvOptions{path, interval_ms});
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

std::optional<std::string> GetOrDie(KvStore& kv, std::string_view key) {
  auto r = kv.Get(key);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return r.value();
}

void PutOrDie(KvStore& kv, std::string key, std::string value) {
  KvBatch b;
  b.Put(std::move(key), std::move(value));
  Status s = kv.Apply(std::move(b));
  REQUIRE_MESSAGE(s.ok(), s.ToString());
}

void DeleteOrDie(KvStore& kv, std::string key) {
  KvBatch b;
  b.Delete(std::move(key));
  Status s = kv.Apply(std::move(b));
  REQUIRE_MESSAGE(s.ok(), s.ToString());
}

KvPairs ScanOrDie(KvStore& kv, std::string_view prefix, std::string_view after = {},
                  size_t limit = 0) {
  auto r = kv.Scan(prefix, after, limit);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return r.value();
}

std::vector<std::string> Keys(const KvPairs& pairs) {
  std::vector<std::string> keys;
  for (const auto& p : pairs) keys.push_back(p.first);
  return keys;
}

TEST_CASE("kv: put, get and delete are visible at once") {
  TempDir dir;
  auto kv = Open(dir.db());
  CHECK(GetOrDie(*kv, "a") == std::nullopt);
  PutOrDie(*kv, "a", "1");
  CHECK(GetOrDie(*kv, "a") == "1");
  PutOrDie(*kv, "a", "2");
  CHECK(GetOrDie(*kv, "a") == "2");
  DeleteOrDie(*kv, "a");
  CHECK(GetOrDie(*kv, "a") == std::nullopt);

  // The same, with the older value already in RocksDB.
  PutOrDie(*kv, "b", "old");
  REQUIRE(kv->Sync().ok());
  CHECK(GetOrDie(*kv, "b") == "old");
  DeleteOrDie(*kv, "b");
  CHECK(GetOrDie(*kv, "b") == std::nullopt);
  PutOrDie(*kv, "b", "new");
  CHECK(GetOrDie(*kv, "b") == "new");
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: a batch is all or nothing when a condition fails") {
  TempDir dir;
  auto kv = Open(dir.db());
  PutOrDie(*kv, "exists", "v");
  PutOrDie(*kv, "committed", "c1");
  REQUIRE(kv->Sync().ok());
  PutOrDie(*kv, "exists", "v2");  // overlay value above the committed one

  {
    KvBatch b;
    b.Put("x", "1");
    b.Delete("committed");
    b.ExpectAbsent("exists");
    Status s = kv->Apply(std::move(b));
    CHECK(s.code() == Code::kAlreadyExists);
  }
  {
    KvBatch b;
    b.Put("x", "1");
    b.ExpectAbsent("nothing-here");
    b.ExpectValue("exists", "v");  // stale: the overlay holds v2
    Status s = kv->Apply(std::move(b));
    CHECK(s.code() == Code::kBusy);
  }
  {
    KvBatch b;
    b.Put("x", "1");
    b.ExpectValue("missing", "v");
    CHECK(kv->Apply(std::move(b)).code() == Code::kBusy);
  }
  CHECK(GetOrDie(*kv, "x") == std::nullopt);
  CHECK(GetOrDie(*kv, "committed") == "c1");

  {
    KvBatch b;
    b.Put("x", "1");
    b.Delete("committed");
    b.ExpectAbsent("x");
    b.ExpectValue("exists", "v2");
    b.ExpectValue("committed", "c1");  // checked against RocksDB through the overlay
    Status s = kv->Apply(std::move(b));
    CHECK_MESSAGE(s.ok(), s.ToString());
  }
  CHECK(GetOrDie(*kv, "x") == "1");
  CHECK(GetOrDie(*kv, "committed") == std::nullopt);
  // A tombstone in the overlay counts as absent.
  KvBatch b;
  b.ExpectAbsent("committed");
  b.Put("committed", "again");
  CHECK(kv->Apply(std::move(b)).ok());
  CHECK(GetOrDie(*kv, "committed") == "again");
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: prefix scans of committed keys stop at the range, also at 0xff bytes") {
  TempDir dir;
  auto kv = Open(dir.db());
  const std::string ff = "a\xff";
  for (const std::string& k : {ff, ff + "\x01", ff + "\xff", std::string("a\xfe"), std::string("b"),
                               std::string("\xff\xff"), std::string("\xff\xff\x00", 3)}) {
    PutOrDie(*kv, k, "v");
  }
  // Tombstones right after a range must not be returned (and not be walked: iterate bound).
  for (int i = 0; i < 100; ++i) PutOrDie(*kv, "c/" + std::to_string(i), "x");
  KvBatch del;
  for (int i = 0; i < 100; ++i) del.Delete("c/" + std::to_string(i));
  REQUIRE(kv->Apply(std::move(del)).ok());
  REQUIRE(kv->Sync().ok());  // into RocksDB itself, not the overlay
  CHECK(Keys(ScanOrDie(*kv, ff)) == std::vector<std::string>{ff, ff + "\x01", ff + "\xff"});
  CHECK(Keys(ScanOrDie(*kv, "a")) ==
        std::vector<std::string>{"a\xfe", ff, ff + "\x01", ff + "\xff"});
  CHECK(Keys(ScanOrDie(*kv, "\xff\xff")) ==
        std::vector<std::string>{"\xff\xff", std::string("\xff\xff\x00", 3)});
  CHECK(ScanOrDie(*kv, "b/").empty());
  CHECK(ScanOrDie(*kv, "c/").empty());
  CHECK(ScanOrDie(*kv, "").size() == 7);
  CHECK(Keys(ScanOrDie(*kv, "a", ff)) == std::vector<std::string>{ff + "\x01", ff + "\xff"});
}

TEST_CASE("kv: scans are ordered, prefix-bounded, paged and limited") {
  TempDir dir;
  auto kv = Open(dir.db());
  for (const char* k : {"d/3", "d/1", "c", "d/2", "d", "d/10", "e/1", "d0"}) PutOrDie(*kv, k, k);

  CHECK(Keys(ScanOrDie(*kv, "d/")) == std::vector<std::string>{"d/1", "d/10", "d/2", "d/3"});
  CHECK(Keys(ScanOrDie(*kv, "d")) ==
        std::vector<std::string>{"d", "d/1", "d/10", "d/2", "d/3", "d0"});
  CHECK(ScanOrDie(*kv, "").size() == 8);
  CHECK(ScanOrDie(*kv, "zz").empty());
  CHECK(ScanOrDie(*kv, "d/1").size() == 2);
  CHECK(ScanOrDie(*kv, "d/")[0].second == "d/1");

  CHECK(Keys(ScanOrDie(*kv, "d/", "", 2)) == std::vector<std::string>{"d/1", "d/10"});
  CHECK(Keys(ScanOrDie(*kv, "d/", "d/10", 2)) == std::vector<std::string>{"d/2", "d/3"});
  CHECK(ScanOrDie(*kv, "d/", "d/3", 2).empty());
  CHECK(Keys(ScanOrDie(*kv, "d/", "d/15")) == std::vector<std::string>{"d/2", "d/3"});
  // start_after before the prefix range bounds nothing.
  CHECK(ScanOrDie(*kv, "d/", "a").size() == 4);

  // Paging through everything in pages of 3 sees each key once, in order.
  std::vector<std::string> all;
  std::string after;
  for (;;) {
    KvPairs page = ScanOrDie(*kv, "", after, 3);
    if (page.empty()) break;
    for (auto& p : page) all.push_back(p.first);
    after = page.back().first;
  }
  CHECK(all == std::vector<std::string>{"c", "d", "d/1", "d/10", "d/2", "d/3", "d0", "e/1"});
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: scan merges the overlay over RocksDB, tombstones hide keys") {
  TempDir dir;
  auto kv = Open(dir.db());
  for (int i = 0; i < 10; ++i) PutOrDie(*kv, "k/" + std::to_string(i), "db" + std::to_string(i));
  PutOrDie(*kv, "other", "x");
  REQUIRE(kv->Sync().ok());

  DeleteOrDie(*kv, "k/0");
  DeleteOrDie(*kv, "k/4");
  DeleteOrDie(*kv, "k/9");
  DeleteOrDie(*kv, "k/44");  // tombstone of a key that never existed
  PutOrDie(*kv, "k/2", "ov2");
  PutOrDie(*kv, "k/35", "ov35");
  PutOrDie(*kv, "k/99", "ov99");

  const KvPairs want = {{"k/1", "db1"},   {"k/2", "ov2"}, {"k/3", "db3"},
                        {"k/35", "ov35"}, {"k/5", "db5"}, {"k/6", "db6"},
                        {"k/7", "db7"},   {"k/8", "db8"}, {"k/99", "ov99"}};
  CHECK(ScanOrDie(*kv, "k/") == want);
  // Limits count visible keys only; tombstones are skipped, not counted.
  CHECK(ScanOrDie(*kv, "k/", "", 3) == KvPairs(want.begin(), want.begin() + 3));
  CHECK(ScanOrDie(*kv, "k/", "k/35", 2) == KvPairs(want.begin() + 4, want.begin() + 6));
  CHECK(ScanOrDie(*kv, "k/", "k/3", 0) == KvPairs(want.begin() + 3, want.end()));

  // After a commit the same view comes from RocksDB alone, and after a reopen too.
  REQUIRE(kv->Sync().ok());
  CHECK(ScanOrDie(*kv, "k/") == want);
  REQUIRE(kv->Close().ok());
  kv = Open(dir.db());
  CHECK(ScanOrDie(*kv, "k/") == want);
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: Sync makes data durable across a reopen") {
  TempDir dir;
  auto kv = Open(dir.db());
  PutOrDie(*kv, "a", "1");
  PutOrDie(*kv, "b", "2");
  REQUIRE(kv->Sync().ok());
  DeleteOrDie(*kv, "b");
  REQUIRE(kv->Sync().ok());
  REQUIRE(kv->Sync().ok());  // an empty commit is Ok
  kv.reset();                // the destructor closes

  kv = Open(dir.db());
  CHECK(GetOrDie(*kv, "a") == "1");
  CHECK(GetOrDie(*kv, "b") == std::nullopt);
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: Close commits, is idempotent, and later calls are Unavailable") {
  TempDir dir;
  auto kv = Open(dir.db());
  PutOrDie(*kv, "a", "1");
  CHECK(kv->Close().ok());
  CHECK(kv->Close().ok());
  CHECK(kv->Get("a").status().code() == Code::kUnavailable);
  CHECK(kv->Scan("", "", 0).status().code() == Code::kUnavailable);
  CHECK(kv->Sync().code() == Code::kUnavailable);
  KvBatch b;
  b.Put("b", "2");
  CHECK(kv->Apply(std::move(b)).code() == Code::kUnavailable);
  kv.reset();

  kv = Open(dir.db());
  CHECK(GetOrDie(*kv, "a") == "1");
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: a kill -9 keeps synced data and loses only uncommitted data") {
  TempDir dir;
  const std::string path = dir.db();
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Child: no doctest assertions here; exit codes tell the parent what went wrong.
    auto r = OpenRocksDbKv(KvOptions{path, kNeverMs});
    if (!r.ok()) _exit(10);
    KvStore* kv = std::move(r).value().release();  // leaked: no Close, no destructor
    KvBatch b1;
    b1.Put("first", "synced");
    if (!kv->Apply(std::move(b1)).ok()) _exit(11);
    if (!kv->Sync().ok()) _exit(12);
    KvBatch b2;
    b2.Put("second", "applied only");
    if (!kv->Apply(std::move(b2)).ok()) _exit(13);
    if (!kv->Get("second").ok()) _exit(14);
    kill(getpid(), SIGKILL);
    _exit(15);
  }
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  INFO("child exit status " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1));
  REQUIRE(WIFSIGNALED(wstatus));
  REQUIRE(WTERMSIG(wstatus) == SIGKILL);

  auto kv = Open(path);
  CHECK(GetOrDie(*kv, "first") == "synced");
  CHECK(GetOrDie(*kv, "second") == std::nullopt);
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: a store another live process holds is refused at once, naming the process") {
  TempDir dir;
  const std::string path = dir.db();
  REQUIRE(Open(path)->Close().ok());  // the store exists before anyone holds it
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto r = OpenRocksDbKv(KvOptions{path, kNeverMs});
    if (!r.ok()) _exit(10);
    (void)!write(ready[1], "x", 1);
    pause();  // holds the store until killed
    _exit(11);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  KvOptions o{path, kNeverMs};
  o.lock_wait_ms = 600000;  // a live holder is not waited for
  auto r = OpenRocksDbKv(o);
  kill(pid, SIGKILL);
  int wstatus = 0;
  REQUIRE(waitpid(pid, &wstatus, 0) == pid);
  close(ready[0]);
  close(ready[1]);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kBusy);
  CHECK(r.status().message().find("in use by process " + std::to_string(pid)) != std::string::npos);
  // Once the holder is gone the store opens.
  auto again = Open(path);
  CHECK(again->Close().ok());
}

TEST_CASE("kv: pre-commit hooks run before the write; a failing hook keeps the data") {
  TempDir dir;
  auto kv = Open(dir.db());
  std::atomic<int> clock{0};
  std::atomic<int> hook_calls{0};
  std::atomic<int> hook_at{-1};
  std::atomic<int> durable_at{-1};
  std::atomic<bool> fail{false};
  kv->AddPreCommitHook([&]() -> Status {
    hook_calls++;
    hook_at = clock++;
    if (fail) return IoError("tier sync failed");
    return Status::Ok();
  });

  // An empty commit runs no hooks.
  REQUIRE(kv->Sync().ok());
  CHECK(hook_calls == 0);

  KvBatch b;
  b.Put("a", "1");
  b.OnDurable([&] { durable_at = clock++; });
  REQUIRE(kv->Apply(std::move(b)).ok());
  CHECK(durable_at == -1);
  REQUIRE(kv->Sync().ok());
  CHECK(hook_calls == 1);
  CHECK(durable_at != -1);
  CHECK(hook_at < durable_at);

  // A failing hook fails Sync, writes nothing, keeps the data visible and the callback pending.
  fail = true;
  std::atomic<int> durable2{0};
  KvBatch b2;
  b2.Put("b", "2");
  b2.Delete("a");
  b2.OnDurable([&] { durable2++; });
  REQUIRE(kv->Apply(std::move(b2)).ok());
  Status s = kv->Sync();
  CHECK(s.code() == Code::kIoError);
  CHECK(s.message().find("tier sync failed") != std::string::npos);
  CHECK(durable2 == 0);
  CHECK(GetOrDie(*kv, "b") == "2");
  CHECK(GetOrDie(*kv, "a") == std::nullopt);
  CHECK(ScanOrDie(*kv, "") == KvPairs{{"b", "2"}});
  CHECK(kv->Sync().code() == Code::kIoError);  // retried, still failing

  // Once the hook succeeds the kept overlay commits and the callback runs once.
  fail = false;
  REQUIRE(kv->Sync().ok());
  CHECK(durable2 == 1);
  REQUIRE(kv->Sync().ok());
  CHECK(durable2 == 1);
  REQUIRE(kv->Close().ok());

  kv = Open(dir.db());
  CHECK(GetOrDie(*kv, "b") == "2");
  CHECK(GetOrDie(*kv, "a") == std::nullopt);
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: a failed commit is merged back under newer writes") {
  TempDir dir;
  auto kv = Open(dir.db());
  KvStore* store = kv.get();
  std::atomic<bool> fail_once{true};
  kv->AddPreCommitHook([&]() -> Status {
    if (!fail_once.exchange(false)) return Status::Ok();
    // Runs outside the store's lock, while the commit is in flight: these writes are newer.
    KvBatch b;
    b.Put("k", "newer");
    b.Delete("gone");
    Status s = store->Apply(std::move(b));
    if (!s.ok()) return s;
    // The in-flight commit's data is still visible beneath the new writes.
    auto r = store->Get("kept");
    if (!r.ok() || r.value() != std::optional<std::string>("c")) return Internal("not visible");
    return IoError("injected");
  });
  PutOrDie(*kv, "k", "older");
  PutOrDie(*kv, "gone", "g");
  PutOrDie(*kv, "kept", "c");
  CHECK(kv->Sync().code() == Code::kIoError);
  CHECK(GetOrDie(*kv, "k") == "newer");
  CHECK(GetOrDie(*kv, "gone") == std::nullopt);
  CHECK(GetOrDie(*kv, "kept") == "c");
  REQUIRE(kv->Sync().ok());
  REQUIRE(kv->Close().ok());

  kv = Open(dir.db());
  CHECK(ScanOrDie(*kv, "") == KvPairs{{"k", "newer"}, {"kept", "c"}});
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: the commit interval commits without Sync") {
  TempDir dir;
  auto kv = Open(dir.db(), 20);
  std::atomic<bool> durable{false};
  KvBatch b;
  b.Put("a", "1");
  b.OnDurable([&] { durable = true; });
  REQUIRE(kv->Apply(std::move(b)).ok());
  for (int i = 0; i < 500 && !durable; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(durable);
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: bad options are refused") {
  CHECK(OpenRocksDbKv(KvOptions{"", 100}).status().code() == Code::kInvalidArgument);
  TempDir dir;
  CHECK(OpenRocksDbKv(KvOptions{dir.db(), 0}).status().code() == Code::kInvalidArgument);
  auto r = OpenRocksDbKv(KvOptions{"/proc/no/such/dir/db", 100});
  REQUIRE(!r.ok());
  CHECK(r.status().message().find("/proc/no/such/dir/db") != std::string::npos);
}

TEST_CASE("kv: concurrent Apply, Scan and Sync stay consistent") {
  TempDir dir;
  auto kv = Open(dir.db(), 5);
  constexpr int kThreads = 4;
  constexpr int kIncrements = 150;
  PutOrDie(*kv, "counter", "0");
  std::atomic<int> errors{0};
  std::atomic<int> durable{0};

  auto worker = [&](int id) {
    for (int done = 0; done < kIncrements;) {
      // Compare-and-swap increment of the shared counter, plus one log entry per value.
      auto cur = kv->Get("counter");
      if (!cur.ok() || !cur.value()) {
        errors++;
        return;
      }
      const int n = std::stoi(*cur.value());
      char key[32];
      snprintf(key, sizeof(key), "log/%06d", n + 1);
      KvBatch b;
      b.ExpectValue("counter", *cur.value());
      b.ExpectAbsent(key);
      b.Put("counter", std::to_string(n + 1));
      b.Put(key, std::to_string(id));
      b.OnDurable([&] { durable++; });
      Status s = kv->Apply(std::move(b));
      if (s.code() == Code::kBusy) continue;  // lost the race; reread
      if (!s.ok()) {
        errors++;
        return;
      }
      ++done;
      if (done % 25 == 0 && !kv->Sync().ok()) errors++;
      if (done % 10 == 0) {
        // A scan is one atomic view: the log is dense 1..N, in order.
        auto r = kv->Scan("log/", "", 0);
        if (!r.ok()) {
          errors++;
          return;
        }
        for (size_t i = 0; i < r.value().size(); ++i) {
          char want[32];
          snprintf(want, sizeof(want), "log/%06zu", i + 1);
          if (r.value()[i].first != want) errors++;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker, i);
  for (auto& t : threads) t.join();
  CHECK(errors == 0);
  REQUIRE(kv->Sync().ok());
  CHECK(durable == kThreads * kIncrements);
  CHECK(GetOrDie(*kv, "counter") == std::to_string(kThreads * kIncrements));
  CHECK(ScanOrDie(*kv, "log/").size() == kThreads * kIncrements);
  REQUIRE(kv->Close().ok());

  kv = Open(dir.db());
  CHECK(GetOrDie(*kv, "counter") == std::to_string(kThreads * kIncrements));
  CHECK(ScanOrDie(*kv, "log/").size() == kThreads * kIncrements);
  CHECK(kv->Close().ok());
}

TEST_CASE("kv: reads outside the lock never go back, and Close waits for them") {
  // Get and Scan read RocksDB without the store's lock. A reader that missed both overlays and
  // then read RocksDB must still see a value at least as new as any it saw before, while
  // commits move keys from the overlays into RocksDB every millisecond.
  TempDir dir;
  auto kv = Open(dir.db(), 1);
  PutOrDie(*kv, "n/a", "0");
  PutOrDie(*kv, "n/b", "0");
  REQUIRE(kv->Sync().ok());
  constexpr int kWrites = 3000;
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, reads{0};
  auto reader = [&] {
    int last_a = 0;
    while (!stop.load()) {
      auto r = kv->Get("n/a");
      if (!r.ok()) {
        if (r.status().code() != Code::kUnavailable) errors++;  // closed: the end of the test
        return;
      }
      const int a = std::stoi(r.value().value_or("-1"));
      if (a < last_a) errors++;  // went back
      last_a = a;
      // Writes go a, then b, in separate batches: one view has b == a or b == a - 1.
      auto page = kv->Scan("n/", "", 0);
      if (!page.ok()) {
        if (page.status().code() != Code::kUnavailable) errors++;
        return;
      }
      if (page.value().size() != 2) {
        errors++;
        continue;
      }
      const int pa = std::stoi(page.value()[0].second), pb = std::stoi(page.value()[1].second);
      if (pa < last_a || !(pb == pa || pb == pa - 1)) errors++;
      last_a = pa;
      reads++;
    }
  };
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) readers.emplace_back(reader);
  for (int i = 1; i <= kWrites; ++i) {
    PutOrDie(*kv, "n/a", std::to_string(i));
    PutOrDie(*kv, "n/b", std::to_string(i));
  }
  // Close with the readers still reading: they get Unavailable, never a closed RocksDB.
  REQUIRE(kv->Close().ok());
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(errors == 0);
  CHECK(reads > 0);
  kv = Open(dir.db());
  CHECK(GetOrDie(*kv, "n/a") == std::to_string(kWrites));
  CHECK(GetOrDie(*kv, "n/b") == std::to_string(kWrites));
  CHECK(kv->Close().ok());
}

}  // namespace
}  // namespace clio
