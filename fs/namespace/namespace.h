// The filesystem namespace: inodes with stable 64-bit ids, directory entries and attributes in
// the metadata store, and file data as CTE blobs (tag = inode, blob = chunk index).
//
// Keys (docs/namespace.md): "i/"+be64(ino) inode, "d/"+be64(parent)+name entry,
// "o/"+be64(ino) orphan (unlinked while open), "m/ino_hwm" (inode numbers reserved).
// Every operation is one atomic metadata batch, durable at the next group commit or Fsync.
//
// Inode numbers are never handed out twice, across any crash: they come from batches reserved
// durably (a synced high-water mark) before the first of them is used, so a kernel that still
// holds a node id from before a crash never meets it again on another file. An operation on an
// inode number the namespace does not have is Stale (ESTALE), never another file's.
//
// Thread safety: all methods may be called concurrently. Metadata changes are serialized by
// mu_; file data moves outside it (the CTE locks per blob), and a write that changes no inode
// field (an overwrite of stored bytes, the kernel keeping the times) takes no lock at all.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "fs/protocol/fs_protocol.h"
#include "placement/blob_index.h"

namespace clio {

class Cte;
class KvBatch;
class KvStore;
struct StartTag;

// Largest file size and offset (well inside off_t).
inline constexpr uint64_t kMaxFileSize = (1ull << 62);

struct NamespaceOptions {
  uint64_t chunk_size = 1u << 20;  // a power of two, at least 4 KiB
  // For this many seconds after start (or until the mount reattaches: Reattach with
  // `complete`) orphans (files and directories unlinked while open) are kept for clients that
  // held them open across the restart and re-declare their opens, and an unlink of a last
  // name keeps the data as an orphan too (its holder may not have re-declared yet). Then the
  // unclaimed ones are removed. 0: orphans go at start.
  uint32_t orphan_reclaim_s = 30;
  // Inode numbers reserved by one synced commit (tests use small batches to cross them).
  uint64_t inode_batch = 1u << 16;
};

class Namespace {
 public:
  // Creates the root directory on first use, reserves a new batch of inode numbers past every
  // number an earlier run may have handed out, removes blobs of inodes that do not exist, and
  // keeps orphans left by an earlier run for the reclaim window (removes them at once when it
  // is 0). A damaged or foreign high-water mark is repaired from the inodes, logged.
  static Result<std::unique_ptr<Namespace>> Open(KvStore* kv, Cte* cte, const NamespaceOptions& options);
  ~Namespace();

  Result<InodeAttr> Lookup(uint64_t parent, std::string_view name);
  Result<InodeAttr> GetAttr(uint64_t ino);
  Result<InodeAttr> SetAttr(uint64_t ino, const SetAttrRequest& req);
  // Creates a regular file and opens it (Release() closes it). `parent_attr` (when given)
  // receives the directory's attributes as this change left them.
  Result<InodeAttr> Create(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                           uint32_t gid, InodeAttr* parent_attr = nullptr);
  Result<InodeAttr> Mkdir(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid, uint32_t gid);
  Result<InodeAttr> Symlink(uint64_t parent, std::string_view name, std::string_view target,
                            uint32_t uid, uint32_t gid);
  Result<std::string> Readlink(uint64_t ino);
  // Regular files, FIFOs, sockets and device nodes (mode carries the type).
  Result<InodeAttr> Mknod(uint64_t parent, std::string_view name, uint32_t mode, uint64_t rdev,
                          uint32_t uid, uint32_t gid);
  // A new name for a non-directory inode; NotPermitted for directories.
  Result<InodeAttr> Link(uint64_t ino, uint64_t new_parent, std::string_view new_name);
  // Removes a name of a non-directory. `deleted_ino` (when given) is set to the inode's number
  // when that was its last name and no one has it open (the inode is gone), else 0;
  // `parent_attr` (when given) receives the directory's attributes as this change left them.
  Status Unlink(uint64_t parent, std::string_view name, uint64_t* deleted_ino = nullptr,
                InodeAttr* parent_attr = nullptr);
  Status Rmdir(uint64_t parent, std::string_view name);
  // flags: RENAME_NOREPLACE, RENAME_EXCHANGE (atomically swaps two existing names). When a
  // plain rename changed the directories, `dirs` (when given) receives their attributes as it
  // left them: source, then target (ino 0: not filled); `moved` (when given) the attributes
  // of the inode that moved, as the rename left them (ino 0: not filled).
  Status Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                std::string_view new_name, uint32_t flags,
                std::pair<InodeAttr, InodeAttr>* dirs = nullptr, InodeAttr* moved = nullptr);
  // Entries after `start_after` in name order, at most `limit` (0 = all).
  Result<std::vector<DirEntry>> ReadDir(uint64_t ino, std::string_view start_after, uint32_t limit);

