// Namespace operations on names: link, unlink, rmdir, rename (with exchange), file deletion.
#include "fs/namespace/namespace.h"

#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>

#include "common/codec.h"
#include "common/log.h"
#include "fs/namespace/ns_keys.h"
#include "placement/cte.h"
#include "storage/kv.h"

namespace clio {

using namespace ns;  // keys and encodings of this module

Status Namespace::DeleteFileKeys(uint64_t ino) {
  KvBatch b;
  CLIO_RETURN_IF_ERROR(DeleteXattrs(ino, &b));
  b.Delete(InodeKey(ino));
  b.Delete(OrphanKey(ino));
  b.Delete(TruncateKey(ino));
  b.Delete(DurableSizeKey(ino));
  durable_noted_.erase(ino);
  const RangeSet kept = KeptOf(ino);
  if (!kept.empty()) {
    CLIO_RETURN_IF_ERROR(KeepRanges(ino, kept, {}));  // letting room go cannot fail
    SetKept(ino, {}, &b);
  }
  return Commit(std::move(b));
}

Status Namespace::DeleteFileData(uint64_t ino) {
  {
    MutexLock l(&mu_);
    CLIO_RETURN_IF_ERROR(DeleteFileKeys(ino));
  }
  // A write that loaded the inode before the keys went stores nothing past this point: it
  // finds the inode gone when it updates the size, and removes what it stored.
  return cte_->DelTag(ino);
}


Status Namespace::DropLink(InodeAttr victim, KvBatch* batch, bool* delete_data) {
  *delete_data = false;
  if (victim.nlink > 0) --victim.nlink;
  victim.ctime_ns = NowNs();
  if (victim.nlink > 0) {
    CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(victim.ino)));
    std::string target;
    if (v) (void)DecodeInode(*v, &target);
    batch->Put(InodeKey(victim.ino), EncodeInode(victim, target));
    return Status::Ok();
  }
  // The last name is gone. The inode becomes an orphan in the same batch, so its data is
  // deleted even if the runtime stops before DeleteFileData() finishes. A file still open
  // stays readable until the last Release() (or, unclaimed, the reclaim window after a
  // restart). Within that window a file nobody has declared open may still be held by a
  // client that has not reattached yet: it stays an orphan too.
  batch->Put(InodeKey(victim.ino), EncodeInode(victim, {}));
  batch->Put(OrphanKey(victim.ino), "");
  auto it = open_counts_.find(victim.ino);
  *delete_data = !(it != open_counts_.end() && it->second > 0) && !reclaiming_;
  return Status::Ok();
}

Status Namespace::Unlink(uint64_t parent, std::string_view name, uint64_t* deleted_ino,
                         InodeAttr* parent_attr) {
  uint64_t drop_data = 0;
  if (deleted_ino != nullptr) *deleted_ino = 0;
  {
    MutexLock l(&mu_);
    CLIO_ASSIGN_OR_RETURN(InodeAttr dir, LoadDir(parent));
    CLIO_ASSIGN_OR_RETURN(auto dent, LoadDentry(parent, name));
    CLIO_ASSIGN_OR_RETURN(InodeAttr victim, LoadInode(dent.first));
    if (S_ISDIR(victim.mode)) return Status(Code::kIsDirectory, "'" + std::string(name) + "' is a directory");
    KvBatch b;
    b.Delete(DentryKey(parent, name));
    dir.mtime_ns = dir.ctime_ns = NowNs();
    b.Put(InodeKey(parent), EncodeInode(dir, {}));
    bool del = false;
    CLIO_RETURN_IF_ERROR(DropLink(victim, &b, &del));
    CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
    if (del) drop_data = victim.ino;
    if (parent_attr != nullptr) *parent_attr = dir;
  }
  if (deleted_ino != nullptr) *deleted_ino = drop_data;
  // The name is gone atomically; the inode and data go after (a crash in between leaves an
  // orphan, removed at the next start).
  return drop_data ? DeleteFileData(drop_data) : Status::Ok();
}

Status Namespace::IsEmptyDir(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(KvPairs one, kv_->Scan(DentryPrefix(ino), "", 1));
  if (!one.empty()) return Status(Code::kNotEmpty, "directory not empty");
  return Status::Ok();
}

Status Namespace::DropEmptyDir(InodeAttr victim, KvBatch* b) {
  auto open = open_counts_.find(victim.ino);
  if ((open != open_counts_.end() && open->second > 0) || reclaiming_) {
    // Still open (opendir'd, or maybe by a client that has not reattached after a restart):
    // it lives on, empty and with no links, as an orphan until the last Release(), so fstat
    // on that descriptor keeps working. (A process's working directory holds no open with
    // FUSE, so that case is not covered.)
    victim.nlink = 0;
    victim.ctime_ns = NowNs();
    b->Put(InodeKey(victim.ino), EncodeInode(victim, {}));
    b->Put(OrphanKey(victim.ino), "");
    return Status::Ok();
  }
  b->Delete(InodeKey(victim.ino));
  return DeleteXattrs(victim.ino, b);
}

