// Recovery of the namespace at start: inode numbers never handed out twice, blobs and sizes
// checked against the inodes, orphans and the mount's reattach across a restart, the on-disk
// inode codec. Crashes are real (a child process dies without a stop; NsFixture::CrashAfter).
#include <doctest/doctest.h>

#include <linux/fs.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>

#include "common/codec.h"
#include "fs/namespace/namespace.h"
#include "fs/namespace/ns_keys.h"
#include "fs/namespace/test_util.h"
#include "placement/cte.h"
#include "storage/kv.h"

using namespace clio;
using clio::testing::NsFixture;

TEST_CASE("a crash never hands a lost inode number out again; the lost number is Stale and takes no bytes") {
  NsFixture f;
  f.commit_interval_ms = 3600 * 1000;  // nothing commits but what a sync commits
  f.Restart();
  const std::string said = f.CrashAfter([](NsFixture& c) -> std::string {
    auto synced = c.ns->Create(kRootIno, "synced", 0644, 0, 0);
    if (!synced.ok()) throw synced.status().ToString();
    if (!c.ns->Write(synced->ino, 0, std::string(3000, 's')).ok() || !c.ns->Fsync(synced->ino).ok())
      throw std::string("writing and syncing 'synced'");
    auto lost = c.ns->Create(kRootIno, "lost", 0644, 0, 0);  // never committed
    if (!lost.ok()) throw lost.status().ToString();
    if (!c.ns->Write(lost->ino, 0, std::string(5000, 'x')).ok()) throw std::string("writing 'lost'");
    return std::to_string(synced->ino) + " " + std::to_string(lost->ino);
  });
  uint64_t synced = 0, lost = 0;
  REQUIRE(std::sscanf(said.c_str(), "%" SCNu64 " %" SCNu64, &synced, &lost) == 2);
  auto s = f.ns->Lookup(kRootIno, "synced");
  REQUIRE(s.ok());
  CHECK(s->ino == synced);
  CHECK(s->size == 3000);
  CHECK(f.ns->Lookup(kRootIno, "lost").status().code() == Code::kNotFound);
  // A kernel that kept the lost node id (a live mount) asks about it and writes its page back.
  CHECK(f.ns->GetAttr(lost).status().code() == Code::kStale);
  CHECK(f.ns->Write(lost, 0, std::string(4096, 'x')).status().code() == Code::kStale);
  CHECK(f.ns->Lookup(lost, "child").status().code() == Code::kStale);  // a directory the kernel kept
  CHECK(f.ns->Create(lost, "child", 0644, 0, 0).status().code() == Code::kStale);
  SetAttrRequest grow;
  grow.valid = kSetSize;
  grow.size = 5000;
  CHECK(f.ns->SetAttr(lost, grow).status().code() == Code::kStale);
  CHECK(f.cte->ListBlobs(lost)->empty());  // the refused write stored nothing
  // A new file gets a number past everything handed out before the crash, and inherits nothing.
  auto kept = f.ns->Create(kRootIno, "kept", 0644, 0, 0);
  REQUIRE(kept.ok());
  CHECK(kept->ino > lost);
  REQUIRE(f.ns->Write(kept->ino, 0, std::string(3000, 'y')).ok());
  REQUIRE(f.ns->Fsync(kept->ino).ok());
  REQUIRE(f.ns->Release(kept->ino).ok());
  f.Restart();
  auto k = f.ns->Lookup(kRootIno, "kept");
  REQUIRE(k.ok());
  CHECK(k->size == 3000);
  CHECK(*f.ns->Read(k->ino, 0, 8192) == std::string(3000, 'y'));
}

