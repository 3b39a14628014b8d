// Request records: a resend (after a broken connection, a runtime restart) of a mutating
// request that ran is answered from its record, in the shape the method answers, and does not
// run twice; one that did not run runs; records survive a restart, keep a window per client,
// and expire. Driven through FsPool::Handle with the request context the server sets.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "common/codec.h"
#include "daemon/pool.h"
#include "fs/namespace/fs_pool.h"
#include "fs/protocol/fs_protocol.h"
#include "fs/namespace/ns_keys.h"
#include "fs/namespace/test_util.h"

using namespace clio;
using clio::testing::NsFixture;

namespace {

struct PoolFixture : NsFixture {
  std::unique_ptr<FsPool> pool;
  PoolFixture() { Wrap(); }
  // FsPool takes the namespace; the fixture keeps a view of it.
  void Wrap() {
    Namespace* raw = ns.get();
    pool = std::make_unique<FsPool>(std::move(ns), kv.get());
    view = raw;
  }
  void RestartAll() {
    ns = nullptr;
    pool.reset();
    Restart();
    Wrap();
  }
  Namespace* view = nullptr;
  // One request as client `client` sends it: `id`, resent or not.
  Result<std::string> Send(uint32_t client, uint64_t id, bool resent, FsMethod m, const std::string& payload) {
    ScopedRequest scope({client, id, resent, nullptr});
    return pool->Handle(static_cast<uint32_t>(m), payload);
  }
};

std::string Named(uint64_t parent, const std::string& name, uint32_t mode = 0644) {
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name).Put<uint32_t>(mode).Put<uint32_t>(0).Put<uint32_t>(0);
  return e.Take();
}

std::string Entry(uint64_t parent, const std::string& name) {
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name);
  return e.Take();
}

InodeAttr FirstAttr(const std::string& reply) {
  Decoder d(reply);
  InodeAttr a;
  REQUIRE(DecodeAttr(&d, &a));
  return a;
}

}  // namespace

TEST_CASE("a resent create, mkdir, link, rename, unlink and rmdir that ran are answered, not run again") {
  PoolFixture f;
  const uint32_t client = 0x1234;
  // create: the resend gets the same inode, not EEXIST.
  auto made = f.Send(client, 10, false, FsMethod::kCreate, Named(kRootIno, "a", S_IFREG | 0644));
  REQUIRE_MESSAGE(made.ok(), made.status().ToString());
  const uint64_t a = FirstAttr(*made).ino;
  auto again = f.Send(client, 10, true, FsMethod::kCreate, Named(kRootIno, "a", S_IFREG | 0644));
  REQUIRE_MESSAGE(again.ok(), again.status().ToString());
  CHECK(FirstAttr(*again).ino == a);
  // Sent again as a new request (another id), the same create is EEXIST: the record is the id's.
  CHECK(f.Send(client, 11, false, FsMethod::kCreate, Named(kRootIno, "a", S_IFREG | 0644)).status().code() ==
        Code::kAlreadyExists);
  // Another client's resend with the same id is not this client's record: it runs.
  CHECK(f.Send(0x9999, 10, true, FsMethod::kCreate, Named(kRootIno, "a", S_IFREG | 0644)).status().code() ==
        Code::kAlreadyExists);
  REQUIRE(f.view->Release(a).ok());

  auto dir = f.Send(client, 12, false, FsMethod::kMkdir, Named(kRootIno, "d", S_IFDIR | 0755));
  REQUIRE(dir.ok());
  CHECK(FirstAttr(*f.Send(client, 12, true, FsMethod::kMkdir, Named(kRootIno, "d", S_IFDIR | 0755))).ino ==
        FirstAttr(*dir).ino);

  Encoder link;
  link.Put<uint64_t>(a).Put<uint64_t>(kRootIno).PutBytes("b");
  REQUIRE(f.Send(client, 13, false, FsMethod::kLink, link.buffer()).ok());
  auto relink = f.Send(client, 13, true, FsMethod::kLink, link.buffer());
  REQUIRE_MESSAGE(relink.ok(), relink.status().ToString());
  CHECK(FirstAttr(*relink).nlink == 2);  // linked once, not twice

  Encoder rename;
  rename.Put<uint64_t>(kRootIno).PutBytes("b").Put<uint64_t>(kRootIno).PutBytes("c").Put<uint32_t>(0);
  REQUIRE(f.Send(client, 14, false, FsMethod::kRename, rename.buffer()).ok());
  REQUIRE(f.Send(client, 14, true, FsMethod::kRename, rename.buffer()).ok());  // not ENOENT
  CHECK(f.view->Lookup(kRootIno, "c").ok());

  REQUIRE(f.Send(client, 15, false, FsMethod::kUnlink, Entry(kRootIno, "c")).ok());
  REQUIRE(f.Send(client, 15, true, FsMethod::kUnlink, Entry(kRootIno, "c")).ok());  // not ENOENT
  CHECK(f.view->GetAttr(a)->nlink == 1);  // unlinked once: "a" keeps its other link

  REQUIRE(f.Send(client, 16, false, FsMethod::kRmdir, Entry(kRootIno, "d")).ok());
  REQUIRE(f.Send(client, 16, true, FsMethod::kRmdir, Entry(kRootIno, "d")).ok());
}

