// safe-bdev over real file members: the erasure code, the journal, reads with members failed
// (every combination), checksum repair, rebuild under a writer, kill -9 during writes and
// during a rebuild, predictive replacement, and the errors of a bad array definition.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "storage/safe/erasure.h"
#include "storage/safe/journal.h"
#include "storage/safe/safe_bdev.h"
#include "storage/safe/safe_format.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::RandomBytes;
using clio::testing::TempDir;

namespace {

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// An array of file members (m0, m1, ...) and spares (s0, ...) in a temporary directory.
struct Rig {
  TempDir dir;
  int n = 0, spares_n = 0;
  uint64_t capacity = 0;
  SafeBdevConfig cfg;
  std::vector<std::unique_ptr<Bdev>> devs;
  std::vector<SafeMember> members, spares;
  OpenedSafeBdev arr;

  Rig(int n_members, uint32_t m, int n_spares, uint64_t member_capacity = 4 * kMiB, uint64_t chunk = 16 * kKiB)
      : n(n_members), spares_n(n_spares), capacity(member_capacity) {
    cfg.name = "safe::test";
    cfg.max_failures = m;
    cfg.chunk_size = chunk;
    cfg.alloc_log = dir.File("array.alloc_log");
    cfg.journal_size = 8 * kMiB;
    cfg.rebuild_bandwidth = 0;
    cfg.health_interval_ms = 3600000;  // health passes only when a test asks
    OpenDevices();
  }
  ~Rig() { Close(); }

  std::string Path(const std::string& name) const { return dir.File(name); }
  void OpenDevices() {
    members.clear();
    spares.clear();
    for (int i = 0; i < n + spares_n; ++i) {
      const std::string name = i < n ? "m" + std::to_string(i) : "s" + std::to_string(i - n);
      devs.push_back(clio::testing::MustOpen(clio::testing::FileConfig(dir, name, capacity)));
      (i < n ? members : spares).push_back({Path(name), devs.back().get()});
    }
  }
  Status Open() {
    auto r = OpenSafeBdev(cfg, members, spares);
    if (!r.ok()) return r.status();
    arr = std::move(r).value();
    return Status::Ok();
  }
  void MustOpenArray() {
    Status s = Open();
    REQUIRE_MESSAGE(s.ok(), s.ToString());
  }
  void Close() {
    arr = {};
    devs.clear();
  }
  void Reopen() {
    Close();
    OpenDevices();
    MustOpenArray();
  }
  Bdev* bdev() const { return arr.bdev.get(); }
  SafeArray* array() const { return arr.array; }
  void Fail(const std::string& name) { std::ofstream(name + ".fail") << "x"; }
  void Heal(const std::string& name) { std::remove((name + ".fail").c_str()); }
};

struct Blob {
  ExtentList extents;
  std::string data;
};

// Writes blobs of awkward sizes (partial chunks, whole stripes, several extents).
std::vector<Blob> WriteBlobs(Bdev* b, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Blob> out;
  for (int i = 0; i < count; ++i) {
    const uint64_t size = 1 + rng() % (600 * kKiB);
    Blob blob;
    blob.extents = clio::testing::MustAllocate(b, size);
    blob.data = RandomBytes(size, seed * 1000 + i);
    Status s = b->Write(blob.extents, 0, blob.data);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    out.push_back(std::move(blob));
  }
  return out;
}

void CheckBlobs(Bdev* b, const std::vector<Blob>& blobs) {
  for (size_t i = 0; i < blobs.size(); ++i) {
    std::string back(blobs[i].data.size(), '\0');
    Status s = b->Read(blobs[i].extents, 0, back.size(), back.data());
    REQUIRE_MESSAGE(s.ok(), "blob " << i << ": " << s.ToString());
    REQUIRE_MESSAGE(back == blobs[i].data, "blob " << i << " reads back other bytes");
  }
}

}  // namespace

