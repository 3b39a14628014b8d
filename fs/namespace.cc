#include "fs/namespace.h"

#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <limits>

#include "common/codec.h"
#include "common/log.h"
#include "placement/cte.h"
#include "storage/kv.h"

namespace clio {
namespace {

constexpr uint8_t kInodeVersion = 1;
constexpr std::string_view kNextInoKey = "m/next_ino";

std::string InodeKey(uint64_t ino) {
  std::string k = "i/";
  AppendBigEndian64(&k, ino);
  return k;
}
std::string DentryPrefix(uint64_t parent) {
  std::string k = "d/";
  AppendBigEndian64(&k, parent);
  return k;
}
std::string DentryKey(uint64_t parent, std::string_view name) {
  std::string k = DentryPrefix(parent);
  k.append(name);
  return k;
}
std::string OrphanKey(uint64_t ino) {
  std::string k = "o/";
  AppendBigEndian64(&k, ino);
  return k;
}
// A truncation whose blob changes may not have finished: redone at start.
std::string TruncateKey(uint64_t ino) {
  std::string k = "x/";
  AppendBigEndian64(&k, ino);
  return k;
}

std::string EncodeInode(const InodeAttr& a, std::string_view target) {
  Encoder e;
  e.Put<uint8_t>(kInodeVersion);
  EncodeAttr(&e, a);
  e.PutBytes(target);
  return e.Take();
}

Result<InodeAttr> DecodeInode(std::string_view v, std::string* target) {
  Decoder d(v);
  uint8_t version = 0;
  InodeAttr a;
  std::string t;
  d.Get(&version);
  if (!d.failed() && version != kInodeVersion)
    return Corruption("inode record has unknown format version " + std::to_string(version));
  DecodeAttr(&d, &a);
  d.GetString(&t);
  CLIO_RETURN_IF_ERROR(d.Finish("inode record"));
  if (target) *target = std::move(t);
  return a;
}

std::string EncodeDentry(uint64_t ino, uint32_t mode) {
  Encoder e;
  e.Put(ino).Put(mode);
  return e.Take();
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string Hex(uint64_t v) { return std::to_string(v); }

}  // namespace

Status ValidateName(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return InvalidArgument("invalid name '" + std::string(name) + "'");
  if (name.size() > kMaxNameLen) return Status(Code::kNameTooLong, "name longer than 255 bytes");
  if (name.find('/') != std::string_view::npos || name.find('\0') != std::string_view::npos)
    return InvalidArgument("name contains '/' or NUL");
  return Status::Ok();
}

Result<std::unique_ptr<Namespace>> Namespace::Open(KvStore* kv, Cte* cte, uint64_t chunk_size) {
  if (chunk_size < 4096 || (chunk_size & (chunk_size - 1)))
    return InvalidArgument("chunk_size must be a power of two of at least 4 KiB");
  std::unique_ptr<Namespace> ns(new Namespace(kv, cte, chunk_size));
  MutexLock l(&ns->mu_);
  CLIO_ASSIGN_OR_RETURN(auto next, kv->Get(kNextInoKey));
  if (next) {
    Decoder d(*next);
    uint64_t v = 0;
    d.Get(&v);
    CLIO_RETURN_IF_ERROR(d.Finish("next inode counter"));
    ns->next_ino_ = v;
  }
  CLIO_ASSIGN_OR_RETURN(auto root, kv->Get(InodeKey(kRootIno)));
  if (!root) {
    InodeAttr a;
    a.ino = kRootIno;
    a.mode = S_IFDIR | 0755;
    a.nlink = 2;
    a.uid = geteuid();
    a.gid = getegid();
    a.atime_ns = a.mtime_ns = a.ctime_ns = NowNs();
    a.parent = kRootIno;
    KvBatch b;
    b.ExpectAbsent(InodeKey(kRootIno));
    b.Put(InodeKey(kRootIno), EncodeInode(a, {}));
    CLIO_RETURN_IF_ERROR(kv->Apply(std::move(b)));
  }
  CLIO_RETURN_IF_ERROR(ns->RemoveOrphans());
  return ns;
}

Status Namespace::RemoveOrphans() {
  // Files whose last name went away: their data is deleted, then the inode and the key.
  CLIO_ASSIGN_OR_RETURN(KvPairs orphans, kv_->Scan("o/", "", 0));
  for (auto& [k, _] : orphans) CLIO_RETURN_IF_ERROR(DeleteFileData(ReadBigEndian64(std::string_view(k).substr(2))));
  if (!orphans.empty()) CLIO_LOG_INFO("removed the data of {} unlinked files", orphans.size());
  // Truncations interrupted between the size change and the blob changes.
  CLIO_ASSIGN_OR_RETURN(KvPairs truncs, kv_->Scan("x/", "", 0));
  for (auto& [k, v] : truncs) {
    uint64_t ino = ReadBigEndian64(std::string_view(k).substr(2));
    Decoder d(v);
    uint64_t size = 0;
    d.Get(&size);
    CLIO_RETURN_IF_ERROR(d.Finish("pending truncate"));
    CLIO_RETURN_IF_ERROR(FinishTruncate(ino, size));
  }
  return Status::Ok();
}

Status Namespace::DeleteFileData(uint64_t ino) {
  CLIO_RETURN_IF_ERROR(cte_->DelTag(ino));
  KvBatch b;
  b.Delete(InodeKey(ino));
  b.Delete(OrphanKey(ino));
  b.Delete(TruncateKey(ino));
  return kv_->Apply(std::move(b));
}

Status Namespace::FinishTruncate(uint64_t ino, uint64_t size) {
  CLIO_RETURN_IF_ERROR(ClipData(ino, size));
  KvBatch b;
  b.Delete(TruncateKey(ino));
  return kv_->Apply(std::move(b));
}

Result<InodeAttr> Namespace::LoadInode(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NotFound("no inode " + Hex(ino));
  return DecodeInode(*v, nullptr);
}

Result<InodeAttr> Namespace::LoadDir(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  if (!S_ISDIR(a.mode)) return Status(Code::kNotDirectory, "inode " + Hex(ino) + " is not a directory");
  return a;
}

Result<std::pair<uint64_t, uint32_t>> Namespace::LoadDentry(uint64_t parent, std::string_view name) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(DentryKey(parent, name)));
  if (!v) return NotFound("no entry '" + std::string(name) + "'");
  Decoder d(*v);
  uint64_t ino = 0;
  uint32_t mode = 0;
  d.Get(&ino);
  d.Get(&mode);
  CLIO_RETURN_IF_ERROR(d.Finish("directory entry"));
  return std::make_pair(ino, mode);
}

