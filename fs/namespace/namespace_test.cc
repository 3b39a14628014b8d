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

namespace {

std::string Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

}  // namespace

TEST_CASE("root exists; create, lookup, getattr") {
  NsFixture f;
  auto root = f.ns->GetAttr(kRootIno);
  REQUIRE(root.ok());
  CHECK(S_ISDIR(root->mode));
  uint64_t ino = f.Create(kRootIno, "a.txt");
  CHECK(ino > kRootIno);
  auto l = f.ns->Lookup(kRootIno, "a.txt");
  REQUIRE(l.ok());
  CHECK(l->ino == ino);
  CHECK(S_ISREG(l->mode));
  CHECK((l->mode & 0777) == 0644);
  CHECK(l->uid == 1000);
  CHECK(f.ns->Lookup(kRootIno, "nope").status().code() == Code::kNotFound);
  CHECK(f.ns->Create(kRootIno, "a.txt", 0644, 0, 0).status().code() == Code::kAlreadyExists);
  CHECK(f.ns->Create(kRootIno, "", 0644, 0, 0).status().code() == Code::kInvalidArgument);
  CHECK(f.ns->Create(kRootIno, std::string(256, 'x'), 0644, 0, 0).status().code() == Code::kNameTooLong);
  CHECK(f.ns->Create(ino, "child", 0644, 0, 0).status().code() == Code::kNotDirectory);
}

TEST_CASE("write and read across chunk boundaries; size follows the furthest write") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "data");
  std::string d = Random((3u << 20) + 777, 1);
  REQUIRE(f.ns->Write(ino, 0, d).ok());
  CHECK(f.ns->GetAttr(ino)->size == d.size());
  auto r = f.ns->Read(ino, 0, static_cast<uint32_t>(d.size()));
  REQUIRE(r.ok());
  CHECK(*r == d);
  // Read past EOF is short; read at EOF is empty.
  CHECK(f.ns->Read(ino, d.size() - 10, 100)->size() == 10);
  CHECK(f.ns->Read(ino, d.size(), 100)->empty());
  // A sparse write leaves a hole of zeros.
  REQUIRE(f.ns->Write(ino, 10u << 20, "tail").ok());
  CHECK(f.ns->GetAttr(ino)->size == (10u << 20) + 4);
  CHECK(*f.ns->Read(ino, 5u << 20, 8) == std::string(8, '\0'));
}

TEST_CASE("truncate shrinks, and re-extension reads zeros") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "t");
  REQUIRE(f.ns->Write(ino, 0, std::string(3u << 20, 'z')).ok());
  SetAttrRequest req;
  req.valid = kSetSize;
  req.size = (1u << 20) + 5;
  REQUIRE(f.ns->SetAttr(ino, req).ok());
  CHECK(f.ns->GetAttr(ino)->size == (1u << 20) + 5);
  req.size = 3u << 20;
  REQUIRE(f.ns->SetAttr(ino, req).ok());
  std::string r = *f.ns->Read(ino, 1u << 20, 100);
  CHECK(r.substr(0, 5) == "zzzzz");
  CHECK(r.substr(5) == std::string(95, '\0'));
  CHECK(*f.ns->Read(ino, 2u << 20, 10) == std::string(10, '\0'));
}

TEST_CASE("mkdir, readdir, rmdir, nlink") {
  NsFixture f;
  auto d = f.ns->Mkdir(kRootIno, "dir", 0755, 0, 0);
  REQUIRE(d.ok());
  CHECK(f.ns->GetAttr(kRootIno)->nlink == 3);
  f.Create(d->ino, "b");
  f.Create(d->ino, "a");
  CHECK(f.List(d->ino) == std::vector<std::string>{"a", "b"});
  CHECK(f.ns->Rmdir(kRootIno, "dir").code() == Code::kNotEmpty);
  CHECK(f.ns->Unlink(kRootIno, "dir").code() == Code::kIsDirectory);
  REQUIRE(f.ns->Unlink(d->ino, "a").ok());
  REQUIRE(f.ns->Unlink(d->ino, "b").ok());
  CHECK(f.ns->Rmdir(d->ino, "x").code() == Code::kNotFound);
  REQUIRE(f.ns->Rmdir(kRootIno, "dir").ok());
  CHECK(f.ns->GetAttr(kRootIno)->nlink == 2);
  CHECK(f.List(kRootIno).empty());
  // Paging with start_after.
  for (int i = 0; i < 10; ++i) f.Create(kRootIno, ("f" + std::to_string(i)).c_str());
  auto page = f.ns->ReadDir(kRootIno, "f4", 3);
  REQUIRE(page.ok());
  REQUIRE(page->size() == 3);
  CHECK((*page)[0].name == "f5");
}