TEST_CASE("a resend of a request that never ran runs; one that failed fails again; records survive a restart") {
  PoolFixture f;
  const uint32_t client = 77;
  // Lost before it ran: the resend is the first run.
  REQUIRE(f.Send(client, 5, true, FsMethod::kCreate, Named(kRootIno, "late", S_IFREG | 0644)).ok());
  // A request that failed left no record (its batch never committed): it fails again.
  CHECK(f.Send(client, 6, false, FsMethod::kUnlink, Entry(kRootIno, "nothing")).status().code() == Code::kNotFound);
  CHECK(f.Send(client, 6, true, FsMethod::kUnlink, Entry(kRootIno, "nothing")).status().code() == Code::kNotFound);
  // The record is in the metadata, with the effect: after a restart the resend is recognised.
  REQUIRE(f.Send(client, 7, false, FsMethod::kMkdir, Named(kRootIno, "kept", S_IFDIR | 0755)).ok());
  REQUIRE(f.kv->Sync().ok());
  f.RestartAll();
  CHECK(f.view->RequestRan(client, 7).value());
  REQUIRE(f.Send(client, 7, true, FsMethod::kMkdir, Named(kRootIno, "kept", S_IFDIR | 0755)).ok());
  // Requests without a client (in-process callers) keep no record.
  Encoder sym;
  sym.Put<uint64_t>(kRootIno).PutBytes("s").PutBytes("target").Put<uint32_t>(0).Put<uint32_t>(0);
  REQUIRE(f.Send(0, 8, false, FsMethod::kSymlink, sym.buffer()).ok());
  CHECK_FALSE(f.view->RequestRan(0, 8).value());
}

TEST_CASE("each client keeps a window of records; records older than an hour go at start") {
  PoolFixture f;
  const uint32_t client = 3;
  REQUIRE(f.Send(client, 100, false, FsMethod::kMkdir, Named(kRootIno, "x", S_IFDIR | 0755)).ok());
  CHECK(f.view->RequestRan(client, 100).value());
  // The slot of id 100 is taken over by id 100 + kRequestSlots.
  REQUIRE(f.Send(client, 100 + Namespace::kRequestSlots, false, FsMethod::kMkdir, Named(kRootIno, "y", S_IFDIR | 0755))
              .ok());
  CHECK_FALSE(f.view->RequestRan(client, 100).value());
  CHECK(f.view->RequestRan(client, 100 + Namespace::kRequestSlots).value());
  // A record two hours old is dropped by the next start.
  KvBatch old;
  old.Put(ns::RequestKey(client, 5, Namespace::kRequestSlots),
          ns::EncodeRequestRecord(5, static_cast<uint32_t>(FsMethod::kMkdir), ns::NowNs() - int64_t{7200} * 1000000000));
  REQUIRE(f.kv->Apply(std::move(old)).ok());
  CHECK(f.view->RequestRan(client, 5).value());
  REQUIRE(f.kv->Sync().ok());
  f.RestartAll();
  CHECK_FALSE(f.view->RequestRan(client, 5).value());
  CHECK(f.view->RequestRan(client, 100 + Namespace::kRequestSlots).value());  // recent: kept
}
