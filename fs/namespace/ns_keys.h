// Internal to fs/: metadata keys and record encodings of the namespace (docs/namespace.md).
#pragma once

#include <ctime>
#include <string>
#include <string_view>

#include "common/codec.h"
#include "common/status.h"
#include "fs/protocol/fs_protocol.h"
#include "placement/blob_index.h"

namespace clio::ns {

// Version 2 added rdev after parent, version 3 the stored byte count after rdev; records of
// versions 1 and 2 are still read (rdev and stored read as 0).
constexpr uint8_t kInodeVersion = 3;
// The inode numbers reserved: every number handed out is below it. u8 version (1), u64 mark.
constexpr std::string_view kInoHwmKey = "m/ino_hwm";
constexpr uint8_t kInoHwmVersion = 1;
// Format 3 and before: the next inode number, committed with each create (so a crash could
// roll it back). Read once to start the high-water mark, then deleted.
constexpr std::string_view kLegacyNextInoKey = "m/next_ino";
// Inode numbers reserved at a time; each reservation is one synced commit.
constexpr uint64_t kInoBatch = 1u << 16;
// The largest inode number handed out; a high-water mark past it is refused as damaged.
constexpr uint64_t kMaxIno = 1ull << 62;

inline std::string EncodeInoHwm(uint64_t hwm) {
  Encoder e;
  e.Put<uint8_t>(kInoHwmVersion).Put<uint64_t>(hwm);
  return e.Take();
}

inline std::string InodeKey(uint64_t ino) {
  std::string k = "i/";
  AppendBigEndian64(&k, ino);
  return k;
}
inline std::string DentryPrefix(uint64_t parent) {
  std::string k = "d/";
  AppendBigEndian64(&k, parent);
  return k;
}
inline std::string DentryKey(uint64_t parent, std::string_view name) {
  std::string k = DentryPrefix(parent);
  k.append(name);
  return k;
}
inline std::string OrphanKey(uint64_t ino) {
  std::string k = "o/";
  AppendBigEndian64(&k, ino);
  return k;
}
// A truncation whose blob changes may not have finished: redone at start.
inline std::string TruncateKey(uint64_t ino) {
  std::string k = "x/";
  AppendBigEndian64(&k, ino);
  return k;
}

// The size a file had at its last durable point in the run that wrote the record: its last
// fsync, or else the start of that run (what a start finds is durable: it came from disk).
// Written with the first change of the size after that point, by an fsync, and lowered with
// a truncation below it; gone with the file. A start after a crash never shortens a file
// below the record of the run that crashed (Namespace::ReconcileFile); a record of an older
// run means the size did not change since that run's start. u8 version (1), u64 size, u64 run
// (the writing run's incarnation).
inline std::string DurableSizeKey(uint64_t ino) {
  std::string k = "s/";
  AppendBigEndian64(&k, ino);
  return k;
}
struct DurableSize {
  uint64_t size = 0;
  uint64_t run = 0;
};
inline std::string EncodeDurableSize(const DurableSize& d) {
  Encoder e;
  e.Put<uint8_t>(1).Put<uint64_t>(d.size).Put<uint64_t>(d.run);
  return e.Take();
}
inline Result<DurableSize> DecodeDurableSize(std::string_view v) {
  Decoder d(v);
  uint8_t version = 0;
  DurableSize out;
  d.Get(&version) && d.Get(&out.size) && d.Get(&out.run);
  CLIO_RETURN_IF_ERROR(d.Finish("durable size record"));
  if (version != 1) return Corruption("durable size record has unknown version " + std::to_string(version));
  return out;
}
// The incarnation of the run that last started (u64): whose durable-size records a start
// after a crash holds the files to.
constexpr std::string_view kLastRunKey = "m/last_run";

// Room kept by fallocate (default mode and KEEP_SIZE): u8 version (1), u32 n, n x (u64 begin,
// u64 end), the file's byte ranges, sorted and disjoint.
inline std::string KeptKey(uint64_t ino) {
  std::string k = "r/";
  AppendBigEndian64(&k, ino);
  return k;
}
inline std::string EncodeKept(const RangeSet& r) {
  Encoder e;
  e.Put<uint8_t>(1).Put<uint32_t>(static_cast<uint32_t>(r.ranges().size()));
  for (const auto& x : r.ranges()) e.Put<uint64_t>(x.begin).Put<uint64_t>(x.end);
  return e.Take();
}
inline Result<RangeSet> DecodeKept(std::string_view v) {
  Decoder d(v);
  uint8_t version = 0;
  uint32_t n = 0;
  d.Get(&version);
  d.Get(&n);
  if (!d.failed() && version != 1) return Corruption("kept-room record has unknown version " + std::to_string(version));
  RangeSet r;
  for (uint32_t i = 0; i < n && !d.failed(); ++i) {
    uint64_t b = 0, e = 0;
    d.Get(&b);
    d.Get(&e);
    if (d.failed() || b >= e || e > (1ull << 62)) return Corruption("kept-room record has a bad range");
    r.Add(b, e);
  }
  CLIO_RETURN_IF_ERROR(d.Finish("kept-room record"));
  return r;
}

// A request record: the client's slot (request id modulo Namespace::kRequestSlots).
constexpr std::string_view kRequestPrefix = "rq/";
inline std::string RequestKey(uint32_t client, uint64_t request_id, uint64_t slots) {
  std::string k(kRequestPrefix);
  AppendBigEndian64(&k, (uint64_t{client} << 32) | (request_id % slots));
  return k;
}
// u8 version 1, u64 request id, u32 method, i64 wall-clock ns when recorded.
inline std::string EncodeRequestRecord(uint64_t request_id, uint32_t method, int64_t now_ns) {
  Encoder e;
  e.Put<uint8_t>(1).Put<uint64_t>(request_id).Put<uint32_t>(method).Put<int64_t>(now_ns);
  return e.Take();
}

// The on-disk inode has a codec of its own, field by field (docs/namespace.md): a change to
// the attributes on the wire (EncodeAttr, docs/ipc.md) never changes the disk format.
inline std::string EncodeInode(const InodeAttr& a, std::string_view target) {
  Encoder e;
  e.Put<uint8_t>(kInodeVersion);
  e.Put(a.ino).Put(a.mode).Put(a.nlink).Put(a.uid).Put(a.gid).Put(a.size);
  e.Put(a.atime_ns).Put(a.mtime_ns).Put(a.ctime_ns).Put(a.parent).Put(a.rdev).Put(a.stored);
  e.PutBytes(target);
  return e.Take();
}

inline Result<InodeAttr> DecodeInode(std::string_view v, std::string* target) {
  Decoder d(v);
  uint8_t version = 0;
  InodeAttr a;
  std::string t;
  d.Get(&version);
  if (!d.failed() && (version < 1 || version > kInodeVersion))
    return Corruption("inode record has format version " + std::to_string(version) + ", and this runtime reads 1 to " +
                      std::to_string(kInodeVersion) + " (written by a newer CLIO? upgrade this one)");
  d.Get(&a.ino) && d.Get(&a.mode) && d.Get(&a.nlink) && d.Get(&a.uid) && d.Get(&a.gid) && d.Get(&a.size) &&
      d.Get(&a.atime_ns) && d.Get(&a.mtime_ns) && d.Get(&a.ctime_ns) && d.Get(&a.parent);
  if (version >= 2) d.Get(&a.rdev);
  if (version >= 3) d.Get(&a.stored);
  d.GetString(&t);
  CLIO_RETURN_IF_ERROR(d.Finish("inode record"));
  if (target) *target = std::move(t);
  return a;
}

inline std::string EncodeDentry(uint64_t ino, uint32_t mode) {
  Encoder e;
  e.Put(ino).Put(mode);
  return e.Take();
}

inline int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline std::string Hex(uint64_t v) { return std::to_string(v); }

// An operation on an inode number the namespace does not have: the file was removed, or its
// creation was lost in a crash while a client (a kernel) kept the number. Stale (ESTALE), so
// the kernel looks the path up again rather than taking it as "no such name".
inline Status NoInode(uint64_t ino) {
  return Status(Code::kStale, "no inode " + Hex(ino) + " (removed, or its creation was lost in a crash)");
}

}  // namespace clio::ns