namespace {

std::string ReadFileRange(const std::string& path, uint64_t at, uint64_t n) {
  std::ifstream f(path, std::ios::binary);
  std::string out(n, '\0');
  f.seekg(static_cast<std::streamoff>(at));
  f.read(out.data(), static_cast<std::streamsize>(n));
  return out;
}

void WriteFileRange(const std::string& path, uint64_t at, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("erasure code: any k of k+m chunks rebuild the others") {
  for (auto km : std::vector<std::pair<int, int>>{{3, 1}, {4, 2}, {2, 3}, {10, 4}}) {
    const int k = km.first, m = km.second;
    auto ec = ErasureCode::Make(k, m);
    REQUIRE(ec.ok());
    const uint64_t len = 4096 + 64;
    std::vector<std::string> chunks;
    for (int i = 0; i < k; ++i) chunks.push_back(RandomBytes(len, 77 + i));
    for (int i = 0; i < m; ++i) chunks.push_back(std::string(len, '\0'));
    std::vector<const uint8_t*> dp;
    std::vector<uint8_t*> pp;
    for (int i = 0; i < k; ++i) dp.push_back(reinterpret_cast<const uint8_t*>(chunks[i].data()));
    for (int i = 0; i < m; ++i) pp.push_back(reinterpret_cast<uint8_t*>(chunks[k + i].data()));
    ec->Encode(len, dp.data(), pp.data());
    // Every set of m lost chunks (and, for small codes, every smaller set).
    const int n = k + m;
    for (uint32_t mask = 1; mask < (1u << n); ++mask) {
      if (__builtin_popcount(mask) > m) continue;
      std::vector<int> lost, src;
      for (int p = 0; p < n; ++p) (mask >> p & 1 ? lost : src).push_back(p);
      src.resize(k);
      std::vector<const uint8_t*> sp;
      for (int p : src) sp.push_back(reinterpret_cast<const uint8_t*>(chunks[p].data()));
      std::vector<std::string> out(lost.size(), std::string(len, '\0'));
      std::vector<uint8_t*> op;
      for (auto& o : out) op.push_back(reinterpret_cast<uint8_t*>(o.data()));
      REQUIRE(ec->Reconstruct(len, src, sp.data(), lost, op.data()).ok());
      for (size_t i = 0; i < lost.size(); ++i) REQUIRE_MESSAGE(out[i] == chunks[lost[i]], k << "+" << m << " mask " << mask);
    }
  }
  CHECK(ErasureCode::Make(0, 1).status().code() == Code::kInvalidArgument);
  CHECK(ErasureCode::Make(3, 0).status().code() == Code::kInvalidArgument);
  CHECK(ErasureCode::Make(250, 6).status().message().find("255") != std::string::npos);
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);  // the CRC32C check value
}

TEST_CASE("stripe journal: replays complete records in order and stops at a torn one") {
  TempDir dir;
  const std::string path = dir.File("j");
  const std::string a = RandomBytes(5000, 1), b = RandomBytes(7000, 2), c = RandomBytes(100, 3);
  uint64_t replayed = 0;
  std::vector<std::string> seen;
  auto collect = [&seen](const StripeJournal::Entry& e) {
    seen.push_back(std::to_string(e.stripe) + ":" + std::to_string(e.slot) + ":" + std::string(e.image));
    return Status::Ok();
  };
  {
    auto j = StripeJournal::Open(path, 42, kMiB, {}, collect, &replayed);
    REQUIRE(j.ok());
    CHECK(replayed == 0);
    REQUIRE((*j)->Commit({{1, 9, 0, a}, {1, 9, 1, b}}).ok());
    REQUIRE((*j)->Commit({{2, 9, 3, c}}).ok());
    // Full: Busy, and nothing written.
    const std::string big(kMiB, 'x');
    CHECK((*j)->Commit({{3, 9, 0, big}}).code() == Code::kBusy);
  }
  auto j = StripeJournal::Open(path, 42, kMiB, {}, collect, &replayed);
  REQUIRE(j.ok());
  CHECK(replayed == 2);
  REQUIRE(seen.size() == 3);
  CHECK(seen[0] == "1:0:" + a);
  CHECK(seen[2] == "2:3:" + c);
  j->reset();
  CHECK(StripeJournal::Open(path, 43, kMiB, {}, collect, &replayed).status().code() == Code::kCorruption);

  // Tear the second record: only the first replays.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const uint64_t second = StripeJournal::kHeaderSize + StripeJournal::RecordBytes(2, 6000);
    f.seekp(static_cast<std::streamoff>(second + StripeJournal::kRecordHeaderSize + 30));
    f.put('!');
  }
  seen.clear();
  j = StripeJournal::Open(path, 42, kMiB, {}, collect, &replayed);
  REQUIRE(j.ok());
  CHECK(replayed == 1);
  CHECK(seen.size() == 2);
  // After a reset nothing replays, and new records start over.
  REQUIRE((*j)->Reset().ok());
  REQUIRE((*j)->Commit({{5, 9, 2, c}}).ok());
  j->reset();
  seen.clear();
  j = StripeJournal::Open(path, 42, kMiB, {}, collect, &replayed);
  REQUIRE(j.ok());
  CHECK(replayed == 1);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0] == "5:2:" + c);
}

