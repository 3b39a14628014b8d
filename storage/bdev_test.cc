#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "storage/alloc_log.h"
#include "storage/bdev.h"
#include "storage/sys_util.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Disjoint;
using clio::testing::Pattern;
using clio::testing::FileConfig;
using clio::testing::FileSize;
using clio::testing::MustAllocate;
using clio::testing::MustOpen;
using clio::testing::TempDir;

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

BdevConfig MemConfig(BdevType type, const std::string& name, uint64_t capacity) {
  BdevConfig c;
  c.name = name;
  c.type = type;
  c.capacity = capacity;
  c.populate_unit = kMiB;
  return c;
}

// Allocates small blocks until the device says NoSpace; returns them all.
std::vector<Extent> AllocateUntilFull(Bdev* b, uint64_t bytes) {
  std::vector<Extent> got;
  for (int i = 0; i < 100000; ++i) {
    auto r = b->Allocate(bytes);
    if (!r.ok()) {
      CHECK(r.status().code() == Code::kNoSpace);
      break;
    }
    got.insert(got.end(), r->begin(), r->end());
  }
  return got;
}

void AppendBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out << bytes;
}

constexpr IoBackend kAsyncBackends[] = {IoBackend::kUring, IoBackend::kLibaio,
                                        IoBackend::kPosixAio};
}  // namespace

TEST_CASE("bdev names and defaults") {
  for (BdevType t : {BdevType::kFile, BdevType::kRam, BdevType::kHbm, BdevType::kPinned,
                     BdevType::kNoop, BdevType::kS3, BdevType::kGcs}) {
    CHECK(*ParseBdevType(BdevTypeName(t)) == t);
  }
  CHECK(*ParseBdevType("RAM") == BdevType::kRam);
  CHECK(ParseBdevType("tape").status().code() == Code::kInvalidArgument);
  CHECK(*ParseBdevType("s3") == BdevType::kS3);
  CHECK(*ParseBdevType("GCS") == BdevType::kGcs);
  for (Persistence p : {Persistence::kVolatile, Persistence::kTemporary, Persistence::kLongTerm}) {
    CHECK(*ParsePersistence(PersistenceName(p)) == p);
  }
  CHECK_FALSE(ParsePersistence("forever").ok());
  auto bw = [](BdevType t) { return DefaultPerfMetrics(t).read_bandwidth_mbps; };
  CHECK(bw(BdevType::kHbm) > bw(BdevType::kRam));
  CHECK(bw(BdevType::kRam) > bw(BdevType::kPinned));
  CHECK(bw(BdevType::kPinned) > bw(BdevType::kFile));
  CHECK(bw(BdevType::kPinned) > bw(BdevType::kNoop));

  // hbm and pinned open everywhere (host memory without a GPU: storage/bdev_gpu_test.cc).
  BdevConfig hbm = MemConfig(BdevType::kHbm, "gpu0", kMiB);
  CHECK(Bdev::Open(hbm).ok());
  hbm.type = BdevType::kPinned;
  CHECK(Bdev::Open(hbm).ok());
  BdevConfig unnamed;
  CHECK(Bdev::Open(unnamed).status().code() == Code::kConfigError);
}