TEST_CASE("rename: within and across directories, replace, noreplace, no cycles") {
  NsFixture f;
  auto a = f.ns->Mkdir(kRootIno, "a", 0755, 0, 0);
  auto b = f.ns->Mkdir(kRootIno, "b", 0755, 0, 0);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  uint64_t x = f.Create(a->ino, "x");
  REQUIRE(f.ns->Write(x, 0, "xdata").ok());
  uint64_t y = f.Create(b->ino, "y");
  REQUIRE(f.ns->Write(y, 0, "ydata").ok());
  const int64_t x_ctime = f.ns->GetAttr(x)->ctime_ns;
  std::pair<InodeAttr, InodeAttr> dirs;
  InodeAttr moved;
  REQUIRE(f.ns->Rename(a->ino, "x", a->ino, "x2", 0, &dirs, &moved).ok());
  CHECK(f.List(a->ino) == std::vector<std::string>{"x2"});
  // What the rename reports is what the store now holds (clio-fuse answers the kernel's time
  // write-back of the moved inode with it).
  CHECK(moved.ino == x);
  CHECK(moved.ctime_ns >= x_ctime);
  CHECK(moved.ctime_ns == f.ns->GetAttr(x)->ctime_ns);
  CHECK(moved.mtime_ns == f.ns->GetAttr(x)->mtime_ns);
  CHECK(moved.size == 5);
  CHECK(dirs.first.ino == a->ino);
  CHECK(dirs.first.mtime_ns == f.ns->GetAttr(a->ino)->mtime_ns);
  CHECK(f.ns->Rename(a->ino, "x2", b->ino, "y", RENAME_NOREPLACE).code() == Code::kAlreadyExists);
  REQUIRE(f.ns->Rename(a->ino, "x2", b->ino, "y", 0).ok());  // replaces y
  CHECK(f.List(a->ino).empty());
  CHECK(f.ns->Lookup(b->ino, "y")->ino == x);
  CHECK(*f.ns->Read(x, 0, 5) == "xdata");
  CHECK(f.ns->GetAttr(y).status().code() == Code::kStale);  // replaced file is gone
  // Directory moves update nlink and refuse cycles.
  auto sub = f.ns->Mkdir(a->ino, "sub", 0755, 0, 0);
  REQUIRE(sub.ok());
  CHECK(f.ns->Rename(kRootIno, "a", sub->ino, "loop", 0).code() == Code::kInvalidArgument);
  REQUIRE(f.ns->Rename(a->ino, "sub", b->ino, "sub", 0).ok());
  CHECK(f.ns->GetAttr(a->ino)->nlink == 2);
  CHECK(f.ns->GetAttr(b->ino)->nlink == 3);
  CHECK(f.ns->GetAttr(sub->ino)->parent == b->ino);
  CHECK(f.ns->Rename(kRootIno, "a", kRootIno, "b", 0).code() == Code::kNotEmpty);
}

TEST_CASE("symlink and readlink") {
  NsFixture f;
  auto s = f.ns->Symlink(kRootIno, "link", "/some/target", 0, 0);
  REQUIRE(s.ok());
  CHECK(S_ISLNK(s->mode));
  CHECK(s->size == 12);
  CHECK(*f.ns->Readlink(s->ino) == "/some/target");
  uint64_t file = f.Create(kRootIno, "f");
  CHECK(f.ns->Readlink(file).status().code() == Code::kInvalidArgument);
}

TEST_CASE("setattr changes mode, owner and times") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "m");
  SetAttrRequest r;
  r.valid = kSetMode | kSetUid | kSetGid | kSetMtime;
  r.mode = 0600;
  r.uid = 42;
  r.gid = 43;
  r.mtime_ns = 1234567890123456789;
  auto a = f.ns->SetAttr(ino, r);
  REQUIRE(a.ok());
  CHECK((a->mode & 07777) == 0600);
  CHECK(S_ISREG(a->mode));
  CHECK(a->uid == 42);
  CHECK(a->gid == 43);
  CHECK(a->mtime_ns == 1234567890123456789);
}

TEST_CASE("an overwrite with the kernel keeping the times changes no inode; every other write does") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "o");
  REQUIRE(f.ns->Write(ino, 0, std::string(10000, 'a'), /*touch_times=*/false).ok());
  auto before = f.ns->GetAttr(ino);
  REQUIRE(before.ok());
  CHECK(before->size == 10000);
  // Inside the file, over stored bytes: the inode stays as it was.
  REQUIRE(f.ns->Write(ino, 100, "bbbb", /*touch_times=*/false).ok());
  auto same = f.ns->GetAttr(ino);
  REQUIRE(same.ok());
  CHECK(same->size == before->size);
  CHECK(same->stored == before->stored);
  CHECK(same->mtime_ns == before->mtime_ns);
  CHECK(f.ns->Read(ino, 98, 8).value() == "aabbbbaa");
  // Past the end: the size grows. Into a hole: the stored count grows.
  REQUIRE(f.ns->Write(ino, 9998, "cccc", /*touch_times=*/false).ok());
  CHECK(f.ns->GetAttr(ino)->size == 10002);
  REQUIRE(f.ns->SetAttr(ino, [] { SetAttrRequest r; r.valid = kSetSize; r.size = 4u << 20; return r; }()).ok());
  const uint64_t stored = f.ns->GetAttr(ino)->stored;
  REQUIRE(f.ns->Write(ino, 3u << 20, "dddd", /*touch_times=*/false).ok());
  CHECK(f.ns->GetAttr(ino)->stored > stored);
  // A file truncated below the write's end first: the write extends it again, as before.
  REQUIRE(f.ns->SetAttr(ino, [] { SetAttrRequest r; r.valid = kSetSize; r.size = 50; return r; }()).ok());
  REQUIRE(f.ns->Write(ino, 40, "eeeeeeeeeeeeeeeeeeee", /*touch_times=*/false).ok());
  CHECK(f.ns->GetAttr(ino)->size == 60);
  CHECK(f.ns->Read(ino, 40, 20).value() == "eeeeeeeeeeeeeeeeeeee");
}