TEST_CASE("safe-bdev: data reads back with 0..m members failed, every combination; m+1 is EIO") {
  const int n = 5;
  const uint32_t m = 2;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    const int failed = __builtin_popcount(mask);
    if (failed > static_cast<int>(m) + 1) continue;
    CAPTURE(mask);
    Rig rig(n, m, 0, 4 * kMiB);
    rig.MustOpenArray();
    const std::vector<Blob> blobs = WriteBlobs(rig.bdev(), 6, mask + 1);
    REQUIRE(rig.bdev()->Sync().ok());
    for (int i = 0; i < n; ++i)
      if (mask >> i & 1) rig.Fail(rig.members[i].name);
    if (failed <= static_cast<int>(m)) {
      CheckBlobs(rig.bdev(), blobs);
      SafeArrayStatus st = rig.array()->ArrayStatus();
      CHECK(st.failed == static_cast<uint32_t>(failed));
      CHECK(st.degraded == (failed > 0));
      if (failed > 0) {
        CHECK(st.reconstructed_reads > 0);
        const std::string health = rig.bdev()->GetStats().health;
        CHECK(health.find("degraded") == 0);
        for (int i = 0; i < n; ++i)
          if (mask >> i & 1) CHECK(health.find(rig.members[i].name) != std::string::npos);
      } else {
        CHECK(rig.bdev()->GetStats().health == "ok");
      }
      // Writes go on in degraded mode and read back.
      const std::vector<Blob> more = WriteBlobs(rig.bdev(), 3, 500 + mask);
      CheckBlobs(rig.bdev(), more);
      CheckBlobs(rig.bdev(), blobs);
    } else {
      // One member more than the array survives: errors, never other bytes.
      int errors = 0;
      for (const Blob& b : blobs) {
        std::string back(b.data.size(), '\0');
        Status s = rig.bdev()->Read(b.extents, 0, back.size(), back.data());
        if (s.ok()) {
          CHECK(back == b.data);  // a stripe whose lost chunks were all parity
        } else {
          CHECK(s.code() == Code::kIoError);
          ++errors;
        }
      }
      CHECK(errors > 0);
      CHECK(rig.bdev()->Write(blobs[0].extents, 0, "x").code() == Code::kIoError);
      CHECK(rig.bdev()->GetStats().health.find("failed") == 0);
    }
  }
}

TEST_CASE("safe-bdev: a flipped byte in a member file is detected, served right and repaired") {
  Rig rig(4, 1, 0);
  rig.MustOpenArray();
  // Fill the whole array so every slot holds a written chunk.
  const uint64_t cap = rig.bdev()->GetStats().capacity;
  Blob all;
  all.extents = clio::testing::MustAllocate(rig.bdev(), cap);
  all.data = RandomBytes(cap, 9);
  REQUIRE(rig.bdev()->Write(all.extents, 0, all.data).ok());
  REQUIRE(rig.bdev()->Sync().ok());

  // Member files start with a 4 KiB header; stripe 0's slot on member 1 follows it.
  const std::string victim = rig.members[1].name;
  const std::streamoff at = 4096 + 1000;
  char before = 0;
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    f.get(before);
    f.seekp(at);
    f.put(static_cast<char>(before ^ 0x5a));
  }
  CheckBlobs(rig.bdev(), {all});
  SafeArrayStatus st = rig.array()->ArrayStatus();
  CHECK(st.checksum_errors == 1);
  CHECK(st.repaired_chunks == 1);
  CHECK(st.failed == 0);  // a bad chunk is not a failed member
  REQUIRE(rig.bdev()->Sync().ok());
  {
    std::ifstream f(victim, std::ios::binary);
    f.seekg(at);
    char now = 0;
    f.get(now);
    CHECK(now == before);  // repaired in place
  }
  auto bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
  CHECK(rig.array()->ArrayStatus().checksum_errors == 1);

  // A corrupted parity trailer: reads do not need it, a scrub (Verify) finds and repairs it.
  const std::string parity_slot = ReadFileRange(rig.members[3].name, 4096, 16 * 1024 + 4096);
  {
    std::fstream f(rig.members[3].name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 16 * 1024 + 20);  // stripe 0 on member 3: trailer after the chunk
    f.put('!');
  }
  CheckBlobs(rig.bdev(), {all});
  bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 1);
  bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
  REQUIRE(rig.bdev()->Sync().ok());
  CHECK(ReadFileRange(rig.members[3].name, 4096, 16 * 1024 + 4096) == parity_slot);
}

