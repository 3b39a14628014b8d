// The FUSE session (fs/fuse_session.h): the kernel's file operations as requests to the
// namespace pool, with the few answers this side can give by itself (absent xattrs, clean
// files, deleted inodes, fresh directory attributes). Stateless apart from those caches and
// open directory listings, so a runtime restart under clio-fuse does not take the mount down.
#define FUSE_USE_VERSION 34

#include "fs/fuse_session.h"

#include <fuse3/fuse_lowlevel.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/codec.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mounts.h"
#include "common/thread_annotations.h"
#include "fs/errno_map.h"
#include "fs/fs_protocol.h"
#include "fs/fuse_uring.h"
#include "fs/node_table.h"

namespace clio {
namespace {

constexpr uint32_t kReadDirPage = 1024;
// A listing read again after a change (readdirplus): what a few replies use, not a full page.
constexpr uint32_t kReReadDirPage = 128;

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

// Methods that change nothing in the namespace (the others count in FuseState::changes).
bool ChangesNothing(FsMethod m) {
  switch (m) {
    case FsMethod::kLookup: case FsMethod::kGetAttr: case FsMethod::kReadlink: case FsMethod::kRead:
    case FsMethod::kReadDir: case FsMethod::kGetXattr: case FsMethod::kListXattr: case FsMethod::kStatfs:
    case FsMethod::kFlush: case FsMethod::kFsync:
      return true;
    default:
      return false;
  }
}

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

// libfuse's I/O on /dev/fuse, through the ring's hooks (fs/fuse_uring.h).
ssize_t UringRead(int fd, void* buf, size_t len, void* userdata) {
  return static_cast<FuseState*>(userdata)->uring->Read(fd, buf, len);
}
ssize_t UringWritev(int fd, struct iovec* iov, int count, void* userdata) {
  return static_cast<FuseState*>(userdata)->uring->Writev(fd, iov, count);
}

FuseState* State(fuse_req_t req) { return static_cast<FuseState*>(fuse_req_userdata(req)); }

Result<std::string> Call(FuseState* s, FsMethod m, Encoder& e) {
  if (!s->gate.Enter()) return Unavailable("the mount is being stopped");
  const bool changes = !ChangesNothing(m);
  if (changes) s->changes.fetch_add(1);
  Result<std::string> r = s->call(m, e.buffer());
  if (changes) s->changes_done.fetch_add(1);
  s->gate.Leave();
  return r;
}
Result<std::string> Call(fuse_req_t req, FsMethod m, Encoder& e) { return Call(State(req), m, e); }

struct stat ToStat(const InodeAttr& a) {
  struct stat st {};
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_rdev = static_cast<dev_t>(a.rdev);
  st.st_blksize = 4096;
  // Holes cost nothing: blocks count the bytes that hold data, not the size.
  st.st_blocks = static_cast<blkcnt_t>((a.stored + 511) / 512);
  st.st_atim = {a.atime_ns / 1000000000, a.atime_ns % 1000000000};
  st.st_mtim = {a.mtime_ns / 1000000000, a.mtime_ns % 1000000000};
  st.st_ctim = {a.ctime_ns / 1000000000, a.ctime_ns % 1000000000};
  return st;
}

fuse_entry_param ToEntry(fuse_req_t req, const InodeAttr& a) {
  const FuseMountOptions& o = State(req)->options;
  fuse_entry_param e{};
  e.ino = a.ino;
  e.generation = 1;
  e.attr = ToStat(a);
  e.attr_timeout = o.attr_timeout;
  e.entry_timeout = o.entry_timeout;
  return e;
}

void ReplyErr(fuse_req_t req, const Status& s) { fuse_reply_err(req, ToErrno(s)); }

bool DecodeAttrReply(const std::string& body, InodeAttr* a) {
  Decoder d(body);
  return DecodeAttr(&d, a) && d.Finish("attr").ok();
}

// An entry reply: the kernel takes a lookup of the node when it accepts it. Counted before
// the reply goes out (the kernel may FORGET it before this thread runs again), taken back if
// the kernel refused it.
void ReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name, const Result<std::string>& r) {
  if (!r.ok()) return ReplyErr(req, r.status());
  InodeAttr a;
  if (!DecodeAttrReply(*r, &a)) return (void)fuse_reply_err(req, EIO);
  fuse_entry_param e = ToEntry(req, a);
  NodeTable& nodes = State(req)->nodes;
  nodes.Looked(parent, name, a.ino);
  if (fuse_reply_entry(req, &e) != 0) nodes.Forget(a.ino, 1);
}

void ReplyAttr(fuse_req_t req, const Result<std::string>& r) {
  if (!r.ok()) return ReplyErr(req, r.status());
  InodeAttr a;
  if (!DecodeAttrReply(*r, &a)) return (void)fuse_reply_err(req, EIO);
  struct stat st = ToStat(a);
  fuse_reply_attr(req, &st, State(req)->options.attr_timeout);
}

void ReplyStatus(fuse_req_t req, const Result<std::string>& r) {
  fuse_reply_err(req, r.ok() ? 0 : ToErrno(r.status()));
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  if (conn->capable & FUSE_CAP_WRITEBACK_CACHE) conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  static_cast<FuseState*>(userdata)->kernel_times.store((conn->want & FUSE_CAP_WRITEBACK_CACHE) != 0);
  conn->max_write = 1u << 20;
  conn->max_readahead = 1u << 20;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name);
  auto r = Call(req, FsMethod::kLookup, e);
  if (!r.ok() && r.status().code() == Code::kNotFound && State(req)->options.negative_timeout > 0) {
    // A name that does not exist is cached as absent (ino 0) for the negative timeout: this
    // mount is the namespace's only writer, so a create here invalidates it.
    fuse_entry_param neg{};
    neg.entry_timeout = State(req)->options.negative_timeout;
    return (void)fuse_reply_entry(req, &neg);
  }
  ReplyEntry(req, parent, name, r);
}

// Inode numbers are stable ids kept by the runtime, never handed out twice; the node table
// counts the kernel's lookups so that a runtime restart knows which ids the kernel holds.
void OpForget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  State(req)->deleted.Forget(ino);
  // The root is never looked up, and never gone: a FORGET of it (at unmount) counts nothing.
  if (ino != FUSE_ROOT_ID) State(req)->nodes.Forget(ino, nlookup);
  fuse_reply_none(req);
}

void OpGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  InodeAttr fresh;
  if (State(req)->dir_attrs.Take(ino, &fresh)) {
    struct stat st = ToStat(fresh);
    return (void)fuse_reply_attr(req, &st, State(req)->options.attr_timeout);
  }
  Encoder e;
  e.Put<uint64_t>(ino);
  ReplyAttr(req, Call(req, FsMethod::kGetAttr, e));
}

void OpSetattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info*) {
  constexpr int kTimesOnly = FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
                             FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
  if ((to_set & ~kTimesOnly) == 0 && State(req)->deleted.Has(ino)) {
    return (void)fuse_reply_err(req, ENOENT);
  }
  SetAttrRequest r;
  if (to_set & FUSE_SET_ATTR_MODE) r.valid |= kSetMode, r.mode = attr->st_mode;
  if (to_set & FUSE_SET_ATTR_UID) r.valid |= kSetUid, r.uid = attr->st_uid;
  if (to_set & FUSE_SET_ATTR_GID) r.valid |= kSetGid, r.gid = attr->st_gid;
  if (to_set & FUSE_SET_ATTR_SIZE) r.valid |= kSetSize, r.size = static_cast<uint64_t>(attr->st_size);
  if (to_set & FUSE_SET_ATTR_ATIME_NOW) r.valid |= kSetAtimeNow;
  else if (to_set & FUSE_SET_ATTR_ATIME)
    r.valid |= kSetAtime, r.atime_ns = attr->st_atim.tv_sec * 1000000000LL + attr->st_atim.tv_nsec;
  if (to_set & FUSE_SET_ATTR_MTIME_NOW) r.valid |= kSetMtimeNow;
  else if (to_set & FUSE_SET_ATTR_MTIME)
    r.valid |= kSetMtime, r.mtime_ns = attr->st_mtim.tv_sec * 1000000000LL + attr->st_mtim.tv_nsec;
  // In writeback-cache mode the kernel sets a regular file's ctime itself and sends it with
  // every change of attributes; the runtime keeps that one rather than taking its own clock,
  // so stat gives the same ctime after the kernel has dropped the inode from its cache.
  if (to_set & FUSE_SET_ATTR_CTIME)
    r.valid |= kSetCtime, r.ctime_ns = attr->st_ctim.tv_sec * 1000000000LL + attr->st_ctim.tv_nsec;
  if (r.valid & kSetSize) State(req)->clean_files.Changing(ino);  // truncation rewrites a chunk
  State(req)->dir_attrs.Changing(ino);
  Encoder e;
  e.Put<uint64_t>(ino);
  EncodeSetAttr(&e, r);
  ReplyAttr(req, Call(req, FsMethod::kSetAttr, e));
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  Encoder e;
  e.Put<uint64_t>(ino);
  auto r = Call(req, FsMethod::kReadlink, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  fuse_reply_readlink(req, r->c_str());
}

void MakeNode(fuse_req_t req, FsMethod m, fuse_ino_t parent, const char* name, mode_t mode) {
  State(req)->dir_attrs.Changing(parent);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name).Put<uint32_t>(mode & ~ctx->umask & 07777)
      .Put<uint32_t>(ctx->uid).Put<uint32_t>(ctx->gid);
  ReplyEntry(req, parent, name, Call(req, m, e));
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  MakeNode(req, FsMethod::kMkdir, parent, name, mode);
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  State(req)->dir_attrs.Changing(parent);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name).PutBytes(link).Put<uint32_t>(ctx->uid).Put<uint32_t>(ctx->gid);
  ReplyEntry(req, parent, name, Call(req, FsMethod::kSymlink, e));
}

void RemoveName(fuse_req_t req, FsMethod m, fuse_ino_t parent, const char* name) {
  State(req)->dir_attrs.ChangingAll();  // rmdir: the parent, and the removed directory
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name);
  ReplyStatus(req, Call(req, m, e));
}
void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  FuseState* st = State(req);
  const FreshDirAttrs::Stamp stamp = st->dir_attrs.Changing(parent);
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name);
  auto r = Call(req, FsMethod::kUnlink, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  Decoder d(*r);
  uint64_t gone = 0;
  InodeAttr dir;
  if (d.Get(&gone) && DecodeAttr(&d, &dir) && d.Finish("unlink").ok()) {
    if (gone != 0) st->deleted.Add(gone);
    st->dir_attrs.Put(parent, dir, stamp);
  }
  fuse_reply_err(req, 0);
}
void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) { RemoveName(req, FsMethod::kRmdir, parent, name); }

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  FuseState* st = State(req);
  FreshDirAttrs& fresh = st->dir_attrs;
  fresh.ChangingAll();
  const FreshDirAttrs::Stamp from_stamp = fresh.Current(parent), to_stamp = fresh.Current(newparent);
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name).Put<uint64_t>(newparent).PutBytes(newname).Put<uint32_t>(flags);
  auto r = Call(req, FsMethod::kRename, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  Decoder d(*r);
  uint8_t has = 0;
  // The moved inode's attributes come last; the kernel keeps its own times for it and sends
  // them (its ctime included) with the SETATTR that follows, which the runtime stores.
  InodeAttr from, to, moved;
  if (d.Get(&has) && has == 1 && DecodeAttr(&d, &from) && DecodeAttr(&d, &to) &&
      DecodeAttr(&d, &moved) && d.Finish("rename").ok()) {
    if (from.ino == parent) fresh.Put(parent, from, from_stamp);
    if (to.ino == newparent && newparent != parent) fresh.Put(newparent, to, to_stamp);
    if (moved.ino != 0) st->nodes.Renamed(moved.ino, newparent, newname);
  }
  fuse_reply_err(req, 0);
}