  // Counts an open of a file or directory (names removed while open keep the inode until the
  // last Release). `truncate`: open(O_TRUNC), the size becomes 0 first.
  Status Open(uint64_t ino, bool truncate = false);
  Status Release(uint64_t ino);
  Result<std::string> Read(uint64_t ino, uint64_t offset, uint32_t len);
  // Returns the bytes stored: fewer than asked when a tier filled up part-way (a short write).
  // `touch_times`: set mtime and ctime to now (false: the caller's kernel keeps them).
  Result<uint64_t> Write(uint64_t ino, uint64_t offset, std::string_view data, bool touch_times = true);
  // Data on a persistent tier and metadata durable.
  Status Fsync(uint64_t ino);
  // Reports a background flush failure of this file (close()).
  // close(): a pending write-back error of the file. `clean` (when given) is set when the file
  // has no bytes left to flush, so no later error can arise from what was written so far.
  Status Flush(uint64_t ino, bool* clean = nullptr);
  FsStatfs Statfs();

  // Extended attributes (ns_xattr.cc). flags: XATTR_CREATE, XATTR_REPLACE.
  Status SetXattr(uint64_t ino, std::string_view name, std::string_view value, uint32_t flags);
  Result<std::string> GetXattr(uint64_t ino, std::string_view name);  // NoData when absent
  Result<std::string> ListXattr(uint64_t ino);  // names, each followed by a NUL
  Status RemoveXattr(uint64_t ino, std::string_view name);

  // mode 0 (extend the size), FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | KEEP_SIZE. The first
  // two keep room on the persistent tiers for the range (Cte::KeepRoom: later writes to it,
  // and overwrites, never meet ENOSPC; NoSpace when the room is not there), recorded in the
  // metadata (durable at the next commit, kept again at start); PUNCH_HOLE lets the room of
  // the range go, and so do a truncation below it and the file's removal.
  Status Fallocate(uint64_t ino, uint32_t mode, uint64_t offset, uint64_t len);
  // Attributes as a client sees them: a regular file's `stored` (st_blocks) also counts the
  // room fallocate keeps for bytes not written yet.
  void ForClient(InodeAttr* a) EXCLUDES(mu_);

  // The chunks of a regular file and where their copies are (IsDirectory / InvalidArgument for
  // anything else). A snapshot: the copies may move right after.
  Result<FileLocation> Locate(uint64_t ino);


  uint64_t chunk_size() const { return chunk_size_; }

  // A random number of this Open: a client that reconnects compares it to tell a restart.
  uint64_t incarnation() const { return incarnation_; }
  // Inode numbers below this one may have been handed out (by this run or an earlier one).
  uint64_t inode_high_water() EXCLUDES(mu_);

  // The mount (at its start, and after a runtime restart) declares the nodes its kernel holds
  // and its opens on each, in one or more parts: the mount declares every open it holds, with
  // none in flight, and there is one mount per runtime. `begin` (the first part) drops every
  // open count first (those of a mount that went away with its opens); each claim then sets
  // its node's count, so an orphan it holds outlives the reclaim window and its last close
  // removes it. `complete` (the last part) ends the reclaim window: unclaimed orphans go.
  // Returns, per claim, whether the node exists here.
  Result<std::vector<bool>> Reattach(const std::vector<NodeClaim>& claims, bool begin, bool complete)
      EXCLUDES(mu_);
  // Whether orphans found at start are still kept for their holders to reclaim.
  bool reclaiming() EXCLUDES(mu_);
  // Ends the reclaim window now (its thread does at orphan_reclaim_s): removes the data of
  // every orphan nobody has open; from then on a last close or unlink removes one at once.
  Status EndReclaimWindow() EXCLUDES(mu_);