TEST_CASE("every transport: write/read round trip over several extents, and bounds") {
  TempDir dir;
  std::vector<BdevConfig> configs = {
      FileConfig(dir, "tier.dat", 64 * kMiB),
      MemConfig(BdevType::kRam, "ram::roundtrip." + std::to_string(::getpid()), 64 * kMiB),
      MemConfig(BdevType::kNoop, "noop0", 64 * kMiB)};
  for (IoBackend backend : kAsyncBackends) {
    for (bool fault : {false, true}) {
      BdevConfig file = FileConfig(
          dir, "tier-" + std::string(IoBackendName(backend)) + (fault ? "-fault" : "") + ".dat",
          64 * kMiB);
      file.io.backend = backend;
      file.io.fault_injection = fault;
      file.io_depth = 4;
      configs.push_back(file);
    }
  }

  for (const auto& config : configs) {
    CAPTURE(config.name);
    auto b = MustOpen(config);
    CHECK(b->tier_id() != 0);
    ExtentList e = MustAllocate(b.get(), 3 * kMiB + 5000);
    REQUIRE(e.size() == 4);
    CHECK(TotalSize(e) >= 3 * kMiB + 5000);
    CHECK(Disjoint(e));

    const std::string data = Pattern(3 * kMiB, 9);
    REQUIRE(b->Write(e, 1000, data).ok());
    std::string back(data.size(), '\0');
    REQUIRE(b->Read(e, 1000, back.size(), back.data()).ok());
    const bool noop = config.type == BdevType::kNoop;
    if (noop) {
      CHECK(back == std::string(data.size(), '\0'));
    } else {
      CHECK(back == data);
      // A read that straddles two extents.
      std::string mid(4096, '\0');
      REQUIRE(b->Read(e, kMiB - 2048, mid.size(), mid.data()).ok());
      CHECK(mid == data.substr(kMiB - 2048 - 1000, 4096));
    }

    // Bounds: past the extents' total, and an extent past the device.
    const uint64_t total = TotalSize(e);
    CHECK(b->Write(e, total - 10, std::string(11, 'x')).code() == Code::kOutOfRange);
    CHECK(b->Read(e, total + 1, 0, back.data()).code() == Code::kOutOfRange);
    CHECK(b->Read(e, total - 10, 10, back.data()).ok());
    ExtentList bogus = {{128 * kMiB, kMiB}};
    CHECK(b->Write(bogus, 0, "x").code() == Code::kOutOfRange);

    BdevStats st = b->GetStats();
    CHECK(st.type == config.type);
    CHECK(st.used == TotalSize(e));
    CHECK(st.capacity == 64 * kMiB);
    CHECK(st.remaining <= 64 * kMiB - st.used);
    CHECK(st.lifetime_days == 999999);
    b->SetLifespan(12.5);
    CHECK(b->GetStats().lifetime_days == 12.5);
    REQUIRE(b->Free(e).ok());
    CHECK(b->Free(e).code() == Code::kInternal);
    CHECK(b->GetStats().used == 0);
    REQUIRE(b->Sync().ok());
  }
}

TEST_CASE("file bdev: backend names and persistence defaults") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "names.dat", 8 * kMiB);
  c.io.backend = IoBackend::kPosix;
  auto b = MustOpen(c);
  BdevStats st = b->GetStats();
  CHECK(st.backend == "posix");
  CHECK(st.persistence == Persistence::kTemporary);
  CHECK(b->shm_name().empty());
  CHECK(FileSize(c.name + ".alloc_log") >= AllocLog::kHeaderSize);
  b.reset();
  c.io.fault_injection = true;
  CHECK(MustOpen(c)->GetStats().backend == "posix+fault");
  CHECK(MustOpen(MemConfig(BdevType::kNoop, "n", kMiB))->GetStats().backend == "noop");
}

TEST_CASE("file bdev: the .fail marker makes reads, writes and syncs fail with IoError") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "faulty.dat", 8 * kMiB);
  auto b = MustOpen(c);
  ExtentList e = MustAllocate(b.get(), 8192);
  REQUIRE(b->Write(e, 0, "before").ok());
  { std::ofstream(c.name + ".fail") << "x"; }
  Status w = b->Write(e, 0, "during");
  CHECK(w.code() == Code::kIoError);
  CHECK(w.message().find("device fault injected by " + c.name + ".fail") != std::string::npos);
  char buf[6];
  CHECK(b->Read(e, 0, 6, buf).code() == Code::kIoError);
  CHECK(b->Sync().code() == Code::kIoError);
  ::unlink((c.name + ".fail").c_str());
  REQUIRE(b->Read(e, 0, 6, buf).ok());
  CHECK(std::string(buf, 6) == "before");
  CHECK(b->Sync().ok());
}

TEST_CASE("file bdev: a deleted backing file fails Sync") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "gone.dat", 8 * kMiB);
  auto b = MustOpen(c);
  REQUIRE(b->Sync().ok());
  ::unlink(c.name.c_str());
  Status s = b->Sync();
  CHECK(s.code() == Code::kIoError);
  CHECK(s.message().find(c.name) != std::string::npos);
}

