// The typed filesystem protocol: the bytes each message takes on the wire (unchanged from
// the hand-built encodings clients of earlier releases send), round trips, and refusal of
// truncated or padded messages.
#include <doctest/doctest.h>

#include <fcntl.h>

#include <set>
#include <string>
#include <tuple>

#include "common/codec.h"
#include "fs/protocol/fs_messages.h"
#include "fs/protocol/fs_protocol.h"

using namespace clio;

namespace {

template <class Req>
void CheckRefusesDamage() {
  INFO(Req::kName);
  const std::string bytes = fsproto::Encode(Req{});
  // Trailing bytes (two: a write takes one as its optional flags).
  const std::string longer = bytes + "xy";
  auto padded = fsproto::Decode<Req>(longer);
  REQUIRE_FALSE(padded.ok());
  CHECK(padded.status().code() == Code::kCorruption);
  CHECK(padded.status().message().find(Req::kName) != std::string::npos);
  if (!bytes.empty()) {
    auto cut = fsproto::Decode<Req>(std::string_view(bytes).substr(0, bytes.size() - 1));
    REQUIRE_FALSE(cut.ok());
    CHECK(cut.status().message().find("truncated") != std::string::npos);
  }
}

template <size_t... I>
void CheckAllRefuseDamage(std::index_sequence<I...>) {
  (CheckRefusesDamage<std::tuple_element_t<I, fsproto::AllRequests>>(), ...);
}

}  // namespace

TEST_CASE("requests take the bytes earlier clients send") {
  Encoder lookup;
  lookup.Put<uint64_t>(7).PutBytes("name");
  CHECK(fsproto::Encode(fsproto::Lookup{.parent = 7, .name = "name"}) == lookup.buffer());

  Encoder create;
  create.Put<uint64_t>(1).PutBytes("f").Put<uint32_t>(0644).Put<uint32_t>(1000).Put<uint32_t>(100);
  CHECK(fsproto::Encode(fsproto::Create{.parent = 1, .name = "f", .mode = 0644, .uid = 1000, .gid = 100}) ==
        create.buffer());

  // A write's flags byte goes out only when set, as before the flags existed.
  Encoder write;
  write.Put<uint64_t>(9).Put<uint64_t>(4096).PutBytes("data");
  fsproto::Write w{.ino = 9, .offset = 4096, .data = "data"};
  CHECK(fsproto::Encode(w) == write.buffer());
  w.flags.value = kWriteKernelTimes;
  write.Put<uint8_t>(kWriteKernelTimes);
  CHECK(fsproto::Encode(w) == write.buffer());
  auto back = fsproto::Decode<fsproto::Write>(write.buffer());
  REQUIRE(back.ok());
  CHECK(back->data == "data");
  CHECK(back->flags.value == kWriteKernelTimes);

  Encoder reattach;
  reattach.Put<uint32_t>(2).Put<uint64_t>(5).Put<uint32_t>(1).Put<uint64_t>(6).Put<uint32_t>(0);
  reattach.Put<uint8_t>(kReattachBegin | kReattachComplete);
  fsproto::Reattach r{.claims = {{5, 1}, {6, 0}}, .flags = kReattachBegin | kReattachComplete};
  CHECK(fsproto::Encode(r) == reattach.buffer());

  SetAttrRequest sa;
  sa.valid = kSetSize | kSetCtime;
  sa.size = 10;
  sa.ctime_ns = 77;
  Encoder setattr;
  setattr.Put<uint64_t>(3);
  EncodeSetAttr(&setattr, sa);
  CHECK(fsproto::Encode(fsproto::SetAttr{.ino = 3, .attr = sa}) == setattr.buffer());
  auto sb = fsproto::Decode<fsproto::SetAttr>(setattr.buffer());
  REQUIRE(sb.ok());
  CHECK(sb->attr.ctime_ns == 77);
}