TEST_CASE("a damaged, foreign or format-3 inode mark is rebuilt above every inode") {
  NsFixture f;
  uint64_t highest = f.Create(kRootIno, "a");
  auto restart_with = [&](const char* what, const std::optional<std::string>& hwm,
                          const std::optional<uint64_t>& legacy_next) {
    INFO(what);
    KvBatch b;
    if (hwm) b.Put("m/ino_hwm", *hwm);
    else b.Delete("m/ino_hwm");
    if (legacy_next) {
      Encoder e;
      e.Put<uint64_t>(*legacy_next);
      b.Put("m/next_ino", e.Take());
    }
    REQUIRE(f.kv->Apply(std::move(b)).ok());
    REQUIRE(f.kv->Sync().ok());
    f.Restart();
    // What a format-3 runtime would read after a downgrade: the mark, past every number.
    auto legacy = f.kv->Get("m/next_ino");
    REQUIRE((legacy.ok() && legacy->has_value()));
    Decoder d(**legacy);
    uint64_t next = 0;
    REQUIRE(d.Get(&next));
    CHECK(next == f.ns->inode_high_water());
    const uint64_t ino = f.Create(kRootIno, what);
    CHECK(ino > highest);
    highest = ino;
  };
  restart_with("garbage", std::string("\x07garbage"), std::nullopt);
  Encoder low;
  low.Put<uint8_t>(1).Put<uint64_t>(2);
  restart_with("below the highest inode", low.Take(), std::nullopt);
  Encoder past;
  past.Put<uint8_t>(1).Put<uint64_t>(~uint64_t{0});
  restart_with("past the largest number", past.Take(), std::nullopt);
  restart_with("format 3, behind", std::nullopt, uint64_t{3});
}

TEST_CASE("blobs of an inode number with no inode are removed at start") {
  NsFixture f;
  const uint64_t file = f.Create(kRootIno, "file");
  REQUIRE(f.ns->Write(file, 0, "file bytes").ok());
  REQUIRE(f.ns->Fsync(file).ok());
  const uint64_t stray = file + 12345;
  REQUIRE(f.cte->PutBlob(stray, 0, 0, "bytes of nobody").ok());
  REQUIRE(f.cte->PutBlob(stray, 3, 0, "more").ok());
  REQUIRE(f.cte->FlushTag(stray).ok());
  REQUIRE(f.kv->Sync().ok());
  f.Restart();
  CHECK(f.cte->ListBlobs(stray)->empty());
  CHECK(*f.ns->Read(file, 0, 100) == "file bytes");
}

TEST_CASE("orphans outlive a restart for the reclaim window; claimed ones live until their last release") {
  NsFixture f(0, /*open=*/false);
  f.options.orphan_reclaim_s = 3600;
  f.Open();
  auto held = f.ns->Create(kRootIno, "held", 0644, 0, 0);
  auto unclaimed = f.ns->Create(kRootIno, "unclaimed", 0644, 0, 0);
  REQUIRE((held.ok() && unclaimed.ok()));
  REQUIRE(f.ns->Write(held->ino, 0, "held bytes").ok());
  REQUIRE(f.ns->Write(unclaimed->ino, 0, "gone bytes").ok());
  REQUIRE(f.ns->Unlink(kRootIno, "held").ok());
  REQUIRE(f.ns->Unlink(kRootIno, "unclaimed").ok());
  f.Restart();  // both open when the runtime stopped: orphans, their open counts gone
  CHECK(f.ns->reclaiming());
  CHECK(*f.ns->Read(held->ino, 0, 100) == "held bytes");
  CHECK(*f.ns->Read(unclaimed->ino, 0, 100) == "gone bytes");
  auto exists = f.ns->Reattach({{held->ino, 2}, {unclaimed->ino, 0}, {held->ino + 999999, 1}}, /*begin=*/true,
                               /*complete=*/false);
  REQUIRE(exists.ok());
  CHECK(*exists == std::vector<bool>{true, true, false});
  // Within the window, the last name of a file nobody declared open may still be held by a
  // client that has not reattached: it is kept too.
  const uint64_t late = f.Create(kRootIno, "late");
  REQUIRE(f.ns->Write(late, 0, "late bytes").ok());
  REQUIRE(f.ns->Unlink(kRootIno, "late").ok());
  CHECK(*f.ns->Read(late, 0, 100) == "late bytes");
  REQUIRE(f.ns->EndReclaimWindow().ok());
  CHECK(!f.ns->reclaiming());
  CHECK(f.ns->GetAttr(unclaimed->ino).status().code() == Code::kStale);
  CHECK(f.cte->ListBlobs(unclaimed->ino)->empty());
  CHECK(f.ns->GetAttr(late).status().code() == Code::kStale);
  // The claimed orphan lives until its two declared opens are released.
  REQUIRE(f.ns->Write(held->ino, 10, " and more").ok());
  CHECK(*f.ns->Read(held->ino, 0, 100) == "held bytes and more");
  REQUIRE(f.ns->Release(held->ino).ok());
  CHECK(f.ns->GetAttr(held->ino).ok());
  REQUIRE(f.ns->Release(held->ino).ok());
  CHECK(f.ns->GetAttr(held->ino).status().code() == Code::kStale);
  CHECK(f.cte->ListBlobs(held->ino)->empty());
  // After the window an unlink of a closed file removes it at once, as before.
  const uint64_t after = f.Create(kRootIno, "after");
  REQUIRE(f.ns->Unlink(kRootIno, "after").ok());
  CHECK(f.ns->GetAttr(after).status().code() == Code::kStale);
}