TEST_CASE("file bdev: grows lazily in growth units up to its capacity") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "grow.dat", 4 * kMiB, kMiB);
  auto b = MustOpen(c);
  CHECK(FileSize(c.name) == 4096);  // just the header
  // More than the capacity: refused before the file grows at all.
  CHECK(b->Allocate(5 * kMiB).status().code() == Code::kNoSpace);
  CHECK(FileSize(c.name) == 4096);
  MustAllocate(b.get(), 4096);
  CHECK(FileSize(c.name) == 4096 + kMiB);
  std::vector<ExtentList> got;
  for (int i = 0; i < 3; ++i) got.push_back(MustAllocate(b.get(), kMiB));
  CHECK(FileSize(c.name) == 4096 + 4 * kMiB);
  // 1 MiB - 4 KiB remain: a whole MiB no longer fits; the remainder does.
  auto r = b->Allocate(kMiB);
  CHECK(r.status().code() == Code::kNoSpace);
  CHECK(r.status().message().find(c.name) != std::string::npos);
  CHECK(b->GetStats().remaining == kMiB - 4096);
  std::vector<Extent> rest = AllocateUntilFull(b.get(), 4096);
  CHECK(rest.size() == 255);
  CHECK(b->GetStats().remaining == 0);
  CHECK(FileSize(c.name) == 4096 + 4 * kMiB);
}

TEST_CASE("file bdev: capacity 0 grows as the host allows, capped by its free space") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "unbounded.dat", 0, kMiB);
  auto b = MustOpen(c);
  ExtentList e = MustAllocate(b.get(), 3 * kMiB);
  CHECK(TotalSize(e) == 3 * kMiB);
  BdevStats st = b->GetStats();
  uint64_t host = *FilesystemFreeBytes(dir.path());
  // remaining = backed-but-unused room + host free space (sampled), far below 1 PiB.
  CHECK(st.remaining <= host + 2 * kMiB);
  CHECK(st.remaining > 0);
  CHECK(st.capacity < (1ull << 50));
  // A request larger than the whole host filesystem fails with NoSpace and leaks nothing.
  auto huge = b->Allocate(host + (64ull << 30));
  CHECK(huge.status().code() == Code::kNoSpace);
  CHECK(b->GetStats().used == 3 * kMiB);
}

TEST_CASE("file bdev: tier id is kept in the header; a mismatch is refused") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "ids.dat", 8 * kMiB);
  c.tier_id = 42;
  MustOpen(c).reset();
  c.tier_id = 0;
  CHECK(MustOpen(c)->tier_id() == 42);
  c.tier_id = 43;
  auto r = Bdev::Open(c);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kCorruption);
  CHECK(r.status().message().find("42") != std::string::npos);
  CHECK(r.status().message().find("43") != std::string::npos);
  CHECK(r.status().message().find(c.name) != std::string::npos);

  // Not a tier file at all.
  const std::string junk = dir.File("junk.dat");
  { std::ofstream(junk) << std::string(8192, 'j'); }
  BdevConfig j = FileConfig(dir, "junk.dat", 8 * kMiB);
  auto rj = Bdev::Open(j);
  CHECK(rj.status().code() == Code::kCorruption);
  CHECK(rj.status().message().find(junk) != std::string::npos);
}

TEST_CASE("file bdev: the alloc log replays so no live extent is handed out twice") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "replay.dat", 8 * kMiB, kMiB);
  std::vector<Extent> live;
  uint64_t live_bytes = 0;
  {
    auto b = MustOpen(c);
    std::mt19937_64 rng(5);
    std::vector<ExtentList> lists;
    for (int i = 0; i < 40; ++i) lists.push_back(MustAllocate(b.get(), 1 + rng() % (150 * kKiB)));
    for (size_t i = 0; i < lists.size(); i += 3) REQUIRE(b->Free(lists[i]).ok());
    for (size_t i = 0; i < lists.size(); ++i) {
      if (i % 3 == 0) continue;
      live.insert(live.end(), lists[i].begin(), lists[i].end());
    }
    for (const auto& e : live) live_bytes += e.size;
    // Writes the data, then no Sync(): the log was flushed at each call, which a process
    // crash (not a power cut) keeps.
    REQUIRE(b->Write(live_bytes > 0 ? ExtentList{live[0]} : ExtentList{}, 0, "abc").ok());
  }
  auto b = MustOpen(c);
  CHECK(b->GetStats().used == live_bytes);
  std::vector<Extent> fresh = AllocateUntilFull(b.get(), 4096);
  CHECK_FALSE(fresh.empty());
  std::vector<Extent> all = live;
  all.insert(all.end(), fresh.begin(), fresh.end());
  CHECK(Disjoint(all));
  CHECK(b->GetStats().used == 8 * kMiB);
  char buf[3];
  REQUIRE(b->Read({live[0]}, 0, 3, buf).ok());
  CHECK(std::string(buf, 3) == "abc");
}