TEST_CASE("a kernel that keeps the times: setattr stores its ctime, its writes leave both times") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "k");
  SetAttrRequest r;
  r.valid = kSetMtime | kSetCtime;
  r.mtime_ns = 1000000000000000001;
  r.ctime_ns = 1000000000000000002;
  auto a = f.ns->SetAttr(ino, r);
  REQUIRE(a.ok());
  CHECK(a->mtime_ns == 1000000000000000001);
  CHECK(a->ctime_ns == 1000000000000000002);
  // The kernel's write lands after the SETATTR that carried its times: they stay.
  REQUIRE(f.ns->Write(ino, 0, "data", /*touch_times=*/false).ok());
  a = f.ns->GetAttr(ino);
  REQUIRE(a.ok());
  CHECK(a->size == 4);
  CHECK(a->mtime_ns == 1000000000000000001);
  CHECK(a->ctime_ns == 1000000000000000002);
  // Any other writer's write takes the clock; so does a setattr without kSetCtime.
  REQUIRE(f.ns->Write(ino, 4, "more").ok());
  a = f.ns->GetAttr(ino);
  REQUIRE(a.ok());
  CHECK(a->mtime_ns > 1000000000000000001);
  CHECK(a->ctime_ns > 1000000000000000002);
  r.valid = kSetMode;
  r.mode = 0600;
  auto b = f.ns->SetAttr(ino, r);
  REQUIRE(b.ok());
  CHECK(b->ctime_ns > 1000000000000000002);
}

TEST_CASE("a file unlinked while open keeps its data until release") {
  NsFixture f;
  auto a = f.ns->Create(kRootIno, "open", 0644, 0, 0);
  REQUIRE(a.ok());
  REQUIRE(f.ns->Write(a->ino, 0, "still here").ok());
  REQUIRE(f.ns->Unlink(kRootIno, "open").ok());
  CHECK(f.ns->Lookup(kRootIno, "open").status().code() == Code::kNotFound);
  CHECK(*f.ns->Read(a->ino, 0, 10) == "still here");
  REQUIRE(f.ns->Release(a->ino).ok());
  CHECK(f.ns->GetAttr(a->ino).status().code() == Code::kStale);
  CHECK(f.cte->ListBlobs(a->ino)->empty());
}

TEST_CASE("orphans left by a previous run are removed at start") {
  NsFixture f;
  auto a = f.ns->Create(kRootIno, "orphan", 0644, 0, 0);
  REQUIRE(a.ok());
  REQUIRE(f.ns->Write(a->ino, 0, "bytes").ok());
  REQUIRE(f.ns->Unlink(kRootIno, "orphan").ok());
  f.Restart();  // never released
  CHECK(f.ns->GetAttr(a->ino).status().code() == Code::kStale);
  CHECK(f.cte->ListBlobs(a->ino)->empty());
}

TEST_CASE("everything survives a clean restart; inode numbers are stable and never reused") {
  NsFixture f;
  auto d = f.ns->Mkdir(kRootIno, "d", 0700, 0, 0);
  REQUIRE(d.ok());
  uint64_t ino = f.Create(d->ino, "file");
  std::string data = Random(1500000, 9);
  REQUIRE(f.ns->Write(ino, 0, data).ok());
  REQUIRE(f.ns->Fsync(ino).ok());
  f.Restart();
  auto l = f.ns->Lookup(d->ino, "file");
  REQUIRE(l.ok());
  CHECK(l->ino == ino);
  CHECK(l->size == data.size());
  CHECK(*f.ns->Read(ino, 0, static_cast<uint32_t>(data.size())) == data);
  uint64_t next = f.Create(kRootIno, "new");
  CHECK(next > ino);
}

TEST_CASE("unlink leaves no orphan record once the data is gone") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "gone");
  REQUIRE(f.ns->Write(ino, 0, std::string(3u << 20, 'g')).ok());
  REQUIRE(f.ns->Unlink(kRootIno, "gone").ok());
  CHECK(f.cte->ListBlobs(ino)->empty());
  CHECK(f.kv->Scan("o/", "", 0)->empty());
  CHECK(f.ns->GetAttr(ino).status().code() == Code::kStale);
}

TEST_CASE("a truncation interrupted before its blobs were clipped is finished at start") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "t");
  REQUIRE(f.ns->Write(ino, 0, std::string(3u << 20, 'q')).ok());
  // What a crash right after the truncate's first batch leaves: the size and the intent.
  KvBatch b;
  std::string key = "x/";
  AppendBigEndian64(&key, ino);
  Encoder e;
  e.Put<uint64_t>(1000);
  b.Put(key, e.Take());
  REQUIRE(f.kv->Apply(std::move(b)).ok());
  f.Restart();
  CHECK(*f.cte->ListBlobs(ino) == std::vector<uint64_t>{0});
  std::string out(4096, '?');
  REQUIRE(f.cte->GetBlob(ino, 0, 0, 4096, out.data()).ok());
  CHECK(out.substr(0, 1000) == std::string(1000, 'q'));
  CHECK(out.substr(1000) == std::string(3096, '\0'));
  CHECK(f.kv->Scan("x/", "", 0)->empty());
}

TEST_CASE("growing a file reads zeros even where stale bytes lay past the old end") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "g");
  REQUIRE(f.ns->Write(ino, 0, "abc").ok());
  // Bytes past EOF that no size covers (what a crash losing a size update leaves).
  REQUIRE(f.cte->PutBlob(ino, 0, 3, "STALE").ok());
  SetAttrRequest r;
  r.valid = kSetSize;
  r.size = 4096;
  REQUIRE(f.ns->SetAttr(ino, r).ok());
  CHECK(*f.ns->Read(ino, 0, 8) == std::string("abc\0\0\0\0\0", 8));
}

