// The FUSE session's operations (fs/mount/fuse_session.h): each kernel request as a request to
// the namespace pool, with the few answers this side gives by itself from the caches in
// session_state.h, and directory listings read a page at a time.
#define FUSE_USE_VERSION 34

#include <fuse3/fuse_lowlevel.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>  // RENAME_EXCHANGE
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/codec.h"
#include "common/log.h"
#include "common/thread_annotations.h"
#include "fs/mount/session_state.h"
#include "fs/protocol/errno_map.h"
#include "fs/protocol/fs_messages.h"
#include "fs/protocol/fs_protocol.h"

namespace clio::fusemount {
namespace {

constexpr uint32_t kReadDirPage = 1024;
// A listing read again after a change (readdirplus): what a few replies use, not a full page.
constexpr uint32_t kReReadDirPage = 128;

FuseState* State(fuse_req_t req) { return static_cast<FuseState*>(fuse_req_userdata(req)); }

// A request to the namespace pool, and its reply's bytes. Requests that change the namespace
// (kFsMethods) count in FuseState::changes.
template <class Req>
Result<std::string> CallRaw(FuseState* s, const Req& req) {
  if (!s->gate.Enter()) return Unavailable("the mount is being stopped");
  const bool changes = MethodInfo(static_cast<uint32_t>(Req::kMethod)).changes;
  if (changes) s->changes.fetch_add(1);
  Result<std::string> r = s->call(Req::kMethod, fsproto::Encode(req));
  if (changes) s->changes_done.fetch_add(1);
  s->gate.Leave();
  return r;
}
// The same, the reply decoded (one it cannot read is Corruption: EIO).
template <class Req>
Result<typename Req::Reply> Call(FuseState* s, const Req& req) {
  Result<std::string> r = CallRaw(s, req);
  if (!r.ok()) return r.status();
  return fsproto::Decode<typename Req::Reply>(std::move(r).value());
}
template <class Req>
Result<typename Req::Reply> Call(fuse_req_t req, const Req& r) {
  return Call(State(req), r);
}

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

// An entry reply: the kernel takes a lookup of the node when it accepts it. Counted before
// the reply goes out (the kernel may FORGET it before this thread runs again), taken back if
// the kernel refused it.
void ReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name, const Result<fsproto::AttrReply>& r) {
  if (!r.ok()) return ReplyErr(req, r.status());
  const InodeAttr& a = r->attr;
  fuse_entry_param e = ToEntry(req, a);
  NodeTable& nodes = State(req)->nodes;
  nodes.Looked(parent, name, a.ino);
  if (fuse_reply_entry(req, &e) != 0) nodes.Forget(a.ino, 1);
}

void ReplyAttr(fuse_req_t req, const Result<fsproto::AttrReply>& r) {
  if (!r.ok()) return ReplyErr(req, r.status());
  struct stat st = ToStat(r->attr);
  fuse_reply_attr(req, &st, State(req)->options.attr_timeout);
}

template <class Reply>
void ReplyStatus(fuse_req_t req, const Result<Reply>& r) {
  fuse_reply_err(req, r.ok() ? 0 : ToErrno(r.status()));
}

void OpInit(void* userdata, fuse_conn_info* conn) {
  if (conn->capable & FUSE_CAP_WRITEBACK_CACHE) conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  static_cast<FuseState*>(userdata)->kernel_times.store((conn->want & FUSE_CAP_WRITEBACK_CACHE) != 0);
  conn->max_write = 1u << 20;
  conn->max_readahead = 1u << 20;
}

void OpLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  auto r = Call(req, fsproto::Lookup{.parent = parent, .name = name});
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
  ReplyAttr(req, Call(req, fsproto::GetAttr{.ino = ino}));
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
  ReplyAttr(req, Call(req, fsproto::SetAttr{.ino = ino, .attr = r}));
}

void OpReadlink(fuse_req_t req, fuse_ino_t ino) {
  auto r = Call(req, fsproto::Readlink{.ino = ino});
  if (!r.ok()) return ReplyErr(req, r.status());
  fuse_reply_readlink(req, r->bytes.c_str());
}

void OpMkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  State(req)->dir_attrs.Changing(parent);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  ReplyEntry(req, parent, name,
             Call(req, fsproto::Mkdir{.parent = parent, .name = name, .mode = mode & ~ctx->umask & 07777,
                                      .uid = ctx->uid, .gid = ctx->gid}));
}

void OpSymlink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) {
  State(req)->dir_attrs.Changing(parent);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  ReplyEntry(req, parent, name,
             Call(req, fsproto::Symlink{.parent = parent, .name = name, .target = link, .uid = ctx->uid, .gid = ctx->gid}));
}

void OpUnlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  FuseState* st = State(req);
  const FreshDirAttrs::Stamp stamp = st->dir_attrs.Changing(parent);
  auto raw = CallRaw(st, fsproto::Unlink{.parent = parent, .name = name});
  if (!raw.ok()) return ReplyErr(req, raw.status());
  // The name is gone; an answer this side cannot read only costs the caches.
  if (auto r = fsproto::Decode<fsproto::UnlinkReply>(*raw); r.ok()) {
    if (r->gone != 0) st->deleted.Add(r->gone);
    st->dir_attrs.Put(parent, r->dir, stamp);
  }
  fuse_reply_err(req, 0);
}
void OpRmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  State(req)->dir_attrs.ChangingAll();  // the parent, and the removed directory
  ReplyStatus(req, Call(req, fsproto::Rmdir{.parent = parent, .name = name}));
}

void OpRename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent,
              const char* newname, unsigned int flags) {
  FuseState* st = State(req);
  FreshDirAttrs& fresh = st->dir_attrs;
  fresh.ChangingAll();
  const FreshDirAttrs::Stamp from_stamp = fresh.Current(parent), to_stamp = fresh.Current(newparent);
  auto raw = CallRaw(st, fsproto::Rename{.parent = parent, .name = name, .new_parent = newparent,
                                          .new_name = newname, .flags = flags});
  if (!raw.ok()) return ReplyErr(req, raw.status());
  // The moved inode's attributes come last; the kernel keeps its own times for it and sends
  // them (its ctime included) with the SETATTR that follows, which the runtime stores. An
  // answer this side cannot read: the rename happened, only the caches learn nothing.
  auto r = fsproto::Decode<fsproto::RenameReply>(*raw);
  if (r.ok() && r->changed == 1) {
    const InodeAttr &from = r->from, &to = r->to, &moved = r->moved;
    if (from.ino == parent) fresh.Put(parent, from, from_stamp);
    if (to.ino == newparent && newparent != parent) fresh.Put(newparent, to, to_stamp);
    if (flags & RENAME_EXCHANGE)
      st->nodes.Exchanged(parent, name, newparent, newname);
    else if (moved.ino != 0)
      st->nodes.Renamed(moved.ino, newparent, newname);
  }
  fuse_reply_err(req, 0);
}

// Undoes an open whose reply the kernel refused. Takes the state, not the request: a reply,
// refused or not, frees the request.
void ReleaseQuietly(FuseState* s, uint64_t ino) { (void)Call(s, fsproto::Release{.ino = ino}); }

void OpCreate(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  OpenChange change(&State(req)->nodes);  // the runtime counts the create as an open
  const fuse_ctx* ctx = fuse_req_ctx(req);
  const FreshDirAttrs::Stamp stamp = State(req)->dir_attrs.Changing(parent);
  auto raw = CallRaw(State(req), fsproto::Create{.parent = parent, .name = name, .mode = mode & ~ctx->umask & 07777,
                                                 .uid = ctx->uid, .gid = ctx->gid});
  if (!raw.ok()) return ReplyErr(req, raw.status());
  auto r = fsproto::Decode<fsproto::CreateReply>(*raw);
  if (!r.ok()) {
    // Created and counted open, but unreadable: the open is given back if its number is there.
    Decoder d(*raw);
    InodeAttr partial;
    if (DecodeAttr(&d, &partial) && partial.ino != 0) ReleaseQuietly(State(req), partial.ino);
    return (void)fuse_reply_err(req, EIO);
  }
  const InodeAttr& a = r->attr;
  State(req)->dir_attrs.Put(parent, r->dir, stamp);
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
  auto r = Call(req, fsproto::Open{.ino = ino, .flags = static_cast<uint32_t>(fi->flags)});
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
  auto r = Call(req, fsproto::Read{.ino = ino, .offset = static_cast<uint64_t>(off), .len = static_cast<uint32_t>(size)});
  if (!r.ok()) return ReplyErr(req, r.status());
  fuse_reply_buf(req, r->bytes.data(), r->bytes.size());
}