TEST_CASE("file bdev: a torn alloc log tail is ignored and cut off") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "torn.dat", 8 * kMiB, kMiB);
  const std::string log = c.name + ".alloc_log";
  ExtentList a, b2;
  {
    auto b = MustOpen(c);
    a = MustAllocate(b.get(), 64 * kKiB);
    REQUIRE(b->Sync().ok());
  }
  const uint64_t good = FileSize(log);
  CHECK(good == AllocLog::kHeaderSize + AllocLog::kRecordSize);
  // A record for another extent whose checksum is broken, then half a record.
  std::string bad = EncodeAllocLogRecord(true, {kMiB, kMiB});
  bad[3] ^= 0x40;
  AppendBytes(log, bad + EncodeAllocLogRecord(true, {2 * kMiB, kMiB}).substr(0, 11));
  {
    auto b = MustOpen(c);
    CHECK(FileSize(log) == good);  // the tail was cut
    CHECK(b->GetStats().used == 64 * kKiB);
    b2 = MustAllocate(b.get(), kMiB);  // appended after the good records
    CHECK(Disjoint({a[0], b2[0]}));
  }
  auto b = MustOpen(c);
  CHECK(b->GetStats().used == 64 * kKiB + kMiB);
  std::vector<Extent> fresh = AllocateUntilFull(b.get(), 64 * kKiB);
  fresh.push_back(a[0]);
  fresh.push_back(b2[0]);
  CHECK(Disjoint(fresh));
}

TEST_CASE("file bdev: alloc log header is checked") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "hdr.dat", 8 * kMiB);
  c.tier_id = 7;
  MustOpen(c).reset();
  const std::string log = c.name + ".alloc_log";
  SUBCASE("unknown version") {
    { std::ofstream(log, std::ios::binary | std::ios::trunc) << EncodeAllocLogHeader(7, 4); }
    auto r = Bdev::Open(c);
    CHECK(r.status().code() == Code::kCorruption);
    CHECK(r.status().message().find("version 4") != std::string::npos);
  }
  SUBCASE("a written record in a version 2 log is an unknown type") {
    {
      std::ofstream out(log, std::ios::binary | std::ios::trunc);
      out << EncodeAllocLogHeader(7, 2) << EncodeAllocLogRecord(true, {0, 4096})
          << EncodeAllocLogWrittenRecord({0, 4096});
    }
    auto r = Bdev::Open(c);
    CHECK(r.status().code() == Code::kCorruption);
    CHECK(r.status().message().find("unknown type 3") != std::string::npos);
  }
  SUBCASE("a version 1 log (blocks never split) is still read") {
    { std::ofstream(log, std::ios::binary | std::ios::trunc) << EncodeAllocLogHeader(7, 1); }
    CHECK(Bdev::Open(c).ok());
  }
  SUBCASE("another tier's log") {
    { std::ofstream(log, std::ios::binary | std::ios::trunc) << EncodeAllocLogHeader(8); }
    auto r = Bdev::Open(c);
    CHECK(r.status().code() == Code::kCorruption);
    CHECK(r.status().message().find(log) != std::string::npos);
  }
  SUBCASE("bad magic") {
    { std::ofstream(log, std::ios::binary | std::ios::trunc) << std::string(64, 'z'); }
    CHECK(Bdev::Open(c).status().code() == Code::kCorruption);
  }
}