TEST_CASE("a complete reattach ends the reclaim window; without it the window is on at every start") {
  NsFixture f(0, /*open=*/false);
  f.options.orphan_reclaim_s = 3600;
  f.Open();
  // No orphan at start, yet the window is on: a file open across the restart and unlinked
  // before its holder reattached must keep its data.
  CHECK(f.ns->reclaiming());
  auto a = f.ns->Create(kRootIno, "open_across", 0644, 0, 0);
  REQUIRE(a.ok());
  REQUIRE(f.ns->Write(a->ino, 0, "still here").ok());
  f.Restart();  // the count of its open is gone with the runtime
  REQUIRE(f.ns->Unlink(kRootIno, "open_across").ok());
  CHECK(*f.ns->Read(a->ino, 0, 100) == "still here");
  const uint64_t b = f.Create(kRootIno, "b");
  auto exists = f.ns->Reattach({{a->ino, 1}, {b, 0}}, /*begin=*/true, /*complete=*/true);
  REQUIRE(exists.ok());
  CHECK(*exists == std::vector<bool>{true, true});
  CHECK(!f.ns->reclaiming());
  CHECK(*f.ns->Read(a->ino, 0, 100) == "still here");
  REQUIRE(f.ns->Release(a->ino).ok());
  CHECK(f.ns->GetAttr(a->ino).status().code() == Code::kStale);
}

TEST_CASE("a new mount's declaration drops the opens of a mount that went away") {
  NsFixture f;
  auto a = f.ns->Create(kRootIno, "held_by_a_dead_mount", 0644, 0, 0);  // open, never released
  REQUIRE(a.ok());
  REQUIRE(f.ns->Write(a->ino, 0, "bytes").ok());
  REQUIRE(f.ns->Unlink(kRootIno, "held_by_a_dead_mount").ok());
  CHECK(f.ns->GetAttr(a->ino).ok());  // an orphan while its open lasts
  auto exists = f.ns->Reattach({}, /*begin=*/true, /*complete=*/true);  // the new mount holds nothing
  REQUIRE(exists.ok());
  CHECK(f.ns->GetAttr(a->ino).status().code() == Code::kStale);
  CHECK(f.cte->ListBlobs(a->ino)->empty());
}

TEST_CASE("crashes across inode batches never hand a number out twice") {
  NsFixture f(0, /*open=*/false);
  f.options.inode_batch = 3;
  f.commit_interval_ms = 3600 * 1000;
  f.Open();
  std::vector<uint64_t> seen;
  for (int round = 0; round < 4; ++round) {
    const std::string said = f.CrashAfter([round](NsFixture& c) -> std::string {
      std::string out;
      for (int i = 0; i < 7; ++i) {  // more than two batches, none of it committed
        auto a = c.ns->Create(kRootIno, "r" + std::to_string(round) + "_" + std::to_string(i), 0644, 0, 0);
        if (!a.ok()) throw a.status().ToString();
        out += std::to_string(a->ino) + " ";
      }
      return out;
    });
    std::istringstream in(said);
    for (uint64_t ino; in >> ino;) {
      for (uint64_t before : seen) CHECK(ino != before);
      seen.push_back(ino);
    }
  }
  CHECK(seen.size() == 28);
  const uint64_t now = f.Create(kRootIno, "after");
  for (uint64_t before : seen) CHECK(now != before);
}

TEST_CASE("the incarnation differs at each start; the inode mark only grows") {
  NsFixture f;
  const uint64_t first = f.ns->incarnation();
  const uint64_t hwm = f.ns->inode_high_water();
  f.Restart();
  CHECK(f.ns->incarnation() != first);
  CHECK(f.ns->inode_high_water() > hwm);
}