Status Namespace::Rmdir(uint64_t parent, std::string_view name) {
  MutexLock l(&mu_);
  if (name == ".") return InvalidArgument("cannot remove '.'");
  if (name == "..") return Status(Code::kNotEmpty, "cannot remove '..'");
  CLIO_ASSIGN_OR_RETURN(InodeAttr dir, LoadDir(parent));
  CLIO_ASSIGN_OR_RETURN(auto dent, LoadDentry(parent, name));
  CLIO_ASSIGN_OR_RETURN(InodeAttr victim, LoadInode(dent.first));
  if (!S_ISDIR(victim.mode)) return Status(Code::kNotDirectory, "'" + std::string(name) + "' is not a directory");
  CLIO_RETURN_IF_ERROR(IsEmptyDir(victim.ino));
  KvBatch b;
  b.Delete(DentryKey(parent, name));
  CLIO_RETURN_IF_ERROR(DropEmptyDir(victim, &b));
  dir.mtime_ns = dir.ctime_ns = NowNs();
  if (dir.nlink > 2) --dir.nlink;
  b.Put(InodeKey(parent), EncodeInode(dir, {}));
  return Commit(std::move(b));
}

Status Namespace::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                         std::string_view new_name, uint32_t flags,
                         std::pair<InodeAttr, InodeAttr>* dirs, InodeAttr* moved) {
  if (flags & ~static_cast<uint32_t>(RENAME_NOREPLACE | RENAME_EXCHANGE)) return InvalidArgument("unknown rename flags");
  if ((flags & RENAME_NOREPLACE) && (flags & RENAME_EXCHANGE)) return InvalidArgument("NOREPLACE with EXCHANGE");
  CLIO_RETURN_IF_ERROR(ValidateName(new_name));
  if (flags & RENAME_EXCHANGE) {
    MutexLock l(&mu_);
    return Exchange(parent, name, new_parent, new_name);
  }
  uint64_t drop_data = 0;
  {
    MutexLock l(&mu_);
    CLIO_ASSIGN_OR_RETURN(InodeAttr src_dir, LoadDir(parent));
    CLIO_ASSIGN_OR_RETURN(auto dent, LoadDentry(parent, name));
    CLIO_ASSIGN_OR_RETURN(InodeAttr src, LoadInode(dent.first));
    if (parent == new_parent && name == new_name) return Status::Ok();
    // Same directory: one object stands for both, so link-count changes are not lost.
    InodeAttr other_dir;
    if (parent != new_parent) {
      CLIO_ASSIGN_OR_RETURN(other_dir, LoadDir(new_parent));
      if (other_dir.nlink == 0) return NotFound("target directory was removed");
    }
    InodeAttr& dst_dir = parent == new_parent ? src_dir : other_dir;
    const bool is_dir = S_ISDIR(src.mode);
    if (is_dir && parent != new_parent) {
      // A directory may not move under itself.
      for (uint64_t p = new_parent;; ) {
        if (p == src.ino) return InvalidArgument("cannot move a directory into itself");
        if (p == kRootIno) break;
        CLIO_ASSIGN_OR_RETURN(InodeAttr pa, LoadInode(p));
        p = pa.parent;
      }
    }
    KvBatch b;
    int64_t now = NowNs();
    auto existing = LoadDentry(new_parent, new_name);
    if (existing.ok()) {
      if (flags & RENAME_NOREPLACE) return Status(Code::kAlreadyExists, "'" + std::string(new_name) + "' exists");
      if (existing->first == src.ino) return Status::Ok();  // hard links to one inode: nothing to do
      CLIO_ASSIGN_OR_RETURN(InodeAttr victim, LoadInode(existing->first));
      if (S_ISDIR(victim.mode)) {
        if (!is_dir) return Status(Code::kIsDirectory, "'" + std::string(new_name) + "' is a directory");
        CLIO_RETURN_IF_ERROR(IsEmptyDir(victim.ino));
        CLIO_RETURN_IF_ERROR(DropEmptyDir(victim, &b));
        if (dst_dir.nlink > 2) --dst_dir.nlink;
      } else {
        if (is_dir) return Status(Code::kNotDirectory, "'" + std::string(new_name) + "' is not a directory");
        bool del = false;
        CLIO_RETURN_IF_ERROR(DropLink(victim, &b, &del));
        if (del) drop_data = victim.ino;
      }
    } else if (existing.status().code() != Code::kNotFound) {
      return existing.status();
    }
    b.Delete(DentryKey(parent, name));
    b.Put(DentryKey(new_parent, new_name), EncodeDentry(src.ino, src.mode));
    src.ctime_ns = now;
    if (is_dir && parent != new_parent) {
      src.parent = new_parent;
      if (src_dir.nlink > 2) --src_dir.nlink;
      ++dst_dir.nlink;
    }
    CLIO_ASSIGN_OR_RETURN(auto sv, kv_->Get(InodeKey(src.ino)));
    std::string target;
    if (sv) (void)DecodeInode(*sv, &target);
    b.Put(InodeKey(src.ino), EncodeInode(src, target));
    src_dir.mtime_ns = src_dir.ctime_ns = now;
    dst_dir.mtime_ns = dst_dir.ctime_ns = now;
    if (parent == new_parent) {
      b.Put(InodeKey(parent), EncodeInode(src_dir, {}));
    } else {
      b.Put(InodeKey(parent), EncodeInode(src_dir, {}));
      b.Put(InodeKey(new_parent), EncodeInode(dst_dir, {}));
    }
    CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
    if (dirs != nullptr) *dirs = {src_dir, dst_dir};
    if (moved != nullptr) *moved = src;
  }
  return drop_data ? DeleteFileData(drop_data) : Status::Ok();
}