// Undoes an open whose reply the kernel refused. Takes the state, not the request: a reply,
// refused or not, frees the request.
void ReleaseQuietly(FuseState* s, uint64_t ino) {
  Encoder e;
  e.Put<uint64_t>(ino);
  (void)Call(s, FsMethod::kRelease, e);
}

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  OpenChange change(&State(req)->nodes);  // the runtime counts the create as an open
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const FreshDirAttrs::Stamp stamp = State(req)->dir_attrs.Changing(parent);
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name).Put<uint32_t>(mode & ~ctx->umask & 07777)
      .Put<uint32_t>(ctx->uid).Put<uint32_t>(ctx->gid);
  auto r = Call(req, FsMethod::kCreate, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  InodeAttr a, dir;
  Decoder d(*r);
  if (!DecodeAttr(&d, &a) || !DecodeAttr(&d, &dir) || !d.Finish("create").ok()) {
    ReleaseQuietly(State(req), a.ino);
    return (void)fuse_reply_err(req, EIO);
  }
  State(req)->dir_attrs.Put(parent, dir, stamp);
  fuse_entry_param ent = ToEntry(req, a);
  fi->keep_cache = 1;
  // A new file has no attributes (an inherited default ACL arrives by setxattr, through us).
  {
    AbsentXattrCache& c = State(req)->absent_xattrs;
    c.MarkAbsent(a.ino, AbsentXattrCache::kAll, c.epoch());
    KnownCleanFiles& k = State(req)->clean_files;
    k.MarkClean(a.ino, k.epoch());  // nothing written yet
  }
  // Counted before the reply (the kernel may RELEASE or FORGET it at once). If the caller was
  // interrupted the kernel never sends release: undo the open and the counts here.
  FuseState* st = State(req);
  st->nodes.Looked(parent, name, a.ino);
  st->nodes.Opened(a.ino);
  if (fuse_reply_create(req, &ent, fi) != 0) {
    st->nodes.Released(a.ino);
    st->nodes.Forget(a.ino, 1);
    ReleaseQuietly(st, a.ino);
  }
}

// fuse_file_info::fh of a file opened read-only: its close has no write-back error to report.
constexpr uint64_t kReadOnlyHandle = 1;

void OpOpen(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  OpenChange change(&State(req)->nodes);
  if (fi->flags & O_TRUNC) State(req)->clean_files.Changing(ino);
  Encoder e;
  e.Put<uint64_t>(ino).Put<uint32_t>(static_cast<uint32_t>(fi->flags));
  auto r = Call(req, FsMethod::kOpen, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  fi->fh = (fi->flags & O_ACCMODE) == O_RDONLY ? kReadOnlyHandle : 0;
  fi->keep_cache = 1;  // this mount is the only writer of its files
  FuseState* st = State(req);
  st->nodes.Opened(ino);  // before the reply: its RELEASE may come at once
  if (fuse_reply_open(req, fi) != 0) {
    st->nodes.Released(ino);
    ReleaseQuietly(st, ino);
  }
}

void OpRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Encoder e;
  e.Put<uint64_t>(ino).Put<uint64_t>(static_cast<uint64_t>(off)).Put<uint32_t>(static_cast<uint32_t>(size));
  auto r = Call(req, FsMethod::kRead, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  fuse_reply_buf(req, r->data(), r->size());
}

void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info*) {
  State(req)->clean_files.Changing(ino);
  Encoder e;
  e.Put<uint64_t>(ino).Put<uint64_t>(static_cast<uint64_t>(off)).PutBytes(std::string_view(buf, size));
  if (State(req)->kernel_times.load(std::memory_order_relaxed)) e.Put<uint8_t>(kWriteKernelTimes);
  auto r = Call(req, FsMethod::kWrite, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  Decoder d(*r);
  uint32_t written = 0;
  if (!d.Get(&written) || written > size) return (void)fuse_reply_err(req, EIO);
  fuse_reply_write(req, written);  // fewer than asked: a tier filled up part-way
}

void InoCall(fuse_req_t req, FsMethod m, fuse_ino_t ino) {
  Encoder e;
  e.Put<uint64_t>(ino);
  ReplyStatus(req, Call(req, m, e));
}
// A close. A failed write-back (flush to a persistent tier) of the file is reported once, to
// the next close of a descriptor open for writing or fsync: the close of a read-only one does
// not ask, so it neither reports an error about writes it did not make nor takes the report
// away from the writer.
void OpFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  KnownCleanFiles& known = State(req)->clean_files;
  if (fi->fh == kReadOnlyHandle || known.Has(ino)) return (void)fuse_reply_err(req, 0);
  const uint64_t epoch = known.epoch();
  Encoder e;
  e.Put<uint64_t>(ino);
  auto r = Call(req, FsMethod::kFlush, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  Decoder d(*r);
  uint8_t clean = 0;
  if (d.Get(&clean) && d.Finish("flush").ok() && clean == 1) known.MarkClean(ino, epoch);
  fuse_reply_err(req, 0);
}
void OpRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  NodeTable& nodes = State(req)->nodes;  // the reply frees req
  OpenChange change(&nodes);
  InoCall(req, FsMethod::kRelease, ino);
  nodes.Released(ino);  // the kernel is done with it whatever the runtime said
}
void OpFsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) { InoCall(req, FsMethod::kFsync, ino); }
// Directory entries are metadata; fsync of a directory commits the metadata.
void OpFsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) { InoCall(req, FsMethod::kFsync, ino); }

// An open directory reads the runtime's listing a page at a time, as the kernel asks for it,
// so a directory of a million entries is neither read whole at opendir nor held in memory.
// Offsets are positions in the handle's stream: 0 ".", 1 "..", 2 + k the k-th entry. A page
// is the entries after a cursor (a name) in name order, so an entry that stays in the
// directory is listed exactly once however others come and go (what POSIX asks of readdir).
// The cursor of every page read is kept (one name per page): a seekdir back to an offset
// read before reads its page again (by position: exact unless that page changed since), and
// a rewinddir (offset 0) lists the directory as it is now.
//
// Readdirplus hands the kernel a dentry and attributes with each entry, which it takes as
// current: from a page read before a change made through this mount, it would bring back a
// name since removed or renamed away (as a positive dentry, for the entry timeout) or an old
// mode. So a readdirplus reply that would start in a page read before the latest change (or
// while one was in flight) reads the directory again after the name listed just before: a
// short page of its own, with its own mark. Checking at the start of a reply is enough: the
// kernel holds the directory's lock across a readdir, which keeps changes to its entries out
// until the reply is in, and it drops any attributes that a change made after the request
// went out would have replaced.
struct DirHandle {
  struct Mark {
    uint64_t start;     // the stream position of the page's first entry
    std::string after;  // the page is the entries after this name ("" : from the first)
  };
  // Held across the runtime call: it only orders readdirs of one open directory, which the
  // kernel already serializes (f_pos_lock), so nothing ever waits on it.
  Mutex mu;
  std::vector<Mark> marks GUARDED_BY(mu) = {Mark{0, ""}};
  std::vector<DirEntry> page GUARDED_BY(mu);
  uint64_t page_start GUARDED_BY(mu) = 0;
  // FuseState::changes before `page` was read, when no change was in flight then (else
  // kStalePage: a change may have landed after the read without being counted after it).
  static constexpr uint64_t kStalePage = UINT64_MAX;
  uint64_t page_changes GUARDED_BY(mu) = 0;
  bool loaded GUARDED_BY(mu) = false;
  bool last GUARDED_BY(mu) = false;  // `page` ends the directory