TEST_CASE("safe-bdev: rebuild onto a spare under a concurrent writer ends with every stripe verified") {
  Rig rig(4, 1, 1);
  rig.cfg.rebuild_bandwidth = 16 * kMiB;  // long enough for the writer to overlap it
  rig.MustOpenArray();
  std::vector<Blob> blobs = WriteBlobs(rig.bdev(), 8, 3);
  REQUIRE(rig.bdev()->Sync().ok());
  rig.Fail(rig.members[2].name);

  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  Status writer_status;
  std::thread writer([&] {
    uint32_t seed = 100;
    while (!stop.load()) {
      Blob& b = blobs[seed % blobs.size()];
      b.data = RandomBytes(b.data.size(), seed++);
      Status s = rig.bdev()->Write(b.extents, 0, b.data);
      if (!s.ok()) {
        writer_status = s;
        return;
      }
      ++rounds;
    }
  });
  // The first read notices the failure; the spare takes over in the background.
  std::string probe(blobs[0].data.size(), '\0');
  while (rig.array()->ArrayStatus().failed == 0) {
    REQUIRE(rig.bdev()->Read(blobs[0].extents, 0, probe.size(), probe.data()).ok());
  }
  Status rebuilt = rig.array()->WaitRebuilds();
  stop = true;
  writer.join();
  REQUIRE_MESSAGE(writer_status.ok(), writer_status.ToString());
  REQUIRE_MESSAGE(rebuilt.ok(), rebuilt.ToString());
  CHECK(rounds.load() > 0);

  SafeArrayStatus st = rig.array()->ArrayStatus();
  CHECK(st.rebuilds_done == 1);
  CHECK(st.failed == 0);
  CHECK(!st.degraded);
  CHECK(st.members[2].name == rig.spares[0].name);
  CHECK(st.spares.empty());
  CHECK(rig.bdev()->GetStats().health == "ok");
  auto bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
  CheckBlobs(rig.bdev(), blobs);

  // The new member carries the data: the array survives losing another one.
  REQUIRE(rig.bdev()->Sync().ok());
  rig.Fail(rig.members[0].name);
  CheckBlobs(rig.bdev(), blobs);
  // And everything survives a restart (with the failed member still failed).
  rig.Reopen();
  CHECK(rig.array()->ArrayStatus().members[2].name == rig.spares[0].name);
  CHECK(rig.array()->ArrayStatus().members[0].state == "failed");
  CheckBlobs(rig.bdev(), blobs);
}

TEST_CASE("safe-bdev: a member whose lifespan runs short is copied onto a spare before it fails") {
  Rig rig(4, 1, 1);
  rig.MustOpenArray();
  const std::vector<Blob> blobs = WriteBlobs(rig.bdev(), 8, 5);
  REQUIRE(rig.bdev()->Sync().ok());
  Bdev* dying = rig.members[1].bdev;
  const uint64_t used_before = dying->GetStats().used;
  CHECK(used_before > 0);

  dying->SetLifespan(30);  // not yet
  REQUIRE(rig.array()->CheckHealth().ok());
  REQUIRE(rig.array()->WaitRebuilds().ok());
  CHECK(rig.array()->ArrayStatus().rebuilds_done == 0);

  dying->SetLifespan(3);
  REQUIRE(rig.array()->CheckHealth().ok());
  REQUIRE(rig.array()->WaitRebuilds().ok());
  SafeArrayStatus st = rig.array()->ArrayStatus();
  CHECK(st.rebuilds_done == 1);
  CHECK(st.members[1].name == rig.spares[0].name);
  CHECK(st.failed == 0);
  CHECK(dying->GetStats().used == 0);  // the array's space went back to the dying pool
  CheckBlobs(rig.bdev(), blobs);
  auto bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
  // The old member is out of the array: failing it changes nothing.
  rig.Fail(rig.members[1].name);
  CheckBlobs(rig.bdev(), blobs);
  CHECK(rig.array()->ArrayStatus().failed == 0);
}