  // Request records (docs/namespace.md): while a RequestRecord lives on a thread, the first
  // batch the namespace commits on that thread also records the request (client, id), in the
  // same atomic batch as the request's effect. A resend after a broken connection (a runtime
  // restart) asks RequestRan() and, when it ran, is answered without running again. Each
  // client keeps its last kRequestSlots records; records older than an hour go at start.
  class RequestRecord {
   public:
    RequestRecord(uint32_t client, uint64_t request_id, uint32_t method);
    ~RequestRecord();
    RequestRecord(const RequestRecord&) = delete;
    RequestRecord& operator=(const RequestRecord&) = delete;

    const uint32_t client;
    const uint64_t request_id;
    const uint32_t method;
    bool recorded = false;  // set by the commit that carried it
  };
  static constexpr uint64_t kRequestSlots = 1024;
  Result<bool> RequestRan(uint32_t client, uint64_t request_id);

 private:
  // kv_->Apply(b), with the thread's pending request record added to the first batch.
  Status Commit(KvBatch b);
  // Drops request records older than an hour (at Open).
  Status ExpireRequestRecords();
  Namespace(KvStore* kv, Cte* cte, const NamespaceOptions& o);
  // At Open: the next inode number and a newly reserved, synced high-water mark past every
  // number handed out before; blobs of tags with no inode are removed.
  Status RecoverInodes() REQUIRES(mu_);
  // The inode mark as stored (m/ino_hwm, or a format-3 m/next_ino plus a margin); a damaged
  // one is logged and not trusted.
  struct StoredMark {
    uint64_t mark = 0;
    bool trusted = false;   // decoded and in range
    bool present = false;   // either key exists
    bool from_hwm = false;  // the key was m/ino_hwm
  };
  Result<StoredMark> LoadInodeMark();
  // What RecoverInodes repaired, for its log lines.
  struct StartRepairs {
    uint64_t clipped = 0;     // files whose blobs held bytes past their size
    uint64_t shrunk = 0;      // files whose size covered bytes a crash lost
    uint64_t lost = 0;        // files that lost unsynced bytes (shrunk or not)
    uint64_t recounted = 0;   // files whose stored-byte count disagreed with the index
  };
  // At Open, for one inode record: its size and stored count against what the blob index
  // holds of it (`st`, null for none). Bytes past the size are clipped (a write whose size
  // update was lost); a size whose end a crash lost goes back to its size at the last durable
  // point (a state the file had; data and size never disagree, as after ext4's ordered
  // mode); the stored count is set from the index. `last_run`: the run that crashed, whose
  // durable-size records count. Repairs go into `b`.
  Status ReconcileFile(uint64_t ino, std::string_view value, const StartTag* st, uint64_t last_run, KvBatch* b,
                       StartRepairs* r) REQUIRES(mu_);
  // A change of a file's size from `old_size` to `new_size` going into `b`: the first in this
  // run records the size it had at the run's start or its last fsync (ns::DurableSizeKey);
  // one below the record lowers it.
  Status NoteSizeChange(uint64_t ino, uint64_t old_size, uint64_t new_size, KvBatch* b) REQUIRES(mu_);
  void NotedDurable(uint64_t ino) REQUIRES(mu_);
  // Reserves the next batch of inode numbers durably (a synced commit) once the last is used.
  Status ReserveInodes() REQUIRES(mu_);
  // Finishes truncations a stop or crash interrupted.
  Status FinishPendingTruncations();
  // Ends the reclaim window after orphan_reclaim_s (a thread of its own).
  void ReclaimerLoop();
  // Removes a file nobody holds: its inode, orphan, truncate, xattr and kept-room keys first
  // (from then on the number is Stale), then its blobs (a crash in between leaves blobs of a
  // number with no inode, which the next start removes).
  Status DeleteFileData(uint64_t ino) EXCLUDES(mu_);
  // The key half of DeleteFileData, committed; the room fallocate kept is let go.
  Status DeleteFileKeys(uint64_t ino) REQUIRES(mu_);
  // Room kept by fallocate: sets the CTE's kept room of every chunk that `before` or `after`
  // touches to what `after` covers of it; on NoSpace puts back what it changed.
  Status KeepRanges(uint64_t ino, const RangeSet& before, const RangeSet& after) REQUIRES(mu_);
  // The ranges kept for `ino`, and their record in `b` (deleted when empty).
  RangeSet KeptOf(uint64_t ino) REQUIRES(mu_);
  void SetKept(uint64_t ino, RangeSet r, KvBatch* b) REQUIRES(mu_);
  // At Open: the room recorded under r/ is kept again.
  Status RestoreKept() REQUIRES(mu_);
  Status FinishTruncate(uint64_t ino, uint64_t size);
  Result<InodeAttr> LoadInode(uint64_t ino);
  Result<InodeAttr> LoadDir(uint64_t ino);
  Result<std::pair<uint64_t, uint32_t>> LoadDentry(uint64_t parent, std::string_view name);
  Result<InodeAttr> MakeNode(uint64_t parent, std::string_view name, uint32_t mode, uint32_t uid,
                             uint32_t gid, std::string_view symlink_target, uint64_t rdev = 0,
                             InodeAttr* dir_out = nullptr) REQUIRES(mu_);
  Status Exchange(uint64_t parent, std::string_view name, uint64_t new_parent,
                  std::string_view new_name) REQUIRES(mu_);
  // Adds deletes of every extended attribute of `ino` to `batch`.
  Status DeleteXattrs(uint64_t ino, KvBatch* batch);
  // Drops one link of `victim` (already loaded) inside `batch`; frees data when it was the last
  // link and the file is not open.
  Status DropLink(InodeAttr victim, KvBatch* batch, bool* delete_data) REQUIRES(mu_);
  // Forgets file bytes at and past `new_size`; `stored_delta` gets the change in stored bytes.
  Status ClipData(uint64_t ino, uint64_t new_size, int64_t* stored_delta);
  static void AddStored(InodeAttr* a, int64_t delta);
  Status IsEmptyDir(uint64_t ino);
  // Removes an empty directory's inode in `b`, or keeps it as an orphan while it is open.
  Status DropEmptyDir(InodeAttr victim, KvBatch* b) REQUIRES(mu_);