TEST_CASE("replies round-trip; a rename that changed nothing is one byte") {
  InodeAttr a;
  a.ino = 12;
  a.mode = 0100600;
  a.size = 99;
  fsproto::RenameReply changed{.changed = 1, .from = a, .to = a, .moved = a};
  auto c = fsproto::Decode<fsproto::RenameReply>(fsproto::Encode(changed));
  REQUIRE(c.ok());
  CHECK(c->moved.size == 99);
  CHECK(fsproto::Encode(fsproto::RenameReply{}) == std::string(1, '\0'));

  fsproto::ReadDirReply dir;
  dir.entries.push_back({"a", a});
  dir.entries.push_back({"bb", a});
  auto d = fsproto::Decode<fsproto::ReadDirReply>(fsproto::Encode(dir));
  REQUIRE(d.ok());
  REQUIRE(d->entries.size() == 2);
  CHECK(d->entries[1].name == "bb");
  CHECK(d->entries[1].attr.ino == 12);

  // Raw replies are the bytes themselves.
  CHECK(fsproto::Encode(fsproto::Raw{"abc"}) == "abc");
  CHECK(fsproto::Decode<fsproto::Raw>(std::string_view("abc"))->bytes == "abc");
  CHECK(fsproto::Decode<fsproto::Raw>(std::string("abc"))->bytes == "abc");
}

TEST_CASE("every request refuses trailing and missing bytes, naming itself") {
  CheckAllRefuseDamage(std::make_index_sequence<std::tuple_size_v<fsproto::AllRequests>>());
}

TEST_CASE("a count past what the message could hold is refused before anything is allocated") {
  Encoder e;
  e.Put<uint32_t>(0xffffffffu).Put<uint8_t>(0);  // four billion entries, one byte
  auto r = fsproto::Decode<fsproto::ReadDirReply>(e.buffer());
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kCorruption);
  Encoder claims;
  claims.Put<uint32_t>(2).Put<uint64_t>(5).Put<uint32_t>(1).Put<uint8_t>(0);  // two claimed, one sent
  CHECK_FALSE(fsproto::Decode<fsproto::Reattach>(claims.buffer()).ok());
  // Past the per-request limit: refused as such before anything is decoded.
  Encoder many;
  many.Put<uint32_t>(kMaxReattachNodes + 1);
  CHECK(fsproto::Reattach::Precheck(many.buffer()).code() == Code::kInvalidArgument);
  CHECK(fsproto::Reattach::Precheck(claims.buffer()).ok());
}

TEST_CASE("the method table: one name each, and what may be resent unmarked") {
  std::set<std::string> names;
  for (const FsMethodInfo& m : kFsMethods) names.insert(m.name);
  CHECK(names.size() == kFsMethodCount);
  // Applying these twice differs from once: resent only marked (docs/namespace.md).
  for (FsMethod m : {FsMethod::kCreate, FsMethod::kMkdir, FsMethod::kSymlink, FsMethod::kUnlink, FsMethod::kRmdir,
                     FsMethod::kRename, FsMethod::kOpen, FsMethod::kRelease, FsMethod::kLink, FsMethod::kMknod,
                     FsMethod::kSetXattr, FsMethod::kRemoveXattr})
    CHECK_FALSE(IsIdempotent(m));
  for (FsMethod m : {FsMethod::kLookup, FsMethod::kRead, FsMethod::kWrite, FsMethod::kSetAttr, FsMethod::kFsync})
    CHECK(IsIdempotent(m));
  CHECK_FALSE(MethodInfo(static_cast<uint32_t>(FsMethod::kRead)).changes);
  CHECK(MethodInfo(static_cast<uint32_t>(FsMethod::kWrite)).changes);
  CHECK(MethodInfo(static_cast<uint32_t>(FsMethod::kLocate)).caller == CallerClass::kReader);
  CHECK(MethodInfo(static_cast<uint32_t>(FsMethod::kReattach)).caller == CallerClass::kMount);
  CHECK(MethodInfo(999).caller == CallerClass::kAdmin);  // unknown methods
  CHECK(std::string(MethodInfo(999).name) == "unknown");
}