  // Whether the page read last holds stream position pos.
  bool Holds(uint64_t pos) const REQUIRES(mu) {
    return loaded && pos >= page_start && pos - page_start < page.size();
  }
};

// Reads the page (at most `count` entries) that starts at marks[i]; the marks after it are
// forgotten (the directory may have changed since) and the next page's mark is taken from
// this one.
Status FetchDirPage(fuse_req_t req, fuse_ino_t ino, DirHandle* h, size_t i, uint32_t count = kReadDirPage)
    REQUIRES(h->mu) {
  Encoder e;
  e.Put<uint64_t>(ino).PutBytes(h->marks[i].after).Put<uint32_t>(count);
  // Answered changes first: equal counts mean none was in flight, so every change the read
  // might miss is counted after `changes`.
  const uint64_t done = State(req)->changes_done.load();
  const uint64_t started = State(req)->changes.load();
  const uint64_t changes = done == started ? started : DirHandle::kStalePage;
  auto r = Call(req, FsMethod::kReadDir, e);
  std::vector<DirEntry> page;
  if (r.ok()) {
    Decoder d(*r);
    uint32_t n = 0;
    d.Get(&n);
    for (uint32_t k = 0; k < n && !d.failed(); ++k) {
      DirEntry ent;
      d.GetString(&ent.name);
      DecodeAttr(&d, &ent.attr);
      page.push_back(std::move(ent));
    }
    CLIO_RETURN_IF_ERROR(d.Finish("readdir"));
  } else if (r.status().code() != Code::kNotFound && r.status().code() != Code::kStale) {
    return r.status();
  }  // NotFound, Stale: the directory is gone (removed while open), so it lists as empty
  h->marks.resize(i + 1);
  h->page = std::move(page);
  h->page_start = h->marks[i].start;
  h->page_changes = changes;
  h->loaded = true;
  h->last = h->page.size() < count;
  if (!h->last) h->marks.push_back({h->page_start + h->page.size(), h->page.back().name});
  return Status::Ok();
}

// The entry at stream position `pos`, reading pages as needed; nullptr past the end.
Result<const DirEntry*> DirEntryAt(fuse_req_t req, fuse_ino_t ino, DirHandle* h, uint64_t pos) REQUIRES(h->mu) {
  while (true) {
    if (h->Holds(pos)) return &h->page[pos - h->page_start];
    if (h->loaded && h->last && pos >= h->page_start) return nullptr;
    // The last page that starts at or before pos; always one (marks[0] starts at 0), and each
    // read either ends the directory or adds a mark past the page it read.
    size_t i = h->marks.size() - 1;
    while (h->marks[i].start > pos) --i;
    CLIO_RETURN_IF_ERROR(FetchDirPage(req, ino, h, i));
  }
}

// Reads the directory again from stream position `pos`, which the page read last holds: from
// that page's own cursor when pos is its first entry, else after the entry just before pos.
// Positions before pos keep the marks they had, so a seekdir back to them reads as before.
Status RereadDirFrom(fuse_req_t req, fuse_ino_t ino, DirHandle* h, uint64_t pos) REQUIRES(h->mu) {
  size_t i = h->marks.size() - 1;
  while (h->marks[i].start > h->page_start) --i;  // the mark the page was read from
  if (pos > h->page_start) {
    std::string after = h->page[pos - h->page_start - 1].name;
    h->marks.resize(i + 1);
    h->marks.push_back({pos, std::move(after)});
    ++i;
  }
  return FetchDirPage(req, ino, h, i, kReReadDirPage);
}

void OpOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  // Counted like a file open, so an rmdir while open keeps the inode until releasedir.
  OpenChange change(&State(req)->nodes);
  Encoder open;
  open.Put<uint64_t>(ino).Put<uint32_t>(0);
  auto o = Call(req, FsMethod::kOpen, open);
  if (!o.ok()) return ReplyErr(req, o.status());
  auto h = std::make_unique<DirHandle>();
  fi->fh = reinterpret_cast<uint64_t>(h.get());
  FuseState* st = State(req);
  st->nodes.Opened(ino);  // before the reply: its RELEASEDIR may come at once
  if (fuse_reply_open(req, fi) == 0) {
    (void)h.release();
  } else {
    st->nodes.Released(ino);
    ReleaseQuietly(st, ino);  // interrupted: no releasedir will come
  }
}

void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi, bool plus) {
  auto* h = reinterpret_cast<DirHandle*>(fi->fh);
  std::string buf(size, '\0');
  size_t used = 0;
  // Readdirplus entries with a node: the kernel takes a lookup of each once the reply is in.
  std::vector<std::pair<std::string, uint64_t>> handed;
  {
    MutexLock l(&h->mu);
    if (off == 0) h->loaded = false;  // the start (or a rewinddir): the directory as it is now
    const uint64_t first = off >= 2 ? static_cast<uint64_t>(off) - 2 : 0;  // the first entry asked
    if (plus && off > 0 && h->Holds(first) && h->page_changes != State(req)->changes.load()) {
      Status s = RereadDirFrom(req, ino, h, first);
      if (!s.ok()) return ReplyErr(req, s);
    }
    // Each entry carries the next offset.
    for (uint64_t i = static_cast<uint64_t>(std::max<off_t>(off, 0));; ++i) {
      const char* name;
      InodeAttr a;
      if (i < 2) {
        name = i == 0 ? "." : "..";
        a.ino = ino;  // for "..", the kernel resolves it itself
        a.mode = S_IFDIR;
      } else {
        // A reply ends where the page it began in ends: the kernel may use only part of it
        // (the caller's buffer is full, a signal) and ask next for an offset inside that
        // page, which must still be the page it listed, not one read again after a change.
        if (used > 0 && h->loaded && !h->Holds(i - 2)) break;
        auto ent = DirEntryAt(req, ino, h, i - 2);
        if (!ent.ok()) {
          if (used > 0) break;  // what was gathered goes out; the next call meets the error again
          return ReplyErr(req, ent.status());
        }
        if (*ent == nullptr) break;
        name = (*ent)->name.c_str();
        a = (*ent)->attr;
      }
      size_t n;
      if (plus && i >= 2) {
        fuse_entry_param e = ToEntry(req, a);
        n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e, static_cast<off_t>(i + 1));
      } else if (plus) {
        fuse_entry_param e{};
        e.attr.st_ino = a.ino;
        e.attr.st_mode = a.mode;
        n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e, static_cast<off_t>(i + 1));
      } else {
        struct stat st {};
        st.st_ino = a.ino;
        st.st_mode = a.mode;
        n = fuse_add_direntry(req, buf.data() + used, size - used, name, &st, static_cast<off_t>(i + 1));
      }
      if (n > size - used) break;
      used += n;
      if (plus && i >= 2 && a.ino != 0) handed.emplace_back(name, a.ino);
    }
  }
  NodeTable& nodes = State(req)->nodes;
  for (const auto& [name, child] : handed) nodes.Looked(ino, name, child);  // before the reply, as entries
  if (fuse_reply_buf(req, buf.data(), used) != 0)
    for (const auto& [name, child] : handed) nodes.Forget(child, 1);
}

void OpReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, false);
}
void OpReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, true);
}
void OpReleasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  delete reinterpret_cast<DirHandle*>(fi->fh);
  NodeTable& nodes = State(req)->nodes;  // the reply frees req
  OpenChange change(&nodes);
  InoCall(req, FsMethod::kRelease, ino);
  nodes.Released(ino);
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  State(req)->dir_attrs.Changing(newparent);
  State(req)->dir_attrs.Changing(ino);
  Encoder e;
  e.Put<uint64_t>(ino).Put<uint64_t>(newparent).PutBytes(newname);
  ReplyEntry(req, newparent, newname, Call(req, FsMethod::kLink, e));
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  State(req)->dir_attrs.Changing(parent);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Encoder e;
  e.Put<uint64_t>(parent).PutBytes(name).Put<uint32_t>((mode & S_IFMT) | (mode & ~ctx->umask & 07777))
      .Put<uint64_t>(rdev).Put<uint32_t>(ctx->uid).Put<uint32_t>(ctx->gid);
  ReplyEntry(req, parent, name, Call(req, FsMethod::kMknod, e));
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  State(req)->dir_attrs.Changing(ino);
  if (uint8_t bit = AbsentXattrCache::Bit(name)) State(req)->absent_xattrs.Changing(ino, bit);
  Encoder e;
  e.Put<uint64_t>(ino).PutBytes(name).PutBytes(std::string_view(value, size)).Put<uint32_t>(static_cast<uint32_t>(flags));
  ReplyStatus(req, Call(req, FsMethod::kSetXattr, e));
}

// getxattr/listxattr: size 0 asks for the length; a buffer too small is ERANGE.
void ReplyXattr(fuse_req_t req, const Result<std::string>& r, size_t size) {
  if (!r.ok()) return ReplyErr(req, r.status());
  if (size == 0) return (void)fuse_reply_xattr(req, r->size());
  if (r->size() > size) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, r->data(), r->size());
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  AbsentXattrCache& cache = State(req)->absent_xattrs;
  const uint8_t bit = AbsentXattrCache::Bit(name);
  if (bit != 0 && cache.Absent(ino, bit)) return (void)fuse_reply_err(req, ENODATA);
  const uint64_t epoch = cache.epoch();
  Encoder e;
  e.Put<uint64_t>(ino).PutBytes(name);
  auto r = Call(req, FsMethod::kGetXattr, e);
  if (bit != 0 && r.status().code() == Code::kNoData) cache.MarkAbsent(ino, bit, epoch);
  ReplyXattr(req, r, size);
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  Encoder e;
  e.Put<uint64_t>(ino);
  ReplyXattr(req, Call(req, FsMethod::kListXattr, e), size);
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  State(req)->dir_attrs.Changing(ino);
  if (uint8_t bit = AbsentXattrCache::Bit(name)) State(req)->absent_xattrs.Changing(ino, bit);
  Encoder e;
  e.Put<uint64_t>(ino).PutBytes(name);
  ReplyStatus(req, Call(req, FsMethod::kRemoveXattr, e));
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, fuse_file_info*) {
  if (offset < 0 || length <= 0) return (void)fuse_reply_err(req, EINVAL);
  State(req)->clean_files.Changing(ino);
  Encoder e;
  e.Put<uint64_t>(ino).Put<uint32_t>(static_cast<uint32_t>(mode)).Put<uint64_t>(static_cast<uint64_t>(offset))
      .Put<uint64_t>(static_cast<uint64_t>(length));
  ReplyStatus(req, Call(req, FsMethod::kFallocate, e));
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  Encoder e;
  auto r = Call(req, FsMethod::kStatfs, e);
  if (!r.ok()) return ReplyErr(req, r.status());
  FsStatfs s;
  Decoder d(*r);
  if (!DecodeStatfs(&d, &s)) return (void)fuse_reply_err(req, EIO);
  struct statvfs v {};
  v.f_bsize = v.f_frsize = s.block_size;
  v.f_blocks = s.blocks;
  v.f_bfree = v.f_bavail = s.blocks_free;
  v.f_files = s.files;
  v.f_ffree = v.f_favail = s.files_free;
  v.f_namemax = s.name_max;
  fuse_reply_statfs(req, &v);
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = OpInit;
  ops.lookup = OpLookup;
  ops.forget = OpForget;
  ops.getattr = OpGetattr;
  ops.setattr = OpSetattr;
  ops.readlink = OpReadlink;
  ops.mkdir = OpMkdir;
  ops.unlink = OpUnlink;
  ops.rmdir = OpRmdir;
  ops.symlink = OpSymlink;
  ops.rename = OpRename;
  ops.open = OpOpen;
  ops.read = OpRead;
  ops.write = OpWrite;
  ops.flush = OpFlush;
  ops.release = OpRelease;
  ops.fsync = OpFsync;
  ops.opendir = OpOpendir;
  ops.readdir = OpReaddir;
  ops.readdirplus = OpReaddirplus;
  ops.releasedir = OpReleasedir;
  ops.fsyncdir = OpFsyncdir;
  ops.statfs = OpStatfs;
  ops.create = OpCreate;
  ops.link = OpLink;
  ops.mknod = OpMknod;
  ops.setxattr = OpSetxattr;
  ops.getxattr = OpGetxattr;
  ops.listxattr = OpListxattr;
  ops.removexattr = OpRemovexattr;
  ops.fallocate = OpFallocate;
  // No lseek: with the writeback cache the kernel holds dirty pages the runtime has not
  // seen, so only the kernel's generic SEEK_DATA/SEEK_HOLE (all data, hole at EOF) is right.
  return ops;
}