  KvStore* const kv_;
  Cte* const cte_;
  const uint64_t chunk_size_;
  const uint32_t orphan_reclaim_s_;
  const uint64_t inode_batch_;
  const uint64_t incarnation_;

  Mutex mu_{kNoIo, "namespace"};
  uint64_t next_ino_ GUARDED_BY(mu_) = kRootIno + 1;
  uint64_t ino_hwm_ GUARDED_BY(mu_) = kRootIno + 1;  // reserved, durable: next_ino_ < ino_hwm_ to use
  std::map<uint64_t, uint32_t> open_counts_ GUARDED_BY(mu_);
  std::map<uint64_t, RangeSet> kept_ GUARDED_BY(mu_);  // fallocate's ranges, by inode
  // Orphans are kept for their holders (NamespaceOptions::orphan_reclaim_s); set at Open.
  bool reclaiming_ GUARDED_BY(mu_) = false;
  // Files whose durable-size record (ns_keys.h) this run has written: a later growth of
  // their size needs no look at it. Forgotten past a bound (that only costs a look).
  std::unordered_set<uint64_t> durable_noted_ GUARDED_BY(mu_);

  Mutex reclaim_mu_;  // after mu_ in the lock order
  CondVar reclaim_cv_;
  bool closing_ GUARDED_BY(reclaim_mu_) = false;
  std::thread reclaimer_;
};

// Name checks shared by every operation that creates a name.
Status ValidateName(std::string_view name);

}  // namespace clio