TEST_CASE("a write that fills every tier is a short write and the size matches what was stored") {
  NsFixture f;  // 16 MiB RAM + 128 MiB file
  uint64_t ino = f.Create(kRootIno, "huge");
  std::string data(200u << 20, 'h');
  auto w = f.ns->Write(ino, 0, data);
  REQUIRE(w.ok());
  CHECK(*w > 0);
  CHECK(*w < data.size());
  CHECK(f.ns->GetAttr(ino)->size == *w);
  CHECK(*f.ns->Read(ino, *w - 4, 4) == "hhhh");
  // Once the flusher is quiet (a flush in progress can make room: RAM copies become clean and
  // evictable), nothing more fits: the next write fails with NoSpace rather than pretending.
  REQUIRE(f.ns->Fsync(ino).ok());
  CHECK(f.ns->Write(ino, *w, std::string(4u << 20, 'x')).status().code() == Code::kNoSpace);
  // Every byte of the persistent tier holds data: the short write did not stop early because
  // a flush's room was counted twice (allocated and still reserved) at some moment.
  CHECK(*w == (128u << 20));
}

TEST_CASE("renaming a directory over an empty one in the same parent keeps nlink right") {
  NsFixture f;
  REQUIRE(f.ns->Mkdir(kRootIno, "a", 0755, 0, 0).ok());
  REQUIRE(f.ns->Mkdir(kRootIno, "b", 0755, 0, 0).ok());
  CHECK(f.ns->GetAttr(kRootIno)->nlink == 4);
  REQUIRE(f.ns->Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  CHECK(f.ns->GetAttr(kRootIno)->nlink == 3);
  CHECK(f.List(kRootIno) == std::vector<std::string>{"b"});
}

TEST_CASE("readdir pages are never shortened by entries vanishing mid-scan") {
  NsFixture f;
  std::vector<uint64_t> inos;
  for (int i = 0; i < 5; ++i) inos.push_back(f.Create(kRootIno, ("e" + std::to_string(i)).c_str()));
  // The inode of e2 disappears between a scan and the inode loads.
  KvBatch b;
  std::string key = "i/";
  AppendBigEndian64(&key, inos[2]);
  b.Delete(key);
  REQUIRE(f.kv->Apply(std::move(b)).ok());
  auto page = f.ns->ReadDir(kRootIno, "", 5);
  REQUIRE(page.ok());
  CHECK(page->size() == 5);
}

TEST_CASE("sizes and offsets past the largest file are refused") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "big");
  SetAttrRequest r;
  r.valid = kSetSize;
  r.size = ~0ull;
  CHECK(f.ns->SetAttr(ino, r).status().code() == Code::kOutOfRange);
  CHECK(f.ns->Write(ino, ~0ull - 2, "abcd").status().code() == Code::kOutOfRange);
}

TEST_CASE("hard links share the inode; the data lives until the last name goes") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "orig");
  REQUIRE(f.ns->Write(ino, 0, "shared").ok());
  auto d = f.ns->Mkdir(kRootIno, "d", 0755, 0, 0);
  auto l = f.ns->Link(ino, d->ino, "alias");
  REQUIRE(l.ok());
  CHECK(l->nlink == 2);
  CHECK(f.ns->Lookup(d->ino, "alias")->ino == ino);
  CHECK(f.ns->Link(ino, kRootIno, "orig").status().code() == Code::kAlreadyExists);
  CHECK(f.ns->Link(d->ino, kRootIno, "dirlink").status().code() == Code::kNotPermitted);
  REQUIRE(f.ns->Unlink(kRootIno, "orig").ok());
  CHECK(f.ns->GetAttr(ino)->nlink == 1);
  CHECK(*f.ns->Read(ino, 0, 6) == "shared");
  REQUIRE(f.ns->Unlink(d->ino, "alias").ok());
  CHECK(f.ns->GetAttr(ino).status().code() == Code::kStale);
  CHECK(f.cte->ListBlobs(ino)->empty());
}

TEST_CASE("mknod makes FIFOs and device nodes") {
  NsFixture f;
  auto fifo = f.ns->Mknod(kRootIno, "pipe", S_IFIFO | 0640, 0, 0, 0);
  REQUIRE(fifo.ok());
  CHECK(S_ISFIFO(fifo->mode));
  auto chr = f.ns->Mknod(kRootIno, "null", S_IFCHR | 0666, makedev(1, 3), 0, 0);
  REQUIRE(chr.ok());
  CHECK(chr->rdev == makedev(1, 3));
  CHECK(f.ns->Mknod(kRootIno, "dir", S_IFDIR | 0755, 0, 0, 0).status().code() == Code::kInvalidArgument);
}

TEST_CASE("extended attributes: create, replace, get, list, remove, and they die with the file") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "x");
  REQUIRE(f.ns->SetXattr(ino, "user.a", "1", 0).ok());
  CHECK(f.ns->SetXattr(ino, "user.a", "2", XATTR_CREATE).code() == Code::kAlreadyExists);
  CHECK(f.ns->SetXattr(ino, "user.b", "2", XATTR_REPLACE).code() == Code::kNoData);
  REQUIRE(f.ns->SetXattr(ino, "user.a", "one", XATTR_REPLACE).ok());
  REQUIRE(f.ns->SetXattr(ino, "user.b", std::string("bin\0ary", 7), XATTR_CREATE).ok());
  CHECK(*f.ns->GetXattr(ino, "user.a") == "one");
  CHECK(*f.ns->GetXattr(ino, "user.b") == std::string("bin\0ary", 7));
  CHECK(f.ns->GetXattr(ino, "user.c").status().code() == Code::kNoData);
  CHECK(*f.ns->ListXattr(ino) == std::string("user.a\0user.b\0", 14));
  CHECK(f.ns->SetXattr(ino, std::string(256, 'n'), "v", 0).code() == Code::kRangeError);
  CHECK(f.ns->SetXattr(ino, "user.big", std::string(65537, 'v'), 0).code() == Code::kNoSpace);
  REQUIRE(f.ns->RemoveXattr(ino, "user.a").ok());
  CHECK(f.ns->RemoveXattr(ino, "user.a").code() == Code::kNoData);
  REQUIRE(f.ns->Unlink(kRootIno, "x").ok());
  CHECK(f.kv->Scan("a/", "", 0)->empty());
}