TEST_CASE("safe-bdev: RemoveBdev, AddBdev and RecoverBdev") {
  Rig rig(4, 1, 0);
  rig.MustOpenArray();
  const std::vector<Blob> blobs = WriteBlobs(rig.bdev(), 6, 8);
  SafeArray* a = rig.array();
  CHECK(a->RemoveMember("nope", "").code() == Code::kNotFound);
  REQUIRE(a->RemoveMember(rig.members[3].name, "planned").ok());
  CHECK(a->ArrayStatus().members[3].reason.find("planned") != std::string::npos);
  CHECK(a->RemoveMember(rig.members[0].name, "").code() == Code::kInvalidArgument);  // would lose data
  CheckBlobs(rig.bdev(), blobs);

  // A new pool as spare: the failed slot rebuilds onto it.
  auto extra = clio::testing::MustOpen(clio::testing::FileConfig(rig.dir, "x0", rig.capacity));
  auto small = clio::testing::MustOpen(clio::testing::FileConfig(rig.dir, "x1", rig.capacity / 2));
  CHECK(a->AddSpare({rig.dir.File("x1"), small.get()}).message().find("capacity") != std::string::npos);
  CHECK(a->AddSpare({rig.members[0].name, rig.members[0].bdev}).message().find("already a member") != std::string::npos);
  REQUIRE(a->AddSpare({rig.dir.File("x0"), extra.get()}).ok());
  REQUIRE(a->WaitRebuilds().ok());
  CHECK(a->ArrayStatus().members[3].name == rig.dir.File("x0"));
  CheckBlobs(rig.bdev(), blobs);

  // A failed member whose device works again is rebuilt in place.
  rig.Fail(rig.members[1].name);
  CheckBlobs(rig.bdev(), blobs);
  REQUIRE(a->ArrayStatus().members[1].state == "failed");
  rig.Heal(rig.members[1].name);
  REQUIRE(a->Recover(rig.members[1].name, rig.members[1]).ok());
  REQUIRE(a->WaitRebuilds().ok());
  CHECK(a->ArrayStatus().members[1].state == "ok");
  CHECK(a->ArrayStatus().members[1].name == rig.members[1].name);
  auto bad = a->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
  CHECK(a->Recover(rig.members[2].name, {rig.dir.File("x1"), small.get()}).message().find("capacity") !=
        std::string::npos);
  rig.Close();  // the array before the extra pools it uses
}

namespace {

// Child of the kill -9 test: writes blobs, syncs each, and reports it on `fd`; never returns.
[[noreturn]] void ChildWrite(Rig& rig, int fd) {
  rig.OpenDevices();
  if (!rig.Open().ok()) ::_exit(3);
  for (uint32_t i = 0;; ++i) {
    const uint64_t size = 1 + (i * 7919) % (300 * kKiB);
    auto e = rig.bdev()->Allocate(size);
    if (!e.ok()) ::_exit(0);
    const std::string data = RandomBytes(size, 4000 + i);
    if (!rig.bdev()->Write(*e, 0, data).ok() || !rig.bdev()->Sync().ok()) ::_exit(4);
    std::string line = std::to_string(i) + " " + std::to_string(size);
    for (const Extent& x : *e) line += " " + std::to_string(x.offset) + " " + std::to_string(x.size);
    line += "\n";
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(5);
  }
}

}  // namespace