Result<InodeAttr> Namespace::Lookup(uint64_t parent, std::string_view name) {
  if (name.size() > kMaxNameLen) return Status(Code::kNameTooLong, "name longer than 255 bytes");
  CLIO_ASSIGN_OR_RETURN(auto dent, LoadDentry(parent, name));
  return LoadInode(dent.first);
}

Result<InodeAttr> Namespace::GetAttr(uint64_t ino) { return LoadInode(ino); }

Status Namespace::ClipData(uint64_t ino, uint64_t new_size) {
  CLIO_ASSIGN_OR_RETURN(auto blobs, cte_->ListBlobs(ino));
  for (uint64_t b : blobs) {
    uint64_t start = b * chunk_size_;
    if (start >= new_size) {
      CLIO_RETURN_IF_ERROR(cte_->DelBlob(ino, b));
    } else if (start + chunk_size_ > new_size) {
      CLIO_RETURN_IF_ERROR(cte_->TruncateBlob(ino, b, new_size - start));
    }
  }
  return Status::Ok();
}

Result<InodeAttr> Namespace::SetAttr(uint64_t ino, const SetAttrRequest& req) {
  MutexLock l(&mu_);
  std::string target;
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NotFound("no inode " + Hex(ino));
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*v, &target));
  int64_t now = NowNs();
  bool shrink = false;
  if (req.valid & kSetSize) {
    if (S_ISDIR(a.mode)) return Status(Code::kIsDirectory, "cannot truncate a directory");
    if (!S_ISREG(a.mode)) return InvalidArgument("can only truncate regular files");
    if (req.size > kMaxFileSize) return Status(Code::kOutOfRange, "size past the largest file");
    if (req.size > a.size) {
      // Growing: whatever lies past the old end (bytes of a write whose size update a crash
      // lost) is forgotten first, so the new range reads as zeros.
      CLIO_RETURN_IF_ERROR(ClipData(ino, a.size));
    }
    shrink = req.size < a.size;
    a.size = req.size;
    a.mtime_ns = now;
  }
  if (req.valid & kSetMode) a.mode = (a.mode & S_IFMT) | (req.mode & 07777);
  if (req.valid & kSetUid) a.uid = req.uid;
  if (req.valid & kSetGid) a.gid = req.gid;
  if (req.valid & kSetAtimeNow) a.atime_ns = now;
  else if (req.valid & kSetAtime) a.atime_ns = req.atime_ns;
  if (req.valid & kSetMtimeNow) a.mtime_ns = now;
  else if (req.valid & kSetMtime) a.mtime_ns = req.mtime_ns;
  a.ctime_ns = now;
  KvBatch b;
  b.Put(InodeKey(ino), EncodeInode(a, target));
  if (shrink) {
    // The new size and the intent to clip commit together; a crash before the blobs are
    // clipped is finished at the next start, so no half-truncated file survives.
    Encoder e;
    e.Put<uint64_t>(a.size);
    b.Put(TruncateKey(ino), e.Take());
  }
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
  if (shrink) CLIO_RETURN_IF_ERROR(FinishTruncate(ino, a.size));
  return a;
}

