// The filesystem pool's requests and replies as types (docs/ipc.md, "clio_fs"). Each request
// names its method and its reply type and lists its fields once, in wire order (`Fields`):
// one list serves encoding and decoding, on both sides. Byte fields are views: a decoded
// request borrows the payload it came from (a write's data is never copied to decode it).
#pragma once

#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/codec.h"
#include "common/message.h"
#include "common/status.h"
#include "fs/protocol/fs_protocol.h"

namespace clio {

// The field codecs of the protocol's domain types (common/message.h finds them by lookup on
// the type). DirEntry and NodeClaim list their fields in fs_protocol.h.
inline void WireEncode(Encoder& e, const InodeAttr& a) { EncodeAttr(&e, a); }
inline Status WireDecode(Decoder& d, InodeAttr& a) { return DecodeAttr(&d, &a), Status::Ok(); }
inline void WireEncode(Encoder& e, const SetAttrRequest& r) { EncodeSetAttr(&e, r); }
inline Status WireDecode(Decoder& d, SetAttrRequest& r) { return DecodeSetAttr(&d, &r), Status::Ok(); }
inline void WireEncode(Encoder& e, const FsStatfs& s) { EncodeStatfs(&e, s); }
inline Status WireDecode(Decoder& d, FsStatfs& s) { return DecodeStatfs(&d, &s), Status::Ok(); }

}  // namespace clio

namespace clio::fsproto {

using wire::Empty;
using wire::Raw;
using wire::Trailing;
using wire::Encode;
using wire::Decode;

// ---- replies -----------------------------------------------------------------------------

// An inode's attributes as a client sees them (lookup, getattr, setattr, mkdir, symlink,
// mknod, link).
struct AttrReply {
  static constexpr const char* kName = "attr reply";
  InodeAttr attr;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.attr); }
};
// The new file, then its directory as the create left it.
struct CreateReply {
  static constexpr const char* kName = "create reply";
  InodeAttr attr, dir;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.attr); f(s.dir); }
};
// `gone`: the inode number when the last name went and nobody held it open, else 0.
struct UnlinkReply {
  static constexpr const char* kName = "unlink reply";
  uint64_t gone = 0;
  InodeAttr dir;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.gone); f(s.dir); }
};
// `changed` 1: the source and target directories' attributes and the moved inode's follow;
// 0 alone: the rename changed none of them, or swapped two names, or was answered from a
// request record.
struct RenameReply {
  static constexpr const char* kName = "rename reply";
  uint8_t changed = 0;
  InodeAttr from, to, moved;
  template <class S, class F> static void Fields(S& s, F&& f) {
    f(s.changed);
    if (s.changed == 1) {
      f(s.from);
      f(s.to);
      f(s.moved);
    }
  }
};
struct ReadDirReply {
  static constexpr const char* kName = "readdir reply";
  std::vector<DirEntry> entries;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.entries); }
};
// Bytes stored: fewer than sent when a tier filled up part-way (a short write).
struct WriteReply {
  static constexpr const char* kName = "write reply";
  uint32_t written = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.written); }
};
// `clean` 1: nothing of the file is left to flush to a persistent tier.
struct FlushReply {
  static constexpr const char* kName = "flush reply";
  uint8_t clean = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.clean); }
};
struct StatfsReply {
  static constexpr const char* kName = "statfs reply";
  FsStatfs statfs;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.statfs); }
};
// A random number per start of the namespace: a new one means the runtime restarted.
struct AttachReply {
  static constexpr const char* kName = "attach reply";
  uint64_t incarnation = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.incarnation); }
};
// For each declared node, in order: 1 when the namespace still has it.
struct ReattachReply {
  static constexpr const char* kName = "reattach reply";
  std::vector<uint8_t> exists;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.exists); }
};

// ---- requests ----------------------------------------------------------------------------

#define CLIO_FS_REQUEST(Type, method, ReplyType) \
  static constexpr FsMethod kMethod = FsMethod::method; \
  static constexpr const char* kName = #Type;            \
  static constexpr bool kBorrows = true;                        \
  using Reply = ReplyType