TEST_CASE("RENAME_EXCHANGE swaps two names atomically, across directories too") {
  NsFixture f;
  auto a = f.ns->Mkdir(kRootIno, "a", 0755, 0, 0);
  uint64_t file = f.Create(kRootIno, "file");
  auto sub = f.ns->Mkdir(a->ino, "sub", 0755, 0, 0);
  REQUIRE(f.ns->Rename(kRootIno, "file", a->ino, "sub", RENAME_EXCHANGE).ok());
  CHECK(f.ns->Lookup(kRootIno, "file")->ino == sub->ino);
  CHECK(f.ns->Lookup(a->ino, "sub")->ino == file);
  CHECK(f.ns->GetAttr(sub->ino)->parent == kRootIno);
  CHECK(f.ns->GetAttr(a->ino)->nlink == 2);         // lost the subdirectory
  CHECK(f.ns->GetAttr(kRootIno)->nlink == 4);       // a and the moved directory
  CHECK(f.ns->Rename(kRootIno, "file", a->ino, "nope", RENAME_EXCHANGE).code() == Code::kNotFound);
  // A directory may not be swapped under itself.
  auto inner = f.ns->Mkdir(sub->ino, "inner", 0755, 0, 0);
  REQUIRE(inner.ok());
  CHECK(f.ns->Rename(kRootIno, "file", sub->ino, "inner", RENAME_EXCHANGE).code() == Code::kInvalidArgument);
}

namespace {

// Writes 1 MiB pieces to `ino` from `from` until the tiers refuse one; returns the bytes
// written. Fsyncs now and then so the RAM tier keeps draining into the file tier.
uint64_t FillUntilFull(NsFixture& f, uint64_t ino, uint64_t from) {
  const std::string piece(1u << 20, 'f');
  uint64_t done = 0;
  while (true) {
    auto w = f.ns->Write(ino, from + done, piece);
    if (!w.ok()) {
      REQUIRE(w.status().code() == Code::kNoSpace);
      break;
    }
    done += *w;
    if (*w < piece.size()) break;
    if ((done >> 20) % 8 == 0) REQUIRE(f.ns->Fsync(ino).ok());
  }
  REQUIRE(f.ns->Fsync(ino).ok());
  return done;
}

uint64_t Blocks(NsFixture& f, uint64_t ino) {
  auto a = f.ns->GetAttr(ino);
  REQUIRE(a.ok());
  InodeAttr c = *a;
  f.ns->ForClient(&c);
  return c.stored;
}

}  // namespace

TEST_CASE("fallocate keeps room: writes and overwrites of the range never meet ENOSPC") {
  constexpr uint64_t kMiB = 1u << 20;
  NsFixture f;  // 16 MiB RAM + 128 MiB file
  const uint64_t pre = f.Create(kRootIno, "prealloc");
  REQUIRE(f.ns->Fallocate(pre, FALLOC_FL_KEEP_SIZE, 0, 24 * kMiB).ok());
  CHECK(f.ns->GetAttr(pre)->size == 0);
  CHECK(Blocks(f, pre) == 24 * kMiB);  // st_blocks counts the kept bytes, as preallocated ones
  CHECK(f.cte->KeptRoom() == 48 * kMiB);  // the range, and room for its copy-on-write flush
  CHECK(f.ns->Fallocate(pre, FALLOC_FL_KEEP_SIZE, 0, 100 * kMiB).code() == Code::kNoSpace);
  CHECK(f.cte->KeptRoom() == 48 * kMiB);  // a refused fallocate keeps nothing more
  const uint64_t filler = f.Create(kRootIno, "filler");
  const uint64_t filled = FillUntilFull(f, filler, 0);
  CHECK(filled >= 40 * kMiB);
  // The tiers are full for everyone else, yet the kept range is written, and overwritten.
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    const std::string data(24 * kMiB, static_cast<char>('a' + round));
    auto w = f.ns->Write(pre, 0, data);
    REQUIRE_MESSAGE(w.ok(), w.status().ToString());
    CHECK(*w == data.size());
    REQUIRE(f.ns->Fsync(pre).ok());
    CHECK(*f.ns->Read(pre, 24 * kMiB - 3, 3) == data.substr(0, 3));
  }
  CHECK(Blocks(f, pre) == 24 * kMiB);  // written now: the same blocks
  CHECK(f.ns->Write(filler, filled, std::string(kMiB, 'f')).status().code() == Code::kNoSpace);
  // The room is kept across a restart (the record committed with the fsync).
  f.Restart();
  CHECK(f.cte->KeptRoom() == 48 * kMiB);
  CHECK(f.ns->Write(filler, filled, std::string(kMiB, 'f')).status().code() == Code::kNoSpace);
  REQUIRE(f.ns->Write(pre, 0, std::string(24 * kMiB, 'z')).ok());
  REQUIRE(f.ns->Fsync(pre).ok());
  // A punch lets the room of its range go: the filler writes on.
  REQUIRE(f.ns->Fallocate(pre, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 16 * kMiB).ok());
  CHECK(f.cte->KeptRoom() == 16 * kMiB);
  REQUIRE(f.kv->Sync().ok());  // the punched blobs' extents are freed once durable
  CHECK(FillUntilFull(f, filler, filled) >= 8 * kMiB);
}