Result<InodeAttr> Namespace::MakeNode(uint64_t parent, std::string_view name, uint32_t mode,
                                      uint32_t uid, uint32_t gid, std::string_view target) {
  CLIO_RETURN_IF_ERROR(ValidateName(name));
  CLIO_ASSIGN_OR_RETURN(InodeAttr dir, LoadDir(parent));
  if (dir.nlink == 0) return NotFound("directory was removed");
  std::string dkey = DentryKey(parent, name);
  CLIO_ASSIGN_OR_RETURN(auto existing, kv_->Get(dkey));
  if (existing) return Status(Code::kAlreadyExists, "'" + std::string(name) + "' exists");
  int64_t now = NowNs();
  InodeAttr a;
  a.ino = next_ino_;
  a.mode = mode;
  a.nlink = S_ISDIR(mode) ? 2 : 1;
  a.uid = uid;
  a.gid = gid;
  a.size = S_ISLNK(mode) ? target.size() : 0;
  a.atime_ns = a.mtime_ns = a.ctime_ns = now;
  a.parent = parent;
  dir.mtime_ns = dir.ctime_ns = now;
  if (S_ISDIR(mode)) ++dir.nlink;
  KvBatch b;
  b.ExpectAbsent(dkey);
  b.Put(dkey, EncodeDentry(a.ino, a.mode));
  b.Put(InodeKey(a.ino), EncodeInode(a, target));
  b.Put(InodeKey(parent), EncodeInode(dir, {}));
  Encoder n;
  n.Put<uint64_t>(a.ino + 1);
  b.Put(std::string(kNextInoKey), n.Take());
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
  ++next_ino_;
  return a;
}

Result<InodeAttr> Namespace::Create(uint64_t parent, std::string_view name, uint32_t mode,
                                    uint32_t uid, uint32_t gid) {
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, MakeNode(parent, name, S_IFREG | (mode & 07777), uid, gid, {}));
  ++open_counts_[a.ino];
  return a;
}