TEST_CASE("alloc log: written records mark live blocks until they are freed") {
  TempDir dir;
  const std::string path = dir.File("w.alloc_log");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << EncodeAllocLogHeader(9) << EncodeAllocLogRecord(true, {0, 4096})
        << EncodeAllocLogRecord(true, {4096, 4096}) << EncodeAllocLogRecord(true, {8192, 8192})
        << EncodeAllocLogWrittenRecord({0, 4096})
        << EncodeAllocLogWrittenRecord({8192, 8192})
        // freed and allocated again: the earlier written record no longer applies
        << EncodeAllocLogRecord(false, {8192, 8192}) << EncodeAllocLogRecord(true, {8192, 8192})
        // a written record of a block that is not live (or not this size) is ignored
        << EncodeAllocLogWrittenRecord({16384, 4096}) << EncodeAllocLogWrittenRecord({4096, 8192});
  }
  AllocLog::Replay replay;
  auto log = AllocLog::Open(path, 9, IoOptions{}, &replay);
  REQUIRE(log.ok());
  CHECK(replay.live.size() == 3);
  REQUIRE(replay.written.size() == 1);
  CHECK(replay.written[0] == Extent{0, 4096});
  // Compaction keeps them.
  REQUIRE((*log)->Compact(replay.live, replay.free, {{0, 4096}, {4096, 4096}}).ok());
  log->reset();
  AllocLog::Replay again;
  REQUIRE(AllocLog::Open(path, 9, IoOptions{}, &again).ok());
  CHECK(again.live == replay.live);
  CHECK(again.written == ExtentList{{0, 4096}, {4096, 4096}});
}

TEST_CASE("file bdev: compaction keeps the live set and the free lists") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "compact.dat", 16 * kMiB, kMiB);
  c.alloc_log = dir.File("custom.alloc_log");
  std::vector<Extent> live;
  {
    auto b = MustOpen(c);
    std::vector<ExtentList> lists;
    for (int round = 0; round < 5; ++round) {
      for (int i = 0; i < 20; ++i) lists.push_back(MustAllocate(b.get(), 8 * kKiB * (i + 1)));
      for (size_t i = 0; i < lists.size(); i += 2) {
        if (!lists[i].empty()) REQUIRE(b->Free(lists[i]).ok());
        lists[i].clear();
      }
    }
    for (const auto& l : lists) live.insert(live.end(), l.begin(), l.end());
    const uint64_t before = FileSize(c.alloc_log);
    REQUIRE(b->FlushAllocLog().ok());
    const uint64_t after = FileSize(c.alloc_log);
    CHECK(after <= before);
    CHECK((after - AllocLog::kHeaderSize) % AllocLog::kRecordSize == 0);
    CHECK(!std::ifstream(c.alloc_log + ".tmp").good());
    // The log keeps working after the swap.
    ExtentList more = MustAllocate(b.get(), 4096);
    live.insert(live.end(), more.begin(), more.end());
  }
  uint64_t live_bytes = 0;
  for (const auto& e : live) live_bytes += e.size;
  auto b = MustOpen(c);
  CHECK(b->GetStats().used == live_bytes);
  std::vector<Extent> fresh = AllocateUntilFull(b.get(), 4 * kKiB);
  std::vector<Extent> all = live;
  all.insert(all.end(), fresh.begin(), fresh.end());
  CHECK(Disjoint(all));
  CHECK(b->GetStats().remaining == 0);
}