Status Namespace::Exchange(uint64_t parent, std::string_view name, uint64_t new_parent,
                           std::string_view new_name) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr dir_a, LoadDir(parent));
  CLIO_ASSIGN_OR_RETURN(auto da, LoadDentry(parent, name));
  CLIO_ASSIGN_OR_RETURN(auto db, LoadDentry(new_parent, new_name));
  if (da.first == db.first) return Status::Ok();
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(da.first));
  CLIO_ASSIGN_OR_RETURN(InodeAttr b, LoadInode(db.first));
  InodeAttr other;
  if (parent != new_parent) {
    CLIO_ASSIGN_OR_RETURN(other, LoadDir(new_parent));
    if (other.nlink == 0) return NotFound("target directory was removed");
  }
  InodeAttr& dir_b = parent == new_parent ? dir_a : other;
  // Neither directory may end up inside itself.
  auto under = [&](uint64_t start, uint64_t ino) -> Result<bool> {
    for (uint64_t p = start;;) {
      if (p == ino) return true;
      if (p == kRootIno) return false;
      CLIO_ASSIGN_OR_RETURN(InodeAttr pa, LoadInode(p));
      p = pa.parent;
    }
  };
  if (parent != new_parent) {
    if (S_ISDIR(a.mode)) {
      CLIO_ASSIGN_OR_RETURN(bool loop, under(new_parent, a.ino));
      if (loop) return InvalidArgument("cannot move a directory into itself");
    }
    if (S_ISDIR(b.mode)) {
      CLIO_ASSIGN_OR_RETURN(bool loop, under(parent, b.ino));
      if (loop) return InvalidArgument("cannot move a directory into itself");
    }
  }
  int64_t now = NowNs();
  KvBatch batch;
  batch.Put(DentryKey(parent, name), EncodeDentry(b.ino, b.mode));
  batch.Put(DentryKey(new_parent, new_name), EncodeDentry(a.ino, a.mode));
  auto put_inode = [&](InodeAttr& x) -> Status {
    CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(x.ino)));
    std::string target;
    if (v) (void)DecodeInode(*v, &target);
    batch.Put(InodeKey(x.ino), EncodeInode(x, target));
    return Status::Ok();
  };
  if (parent != new_parent) {
    // A directory changing parent moves one ".." link with it.
    if (S_ISDIR(a.mode)) a.parent = new_parent, --dir_a.nlink, ++dir_b.nlink;
    if (S_ISDIR(b.mode)) b.parent = parent, --dir_b.nlink, ++dir_a.nlink;
  }
  a.ctime_ns = b.ctime_ns = now;
  dir_a.mtime_ns = dir_a.ctime_ns = dir_b.mtime_ns = dir_b.ctime_ns = now;
  CLIO_RETURN_IF_ERROR(put_inode(a));
  CLIO_RETURN_IF_ERROR(put_inode(b));
  batch.Put(InodeKey(dir_a.ino), EncodeInode(dir_a, {}));
  if (parent != new_parent) batch.Put(InodeKey(dir_b.ino), EncodeInode(dir_b, {}));
  return Commit(std::move(batch));
}

Result<InodeAttr> Namespace::Link(uint64_t ino, uint64_t new_parent, std::string_view new_name) {
  CLIO_RETURN_IF_ERROR(ValidateName(new_name));
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NoInode(ino);
  std::string target;
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*v, &target));
  if (S_ISDIR(a.mode)) return Status(Code::kNotPermitted, "hard links to directories are not allowed");
  if (a.nlink == 0) return NotFound("file was removed");
  CLIO_ASSIGN_OR_RETURN(InodeAttr dir, LoadDir(new_parent));
  if (dir.nlink == 0) return NotFound("target directory was removed");
  std::string dkey = DentryKey(new_parent, new_name);
  CLIO_ASSIGN_OR_RETURN(auto existing, kv_->Get(dkey));
  if (existing) return Status(Code::kAlreadyExists, "'" + std::string(new_name) + "' exists");
  int64_t now = NowNs();
  ++a.nlink;
  a.ctime_ns = now;
  dir.mtime_ns = dir.ctime_ns = now;
  KvBatch b;
  b.ExpectAbsent(dkey);
  b.Put(dkey, EncodeDentry(a.ino, a.mode));
  b.Put(InodeKey(a.ino), EncodeInode(a, target));
  b.Put(InodeKey(new_parent), EncodeInode(dir, {}));
  CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
  return a;
}

}  // namespace clio