struct Lookup {
  CLIO_FS_REQUEST(Lookup, kLookup, AttrReply);
  uint64_t parent = 0;
  std::string_view name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.parent); f(s.name); }
};
struct GetAttr {
  CLIO_FS_REQUEST(GetAttr, kGetAttr, AttrReply);
  uint64_t ino = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); }
};
struct SetAttr {
  CLIO_FS_REQUEST(SetAttr, kSetAttr, AttrReply);
  uint64_t ino = 0;
  SetAttrRequest attr;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.attr); }
};
// Create and mkdir share their fields: mode (permission bits, umask applied), owner.
struct Create {
  CLIO_FS_REQUEST(Create, kCreate, CreateReply);
  uint64_t parent = 0;
  std::string_view name;
  uint32_t mode = 0, uid = 0, gid = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.parent); f(s.name); f(s.mode); f(s.uid); f(s.gid); }
};
struct Mkdir {
  CLIO_FS_REQUEST(Mkdir, kMkdir, AttrReply);
  uint64_t parent = 0;
  std::string_view name;
  uint32_t mode = 0, uid = 0, gid = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.parent); f(s.name); f(s.mode); f(s.uid); f(s.gid); }
};
struct Symlink {
  CLIO_FS_REQUEST(Symlink, kSymlink, AttrReply);
  uint64_t parent = 0;
  std::string_view name, target;
  uint32_t uid = 0, gid = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.parent); f(s.name); f(s.target); f(s.uid); f(s.gid); }
};
struct Readlink {
  CLIO_FS_REQUEST(Readlink, kReadlink, Raw);
  uint64_t ino = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); }
};
struct Unlink {
  CLIO_FS_REQUEST(Unlink, kUnlink, UnlinkReply);
  uint64_t parent = 0;
  std::string_view name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.parent); f(s.name); }
};
struct Rmdir {
  CLIO_FS_REQUEST(Rmdir, kRmdir, Empty);
  uint64_t parent = 0;
  std::string_view name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.parent); f(s.name); }
};
struct Rename {
  CLIO_FS_REQUEST(Rename, kRename, RenameReply);
  uint64_t parent = 0;
  std::string_view name;
  uint64_t new_parent = 0;
  std::string_view new_name;
  uint32_t flags = 0;  // RENAME_NOREPLACE, RENAME_EXCHANGE
  template <class S, class F> static void Fields(S& s, F&& f) {
    f(s.parent); f(s.name); f(s.new_parent); f(s.new_name); f(s.flags);
  }
};
// The entries after `after` in name order ("": from the first), at most `count`.
struct ReadDir {
  CLIO_FS_REQUEST(ReadDir, kReadDir, ReadDirReply);
  uint64_t ino = 0;
  std::string_view after;
  uint32_t count = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.after); f(s.count); }
};
struct Open {
  CLIO_FS_REQUEST(Open, kOpen, Empty);
  uint64_t ino = 0;
  uint32_t flags = 0;  // open(2) flags: O_TRUNC empties the file
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.flags); }
};
struct Release {
  CLIO_FS_REQUEST(Release, kRelease, Empty);
  uint64_t ino = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); }
};
struct Read {
  CLIO_FS_REQUEST(Read, kRead, Raw);
  uint64_t ino = 0, offset = 0;
  uint32_t len = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.offset); f(s.len); }
};
struct Write {
  CLIO_FS_REQUEST(Write, kWrite, WriteReply);
  uint64_t ino = 0, offset = 0;
  std::string_view data;
  Trailing<uint8_t> flags;  // WriteFlags; absent from clients older than the flags
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.offset); f(s.data); f(s.flags); }
};
// The next close's report: whether a flush to a persistent tier failed (an error), and
// whether anything is left to flush.
struct Flush {
  CLIO_FS_REQUEST(Flush, kFlush, FlushReply);
  uint64_t ino = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); }
};
// Of a file: its bytes on a persistent tier and every change committed; of a directory: every
// change committed.
struct Fsync {
  CLIO_FS_REQUEST(Fsync, kFsync, Empty);
  uint64_t ino = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); }
};
struct Statfs {
  CLIO_FS_REQUEST(Statfs, kStatfs, StatfsReply);
  template <class S, class F> static void Fields(S&, F&&) {}
};
struct Link {
  CLIO_FS_REQUEST(Link, kLink, AttrReply);
  uint64_t ino = 0, new_parent = 0;
  std::string_view new_name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.new_parent); f(s.new_name); }
};
struct Mknod {
  CLIO_FS_REQUEST(Mknod, kMknod, AttrReply);
  uint64_t parent = 0;
  std::string_view name;
  uint32_t mode = 0;  // type and permission bits
  uint64_t rdev = 0;
  uint32_t uid = 0, gid = 0;
  template <class S, class F> static void Fields(S& s, F&& f) {
    f(s.parent); f(s.name); f(s.mode); f(s.rdev); f(s.uid); f(s.gid);
  }
};
struct SetXattr {
  CLIO_FS_REQUEST(SetXattr, kSetXattr, Empty);
  uint64_t ino = 0;
  std::string_view name, value;
  uint32_t flags = 0;  // XATTR_CREATE, XATTR_REPLACE
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.name); f(s.value); f(s.flags); }
};
struct GetXattr {
  CLIO_FS_REQUEST(GetXattr, kGetXattr, Raw);
  uint64_t ino = 0;
  std::string_view name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.name); }
};
// Reply: the names, each followed by a NUL (listxattr(2)'s buffer).
struct ListXattr {
  CLIO_FS_REQUEST(ListXattr, kListXattr, Raw);
  uint64_t ino = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); }
};
struct RemoveXattr {
  CLIO_FS_REQUEST(RemoveXattr, kRemoveXattr, Empty);
  uint64_t ino = 0;
  std::string_view name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.name); }
};
struct Fallocate {
  CLIO_FS_REQUEST(Fallocate, kFallocate, Empty);
  uint64_t ino = 0;
  uint32_t mode = 0;  // 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
  uint64_t offset = 0, length = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.mode); f(s.offset); f(s.length); }
};
// Reply: EncodeFileLocation (`clioctl locate`; not sent by clio-fuse).
// `path`: the file's path from the mount's root ("dir/file"). A reader (below the mount class)
// must send it: the runtime walks it with the reader's search permission on each directory,
// as the kernel would, and it must lead to `ino`. Root and the mount may leave it empty.
struct Locate {
  CLIO_FS_REQUEST(Locate, kLocate, Raw);
  uint64_t ino = 0;
  Trailing<std::string> path;  // absent from clients older than the check (root's still work)
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.path); }
};
struct Attach {
  CLIO_FS_REQUEST(Attach, kAttach, AttachReply);
  template <class S, class F> static void Fields(S&, F&&) {}
};
// After a restart, clio-fuse declares every node its kernel holds and its opens on each, in
// parts of at most kMaxReattachNodes, the first with kReattachBegin and the last with
// kReattachComplete (Namespace::Reattach).
struct Reattach {
  CLIO_FS_REQUEST(Reattach, kReattach, ReattachReply);
  std::vector<NodeClaim> claims;
  uint8_t flags = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.claims); f(s.flags); }
  // Before decoding: a count past the limit is refused as such (InvalidArgument), whatever
  // follows it.
  static Status Precheck(std::string_view payload) {
    Decoder d(payload);
    uint32_t n = 0;
    if (d.Get(&n) && n > kMaxReattachNodes)
      return InvalidArgument("reattach of " + std::to_string(n) + " nodes: at most " +
                             std::to_string(kMaxReattachNodes) + " per request");
    return Status::Ok();
  }
};

#undef CLIO_FS_REQUEST

// Every request, in FsMethod order (the handler tables are built from it).
using AllRequests = std::tuple<Lookup, GetAttr, SetAttr, Create, Mkdir, Symlink, Readlink, Unlink, Rmdir,
                               Rename, ReadDir, Open, Release, Read, Write, Fsync, Flush, Statfs, Link,
                               Mknod, SetXattr, GetXattr, ListXattr, RemoveXattr, Fallocate, Locate,
                               Attach, Reattach>;
static_assert(std::tuple_size_v<AllRequests> == kFsMethodCount - 1, "AllRequests must list every FsMethod");
template <size_t... I>
constexpr bool InMethodOrder(std::index_sequence<I...>) {
  return ((static_cast<size_t>(std::tuple_element_t<I, AllRequests>::kMethod) == I + 1) && ...);
}
static_assert(InMethodOrder(std::make_index_sequence<std::tuple_size_v<AllRequests>>()),
              "AllRequests must be in FsMethod order");

}  // namespace clio::fsproto