// The mount on `path` (the last one when several are stacked); nullopt when nothing is
// mounted there or the table cannot be read.
std::optional<MountEntry> TopMount(const std::string& path) {
  auto mounts = ReadMounts();
  if (!mounts.ok()) return std::nullopt;
  std::optional<MountEntry> top;
  for (const MountEntry& m : *mounts)
    if (m.mountpoint == path) top = m;
  return top;
}

bool IsMountPoint(const std::string& path) { return TopMount(path).has_value(); }

// Options mount(8) and fstab pass that mean nothing to FUSE.
bool IsMountOnlyOption(const std::string& key) {
  static const char* kIgnored[] = {"defaults", "auto", "noauto", "user", "nouser", "users",
                                   "_netdev", "nofail", "owner", "group", "comment"};
  for (const char* k : kIgnored)
    if (key == k) return true;
  return key.rfind("x-", 0) == 0 || key.rfind("comment=", 0) == 0;
}

// Runs fusermount3 with `args` (an unprivileged unmount); whether it succeeded.
bool RunFusermount(const char* flags, const std::string& mountpoint) {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::execlp("fusermount3", "fusermount3", flags, "--", mountpoint.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

}  // namespace

Status ApplyMountOptions(const std::string& opts, FuseMountOptions* options) {
  size_t pos = 0;
  while (pos <= opts.size()) {
    size_t comma = opts.find(',', pos);
    std::string o = opts.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? opts.size() + 1 : comma + 1;
    std::string key = o.substr(0, o.find('='));
    std::string val = o.find('=') == std::string::npos ? "" : o.substr(o.find('=') + 1);
    double* target = nullptr;
    if (key == "attr_timeout") target = &options->attr_timeout;
    if (key == "entry_timeout") target = &options->entry_timeout;
    if (key == "negative_timeout") target = &options->negative_timeout;
    if (target) {
      char* end = nullptr;
      *target = std::strtod(val.c_str(), &end);
      if (val.empty() || *end || *target < 0 || *target > 86400)
        return InvalidArgument("bad value in -o " + o + " (seconds, 0 to 86400)");
    } else if (key == "io_uring") {
      CLIO_ASSIGN_OR_RETURN(options->io_uring, ParseFuseUringMode(val));
    } else if (key == "uring_threads") {
      char* end = nullptr;
      const long n = std::strtol(val.c_str(), &end, 10);
      if (val.empty() || *end || n < 1 || n > 64)
        return InvalidArgument("bad value in -o " + o + " (ring threads per CPU, 1 to 64)");
      options->uring_threads = static_cast<int>(n);
    } else if (key == "conf") {
      if (val.empty()) return InvalidArgument("-o conf needs a file");
      options->conf = val;
    } else if (!o.empty() && !IsMountOnlyOption(key)) {
      options->fuse_opts += "," + o;
    }
  }
  return Status::Ok();
}

Result<std::string> CheckMountPoint(const std::string& path) {
  char real[PATH_MAX];
  struct stat st {};
  struct statvfs vfs {};
  // statfs, not stat: the kernel may answer a stat of a FUSE root from its cache, a statfs
  // always asks the file system.
  int probe = ::statvfs(path.c_str(), &vfs);
  // Over io_uring, a request the kernel was handing to a ring whose process died ends with
  // ECANCELED; the next one says ENOTCONN.
  if (probe != 0 && errno == ECANCELED) probe = ::statvfs(path.c_str(), &vfs);
  if (probe != 0 && (errno == ENOTCONN || errno == ECONNABORTED)) {
    // A dead mount: the process serving it died. One of ours (fuse.clio) holds nothing that
    // can still be served, so it is detached and the mount goes ahead (a restart after a
    // crash just works); any other is left to its owner.
    std::string abs = path;
    if (!abs.empty() && abs[0] != '/') {
      char cwd[PATH_MAX];
      if (::getcwd(cwd, sizeof cwd) != nullptr) abs = std::string(cwd) + "/" + abs;
    }
    while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
    std::optional<MountEntry> top = TopMount(abs);
    const bool ours = top && top->fstype == "fuse.clio";
    const bool detached = ours && (::geteuid() == 0 ? ::umount2(abs.c_str(), MNT_DETACH) == 0 : RunFusermount("-uz", abs));
    if (!detached)
      return Status(Code::kBusy, path + " is a dead FUSE mount (the process serving it died): unmount it with "
                                        "fusermount3 -u " + path + " and mount again");
    CLIO_LOG_WARN("{} was a CLIO mount whose process died; detached it", abs);
  }
  if (::stat(path.c_str(), &st) != 0 || !::realpath(path.c_str(), real))
    return NotFound("mount point " + path + " does not exist (create it with mkdir -p " + path + ")");
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("mount point " + path + " is not a directory");
  if (IsMountPoint(real))
    return Status(Code::kBusy, std::string(real) + " is busy: something is already mounted there (unmount it with fusermount3 -u " +
                                   real + ")");
  return std::string(real);
}

// One mount per runtime. Each mount's kernel caches (pages kept across opens, entries, absent
// xattrs, files known clean) are right only while it is the namespace's only writer: a second
// mount would read its own stale pages after the first wrote, and could write them back.
// Mounts of one runtime share its lock file and hold it (flock, so the kernel lets go when the
// process dies, kill -9 included) for as long as they serve. The holder writes its mount point
// into the file for the message of a refused mount. A holder whose mount is already gone (an
// unmount, then a mount again at once) is waited for a few seconds while it exits.
static Result<int> TakeMountLock(const std::string& path, const std::string& mountpoint) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0660);
  if (fd < 0 && errno == EACCES) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "opening the runtime's mount lock " + path);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    std::string holder;
    if (err == EWOULDBLOCK) {
      char buf[PATH_MAX + 1];
      const ssize_t n = ::pread(fd, buf, PATH_MAX, 0);
      holder.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
      holder = holder.substr(0, holder.find('\n'));
      for (char c : holder)
        if (static_cast<unsigned char>(c) < 0x20) holder.clear();  // not a path we wrote
      std::optional<MountEntry> top = holder.empty() ? std::nullopt : TopMount(holder);
      const bool serving = top && top->mountpoint == holder && top->fstype == "fuse.clio";
      if (!serving && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
    }
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "locking the runtime's mount lock " + path);
    const std::string there = holder.empty() ? std::string("elsewhere") : "on " + holder;
    const std::string bind = holder.empty() ? std::string("MOUNTED_PATH") : holder;
    return Status(Code::kBusy, "this runtime's filesystem is already mounted " + there +
                                   ": one mount per runtime keeps every mount's kernel cache right; "
                                   "to see it at " + mountpoint + " too, bind-mount it (mount --bind " + bind +
                                   " " + mountpoint + ")");
  }
  // Not through a read-only descriptor (a user's mount): a refused mount then cannot say where.
  const std::string line = mountpoint + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, line.data(), line.size(), 0);
  return fd;
}