TEST_CASE("file bdev: Reconcile frees unreferenced extents and protects referenced ones") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "reconcile.dat", 4 * kMiB, kMiB);
  ExtentList a, b1, cc;
  {
    auto b = MustOpen(c);
    a = MustAllocate(b.get(), 256 * kKiB);
    b1 = MustAllocate(b.get(), 256 * kKiB);
    cc = MustAllocate(b.get(), 256 * kKiB);
  }
  auto b = MustOpen(c);
  CHECK(b->GetStats().used == 768 * kKiB);
  // The index names a and c, plus an extent the log never saw (past the high-water mark).
  Extent unseen{3 * kMiB, 512 * kKiB};
  ExtentList referenced = {a[0], cc[0], unseen};
  REQUIRE(b->Reconcile(referenced).ok());
  CHECK(b->GetStats().used == 1024 * kKiB);  // a + c + unseen; b1 freed
  std::vector<Extent> fresh = AllocateUntilFull(b.get(), 64 * kKiB);
  std::vector<Extent> all = fresh;
  all.insert(all.end(), referenced.begin(), referenced.end());
  CHECK(Disjoint(all));
  // b1's block was handed out again; the referenced ones were not.
  bool b1_reused = false;
  for (const auto& e : fresh) b1_reused |= (e.offset == b1[0].offset);
  CHECK(b1_reused);
  // The reconciled state is what the log replays.
  b.reset();
  auto again = MustOpen(c);
  CHECK(again->GetStats().used == 4 * kMiB);
  // A referenced extent that overlaps a different block is corruption.
  CHECK(again->Reconcile({{a[0].offset + 4096, 4096}}).code() == Code::kCorruption);
}

TEST_CASE("file bdev: with fault injection, unsynced data is lost at a crash, synced kept") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "crash.dat", 8 * kMiB, kMiB);
  c.io.fault_injection = true;
  ExtentList e;
  {
    auto b = MustOpen(c);
    e = MustAllocate(b.get(), 16 * kKiB);
    REQUIRE(b->Write(e, 0, std::string(16 * kKiB, 'o')).ok());
    REQUIRE(b->Sync().ok());
    REQUIRE(b->Write(e, 100, std::string(5000, 'n')).ok());
    std::string now(16 * kKiB, '\0');
    REQUIRE(b->Read(e, 0, now.size(), now.data()).ok());
    CHECK(now.substr(100, 5000) == std::string(5000, 'n'));
  }  // no Sync(): a power cut
  auto b = MustOpen(c);
  CHECK(b->GetStats().used == 16 * kKiB);  // the allocation was synced
  std::string back(16 * kKiB, '\0');
  REQUIRE(b->Read(e, 0, back.size(), back.data()).ok());
  CHECK(back == std::string(16 * kKiB, 'o'));
}

TEST_CASE("file bdev: concurrent allocate/write/read/free from 4 threads, on every backend") {
  TempDir dir;
  for (IoBackend backend : kAsyncBackends) {
    for (bool fault : {false, true}) {
      CAPTURE(IoBackendName(backend));
      CAPTURE(fault);
      BdevConfig c = FileConfig(
          dir, "mt-" + std::string(IoBackendName(backend)) + (fault ? "-fault" : "") + ".dat",
          64 * kMiB, 4 * kMiB);
      c.io.backend = backend;
      c.io.fault_injection = fault;
      auto b = MustOpen(c);
      const std::string name(IoBackendName(backend));
      CHECK(b->GetStats().backend == name + (fault ? "+fault" : ""));
      std::vector<int> errors(4, 0);
      std::vector<std::thread> threads;
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 rng(static_cast<uint64_t>(t) + 11);
          for (int i = 0; i < 100; ++i) {
            uint64_t n = 1 + rng() % (300 * kKiB);
            auto r = b->Allocate(n);
            if (!r.ok()) {
              ++errors[t];
              continue;
            }
            std::string data = Pattern(n, static_cast<unsigned>(t * 1000 + i));
            std::string back(n, '\0');
            if (!b->Write(*r, 0, data).ok() || !b->Read(*r, 0, n, back.data()).ok() ||
                back != data) {
              ++errors[t];
            }
            if (rng() % 2 == 0 && !b->Free(*r).ok()) ++errors[t];
          }
        });
      }
      for (auto& th : threads) th.join();
      for (int t = 0; t < 4; ++t) CHECK(errors[t] == 0);
      REQUIRE(b->Sync().ok());
    }
  }
}

