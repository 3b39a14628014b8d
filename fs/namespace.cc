// Namespace core: open and recovery, lookups, attributes, node creation, listing, opens.
#include "fs/namespace.h"

#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits>

#include "common/codec.h"
#include "common/log.h"
#include "fs/ns_keys.h"
#include "placement/cte.h"
#include "storage/kv.h"

namespace clio {

using namespace ns;  // keys and encodings of this module


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
  CLIO_RETURN_IF_ERROR(ns->ExpireRequestRecords());
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
      int64_t delta = 0;
      CLIO_RETURN_IF_ERROR(ClipData(ino, a.size, &delta));
      AddStored(&a, delta);
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
  a.ctime_ns = (req.valid & kSetCtime) ? req.ctime_ns : now;
  KvBatch b;
  b.Put(InodeKey(ino), EncodeInode(a, target));
  if (shrink) {
    // The new size and the intent to clip commit together; a crash before the blobs are
    // clipped is finished at the next start, so no half-truncated file survives.
    Encoder e;
    e.Put<uint64_t>(a.size);
    b.Put(TruncateKey(ino), e.Take());
  }
  CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
  if (shrink) CLIO_RETURN_IF_ERROR(FinishTruncate(ino, a.size));
  return a;
}

Result<InodeAttr> Namespace::MakeNode(uint64_t parent, std::string_view name, uint32_t mode,
                                      uint32_t uid, uint32_t gid, std::string_view target,
                                      uint64_t rdev, InodeAttr* dir_out) {
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
  a.rdev = rdev;
  if (dir.mode & S_ISGID) {
    // A setgid directory hands its group down, and its setgid bit to subdirectories.
    a.gid = dir.gid;
    if (S_ISDIR(mode)) a.mode |= S_ISGID;
  }
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
  CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
  ++next_ino_;
  if (dir_out != nullptr) *dir_out = dir;
  return a;
}

Result<InodeAttr> Namespace::Create(uint64_t parent, std::string_view name, uint32_t mode,
                                    uint32_t uid, uint32_t gid, InodeAttr* parent_attr) {
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, MakeNode(parent, name, S_IFREG | (mode & 07777), uid, gid,
                                              {}, 0, parent_attr));
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

Result<InodeAttr> Namespace::Mknod(uint64_t parent, std::string_view name, uint32_t mode,
                                   uint64_t rdev, uint32_t uid, uint32_t gid) {
  switch (mode & S_IFMT) {
    case S_IFREG: case S_IFIFO: case S_IFSOCK: case S_IFCHR: case S_IFBLK:
      break;
    case 0:
      mode |= S_IFREG;  // mknod(2): a zero type means a regular file
      break;
    default:
      return InvalidArgument("mknod of an unsupported file type");
  }
  MutexLock l(&mu_);
  bool device = S_ISCHR(mode) || S_ISBLK(mode);
  return MakeNode(parent, name, (mode & S_IFMT) | (mode & 07777), uid, gid, {}, device ? rdev : 0);
}

Result<std::string> Namespace::Readlink(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NotFound("no inode " + Hex(ino));
  std::string target;
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*v, &target));
  if (!S_ISLNK(a.mode)) return InvalidArgument("not a symbolic link");
  return target;
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

Status Namespace::Open(uint64_t ino, bool truncate) {
  if (truncate) {
    // open(O_TRUNC): libfuse asks the kernel for atomic O_TRUNC, so the truncation arrives
    // here, with the open, and nowhere else.
    SetAttrRequest req;
    req.valid = kSetSize;
    req.size = 0;
    CLIO_RETURN_IF_ERROR(SetAttr(ino, req).status());
  }
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