Result<InodeAttr> Namespace::Mkdir(uint64_t parent, std::string_view name, uint32_t mode,
                                   uint32_t uid, uint32_t gid) {
  MutexLock l(&mu_);
  return MakeNode(parent, name, S_IFDIR | (mode & 07777), uid, gid, {});
}

Result<InodeAttr> Namespace::Symlink(uint64_t parent, std::string_view name, std::string_view target,
                                     uint32_t uid, uint32_t gid) {
  if (target.empty() || target.size() > kMaxSymlinkLen)
    return InvalidArgument("symlink target must be 1 to 4095 bytes");
  MutexLock l(&mu_);
  return MakeNode(parent, name, S_IFLNK | 0777, uid, gid, target);
}

Result<std::string> Namespace::Readlink(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NotFound("no inode " + Hex(ino));
  std::string target;
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*v, &target));
  if (!S_ISLNK(a.mode)) return InvalidArgument("not a symbolic link");
  return target;
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
  // stays readable until the last Release() (or the next start).
  batch->Put(InodeKey(victim.ino), EncodeInode(victim, {}));
  batch->Put(OrphanKey(victim.ino), "");
  auto it = open_counts_.find(victim.ino);
  *delete_data = !(it != open_counts_.end() && it->second > 0);
  return Status::Ok();
}

Status Namespace::Unlink(uint64_t parent, std::string_view name) {
  uint64_t drop_data = 0;
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
    CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
    if (del) drop_data = victim.ino;
  }
  // The name is gone atomically; the data goes after (a crash in between leaves blobs of a
  // deleted inode, which are unreachable and read by nobody).
  return drop_data ? DeleteFileData(drop_data) : Status::Ok();
}

Status Namespace::IsEmptyDir(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(KvPairs one, kv_->Scan(DentryPrefix(ino), "", 1));
  if (!one.empty()) return Status(Code::kNotEmpty, "directory not empty");
  return Status::Ok();
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
  b.Delete(InodeKey(victim.ino));
  dir.mtime_ns = dir.ctime_ns = NowNs();
  if (dir.nlink > 2) --dir.nlink;
  b.Put(InodeKey(parent), EncodeInode(dir, {}));
  return kv_->Apply(std::move(b));
}

Status Namespace::Rename(uint64_t parent, std::string_view name, uint64_t new_parent,
                         std::string_view new_name, uint32_t flags) {
  if (flags & RENAME_EXCHANGE) return Status(Code::kNotSupported, "RENAME_EXCHANGE is not supported yet");
  if (flags & ~static_cast<uint32_t>(RENAME_NOREPLACE)) return InvalidArgument("unknown rename flags");
  CLIO_RETURN_IF_ERROR(ValidateName(new_name));
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
        b.Delete(InodeKey(victim.ino));
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
    CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
  }
  return drop_data ? DeleteFileData(drop_data) : Status::Ok();
}

Result<std::vector<DirEntry>> Namespace::ReadDir(uint64_t ino, std::string_view start_after, uint32_t limit) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr dir, LoadDir(ino));
  (void)dir;
  std::string prefix = DentryPrefix(ino);
  std::string after = start_after.empty() ? std::string() : prefix + std::string(start_after);
  CLIO_ASSIGN_OR_RETURN(KvPairs page, kv_->Scan(prefix, after, limit));
  std::vector<DirEntry> out;
  out.reserve(page.size());
  for (auto& [k, v] : page) {
    DirEntry e;
    e.name = k.substr(prefix.size());
    Decoder d(v);
    uint64_t child = 0;
    uint32_t mode = 0;
    d.Get(&child);
    d.Get(&mode);
    CLIO_RETURN_IF_ERROR(d.Finish("directory entry"));
    auto a = LoadInode(child);
    if (a.ok()) {
      e.attr = *a;
    } else if (a.status().code() == Code::kNotFound) {
      // Removed between the scan and the load. Keep the entry (from the dentry alone) so a
      // page is never shorter than the scan, which callers read as the end of the directory.
      e.attr.ino = child;
      e.attr.mode = mode;
    } else {
      return a.status();
    }
    out.push_back(std::move(e));
  }
  return out;
}