void OpWrite(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info*) {
  State(req)->clean_files.Changing(ino);
  fsproto::Write w{.ino = ino, .offset = static_cast<uint64_t>(off), .data = std::string_view(buf, size), .flags = {}};
  if (State(req)->kernel_times.load(std::memory_order_relaxed)) w.flags.value = kWriteKernelTimes;
  auto r = Call(req, w);
  if (!r.ok()) return ReplyErr(req, r.status());
  if (r->written > size) return (void)fuse_reply_err(req, EIO);
  fuse_reply_write(req, r->written);  // fewer than asked: a tier filled up part-way
}

// A close. A failed write-back (flush to a persistent tier) of the file is reported once, to
// the next close of a descriptor open for writing or fsync: the close of a read-only one does
// not ask, so it neither reports an error about writes it did not make nor takes the report
// away from the writer.
void OpFlush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  KnownCleanFiles& known = State(req)->clean_files;
  if (fi->fh == kReadOnlyHandle || known.Has(ino)) return (void)fuse_reply_err(req, 0);
  const uint64_t epoch = known.epoch();
  auto raw = CallRaw(State(req), fsproto::Flush{.ino = ino});
  if (!raw.ok()) return ReplyErr(req, raw.status());
  if (auto r = fsproto::Decode<fsproto::FlushReply>(*raw); r.ok() && r->clean == 1) known.MarkClean(ino, epoch);
  fuse_reply_err(req, 0);
}
void OpRelease(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  NodeTable& nodes = State(req)->nodes;  // the reply frees req
  OpenChange change(&nodes);
  ReplyStatus(req, Call(req, fsproto::Release{.ino = ino}));
  nodes.Released(ino);  // the kernel is done with it whatever the runtime said
}
void OpFsync(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  ReplyStatus(req, Call(req, fsproto::Fsync{.ino = ino}));
}
// Directory entries are metadata; fsync of a directory commits the metadata.
void OpFsyncdir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  ReplyStatus(req, Call(req, fsproto::Fsync{.ino = ino}));
}

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
  // Answered changes first: equal counts mean none was in flight, so every change the read
  // might miss is counted after `changes`.
  const uint64_t done = State(req)->changes_done.load();
  const uint64_t started = State(req)->changes.load();
  const uint64_t changes = done == started ? started : DirHandle::kStalePage;
  auto r = Call(req, fsproto::ReadDir{.ino = ino, .after = h->marks[i].after, .count = count});
  std::vector<DirEntry> page;
  if (r.ok()) {
    page = std::move(r->entries);
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
  auto o = Call(req, fsproto::Open{.ino = ino, .flags = 0});
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
  Status err;  // answered after the handle's lock is let go, as every reply is
  {
    MutexLock l(&h->mu);
    if (off == 0) h->loaded = false;  // the start (or a rewinddir): the directory as it is now
    const uint64_t first = off >= 2 ? static_cast<uint64_t>(off) - 2 : 0;  // the first entry asked
    if (plus && off > 0 && h->Holds(first) && h->page_changes != State(req)->changes.load()) {
      err = RereadDirFrom(req, ino, h, first);
    }
    // Each entry carries the next offset.
    for (uint64_t i = static_cast<uint64_t>(std::max<off_t>(off, 0)); err.ok(); ++i) {
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
          // What was gathered goes out; the next call meets the error again.
          if (used == 0) err = ent.status();
          break;
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
  if (!err.ok()) return ReplyErr(req, err);
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
  ReplyStatus(req, Call(req, fsproto::Release{.ino = ino}));
  nodes.Released(ino);
}

void OpLink(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) {
  State(req)->dir_attrs.Changing(newparent);
  State(req)->dir_attrs.Changing(ino);
  ReplyEntry(req, newparent, newname, Call(req, fsproto::Link{.ino = ino, .new_parent = newparent, .new_name = newname}));
}

void OpMknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  State(req)->dir_attrs.Changing(parent);
  const fuse_ctx* ctx = fuse_req_ctx(req);
  ReplyEntry(req, parent, name,
             Call(req, fsproto::Mknod{.parent = parent, .name = name,
                                      .mode = static_cast<uint32_t>((mode & S_IFMT) | (mode & ~ctx->umask & 07777)),
                                      .rdev = rdev, .uid = ctx->uid, .gid = ctx->gid}));
}

void OpSetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  State(req)->dir_attrs.Changing(ino);
  if (uint8_t bit = AbsentXattrCache::Bit(name)) State(req)->absent_xattrs.Changing(ino, bit);
  ReplyStatus(req, Call(req, fsproto::SetXattr{.ino = ino, .name = name, .value = std::string_view(value, size),
                                               .flags = static_cast<uint32_t>(flags)}));
}