TEST_CASE("safe-bdev: kill -9 during writes and during a rebuild; every synced byte survives, the rebuild resumes") {
  Rig rig(4, 1, 1, 8 * kMiB);
  rig.MustOpenArray();
  rig.Close();

  // Phase 1: kill -9 in the middle of synced writes.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(fds[0]);
    ChildWrite(rig, fds[1]);
  }
  ::close(fds[1]);
  FILE* in = ::fdopen(fds[0], "r");
  std::vector<Blob> synced;
  char line[4096];
  while (synced.size() < 25 && std::fgets(line, sizeof line, in)) {
    std::istringstream ss(line);
    uint32_t i = 0;
    uint64_t size = 0, off = 0, sz = 0;
    ss >> i >> size;
    Blob b;
    while (ss >> off >> sz) b.extents.push_back({off, sz});
    b.data = RandomBytes(size, 4000 + i);
    synced.push_back(std::move(b));
  }
  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::fclose(in);
  REQUIRE(synced.size() == 25);

  rig.OpenDevices();
  rig.MustOpenArray();
  CheckBlobs(rig.bdev(), synced);
  auto bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
  // Blocks the array never confirmed go back when the CTE reconciles; here: the synced ones.
  ExtentList referenced;
  for (const Blob& b : synced) referenced.insert(referenced.end(), b.extents.begin(), b.extents.end());
  REQUIRE(rig.bdev()->Reconcile(referenced).ok());
  const std::vector<Blob> more = WriteBlobs(rig.bdev(), 4, 77);
  REQUIRE(rig.bdev()->Sync().ok());
  rig.Close();

  // Phase 2: kill -9 in the middle of a rebuild (slow, so it is caught half way).
  rig.Fail(rig.members[0].name);
  child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    rig.cfg.rebuild_bandwidth = 4 * kMiB;
    rig.OpenDevices();
    if (!rig.Open().ok()) ::_exit(3);
    // Reading notices the failed member; the spare takes over.
    std::string back(synced[0].data.size(), '\0');
    if (!rig.bdev()->Read(synced[0].extents, 0, back.size(), back.data()).ok()) ::_exit(4);
    (void)rig.array()->WaitRebuilds();
    ::_exit(0);
  }
  // Wait for the superblock to record progress, then kill.
  uint64_t recorded = 0;
  for (int tries = 0; tries < 20000 && recorded == 0; ++tries) {
    auto sb = ReadSuperblock(rig.cfg.alloc_log + ".sb");
    if (sb.ok() && sb->slots[0].has_target) recorded = sb->slots[0].cursor;
    if (recorded == 0) ::usleep(1000);
  }
  REQUIRE(::kill(child, SIGKILL) == 0);
  ::waitpid(child, &status, 0);
  REQUIRE(recorded > 0);
  auto sb = ReadSuperblock(rig.cfg.alloc_log + ".sb");
  REQUIRE(sb.ok());
  REQUIRE(sb->slots[0].has_target);
  const uint64_t persisted = sb->slots[0].cursor;
  REQUIRE(persisted < sb->stripes);  // caught half way

  rig.OpenDevices();
  rig.MustOpenArray();
  REQUIRE(rig.array()->WaitRebuilds().ok());
  SafeArrayStatus st = rig.array()->ArrayStatus();
  CHECK(st.members[0].name == rig.spares[0].name);
  CHECK(st.rebuilds_done == 1);
  // Resumed from the recorded cursor, not restarted: only the rest was rebuilt.
  CHECK(st.rebuild_stripes_written == st.stripes - persisted);
  CheckBlobs(rig.bdev(), synced);
  CheckBlobs(rig.bdev(), more);
  bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
}