TEST_CASE("fallocate's room goes with a truncation below it and with the file") {
  constexpr uint64_t kMiB = 1u << 20;
  NsFixture f;
  const uint64_t a = f.Create(kRootIno, "a");
  REQUIRE(f.ns->Fallocate(a, 0, 0, 6 * kMiB + 100).ok());  // the default mode sets the size too
  CHECK(f.ns->GetAttr(a)->size == 6 * kMiB + 100);
  CHECK(Blocks(f, a) == 6 * kMiB + 100);
  REQUIRE(f.ns->Write(a, kMiB, std::string(1000, 'w')).ok());
  CHECK(Blocks(f, a) == 6 * kMiB + 100);  // written bytes were kept ones: no more blocks
  SetAttrRequest cut;
  cut.valid = kSetSize;
  cut.size = 2 * kMiB + 5;
  REQUIRE(f.ns->SetAttr(a, cut).ok());
  CHECK(Blocks(f, a) == 2 * kMiB + 5);
  // Chunks 0 and 1 whole, and 5 bytes of chunk 2 (the smallest allocation there), twice.
  CHECK(f.cte->KeptRoom() >= 2 * (2 * kMiB + 512));
  CHECK(f.cte->KeptRoom() <= 2 * (2 * kMiB + 4096));
  REQUIRE(f.ns->Unlink(kRootIno, "a").ok());
  CHECK(f.cte->KeptRoom() == 0);
  f.Restart();
  CHECK(f.cte->KeptRoom() == 0);
  // KEEP_SIZE room past the end goes with a truncation to the same size; growing keeps it.
  const uint64_t b = f.Create(kRootIno, "b");
  REQUIRE(f.ns->Write(b, 0, std::string(100, 'b')).ok());
  REQUIRE(f.ns->Fallocate(b, FALLOC_FL_KEEP_SIZE, 0, 2 * kMiB).ok());
  SetAttrRequest grow;
  grow.valid = kSetSize;
  grow.size = kMiB;
  REQUIRE(f.ns->SetAttr(b, grow).ok());
  CHECK(f.cte->KeptRoom() == 4 * kMiB);
  REQUIRE(f.ns->SetAttr(b, grow).ok());  // the same size again
  CHECK(f.cte->KeptRoom() == 2 * kMiB);
  CHECK(Blocks(f, b) == kMiB);
}

TEST_CASE("a kept-room record with no file behind it is removed at start") {
  NsFixture f;
  RangeSet r;
  r.Add(0, 1u << 20);
  KvBatch put;
  put.Put(ns::KeptKey(1000000), ns::EncodeKept(r));
  REQUIRE(f.kv->Apply(std::move(put)).ok());
  REQUIRE(f.kv->Sync().ok());
  f.Restart();
  CHECK(f.cte->KeptRoom() == 0);
  auto left = f.kv->Scan("r/", "", 0);
  REQUIRE(left.ok());
  CHECK(left->empty());
}

TEST_CASE("fallocate extends, keeps size and punches holes that cost nothing") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "fa");
  REQUIRE(f.ns->Fallocate(ino, 0, 0, 4096).ok());
  CHECK(f.ns->GetAttr(ino)->size == 4096);
  REQUIRE(f.ns->Fallocate(ino, FALLOC_FL_KEEP_SIZE, 0, 1u << 20).ok());
  CHECK(f.ns->GetAttr(ino)->size == 4096);
  // Data at [0, 3 MiB), then punch [1 MiB, 2 MiB + 20): chunk 1 whole, the head of chunk 2.
  REQUIRE(f.ns->Write(ino, 0, std::string(3u << 20, 'd')).ok());
  REQUIRE(f.ns->Fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1u << 20, (1u << 20) + 20).ok());
  CHECK(f.ns->GetAttr(ino)->size == (3u << 20));
  CHECK(*f.ns->Read(ino, (1u << 20) - 5, 10) == std::string("ddddd\0\0\0\0\0", 10));
  CHECK(*f.ns->Read(ino, (2u << 20) + 15, 10) == std::string("\0\0\0\0\0ddddd", 10));
  // The punched whole chunk holds no blob at all; the edge keeps only its data.
  CHECK(*f.cte->ListBlobs(ino) == std::vector<uint64_t>{0, 2});
  auto r2 = f.cte->BlobRanges(ino, 2);
  REQUIRE(r2.ok());
  CHECK(r2->ranges() == std::vector<RangeSet::Range>{{20, 1u << 20}});
  CHECK(f.ns->Fallocate(ino, FALLOC_FL_PUNCH_HOLE, 0, 10).code() == Code::kInvalidArgument);
  CHECK(f.ns->Fallocate(ino, FALLOC_FL_COLLAPSE_RANGE, 0, 4096).code() == Code::kNotSupported);
}

TEST_CASE("open with truncate empties the file, and the old bytes never come back") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "t");
  REQUIRE(f.ns->Write(ino, 0, std::string(8192, 'A')).ok());
  REQUIRE(f.ns->Open(ino, /*truncate=*/true).ok());
  CHECK(f.ns->GetAttr(ino)->size == 0);
  SetAttrRequest grow;
  grow.valid = kSetSize;
  grow.size = 8192;
  REQUIRE(f.ns->SetAttr(ino, grow).ok());
  CHECK(*f.ns->Read(ino, 0, 8192) == std::string(8192, '\0'));
  REQUIRE(f.ns->Release(ino).ok());
}

