// Messages between clio-fuse and the clio_fs pool. Format: docs/ipc.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/codec.h"
#include "common/status.h"
#include "daemon/caller.h"

namespace clio {

inline constexpr uint64_t kRootIno = 1;
inline constexpr size_t kMaxNameLen = 255;
inline constexpr size_t kMaxSymlinkLen = 4095;
inline constexpr size_t kMaxXattrNameLen = 255;
inline constexpr size_t kMaxXattrValueLen = 64 * 1024;  // like ext4's limit per value

struct InodeAttr {
  uint64_t ino = 0;
  uint32_t mode = 0;  // type and permission bits (S_IFREG | 0644)
  uint32_t nlink = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  uint64_t parent = 0;  // directories: the parent directory (for rename cycle checks)
  uint64_t rdev = 0;    // device number of character and block special files
  uint64_t stored = 0;  // regular files: bytes that hold data (holes excluded), for st_blocks
};

// One node a client's kernel holds, and how many opens (files and directories) it has on it
// (Reattach).
struct NodeClaim {
  uint64_t ino = 0;
  uint32_t opens = 0;
  static constexpr size_t kMinWireSize = sizeof(uint64_t) + sizeof(uint32_t);
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.ino); f(s.opens); }
};

struct DirEntry {
  std::string name;
  InodeAttr attr;
  static constexpr size_t kMinWireSize = sizeof(uint32_t) + 8 * 8 + 4 * 4;  // name length, attr
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.name); f(s.attr); }
};

struct FsStatfs {
  uint64_t block_size = 4096;
  uint64_t blocks = 0;
  uint64_t blocks_free = 0;
  uint64_t files = 0;
  uint64_t files_free = 0;
  uint32_t name_max = kMaxNameLen;
};

// SetAttr `valid` bits.
enum SetAttrBits : uint32_t {
  kSetMode = 1u << 0,
  kSetUid = 1u << 1,
  kSetGid = 1u << 2,
  kSetSize = 1u << 3,
  kSetAtime = 1u << 4,
  kSetMtime = 1u << 5,
  kSetAtimeNow = 1u << 6,
  kSetMtimeNow = 1u << 7,
  // The ctime the kernel gave the inode itself (writeback-cache mode, where it owns a regular
  // file's times): stored as given, so the file keeps it after the kernel forgets the inode.
  kSetCtime = 1u << 8,
};

// Write's optional trailing u8 of flags.
enum WriteFlags : uint8_t {
  // The kernel keeps the file's mtime and ctime itself (writeback-cache mode) and sends them
  // with a SetAttr (kSetCtime) at write-back, close and fsync: the write leaves them alone. A
  // write that took its own clock could land after that SetAttr (the kernel does not wait
  // for its background writes first) and leave times the kernel never showed.
  kWriteKernelTimes = 1u << 0,
};

struct SetAttrRequest {
  uint32_t valid = 0;
  uint32_t mode = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint64_t size = 0;
  int64_t atime_ns = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;  // on the wire only with kSetCtime
};

enum class FsMethod : uint32_t {
  kLookup = 1,
  kGetAttr,
  kSetAttr,
  kCreate,
  kMkdir,
  kSymlink,
  kReadlink,
  kUnlink,
  kRmdir,
  kRename,
  kReadDir,
  kOpen,
  kRelease,
  kRead,
  kWrite,
  kFsync,
  kFlush,
  kStatfs,
  kLink,
  kMknod,
  kSetXattr,
  kGetXattr,
  kListXattr,
  kRemoveXattr,
  kFallocate,
  kLocate,  // u64 ino [, path from the mount's root] -> EncodeFileLocation (`clioctl locate`)
  // -> u64 incarnation: a random number per start of the namespace. clio-fuse asks it at mount
  // and after its connection to the runtime broke, to tell a runtime restart.
  kAttach,
  // u32 n, n x (u64 ino, u32 opens), u8 flags -> u32 n, n x u8 exists. After a restart,
  // clio-fuse declares every node its kernel holds and how many opens each has, in parts of
  // at most kMaxReattachNodes, the last with kReattachComplete (Namespace::Reattach).
  kReattach,
};
// Nodes in one Reattach request, at most.
inline constexpr uint32_t kMaxReattachNodes = 1u << 16;
// Reattach flags: the last part of the declaration; the first (the open counts it does not
// name are dropped: the mount declares every open it holds).
inline constexpr uint8_t kReattachComplete = 1u << 0;
inline constexpr uint8_t kReattachBegin = 1u << 1;