TEST_CASE("a size covering bytes a crash lost is shortened to what remains, never below the durable size") {
  NsFixture f(/*flush_interval_ms=*/3600000);  // the flusher runs only when asked
  f.commit_interval_ms = 3600 * 1000;           // only syncs commit
  f.Restart();
  f.CrashAfter([](NsFixture& c) -> std::string {
    auto must = [](const Status& s, const char* what) {
      if (!s.ok()) throw std::string(what) + ": " + s.ToString();
    };
    auto create = [&](const char* name) {
      auto a = c.ns->Create(kRootIno, name, 0644, 0, 0);
      must(a.status(), name);
      must(c.ns->Release(a->ino), name);
      return a->ino;
    };
    SetAttrRequest size;
    size.valid = kSetSize;
    // grown: 5,000 bytes fsynced, then 60,000 more that stay on the RAM tier.
    const uint64_t grown = create("grown");
    must(c.ns->Write(grown, 0, std::string(5000, 'a')).status(), "write grown");
    must(c.ns->Fsync(grown), "fsync grown");
    must(c.ns->Write(grown, 5000, std::string(60000, 'b')).status(), "extend grown");
    // extended: 3,000 bytes, extended by truncate to 100,000, fsynced; then a lost write far out.
    const uint64_t extended = create("extended");
    must(c.ns->Write(extended, 0, std::string(3000, 'c')).status(), "write extended");
    size.size = 100000;
    must(c.ns->SetAttr(extended, size).status(), "truncate extended up");
    must(c.ns->Fsync(extended), "fsync extended");
    must(c.ns->Write(extended, 200000, "lost").status(), "write extended far");
    // never: written, never flushed nor fsynced.
    const uint64_t never = create("never");
    must(c.ns->Write(never, 0, std::string(4000, 'n')).status(), "write never");
    // cut: 8,000 fsynced, truncated to 2,000, then 6,000 unsynced bytes.
    const uint64_t cut = create("cut");
    must(c.ns->Write(cut, 0, std::string(8000, 'm')).status(), "write cut");
    must(c.ns->Fsync(cut), "fsync cut");
    size.size = 2000;
    must(c.ns->SetAttr(cut, size).status(), "truncate cut");
    must(c.ns->Write(cut, 2000, std::string(6000, 'o')).status(), "extend cut");
    // whole: fsynced and left alone.
    const uint64_t whole = create("whole");
    must(c.ns->Write(whole, 0, std::string(5000, 'w')).status(), "write whole");
    must(c.ns->Fsync(whole), "fsync whole");
    // sparse: flushed (as the flusher does, no fsync), extended by truncate: nothing was lost.
    const uint64_t sparse = create("sparse");
    must(c.ns->Write(sparse, 0, "0123456789").status(), "write sparse");
    size.size = 1000000;
    must(c.ns->SetAttr(sparse, size).status(), "truncate sparse up");
    must(c.cte->FlushTag(sparse), "flush sparse");
    // Every size above commits (a group commit), none of the unsynced bytes do.
    must(c.kv->Sync(), "sync");
    return "";
  });
  auto attr = [&](const char* name) {
    auto a = f.ns->Lookup(kRootIno, name);
    REQUIRE_MESSAGE(a.ok(), name);
    return *a;
  };
  const InodeAttr grown = attr("grown");
  CHECK(grown.size == 5000);
  CHECK(grown.stored == 5000);
  CHECK(*f.ns->Read(grown.ino, 0, 100000) == std::string(5000, 'a'));
  const InodeAttr extended = attr("extended");
  CHECK(extended.size == 100000);  // the fsynced size stays, though no bytes back its end
  std::string want = std::string(3000, 'c') + std::string(97000, '\0');
  CHECK(*f.ns->Read(extended.ino, 0, 300000) == want);
  CHECK(attr("never").size == 0);
  CHECK(attr("never").stored == 0);
  const InodeAttr cut = attr("cut");
  CHECK(cut.size == 2000);
  CHECK(*f.ns->Read(cut.ino, 0, 10000) == std::string(2000, 'm'));
  CHECK(attr("whole").size == 5000);
  CHECK(*f.ns->Read(attr("whole").ino, 0, 10000) == std::string(5000, 'w'));
  CHECK(attr("sparse").size == 1000000);  // a hole at the end is no loss
  CHECK(f.ns->Read(attr("sparse").ino, 0, 10)->substr(0, 10) == "0123456789");
  // Done once: a second start finds nothing to repair and changes nothing.
  f.Restart();
  CHECK(attr("grown").size == 5000);
  CHECK(attr("extended").size == 100000);
  // The fsynced size goes with the file.
  REQUIRE(f.kv->Get(ns::DurableSizeKey(grown.ino))->has_value());
  uint64_t gone = 0;
  REQUIRE(f.ns->Unlink(kRootIno, "grown", &gone).ok());
  CHECK(gone == grown.ino);
  CHECK_FALSE(f.kv->Get(ns::DurableSizeKey(grown.ino))->has_value());
}

