// What the FUSE session's operations (session_ops.cc) and its mount (fuse_session.cc) share:
// the per-mount state and the caches that let the session answer a few requests itself.
// Internal to fs/mount/: nothing outside this folder includes it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "common/thread_annotations.h"
#include "fs/mount/fuse_session.h"
#include "fs/mount/fuse_uring.h"
#include "fs/mount/node_table.h"
#include "fs/protocol/fs_protocol.h"

struct fuse_lowlevel_ops;

namespace clio::fusemount {

// Extended attributes the kernel and common tools ask for on every file, remembered per
// inode as known to be absent: security.capability before every write(2) (to drop file
// capabilities), security.selinux and the POSIX ACLs on every `ls -l`. Without this each of
// those costs a runtime round trip that answers ENODATA. This mount is the only writer of the
// namespace, so an answer stays true until the mount sets or removes that attribute itself.
// A set or remove bumps an epoch; a lookup that raced with one is not remembered.
class AbsentXattrCache {
 public:
  static constexpr std::string_view kNames[] = {"security.capability", "security.selinux",
                                                "system.posix_acl_access",
                                                "system.posix_acl_default"};
  // The bit of a tracked name, 0 for any other name.
  static uint8_t Bit(std::string_view name) {
    for (size_t i = 0; i < std::size(kNames); ++i) {
      if (name == kNames[i]) return static_cast<uint8_t>(1u << i);
    }
    return 0;
  }
  static constexpr uint8_t kAll = (1u << std::size(kNames)) - 1;

  bool Absent(uint64_t ino, uint8_t bit) {
    MutexLock l(&mu_);
    auto it = absent_.find(ino);
    return it != absent_.end() && (it->second & bit) != 0;
  }
  uint64_t epoch() {
    MutexLock l(&mu_);
    return epoch_;
  }
  // Remembers `bits` as absent on `ino`, unless a set or remove happened since `epoch`.
  void MarkAbsent(uint64_t ino, uint8_t bits, uint64_t epoch) {
    MutexLock l(&mu_);
    if (epoch != epoch_) return;
    if (absent_.size() >= kMaxEntries) absent_.clear();  // a bound, not an eviction policy
    absent_[ino] |= bits;
  }
  void Clear() {
    MutexLock l(&mu_);
    ++epoch_;
    absent_.clear();
  }
  // Before a set or remove of `name` on `ino`.
  void Changing(uint64_t ino, uint8_t bit) {
    MutexLock l(&mu_);
    ++epoch_;
    auto it = absent_.find(ino);
    if (it != absent_.end()) it->second &= static_cast<uint8_t>(~bit);
  }

 private:
  static constexpr size_t kMaxEntries = 1u << 20;
  Mutex mu_;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, uint8_t> absent_ GUARDED_BY(mu_);
};

// Files known to have nothing left to flush: a close (FLUSH) of one has no write-back error
// to report, so it is answered here without a runtime round trip. A file enters when it is
// created, or when the runtime answers a FLUSH with "clean"; any operation that may change
// its bytes removes it. An epoch bumped by each such change keeps a FLUSH answer that raced
// with one from being remembered. Empty after a restart of clio-fuse: every file is asked.
class KnownCleanFiles {
 public:
  bool Has(uint64_t ino) {
    MutexLock l(&mu_);
    return clean_.count(ino) != 0;
  }
  uint64_t epoch() {
    MutexLock l(&mu_);
    return epoch_;
  }
  void Clear() {
    MutexLock l(&mu_);
    ++epoch_;
    clean_.clear();
  }
  void MarkClean(uint64_t ino, uint64_t epoch) {
    MutexLock l(&mu_);
    if (epoch != epoch_) return;
    if (clean_.size() >= kMaxEntries) clean_.clear();  // a bound, not an eviction policy
    clean_.insert(ino);
  }
  void Changing(uint64_t ino) {
    MutexLock l(&mu_);
    ++epoch_;
    clean_.erase(ino);
  }

 private:
  static constexpr size_t kMaxEntries = 1u << 20;
  Mutex mu_;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  std::unordered_set<uint64_t> clean_ GUARDED_BY(mu_);
};

// Inodes whose last name this mount removed while nobody had them open: they are gone in the
// runtime. The kernel still sends a SETATTR of their times (writeback-cache mode keeps c/mtime
// in the kernel and writes them back when it evicts the inode, inside the unlink call); that
// is answered here (ENOENT, which eviction ignores) instead of costing a round trip.
// Inode numbers are never reused, so an entry cannot name a newer file; FORGET removes it.
class DeletedInodes {
 public:
  void Add(uint64_t ino) {
    MutexLock l(&mu_);
    if (inos_.size() >= kMaxEntries) inos_.clear();  // a bound, not an eviction policy
    inos_.insert(ino);
  }
  bool Has(uint64_t ino) {
    MutexLock l(&mu_);
    return inos_.count(ino) != 0;
  }
  void Forget(uint64_t ino) {
    MutexLock l(&mu_);
    inos_.erase(ino);
  }
  void Clear() {
    MutexLock l(&mu_);
    inos_.clear();
  }