TEST_CASE("safe-bdev: a bad array definition is refused naming the member and the key") {
  Rig rig(4, 1, 0);
  auto err = [&](std::vector<SafeMember> members, std::vector<SafeMember> spares = {}) {
    auto r = OpenSafeBdev(rig.cfg, members, spares);
    REQUIRE(!r.ok());
    return r.status().message();
  };
  const auto& ms = rig.members;
  rig.cfg.max_failures = 0;
  CHECK(err(ms).find("max_failures: must be at least 1") == 0);
  rig.cfg.max_failures = 4;
  CHECK(err(ms).find("members: 4 members leave no data member") == 0);
  rig.cfg.max_failures = 1;
  std::vector<SafeMember> many(256, ms[0]);
  CHECK(err(many).find("255") != std::string::npos);
  CHECK(err({ms[0], ms[1], ms[0]}).find("'" + ms[0].name + "' is listed twice") != std::string::npos);
  CHECK(err({ms[0], ms[1]}, {ms[1]}).find("listed twice") != std::string::npos);
  CHECK(err({ms[0], ms[1], {"ghost", nullptr}}).find("pool 'ghost' does not exist") != std::string::npos);
  auto small = clio::testing::MustOpen(clio::testing::FileConfig(rig.dir, "small", 2 * kMiB));
  CHECK(err({ms[0], ms[1], {"small", small.get()}}).find("'small' has capacity") != std::string::npos);
  BdevConfig c512 = clio::testing::FileConfig(rig.dir, "a512", rig.capacity);
  c512.alignment = 512;
  auto a512 = clio::testing::MustOpen(c512);
  CHECK(err({ms[0], ms[1], {"a512", a512.get()}}).find("'a512' has alignment 512") != std::string::npos);
  rig.cfg.chunk_size = 6000;
  CHECK(err(ms).find("chunk_size: 6000 is not a multiple") == 0);
  rig.cfg.chunk_size = 16 * kKiB;
  rig.cfg.journal_size = 4096;
  CHECK(err(ms).find("journal_size:") == 0);
  rig.cfg.journal_size = 8 * kMiB;
  rig.cfg.alloc_log.clear();
  CHECK(err(ms).find("alloc_log: required") == 0);
  rig.cfg.alloc_log = rig.dir.File("array.alloc_log");
  // A member that already holds data is not taken over.
  auto used = clio::testing::MustAllocate(ms[2].bdev, 4096);
  CHECK(err(ms).find("'" + ms[2].name + "' already holds 4096 bytes") != std::string::npos);
  REQUIRE(ms[2].bdev->Free(used).ok());
  // Geometry is fixed once the array exists.
  rig.MustOpenArray();
  rig.Close();
  rig.OpenDevices();
  rig.cfg.chunk_size = 32 * kKiB;
  CHECK(err(rig.members).find("chunk_size: 32768 differs from the array's 16384") == 0);
  rig.cfg.chunk_size = 16 * kKiB;
  rig.MustOpenArray();
}


TEST_CASE("safe-bdev: a stripe update cut between data and parity is replayed from the journal (no write hole)") {
  // Stripe 0 of a 3+1 array: chunk 0 (member 0) holds A, synced; then B is written into
  // chunk 1 (member 1). The crash is simulated by putting member 3's old parity slot back,
  // as if the power went after the data chunk landed and before the parity did. Losing
  // member 0 then needs that parity to rebuild A.
  // Variants: the journal replays; without it the stale parity is caught; without it a scrub
  // before the loss recomputes the parity from the data.
  for (int variant : {0, 1, 2}) {
    CAPTURE(variant);
    const bool keep_journal = variant == 0;
    Rig rig(4, 1, 0);
    rig.MustOpenArray();
    const uint64_t slot = 16 * kKiB + 4096, header = 4096;
    Blob a{clio::testing::MustAllocate(rig.bdev(), 10 * kKiB), RandomBytes(10 * kKiB, 1)};
    REQUIRE(a.extents.size() == 1);
    REQUIRE(a.extents[0].offset == 0);
    REQUIRE(rig.bdev()->Write(a.extents, 0, a.data).ok());
    REQUIRE(rig.bdev()->Sync().ok());
    const std::string old_parity = ReadFileRange(rig.members[3].name, header, slot);

    Blob b{clio::testing::MustAllocate(rig.bdev(), 10 * kKiB), RandomBytes(10 * kKiB, 2)};
    REQUIRE(b.extents[0].offset == 16 * kKiB);
    REQUIRE(rig.bdev()->Write(b.extents, 0, b.data).ok());
    REQUIRE(ReadFileRange(rig.members[3].name, header, slot) != old_parity);
    const std::string journal = ReadWholeFile(rig.cfg.alloc_log + ".journal");
    rig.Close();  // a clean close checkpoints the journal: put back the crash's state
    WriteFileRange(rig.members[3].name, header, old_parity);
    if (keep_journal) WriteFileRange(rig.cfg.alloc_log + ".journal", 0, journal);

    rig.OpenDevices();
    if (variant == 2) {
      rig.MustOpenArray();
      auto bad = rig.array()->Verify();
      REQUIRE(bad.ok());
      CHECK(*bad == 1);
      bad = rig.array()->Verify();
      REQUIRE(bad.ok());
      CHECK(*bad == 0);
      rig.Close();
      rig.OpenDevices();
    }
    rig.Fail(rig.members[0].name);
    rig.MustOpenArray();
    std::string back(a.data.size(), '\0');
    Status s = rig.bdev()->Read(a.extents, 0, back.size(), back.data());
    if (variant != 1) {
      if (keep_journal) CHECK(rig.array()->ArrayStatus().journal_replayed >= 1);
      REQUIRE_MESSAGE(s.ok(), s.ToString());
      CHECK(back == a.data);
      CheckBlobs(rig.bdev(), {b});
    } else {
      // Without the journal the stale parity would rebuild other bytes: the checksums the
      // parity records catch it, and the read fails instead of returning them.
      CHECK(s.code() == Code::kIoError);
      CHECK(s.message().find("does not match the checksum") != std::string::npos);
    }
  }
}