TEST_CASE("bytes past a file's size and a wrong stored count are repaired at start") {
  NsFixture f;
  const uint64_t ino = f.Create(kRootIno, "f");
  REQUIRE(f.ns->Write(ino, 0, "abc").ok());
  // What a crash that lost the size updates of two writes leaves: bytes past the end, in the
  // file's own chunk and two chunks on, on the persistent tier.
  REQUIRE(f.cte->PutBlob(ino, 0, 3, "STALE").ok());
  REQUIRE(f.cte->PutBlob(ino, 2, 0, "far").ok());
  REQUIRE(f.cte->FlushTag(ino).ok());
  // And a stored count (st_blocks) that drifted.
  std::string target;
  auto rec = f.kv->Get(ns::InodeKey(ino));
  REQUIRE((rec.ok() && rec->has_value()));
  InodeAttr a = *ns::DecodeInode(**rec, &target);
  a.stored = 123456789;
  KvBatch b;
  b.Put(ns::InodeKey(ino), ns::EncodeInode(a, target));
  REQUIRE(f.kv->Apply(std::move(b)).ok());
  REQUIRE(f.kv->Sync().ok());
  f.Restart();
  CHECK(*f.cte->ListBlobs(ino) == std::vector<uint64_t>{0});
  CHECK(f.cte->BlobRanges(ino, 0)->bytes() == 3);
  const InodeAttr after = *f.ns->GetAttr(ino);
  CHECK(after.size == 3);
  CHECK(after.stored == 3);
  // A write far past the end leaves a hole that reads as zeros, not the stale bytes.
  const uint64_t far = 2 * f.options.chunk_size + 10;
  REQUIRE(f.ns->Write(ino, far, "z").ok());
  const std::string all = *f.ns->Read(ino, 0, static_cast<uint32_t>(far + 1));
  CHECK(all == std::string("abc") + std::string(far - 3, '\0') + "z");
}

TEST_CASE("the on-disk inode codec: version 3 byte for byte, versions 1 and 2 read, newer refused") {
  InodeAttr a;
  a.ino = 0x0102030405060708;
  a.mode = 0100644;
  a.nlink = 2;
  a.uid = 1000;
  a.gid = 1001;
  a.size = 5000;
  a.atime_ns = 11;
  a.mtime_ns = 12;
  a.ctime_ns = 13;
  a.parent = 1;
  a.rdev = 7;
  a.stored = 4096;
  // Written out by hand, little-endian as common/codec.h puts integers: if this changes, the
  // disk format changed, and kInodeVersion with it.
  auto le = [](uint64_t v, int bytes) {
    std::string s;
    for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return s;
  };
  const std::string fields = le(a.ino, 8) + le(a.mode, 4) + le(a.nlink, 4) + le(a.uid, 4) + le(a.gid, 4) +
                             le(a.size, 8) + le(11, 8) + le(12, 8) + le(13, 8) + le(a.parent, 8);
  const std::string v3 = std::string("\x03") + fields + le(a.rdev, 8) + le(a.stored, 8) + le(3, 4) + "tgt";
  CHECK(ns::EncodeInode(a, "tgt") == v3);
  std::string target;
  auto back = ns::DecodeInode(v3, &target);
  REQUIRE(back.ok());
  CHECK(back->stored == 4096);
  CHECK(target == "tgt");
  // Version 2: no stored count; version 1: no rdev either.
  auto v2 = ns::DecodeInode(std::string("\x02") + fields + le(a.rdev, 8) + le(0, 4), nullptr);
  REQUIRE(v2.ok());
  CHECK(v2->rdev == 7);
  CHECK(v2->stored == 0);
  auto v1 = ns::DecodeInode(std::string("\x01") + fields + le(0, 4), nullptr);
  REQUIRE(v1.ok());
  CHECK(v1->size == 5000);
  CHECK(v1->rdev == 0);
  // A record from a newer CLIO: refused, naming both versions.
  auto v9 = ns::DecodeInode(std::string("\x09") + fields, nullptr);
  REQUIRE(v9.status().code() == Code::kCorruption);
  CHECK(v9.status().message().find("format version 9") != std::string::npos);
  CHECK(v9.status().message().find("reads 1 to 3") != std::string::npos);
  // Truncated records are damage.
  CHECK(ns::DecodeInode(v3.substr(0, 20), nullptr).status().code() == Code::kCorruption);
}