Status Namespace::Open(uint64_t ino) {
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  (void)a;
  ++open_counts_[ino];
  return Status::Ok();
}

Status Namespace::Release(uint64_t ino) {
  bool drop = false;
  {
    MutexLock l(&mu_);
    auto it = open_counts_.find(ino);
    if (it == open_counts_.end()) return Status::Ok();
    if (--it->second > 0) return Status::Ok();
    open_counts_.erase(it);
    CLIO_ASSIGN_OR_RETURN(auto orphan, kv_->Get(OrphanKey(ino)));
    drop = orphan.has_value();
  }
  return drop ? DeleteFileData(ino) : Status::Ok();
}

Result<std::string> Namespace::Read(uint64_t ino, uint64_t offset, uint32_t len) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  if (S_ISDIR(a.mode)) return Status(Code::kIsDirectory, "read of a directory");
  if (offset >= a.size) return std::string();
  uint64_t n = std::min<uint64_t>(len, a.size - offset);
  std::string out(n, '\0');
  uint64_t done = 0;
  while (done < n) {
    uint64_t pos = offset + done;
    uint64_t chunk = pos / chunk_size_, in = pos % chunk_size_;
    uint64_t piece = std::min(n - done, chunk_size_ - in);
    CLIO_RETURN_IF_ERROR(cte_->GetBlob(ino, chunk, in, piece, out.data() + done));
    done += piece;
  }
  return out;
}

Result<uint64_t> Namespace::Write(uint64_t ino, uint64_t offset, std::string_view data) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  if (!S_ISREG(a.mode)) return Status(Code::kIsDirectory, "write to something not a regular file");
  if (data.empty()) return uint64_t{0};
  if (offset > kMaxFileSize || data.size() > kMaxFileSize - offset)
    return Status(Code::kOutOfRange, "write past the largest file size");
  uint64_t done = 0;
  Status failed;
  while (done < data.size()) {
    uint64_t pos = offset + done;
    uint64_t chunk = pos / chunk_size_, in = pos % chunk_size_;
    uint64_t piece = std::min<uint64_t>(data.size() - done, chunk_size_ - in);
    failed = cte_->PutBlob(ino, chunk, in, data.substr(done, piece));
    if (!failed.ok()) break;
    done += piece;
  }
  // A write that stored only a prefix (a tier filled up) is a short write: the size covers
  // exactly the bytes stored, so nothing unwritten ever becomes visible.
  if (done == 0) return failed;
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) {
    // Unlinked and released while this write was in flight: drop what it stored.
    (void)cte_->DelTag(ino);
    return NotFound("file was removed during the write");
  }
  CLIO_ASSIGN_OR_RETURN(a, DecodeInode(*v, nullptr));
  a.size = std::max<uint64_t>(a.size, offset + done);
  a.mtime_ns = a.ctime_ns = NowNs();
  KvBatch b;
  b.Put(InodeKey(ino), EncodeInode(a, {}));
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
  return done;
}

Status Namespace::Fsync(uint64_t ino) {
  CLIO_RETURN_IF_ERROR(cte_->FlushTag(ino));
  return kv_->Sync();
}

Status Namespace::Flush(uint64_t ino) { return cte_->TakeFlushError(ino); }

FsStatfs Namespace::Statfs() {
  FsStatfs s;
  auto [cap, rem] = cte_->PersistentSpace();
  s.blocks = cap / s.block_size;
  s.blocks_free = rem / s.block_size;
  s.files = 1ull << 40;
  s.files_free = (1ull << 40) - 1;
  return s;
}

}  // namespace clio