TEST_CASE("ram bdev: a 0600 segment, committed as allocations advance, removed at the end") {
  BdevConfig c = MemConfig(BdevType::kRam, "ram::tier1", 32 * kMiB);
  c.alignment = 4096;  // lowered to 512 for memory tiers
  c.alloc = AllocPolicy::kLazy;
  std::string seg;
  {
    auto b = MustOpen(c);
    seg = b->shm_name();
    CHECK(seg == "/clio." + std::to_string(::getpid()) + ".ram__tier1");
    CHECK(b->GetStats().backend == "shm");
    CHECK(b->GetStats().persistence == Persistence::kVolatile);
    struct stat st;
    REQUIRE(::stat(("/dev/shm" + seg).c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(static_cast<uint64_t>(st.st_size) == 32 * kMiB);
    CHECK(static_cast<uint64_t>(st.st_blocks) * 512 < kMiB);  // nothing committed yet

    ExtentList e = MustAllocate(b.get(), 1);
    CHECK(e == ExtentList{{0, 512}});
    REQUIRE(::stat(("/dev/shm" + seg).c_str(), &st) == 0);
    CHECK(static_cast<uint64_t>(st.st_blocks) * 512 >= kMiB);  // one populate unit
    CHECK(static_cast<uint64_t>(st.st_blocks) * 512 < 4 * kMiB);

    // Another process could map the segment and see the bytes.
    REQUIRE(b->Write(e, 0, "shared").ok());
    int fd = ::shm_open(seg.c_str(), O_RDONLY, 0);
    REQUIRE(fd >= 0);
    void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED);
    CHECK(std::string(static_cast<char*>(p), 6) == "shared");
    ::munmap(p, 4096);
    ::close(fd);

    // Exhaustion is NoSpace, and the capacity holds.
    std::vector<Extent> all = AllocateUntilFull(b.get(), 256 * kKiB);
    std::vector<Extent> small = AllocateUntilFull(b.get(), 512);  // the last partial 256 KiB
    all.insert(all.end(), small.begin(), small.end());
    all.push_back(e[0]);
    CHECK(Disjoint(all));
    CHECK(b->GetStats().used == 32 * kMiB);
    CHECK(b->Allocate(1).status().code() == Code::kNoSpace);
    // Opening the same name twice in one process is refused rather than shared.
    CHECK(Bdev::Open(c).status().code() == Code::kAlreadyExists);
    // A ram tier cannot claim persistence.
    BdevConfig p2 = MemConfig(BdevType::kRam, "ram::persist", kMiB);
    p2.persistence = Persistence::kTemporary;
    CHECK(Bdev::Open(p2).status().code() == Code::kConfigError);
  }
  struct stat st;
  CHECK(::stat(("/dev/shm" + seg).c_str(), &st) != 0);
}

TEST_CASE("ram bdev: a capacity /dev/shm cannot hold is refused; the default is capped by it") {
  BdevConfig c = MemConfig(BdevType::kRam, "ram::huge", 1ull << 50);
  c.alloc = AllocPolicy::kLazy;
  auto huge = Bdev::Open(c);
  REQUIRE_FALSE(huge.ok());
  CHECK(huge.status().code() == Code::kConfigError);
  CHECK_MESSAGE(huge.status().message().find("ram bdev 'ram::huge': capacity 1 PiB (a tier's capacity_limit") !=
                    std::string::npos, huge.status().ToString());
  CHECK(huge.status().message().find("is more than /dev/shm holds") != std::string::npos);
  uint64_t shm_free = *FilesystemFreeBytes("/dev/shm");
  BdevConfig zero = MemConfig(BdevType::kRam, "ram::default", 0);
  auto z = MustOpen(zero);
  CHECK(z->GetStats().capacity <= shm_free + kMiB);
}

TEST_CASE("ram bdev: segments of dead processes are removed at Open") {
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  const std::string stale = "/clio." + std::to_string(child) + ".leftover";
  int fd = ::shm_open(stale.c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);
  // Our own segments are left alone.
  const std::string mine = "/clio." + std::to_string(::getpid()) + ".mine";
  fd = ::shm_open(mine.c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  ::close(fd);

  auto b = MustOpen(MemConfig(BdevType::kRam, "ram::cleaner", kMiB));
  struct stat st;
  CHECK(::stat(("/dev/shm" + stale).c_str(), &st) != 0);
  CHECK(::stat(("/dev/shm" + mine).c_str(), &st) == 0);
  ::shm_unlink(mine.c_str());
}

TEST_CASE("Reconcile on a memory tier protects referenced extents") {
  auto b = MustOpen(MemConfig(BdevType::kNoop, "noop::reconcile", 2 * kMiB));
  ExtentList a = MustAllocate(b.get(), kMiB);
  ExtentList x = MustAllocate(b.get(), 512 * kKiB);
  REQUIRE(b->Reconcile(a).ok());
  CHECK(b->GetStats().used == kMiB);
  CHECK(b->Free(x).code() == Code::kInternal);  // already freed by Reconcile
  std::vector<Extent> fresh = AllocateUntilFull(b.get(), 512 * kKiB);
  CHECK(fresh.size() == 2);
  fresh.push_back(a[0]);
  CHECK(Disjoint(fresh));
}

namespace {

uint64_t ShmCommitted(const std::string& segment) {
  struct stat st;
  REQUIRE(::stat(("/dev/shm" + segment).c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

}  // namespace

TEST_CASE("ram bdev alloc policy: eager commits the whole capacity at creation") {
  BdevConfig c = MemConfig(BdevType::kRam, "ram::eager", 16 * kMiB);
  c.alloc = AllocPolicy::kEager;
  auto b = MustOpen(c);
  CHECK(ShmCommitted(b->shm_name()) >= 16 * kMiB);
  CHECK(b->GetStats().committed == 16 * kMiB);
  // Allocating commits nothing more.
  MustAllocate(b.get(), 8 * kMiB);
  CHECK(b->GetStats().committed == 16 * kMiB);
}

TEST_CASE("ram bdev alloc policy: lazy commits populate_unit at a time") {
  BdevConfig c = MemConfig(BdevType::kRam, "ram::lazy", 16 * kMiB);
  c.alloc = AllocPolicy::kLazy;
  c.populate_unit = 2 * kMiB;
  auto b = MustOpen(c);
  CHECK(ShmCommitted(b->shm_name()) == 0);
  CHECK(b->GetStats().committed == 0);
  MustAllocate(b.get(), 4096);
  CHECK(b->GetStats().committed == 2 * kMiB);
  CHECK(ShmCommitted(b->shm_name()) >= 2 * kMiB);
  CHECK(ShmCommitted(b->shm_name()) < 4 * kMiB);
  MustAllocate(b.get(), 3 * kMiB);  // crosses the watermark: another unit or two
  CHECK(b->GetStats().committed == 4 * kMiB);
  CHECK(ShmCommitted(b->shm_name()) < 16 * kMiB);
}

TEST_CASE("ram bdev alloc policy: auto is eager with a capacity, lazy without") {
  BdevConfig given = MemConfig(BdevType::kRam, "ram::auto_given", 8 * kMiB);
  REQUIRE(given.alloc == AllocPolicy::kAuto);
  auto g = MustOpen(given);
  CHECK(ShmCommitted(g->shm_name()) >= 8 * kMiB);
  CHECK(g->GetStats().committed == 8 * kMiB);

  BdevConfig dflt = MemConfig(BdevType::kRam, "ram::auto_default", 0);  // 80% of DRAM
  auto d = MustOpen(dflt);
  CHECK(ShmCommitted(d->shm_name()) < 4 * kMiB);
  CHECK(d->GetStats().committed == 0);
  CHECK(d->GetStats().capacity > 8 * kMiB);
}

TEST_CASE("file bdev: an explicitly volatile file tier keeps no allocator log") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "scratch.dat", 8 * kMiB);
  c.persistence = Persistence::kVolatile;
  {
    auto b = MustOpen(c);
    CHECK(b->GetStats().persistence == Persistence::kVolatile);
    ExtentList e = MustAllocate(b.get(), 1 * kMiB);
    REQUIRE(b->Write(e, 0, "scratch").ok());
    REQUIRE(b->Sync().ok());
  }
  CHECK_FALSE(std::filesystem::exists(c.name + ".alloc_log"));
  // Nothing is replayed: the whole capacity is free again after a reopen.
  auto b = MustOpen(c);
  CHECK(b->GetStats().used == 0);
  // Only an explicit volatile does this: the default (temporary) logs.
  BdevConfig d = FileConfig(dir, "default.dat", 8 * kMiB);
  MustOpen(d);
  CHECK(std::filesystem::exists(d.name + ".alloc_log"));
}