// getxattr/listxattr: size 0 asks for the length; a buffer too small is ERANGE.
void ReplyXattr(fuse_req_t req, const Result<fsproto::Raw>& r, size_t size) {
  if (!r.ok()) return ReplyErr(req, r.status());
  const std::string& v = r->bytes;
  if (size == 0) return (void)fuse_reply_xattr(req, v.size());
  if (v.size() > size) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, v.data(), v.size());
}

void OpGetxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  AbsentXattrCache& cache = State(req)->absent_xattrs;
  const uint8_t bit = AbsentXattrCache::Bit(name);
  if (bit != 0 && cache.Absent(ino, bit)) return (void)fuse_reply_err(req, ENODATA);
  const uint64_t epoch = cache.epoch();
  auto r = Call(req, fsproto::GetXattr{.ino = ino, .name = name});
  if (bit != 0 && r.status().code() == Code::kNoData) cache.MarkAbsent(ino, bit, epoch);
  ReplyXattr(req, r, size);
}

void OpListxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  ReplyXattr(req, Call(req, fsproto::ListXattr{.ino = ino}), size);
}

void OpRemovexattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  State(req)->dir_attrs.Changing(ino);
  if (uint8_t bit = AbsentXattrCache::Bit(name)) State(req)->absent_xattrs.Changing(ino, bit);
  ReplyStatus(req, Call(req, fsproto::RemoveXattr{.ino = ino, .name = name}));
}

void OpFallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, fuse_file_info*) {
  if (offset < 0 || length <= 0) return (void)fuse_reply_err(req, EINVAL);
  State(req)->clean_files.Changing(ino);
  ReplyStatus(req, Call(req, fsproto::Fallocate{.ino = ino, .mode = static_cast<uint32_t>(mode),
                                                .offset = static_cast<uint64_t>(offset),
                                                .length = static_cast<uint64_t>(length)}));
}

void OpStatfs(fuse_req_t req, fuse_ino_t) {
  auto r = Call(req, fsproto::Statfs{});
  if (!r.ok()) return ReplyErr(req, r.status());
  const FsStatfs& s = r->statfs;
  struct statvfs v {};
  v.f_bsize = v.f_frsize = s.block_size;
  v.f_blocks = s.blocks;
  v.f_bfree = v.f_bavail = s.blocks_free;
  v.f_files = s.files;
  v.f_ffree = v.f_favail = s.files_free;
  v.f_namemax = s.name_max;
  fuse_reply_statfs(req, &v);
}

}  // namespace

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

}  // namespace clio::fusemount