TEST_CASE("what a start found is durable: a later crash never shortens a file below it") {
  NsFixture f(/*flush_interval_ms=*/3600000);
  f.commit_interval_ms = 3600 * 1000;
  f.Restart();
  // First run: 3,000 bytes fsynced, then a truncation up to 50,000 that commits unsynced.
  f.CrashAfter([](NsFixture& c) -> std::string {
    auto a = c.ns->Create(kRootIno, "f", 0644, 0, 0);
    if (!a.ok() || !c.ns->Release(a->ino).ok()) throw std::string("create");
    if (!c.ns->Write(a->ino, 0, std::string(3000, 'a')).ok() || !c.ns->Fsync(a->ino).ok())
      throw std::string("write and fsync");
    SetAttrRequest grow;
    grow.valid = kSetSize;
    grow.size = 50000;
    if (!c.ns->SetAttr(a->ino, grow).ok() || !c.kv->Sync().ok()) throw std::string("truncate up");
    return "";
  });
  REQUIRE(f.ns->Lookup(kRootIno, "f")->size == 50000);  // nothing was lost: the size stays
  // Second run: a write past that end, lost with the RAM tier; its size commits.
  f.CrashAfter([](NsFixture& c) -> std::string {
    auto a = c.ns->Lookup(kRootIno, "f");
    if (!a.ok()) throw a.status().ToString();
    if (!c.ns->Write(a->ino, 60000, std::string(100, 'x')).ok() || !c.kv->Sync().ok())
      throw std::string("write past the end");
    return "";
  });
  // The state the first restart showed (50,000, a hole after 3,000) is where it goes back to,
  // not the 3,000 of the last fsync.
  const InodeAttr a = *f.ns->Lookup(kRootIno, "f");
  CHECK(a.size == 50000);
  CHECK(*f.ns->Read(a.ino, 0, 100000) == std::string(3000, 'a') + std::string(47000, '\0'));
}

TEST_CASE("a file whose end a crash lost goes back to its durable size, not to where flushed bytes end") {
  NsFixture f(/*flush_interval_ms=*/3600000);
  f.commit_interval_ms = 3600 * 1000;
  f.Restart();
  constexpr uint64_t kDurable = 783362, kChunk = 1u << 20, kEnd = 1131917;
  f.CrashAfter([&](NsFixture& c) -> std::string {
    auto a = c.ns->Create(kRootIno, "f", 0644, 0, 0);
    if (!a.ok() || !c.ns->Release(a->ino).ok()) throw std::string("create");
    if (!c.ns->Write(a->ino, 0, std::string(kDurable, 'd')).ok() || !c.ns->Fsync(a->ino).ok())
      throw std::string("write and fsync");
    // Unsynced: the rest of the first chunk reaches the file tier (as the flusher takes it),
    // the bytes past it stay on RAM; the size of both commits.
    if (!c.ns->Write(a->ino, kDurable, std::string(kChunk - kDurable, 'n')).ok() || !c.cte->FlushTag(a->ino).ok())
      throw std::string("first chunk");
    if (!c.ns->Write(a->ino, kChunk, std::string(kEnd - kChunk, 'n')).ok() || !c.kv->Sync().ok())
      throw std::string("past the chunk");
    return "";
  });
  // 1 MiB, where the flushed bytes end, is a size the file never had: it goes back to the
  // fsynced one, and the flushed bytes past it are gone (a later growth reads zeros there).
  const InodeAttr a = *f.ns->Lookup(kRootIno, "f");
  CHECK(a.size == kDurable);
  CHECK(*f.ns->Read(a.ino, 0, kEnd) == std::string(kDurable, 'd'));
  SetAttrRequest grow;
  grow.valid = kSetSize;
  grow.size = kChunk;
  REQUIRE(f.ns->SetAttr(a.ino, grow).ok());
  CHECK(*f.ns->Read(a.ino, kDurable, 16) == std::string(16, '\0'));
}