TEST_CASE("chunk trailers: sound ones of another array or incarnation read as never written, others as bad") {
  const std::string chunk = RandomBytes(4096, 5);
  const uint64_t tb = TrailerBytes(3, 4096);
  std::string trailer(tb, '\0');
  ChunkTrailer t, out;
  t.stripe = 12;
  t.incarnation = 99;
  t.position = 3;
  t.crc = Crc32c(chunk.data(), chunk.size());
  t.data_crcs = {1, 2, 3};
  EncodeTrailer(7, t, trailer.data(), tb);
  CHECK(CheckTrailer(7, chunk, trailer, 12, 3, 99, 3, &out) == TrailerCheck::kValid);
  CHECK(out.data_crcs == t.data_crcs);
  CHECK(CheckTrailer(8, chunk, trailer, 12, 3, 99, 3, &out) == TrailerCheck::kBlank);   // another array
  CHECK(CheckTrailer(7, chunk, trailer, 12, 3, 100, 3, &out) == TrailerCheck::kBlank);  // another incarnation
  CHECK(CheckTrailer(7, chunk, trailer, 13, 3, 99, 3, &out) == TrailerCheck::kBad);     // misdirected
  CHECK(CheckTrailer(7, chunk, trailer, 12, 2, 99, 3, &out) == TrailerCheck::kBad);
  std::string flipped = chunk;
  flipped[100] ^= 1;
  CHECK(CheckTrailer(7, flipped, trailer, 12, 3, 99, 3, &out) == TrailerCheck::kBad);
  std::string torn = trailer;
  torn[20] ^= 1;
  CHECK(CheckTrailer(7, chunk, torn, 12, 3, 99, 3, &out) == TrailerCheck::kBad);
  CHECK(CheckTrailer(7, chunk, std::string(tb, '\0'), 12, 3, 99, 3, &out) == TrailerCheck::kBlank);
}

TEST_CASE("safe-bdev: a pool new to the array becomes a spare and is still one after the next open") {
  Rig rig(4, 1, 0);
  rig.MustOpenArray();
  const std::vector<Blob> blobs = WriteBlobs(rig.bdev(), 4, 21);
  REQUIRE(rig.bdev()->Sync().ok());
  rig.Close();
  rig.spares_n = 1;  // s0 appears in the config
  for (int round = 0; round < 2; ++round) {
    rig.OpenDevices();
    rig.MustOpenArray();
    SafeArrayStatus st = rig.array()->ArrayStatus();
    REQUIRE(st.spares.size() == 1);
    CHECK(st.spares[0] == rig.spares[0].name);
    CheckBlobs(rig.bdev(), blobs);
    rig.Close();
  }
  // The spare still works as one: a failed member rebuilds onto it.
  rig.OpenDevices();
  rig.MustOpenArray();
  rig.Fail(rig.members[3].name);
  CheckBlobs(rig.bdev(), blobs);
  REQUIRE(rig.array()->WaitRebuilds().ok());
  CHECK(rig.array()->ArrayStatus().members[3].name == rig.spares[0].name);
  auto bad = rig.array()->Verify();
  REQUIRE(bad.ok());
  CHECK(*bad == 0);
}