 private:
  static constexpr size_t kMaxEntries = 1u << 16;
  Mutex mu_;
  std::unordered_set<uint64_t> inos_ GUARDED_BY(mu_);
};

// Directory attributes the runtime returned with a change this mount made (create, unlink,
// rename). The kernel drops a directory's cached attributes after such a change and asks for
// them again before the next lookup in it; that GETATTR is answered from here, once. Any other
// operation that may change a directory removes its entry first. Change counters (per hashed
// inode, plus one for changes that clear everything) keep a reply that raced with another
// change of the same directory from being stored; a change of another inode (the kernel's
// asynchronous time write-back of a file) does not disturb it.
class FreshDirAttrs {
 public:
  struct Stamp {
    uint64_t all = 0;
    uint64_t ino = 0;
    bool operator==(const Stamp&) const = default;
  };
  // Before an operation that changes `ino`; the stamp to store its reply with.
  Stamp Changing(uint64_t ino) {
    MutexLock l(&mu_);
    ++counters_[Bucket(ino)];
    attrs_.erase(ino);
    return StampLocked(ino);
  }
  // Before an operation that may change directories not named here (rename, rmdir).
  void ChangingAll() {
    MutexLock l(&mu_);
    ++all_;
    attrs_.clear();
  }
  Stamp Current(uint64_t ino) {
    MutexLock l(&mu_);
    return StampLocked(ino);
  }
  void Put(uint64_t dir, const InodeAttr& a, const Stamp& stamp) {
    MutexLock l(&mu_);
    if (!(StampLocked(dir) == stamp)) return;
    if (attrs_.size() >= kMaxEntries) attrs_.clear();  // a bound, not an eviction policy
    attrs_[dir] = a;
  }
  bool Take(uint64_t dir, InodeAttr* a) {
    MutexLock l(&mu_);
    auto it = attrs_.find(dir);
    if (it == attrs_.end()) return false;
    *a = it->second;
    attrs_.erase(it);
    return true;
  }

 private:
  static constexpr size_t kMaxEntries = 1024;
  static constexpr size_t kBuckets = 1024;
  static size_t Bucket(uint64_t ino) { return (ino * 0x9E3779B97F4A7C15ull) >> 54; }
  Stamp StampLocked(uint64_t ino) REQUIRES(mu_) { return {all_, counters_[Bucket(ino)]}; }

  Mutex mu_;
  uint64_t all_ GUARDED_BY(mu_) = 0;
  std::array<uint64_t, kBuckets> counters_ GUARDED_BY(mu_){};
  std::unordered_map<uint64_t, InodeAttr> attrs_ GUARDED_BY(mu_);
};

// Counts the calls in flight to the namespace; once closed, refuses new ones (ENOTCONN) and
// Close() waits for those in flight. A host that gives up on a session whose threads still
// run (FuseMount::Stop) closes it, so that nothing calls into a runtime being stopped.
class CallGate {
 public:
  bool Enter() {
    MutexLock l(&mu_);
    if (closed_) return false;
    ++inflight_;
    return true;
  }
  void Leave() {
    MutexLock l(&mu_);
    if (--inflight_ == 0) cv_.NotifyAll();
  }
  void Close() {
    MutexLock l(&mu_);
    closed_ = true;
    while (inflight_ != 0) cv_.Wait(&mu_);
  }

 private:
  Mutex mu_;
  CondVar cv_;
  int inflight_ GUARDED_BY(mu_) = 0;
  bool closed_ GUARDED_BY(mu_) = false;
};

struct FuseState {
  FsCaller call;
  CallGate gate;
  // Requests sent that may change the namespace, counted before they are sent, and those
  // answered (equal when none is in flight).
  std::atomic<uint64_t> changes{0};
  std::atomic<uint64_t> changes_done{0};
  // The kernel keeps regular files' mtime and ctime (writeback cache negotiated at INIT): a
  // write leaves them to the SETATTR that brings the kernel's (kWriteKernelTimes).
  std::atomic<bool> kernel_times{false};
  FuseMountOptions options;
  AbsentXattrCache absent_xattrs;
  KnownCleanFiles clean_files;
  DeletedInodes deleted;
  FreshDirAttrs dir_attrs;
  NodeTable nodes;  // the node ids the kernel holds, and the opens on each
  std::unique_ptr<FuseUring> uring;  // unless -o io_uring=off
};

// The kernel's operations (session_ops.cc); each request's userdata is the mount's FuseState.
fuse_lowlevel_ops MakeOps();

}  // namespace clio::fusemount