// What each method is, by value (FsMethod; [0] is any unknown method).
struct FsMethodInfo {
  const char* name;  // the metric label (clio_fs_operations_total{op})
  // False when applying it twice differs from once. The client resends those after a broken
  // connection only marked (RuntimeClient::Resend::kMarked): FsPool records each with its
  // effect and answers a resend of one that ran from the record (docs/namespace.md).
  bool idempotent;
  // Changes the namespace: clio-fuse counts it (its readdir pages and caches go stale).
  bool changes;
  CallerClass caller;  // who may call it
};
inline constexpr size_t kFsMethodCount = static_cast<size_t>(FsMethod::kReattach) + 1;
inline constexpr std::array<FsMethodInfo, kFsMethodCount> kFsMethods = {{
    {"unknown", true, false, CallerClass::kAdmin},
    {"lookup", true, false, CallerClass::kMount},
    {"getattr", true, false, CallerClass::kMount},
    {"setattr", true, true, CallerClass::kMount},
    {"create", false, true, CallerClass::kMount},
    {"mkdir", false, true, CallerClass::kMount},
    {"symlink", false, true, CallerClass::kMount},
    {"readlink", true, false, CallerClass::kMount},
    {"unlink", false, true, CallerClass::kMount},
    {"rmdir", false, true, CallerClass::kMount},
    {"rename", false, true, CallerClass::kMount},
    {"readdir", true, false, CallerClass::kMount},
    {"open", false, true, CallerClass::kMount},
    {"release", false, true, CallerClass::kMount},
    {"read", true, false, CallerClass::kMount},
    {"write", true, true, CallerClass::kMount},
    {"fsync", true, false, CallerClass::kMount},
    {"flush", true, false, CallerClass::kMount},
    {"statfs", true, false, CallerClass::kReader},
    {"link", false, true, CallerClass::kMount},
    {"mknod", false, true, CallerClass::kMount},
    {"setxattr", false, true, CallerClass::kMount},
    {"getxattr", true, false, CallerClass::kMount},
    {"listxattr", true, false, CallerClass::kMount},
    {"removexattr", false, true, CallerClass::kMount},
    {"fallocate", true, true, CallerClass::kMount},
    {"locate", true, false, CallerClass::kReader},
    {"attach", true, false, CallerClass::kMount},
    {"reattach", true, false, CallerClass::kMount},
}};
inline const FsMethodInfo& MethodInfo(uint32_t method) {
  return kFsMethods[method < kFsMethodCount ? method : 0];
}
inline bool IsIdempotent(FsMethod m) { return MethodInfo(static_cast<uint32_t>(m)).idempotent; }

void EncodeAttr(Encoder* e, const InodeAttr& a);
bool DecodeAttr(Decoder* d, InodeAttr* a);
void EncodeSetAttr(Encoder* e, const SetAttrRequest& r);
bool DecodeSetAttr(Decoder* d, SetAttrRequest* r);
void EncodeStatfs(Encoder* e, const FsStatfs& s);
bool DecodeStatfs(Decoder* d, FsStatfs* s);

// Where a regular file's bytes are (`clioctl locate`): per chunk (blob) that exists, each copy
// with its tier, state and extents on the tier's device.
struct ChunkCopy {
  uint64_t tier_id = 0;
  bool dirty = false;   // not yet flushed to a persistent tier
  uint64_t bytes = 0;   // written bytes of this copy
  std::vector<std::pair<uint64_t, uint64_t>> extents;  // (offset, size) on the device
};
struct ChunkLocation {
  uint64_t index = 0;  // the chunk covers [index * chunk_size, (index + 1) * chunk_size)
  std::vector<ChunkCopy> copies;  // newest first
};
struct FileLocation {
  uint64_t ino = 0;
  uint64_t size = 0;
  uint64_t chunk_size = 0;
  std::vector<ChunkLocation> chunks;  // ascending index; holes have none
};
// u64 ino, size, chunk_size, u32 chunks; per chunk u64 index, u32 copies; per copy u64 tier
// id, u8 dirty, u64 bytes, u32 extents, then (u64 offset, u64 size) each.
std::string EncodeFileLocation(const FileLocation& f);
Result<FileLocation> DecodeFileLocation(std::string_view bytes);

}  // namespace clio