TEST_CASE("a directory removed while open keeps its inode, with no links, until released") {
  NsFixture f;
  auto d = f.ns->Mkdir(kRootIno, "gone", 0755, 0, 0);
  REQUIRE(d.ok());
  REQUIRE(f.ns->Open(d->ino).ok());
  REQUIRE(f.ns->Rmdir(kRootIno, "gone").ok());
  CHECK(f.ns->Lookup(kRootIno, "gone").status().code() == Code::kNotFound);
  auto a = f.ns->GetAttr(d->ino);
  REQUIRE(a.ok());
  CHECK(a->nlink == 0);
  CHECK(f.ns->ReadDir(d->ino, "", 0)->empty());
  CHECK(f.ns->Create(d->ino, "x", 0644, 0, 0).status().code() == Code::kNotFound);
  REQUIRE(f.ns->Release(d->ino).ok());
  CHECK(f.ns->GetAttr(d->ino).status().code() == Code::kStale);
  CHECK(f.kv->Scan("o/", "", 0)->empty());
}

TEST_CASE("a setgid directory hands down its group, and its setgid bit to subdirectories") {
  NsFixture f;
  auto d = f.ns->Mkdir(kRootIno, "shared", 02775, 0, 4242);
  REQUIRE(d.ok());
  CHECK((d->mode & S_ISGID) != 0);
  auto sub = f.ns->Mkdir(d->ino, "sub", 0755, 1000, 1000);
  REQUIRE(sub.ok());
  CHECK(sub->gid == 4242);
  CHECK((sub->mode & S_ISGID) != 0);
  auto file = f.ns->Create(d->ino, "file", 0644, 1000, 1000);
  REQUIRE(file.ok());
  CHECK(file->gid == 4242);
  CHECK((file->mode & S_ISGID) == 0);
}

TEST_CASE("only the user, trusted and security attribute namespaces are stored") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "x");
  CHECK(f.ns->SetXattr(ino, "bogus.x", "1", 0).code() == Code::kNotSupported);
  CHECK(f.ns->SetXattr(ino, "user.", "1", 0).code() == Code::kNotSupported);
  CHECK(f.ns->SetXattr(ino, "system.posix_acl_access", "1", 0).code() == Code::kNotSupported);
  CHECK(f.ns->SetXattr(ino, "trusted.t", "1", 0).ok());
  CHECK(f.ns->SetXattr(ino, "security.s", "1", 0).ok());
}

TEST_CASE("inode records of format version 1 (before rdev) are still read") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "old");
  // The version 1 layout: u8 1, the attr without rdev, the symlink target.
  InodeAttr a = *f.ns->GetAttr(ino);
  Encoder e;
  e.Put<uint8_t>(1).Put(a.ino).Put(a.mode).Put(a.nlink).Put(a.uid).Put(a.gid).Put(a.size)
      .Put(a.atime_ns).Put(a.mtime_ns).Put(a.ctime_ns).Put(a.parent).PutBytes("");
  KvBatch b;
  std::string key = "i/";
  AppendBigEndian64(&key, ino);
  b.Put(key, e.Take());
  REQUIRE(f.kv->Apply(std::move(b)).ok());
  auto back = f.ns->GetAttr(ino);
  REQUIRE(back.ok());
  CHECK(back->ino == ino);
  CHECK(back->mode == a.mode);
  CHECK(back->rdev == 0);
  std::string bad = "\x09";
  KvBatch c;
  c.Put(key, bad);
  REQUIRE(f.kv->Apply(std::move(c)).ok());
  CHECK(f.ns->GetAttr(ino).status().code() == Code::kCorruption);
}

TEST_CASE("a directory replaced by rename while open survives as an orphan; removed ones take no names") {
  NsFixture f;
  REQUIRE(f.ns->Mkdir(kRootIno, "a", 0755, 0, 0).ok());
  auto b = f.ns->Mkdir(kRootIno, "b", 0755, 0, 0);
  REQUIRE(b.ok());
  REQUIRE(f.ns->Open(b->ino).ok());
  REQUIRE(f.ns->Rename(kRootIno, "a", kRootIno, "b", 0).ok());
  auto old = f.ns->GetAttr(b->ino);
  REQUIRE(old.ok());
  CHECK(old->nlink == 0);
  // Nothing may be linked, renamed or swapped into the removed directory.
  uint64_t file = f.Create(kRootIno, "f");
  CHECK(f.ns->Link(file, b->ino, "x").status().code() == Code::kNotFound);
  CHECK(f.ns->Rename(kRootIno, "f", b->ino, "x", 0).code() == Code::kNotFound);
  REQUIRE(f.ns->Release(b->ino).ok());
  CHECK(f.ns->GetAttr(b->ino).status().code() == Code::kStale);
}

TEST_CASE("stored bytes count data, not holes, through writes, punches and truncation") {
  NsFixture f;
  uint64_t ino = f.Create(kRootIno, "sparse");
  REQUIRE(f.ns->Write(ino, 5ull << 30, std::string(4096, 's')).ok());
  CHECK(f.ns->GetAttr(ino)->size == (5ull << 30) + 4096);
  CHECK(f.ns->GetAttr(ino)->stored == 4096);
  REQUIRE(f.ns->Write(ino, 5ull << 30, std::string(4096, 't')).ok());  // overwrite: no change
  CHECK(f.ns->GetAttr(ino)->stored == 4096);
  REQUIRE(f.ns->Write(ino, 0, std::string(3u << 20, 'd')).ok());
  CHECK(f.ns->GetAttr(ino)->stored == (3u << 20) + 4096);
  REQUIRE(f.ns->Fallocate(ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1u << 20, 1u << 20).ok());
  CHECK(f.ns->GetAttr(ino)->stored == (2u << 20) + 4096);
  SetAttrRequest r;
  r.valid = kSetSize;
  r.size = 1000;
  REQUIRE(f.ns->SetAttr(ino, r).ok());
  CHECK(f.ns->GetAttr(ino)->stored == 1000);
  f.Restart();
  CHECK(f.ns->GetAttr(ino)->stored == 1000);
}