struct FuseMount::Impl {
  FuseState state;
  int lock_fd = -1;  // the runtime's mount lock, held until the session is gone
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  fuse_session* se = nullptr;
  bool signals = false;
  dev_t dev = 0;  // the mount's device: its minor is the connection's number in fusectl
  std::thread loop;
  Mutex mu;
  CondVar ended_cv;
  bool ended GUARDED_BY(mu) = false;
  bool abandoned = false;  // Stop() could not end the loop; its threads still use this
  metrics::SamplerRegistration uring_metrics;

  ~Impl() {
    if (se != nullptr) {
      if (signals) fuse_remove_signal_handlers(se);
      fuse_session_unmount(se);
      fuse_session_destroy(se);
    }
    fuse_opt_free_args(&args);
    ReleaseLock();
  }

  const std::string& mountpoint() const { return state.options.mountpoint; }

  // Lazy unmount, only while the mount there is still this session's (not one made after an
  // unmount from outside). With nothing open the kernel lets go at once, sends DESTROY and
  // ends the connection, which ends the loop; open files keep it until they close.
  void Detach() {
    const std::string& mnt = mountpoint();
    std::optional<MountEntry> now = TopMount(mnt);
    if (!now || now->dev != dev) return;
    if (::geteuid() == 0) {
      if (::umount2(mnt.c_str(), MNT_DETACH) != 0) CLIO_LOG_WARN("unmounting {}: {}", mnt, std::strerror(errno));
    } else if (!RunFusermount("-uz", mnt)) {
      CLIO_LOG_WARN("unmounting {}: fusermount3 -uz failed", mnt);
    }
  }

  // Ends the connection as the kernel does when a FUSE daemon exits: requests waiting and to
  // come fail with ENOTCONN, and the loop's reads with ENODEV. Whether the kernel took it.
  bool Abort() {
    const std::string path = "/sys/fs/fuse/connections/" + std::to_string(minor(dev)) + "/abort";
    auto write_abort = [&] {
      std::ofstream out(path);
      out << "1\n";
      out.flush();
      return out.good();
    };
    if (write_abort()) return true;
    if (::geteuid() != 0) return false;
    // fusectl is not mounted (a container, a minimal system): mount it, as systemd would.
    (void)::mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr);
    return write_abort();
  }

  bool WaitEnded(int ms) {
    MutexLock l(&mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!ended && std::chrono::steady_clock::now() < deadline) {
      ended_cv.WaitFor(&mu, deadline - std::chrono::steady_clock::now());
    }
    return ended;
  }

  int RunLoop(int max_idle_threads) {
    fuse_loop_config lc{};
    lc.clone_fd = 0;
    lc.max_idle_threads = static_cast<unsigned>(max_idle_threads);
    const int rc = fuse_session_loop_mt(se, &lc);
    // The connection ended (or the session was told to exit): the rings have nothing more
    // to serve, and closing them lets the kernel release the connection.
    if (state.uring) state.uring->Stop();
    ReleaseLock();  // nothing is served here any more: another mount may go ahead
    return rc;
  }

  void ReleaseLock() {
    if (lock_fd >= 0) ::close(std::exchange(lock_fd, -1));
  }
};