TEST_CASE("flush says whether a file has bytes left to flush to a persistent tier") {
  NsFixture f(/*flush_interval_ms=*/3600000);
  const uint64_t ino = f.Create(kRootIno, "c");
  bool clean = false;
  REQUIRE(f.ns->Flush(ino, &clean).ok());
  CHECK(clean);  // nothing written
  // The flusher runs only when asked (an hour's interval): a write lands dirty on RAM.
  REQUIRE(f.ns->Write(ino, 0, std::string(10000, 'x')).ok());
  REQUIRE(f.ns->Flush(ino, &clean).ok());
  CHECK_FALSE(clean);
  REQUIRE(f.ns->Fsync(ino).ok());
  REQUIRE(f.ns->Flush(ino, &clean).ok());
  CHECK(clean);
}

TEST_CASE("unlink says when the inode is gone: last name and not open") {
  NsFixture f;
  const uint64_t a = f.Create(kRootIno, "a");
  REQUIRE(f.ns->Link(a, kRootIno, "a2").ok());
  uint64_t gone = 99;
  REQUIRE(f.ns->Unlink(kRootIno, "a", &gone).ok());
  CHECK(gone == 0);  // another name remains
  REQUIRE(f.ns->Open(a, false).ok());
  REQUIRE(f.ns->Unlink(kRootIno, "a2", &gone).ok());
  CHECK(gone == 0);  // still open
  REQUIRE(f.ns->Release(a).ok());
  const uint64_t b = f.Create(kRootIno, "b");
  REQUIRE(f.ns->Unlink(kRootIno, "b", &gone).ok());
  CHECK(gone == b);
  CHECK(f.ns->GetAttr(b).status().code() == Code::kStale);
}

TEST_CASE("locate lists each chunk's copies: dirty on RAM, clean on the file tier after fsync") {
  NsFixture f(/*flush_interval_ms=*/3600000);
  const uint64_t ino = f.Create(kRootIno, "l");
  const uint64_t chunk = 1u << 20;
  REQUIRE(f.ns->Write(ino, 0, std::string(5000, 'a')).ok());
  REQUIRE(f.ns->Write(ino, 2 * chunk + 100, std::string(3000, 'b')).ok());  // chunk 1 is a hole
  const std::vector<TierInfo> tiers = f.cte->ListTiers();
  REQUIRE(tiers.size() == 2);
  const uint64_t ram = tiers[0].tier_id, file = tiers[1].tier_id;
  auto loc = f.ns->Locate(ino);
  REQUIRE_MESSAGE(loc.ok(), loc.status().ToString());
  CHECK(loc->ino == ino);
  CHECK(loc->size == 2 * chunk + 3100);
  CHECK(loc->chunk_size == chunk);
  REQUIRE(loc->chunks.size() == 2);
  CHECK(loc->chunks[0].index == 0);
  CHECK(loc->chunks[1].index == 2);
  const uint64_t want[] = {5000, 3000};
  for (size_t i = 0; i < 2; ++i) {
    REQUIRE(loc->chunks[i].copies.size() == 1);
    const ChunkCopy& c = loc->chunks[i].copies[0];
    CHECK(c.tier_id == ram);
    CHECK(c.dirty);
    CHECK(c.bytes == want[i]);
    uint64_t extent_bytes = 0;
    for (const auto& [off, size] : c.extents) extent_bytes += size;
    CHECK(extent_bytes >= c.bytes);
  }
  REQUIRE(f.ns->Fsync(ino).ok());
  loc = f.ns->Locate(ino);
  REQUIRE(loc.ok());
  REQUIRE(loc->chunks.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    bool on_file = false;
    for (const ChunkCopy& c : loc->chunks[i].copies) {
      CHECK_FALSE(c.dirty);
      if (c.tier_id == file && c.bytes == want[i] && !c.extents.empty()) on_file = true;
    }
    CHECK_MESSAGE(on_file, "chunk " << loc->chunks[i].index << " has no clean copy on the file tier");
  }
  // What the runtime sends clioctl decodes to the same thing; a cut reply is refused.
  const std::string wire = EncodeFileLocation(*loc);
  auto back = DecodeFileLocation(wire);
  REQUIRE(back.ok());
  CHECK(back->chunks.size() == 2);
  CHECK(back->chunks[1].copies.size() == loc->chunks[1].copies.size());
  CHECK(back->chunks[1].copies[0].extents == loc->chunks[1].copies[0].extents);
  for (size_t cut : {size_t{0}, size_t{7}, wire.size() - 1})
    CHECK(DecodeFileLocation(std::string_view(wire).substr(0, cut)).status().code() == Code::kCorruption);

  CHECK(f.ns->Locate(kRootIno).status().code() == Code::kIsDirectory);
  CHECK(f.ns->Locate(ino + 1000).status().code() == Code::kStale);
  const uint64_t empty = f.Create(kRootIno, "empty");
  loc = f.ns->Locate(empty);
  REQUIRE(loc.ok());
  CHECK(loc->chunks.empty());
}