FuseMount::FuseMount(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FuseMount::~FuseMount() {
  if (impl_->loop.joinable()) (void)Stop(0);
  if (impl_->abandoned) {
    // The loop's threads still run: the session, its state and the calls' gate (closed by
    // Stop) must outlive them; the process is ending.
    (void)impl_.release();
  }
}

Result<std::unique_ptr<FuseMount>> FuseMount::Mount(FuseMountOptions options, FsCaller call) {
  CLIO_ASSIGN_OR_RETURN(std::string real, CheckMountPoint(options.mountpoint));
  auto impl = std::make_unique<Impl>();
  options.mountpoint = real;
  impl->state.options = options;
  impl->state.call = std::move(call);
  const char* argv[] = {"clio-fuse", "-o", options.fuse_opts.c_str(), "-d"};
  for (int i = 0; i < (options.debug ? 4 : 3); ++i) {
    if (fuse_opt_add_arg(&impl->args, argv[i]) != 0) return Internal("out of memory");
  }
  fuse_lowlevel_ops ops = MakeOps();
  impl->se = fuse_session_new(&impl->args, &ops, sizeof ops, &impl->state);
  if (impl->se == nullptr) return InvalidArgument("bad mount options '" + options.fuse_opts + "'");
  if (options.handle_signals) {
    if (fuse_set_signal_handlers(impl->se) != 0) return Internal("cannot install signal handlers");
    impl->signals = true;
  }
  if (options.io_uring == FuseUringMode::kOn) CLIO_RETURN_IF_ERROR(FuseUringAvailable().WithContext("-o io_uring=on"));
  if (!options.mount_lock.empty()) {
    CLIO_ASSIGN_OR_RETURN(impl->lock_fd, TakeMountLock(options.mount_lock, real));
  }
  if (fuse_session_mount(impl->se, real.c_str()) != 0) {
    return IoError("mounting " + real + " failed (see the message above)");
  }
  if (options.io_uring != FuseUringMode::kOff) {
    // Before the loop reads FUSE_INIT, which decides whether the kernel uses the ring.
    fuse_session* se = impl->se;
    const int fd = fuse_session_fd(se);
    impl->state.uring = std::make_unique<FuseUring>(fd, options.io_uring, options.uring_threads,
                                                    [se](const void* request, size_t size) {
                                                      fuse_buf b{};
                                                      b.size = size;
                                                      b.mem = const_cast<void*>(request);
                                                      fuse_session_process_buf(se, &b);
                                                    });
    fuse_custom_io io{};
    io.read = UringRead;
    io.writev = UringWritev;
    if (int rc = fuse_session_custom_io(se, &io, fd); rc != 0) {
      return Internal("cannot take over the FUSE session's I/O (libfuse: " + std::string(std::strerror(-rc)) + ")");
    }
    FuseUring* uring = impl->state.uring.get();
    impl->uring_metrics = metrics::SamplerRegistration([uring] {
      const char* help = "FUSE requests served, by the channel they came through";
      return std::vector<metrics::Sample>{
          {"clio_fuse_requests_total", help, {{"channel", "io_uring"}}, static_cast<double>(uring->ring_requests()),
           metrics::Sample::Kind::kCounter},
          {"clio_fuse_requests_total", help, {{"channel", "dev"}}, static_cast<double>(uring->dev_requests()),
           metrics::Sample::Kind::kCounter}};
    });
  }
  std::optional<MountEntry> mounted = TopMount(real);
  impl->dev = mounted ? mounted->dev : 0;
  return std::unique_ptr<FuseMount>(new FuseMount(std::move(impl)));
}

void FuseMount::Daemonize(bool foreground) { fuse_daemonize(foreground ? 1 : 0); }

int FuseMount::Loop(int max_idle_threads) { return impl_->RunLoop(max_idle_threads); }

void FuseMount::Start(int max_idle_threads) {
  Impl* m = impl_.get();  // not `this`: the thread may outlive the FuseMount (Stop gave up)
  m->loop = std::thread([m, max_idle_threads] {
    int rc = m->RunLoop(max_idle_threads);
    if (rc != 0) {
      // The session failed: leave no mount behind that nobody serves.
      CLIO_LOG_ERROR("the FUSE session on {} ended with {}; detaching the mount", m->mountpoint(), rc);
      m->Detach();
      (void)m->Abort();
    }
    MutexLock l(&m->mu);
    m->ended = true;
    m->ended_cv.NotifyAll();
  });
}

bool FuseMount::Stop(int grace_ms) {
  Impl& m = *impl_;
  if (!m.loop.joinable()) return true;
  const std::string& mnt = m.mountpoint();
  if (!m.WaitEnded(0)) m.Detach();  // ended already: unmounted from outside, leave the path alone
  if (!m.WaitEnded(grace_ms)) {
    CLIO_LOG_WARN("{}: files still open after {} ms; aborting the FUSE connection", mnt, grace_ms);
    if (!m.Abort() || !m.WaitEnded(5000)) {
      CLIO_LOG_ERROR("{}: the FUSE session did not end (is fusectl mounted on /sys/fs/fuse/connections?); "
                     "refusing its requests from now on and leaving it to the process exit", mnt);
      fuse_session_exit(m.se);
      m.state.gate.Close();
      m.loop.detach();
      m.abandoned = true;
      return false;
    }
  }
  m.loop.join();
  return true;
}

const std::string& FuseMount::mountpoint() const { return impl_->mountpoint(); }

Result<FuseMount::Reattached> FuseMount::RuntimeRestarted() {
  FuseState& s = impl_->state;
  std::vector<NodeTable::Node> nodes = s.nodes.Freeze();
  std::vector<bool> exists;
  exists.reserve(nodes.size());
  Status declared;
  // In parts; the last (an empty one when the kernel holds nothing) says it is complete.
  for (size_t first = 0; declared.ok() && (first < nodes.size() || first == 0); first += kMaxReattachNodes) {
    const size_t n = std::min<size_t>(kMaxReattachNodes, nodes.size() - first);
    const bool last = first + n == nodes.size();
    Encoder e;
    e.Put<uint32_t>(static_cast<uint32_t>(n));
    for (size_t i = first; i < first + n; ++i) e.Put<uint64_t>(nodes[i].ino).Put<uint32_t>(nodes[i].opens);
    e.Put<uint8_t>((first == 0 ? kReattachBegin : 0) | (last ? kReattachComplete : 0));
    if (!s.gate.Enter()) {
      declared = Unavailable("the mount is being stopped");
      break;
    }
    Result<std::string> r = s.call(FsMethod::kReattach, e.buffer());
    s.gate.Leave();
    if (!r.ok()) {
      declared = r.status();
      break;
    }
    Decoder d(*r);
    uint32_t count = 0;
    d.Get(&count);
    for (uint32_t i = 0; i < count && !d.failed(); ++i) {
      uint8_t x = 0;
      d.Get(&x);
      exists.push_back(x != 0);
    }
    declared = d.Finish("reattach");
    if (declared.ok() && count != n) declared = Corruption("reattach: the runtime answered for another number of nodes");
    if (last) break;
  }
  s.nodes.Thaw();
  CLIO_RETURN_IF_ERROR(declared.WithContext("declaring the mount's nodes to the restarted runtime"));
  // From here on no lock of this side is held: notifications may wait for requests (a dirty
  // page written back before its page is dropped), which must be free to run.
  s.dir_attrs.ChangingAll();
  s.clean_files.Clear();
  s.absent_xattrs.Clear();
  s.deleted.Clear();
  Reattached out;
  out.nodes = nodes.size();
  fuse_session* se = impl_->se;
  std::vector<const NodeTable::Node*> gone;
  for (size_t i = 0; i < nodes.size(); ++i) {
    out.opens += nodes[i].opens;
    if (!exists[i]) gone.push_back(&nodes[i]);
  }
  out.gone = gone.size();
  // The names of the nodes that are gone: children before their directories (a directory
  // with entries in the kernel's cache is not dropped), newest numbers first, and once more
  // for what a first pass could not drop.
  std::sort(gone.begin(), gone.end(), [](const auto* a, const auto* b) { return a->ino > b->ino; });
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<const NodeTable::Node*> again;
    for (const NodeTable::Node* n : gone) {
      if (n->parent == 0) continue;
      if (fuse_lowlevel_notify_delete(se, n->parent, n->ino, n->name.data(), n->name.size()) == -ENOTEMPTY)
        again.push_back(n);
    }
    gone.swap(again);
  }
  // Then what the kernel caches of every node: attributes, and pages (dirty ones written
  // back first; to a node that is gone that fails with ESTALE and stores nothing).
  for (const NodeTable::Node& n : nodes) (void)fuse_lowlevel_notify_inval_inode(se, n.ino, 0, 0);
  (void)fuse_lowlevel_notify_inval_inode(se, kRootIno, 0, 0);
  return out;
}

}  // namespace clio
