// Namespace core: open and recovery, lookups, attributes, node creation, listing, opens.
#include "fs/namespace/namespace.h"

#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <limits>
#include <random>

#include "common/codec.h"
#include "common/log.h"
#include "fs/namespace/ns_keys.h"
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

namespace {

constexpr size_t kScanPage = 4096;
// How far past the highest inode a damaged or missing mark is rebuilt: numbers a crash lost
// after the last reservation cannot be known then, and a kernel may still hold some.
constexpr uint64_t kRepairMargin = 1u << 16;

uint64_t RandomIncarnation() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(NowNs());
}

}  // namespace

Namespace::Namespace(KvStore* kv, Cte* cte, const NamespaceOptions& o)
    : kv_(kv), cte_(cte), chunk_size_(o.chunk_size), orphan_reclaim_s_(o.orphan_reclaim_s),
      inode_batch_(o.inode_batch), incarnation_(RandomIncarnation()) {}

Namespace::~Namespace() {
  if (!reclaimer_.joinable()) return;
  {
    MutexLock l(&reclaim_mu_);
    closing_ = true;
    reclaim_cv_.NotifyAll();
  }
  reclaimer_.join();
}

Result<std::unique_ptr<Namespace>> Namespace::Open(KvStore* kv, Cte* cte, const NamespaceOptions& options) {
  const uint64_t chunk_size = options.chunk_size;
  if (chunk_size < 4096 || (chunk_size & (chunk_size - 1)))
    return InvalidArgument("chunk_size must be a power of two of at least 4 KiB");
  if (options.inode_batch == 0) return InvalidArgument("inode_batch must be at least 1");
  std::unique_ptr<Namespace> ns(new Namespace(kv, cte, options));
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
  {
    MutexLock l(&ns->mu_);
    CLIO_RETURN_IF_ERROR(ns->RecoverInodes());
    CLIO_RETURN_IF_ERROR(ns->RestoreKept());
  }
  CLIO_RETURN_IF_ERROR(ns->FinishPendingTruncations());
  if (options.orphan_reclaim_s == 0) {
    CLIO_RETURN_IF_ERROR(ns->EndReclaimWindow());
  } else {
    // A client that rides out the restart (clio-fuse) may hold files open, unlinked or not,
    // that this runtime has no count of until it reattaches: orphans found now are kept, and
    // a last unlink keeps the data, until it has declared its opens or the window ends.
    CLIO_ASSIGN_OR_RETURN(KvPairs orphans, kv->Scan("o/", "", 0));
    {
      MutexLock l(&ns->mu_);
      ns->reclaiming_ = true;
    }
    if (!orphans.empty())
      CLIO_LOG_INFO("{} files unlinked while open are kept up to {} s for the clients that hold them "
                    "(clio_fs orphan_reclaim_s)", orphans.size(), options.orphan_reclaim_s);
    ns->reclaimer_ = std::thread([n = ns.get()] { n->ReclaimerLoop(); });
  }
  CLIO_RETURN_IF_ERROR(ns->ExpireRequestRecords());
  return ns;
}

Result<Namespace::StoredMark> Namespace::LoadInodeMark() {
  // The mark every number handed out before lies below (a synced reservation), or, from a
  // store of format 3, the next number as last committed (a crash may have rolled it back:
  // a margin past it).
  StoredMark m;
  CLIO_ASSIGN_OR_RETURN(auto hwm, kv_->Get(kInoHwmKey));
  CLIO_ASSIGN_OR_RETURN(auto legacy, kv_->Get(kLegacyNextInoKey));
  m.present = hwm.has_value() || legacy.has_value();
  m.from_hwm = hwm.has_value();
  if (hwm) {
    Decoder d(*hwm);
    uint8_t version = 0;
    d.Get(&version);
    d.Get(&m.mark);
    Status s = d.Finish("inode high-water mark");
    if (s.ok() && version != kInoHwmVersion) s = Corruption("unknown version " + std::to_string(version));
    if (s.ok() && m.mark > kMaxIno) s = Corruption("mark " + std::to_string(m.mark) + " is past the largest inode number");
    m.trusted = s.ok();
    if (!m.trusted) {
      CLIO_LOG_WARN("metadata key {} is damaged ({}); rebuilt from the highest inode plus {}; "
                    "a mount kept across this restart should be remounted",
                    kInoHwmKey, s.message(), kRepairMargin);
      m.mark = 0;
    }
  } else if (legacy) {
    Decoder d(*legacy);
    uint64_t next = 0;
    d.Get(&next);
    if (d.Finish("next inode counter").ok() && next <= kMaxIno) {
      m.mark = next + kRepairMargin;
      m.trusted = true;
      CLIO_LOG_INFO("metadata key {} (format 3) starts the inode mark {} ({} past it)", kLegacyNextInoKey,
                    kInoHwmKey, kRepairMargin);
    } else {
      CLIO_LOG_WARN("metadata key {} is damaged; the inode mark is rebuilt from the highest inode", kLegacyNextInoKey);
    }
  }
  return m;
}

Status Namespace::RecoverInodes() {
  CLIO_ASSIGN_OR_RETURN(StoredMark stored, LoadInodeMark());
  uint64_t mark = stored.mark;
  // Every inode, in number order, against the tags the blob index held at start (also in
  // order): a tag with no inode is data of a file that does not exist (nothing can reach
  // it; a later file must never inherit it); a file's size and bytes must agree.
  const std::vector<StartTag> tags = cte_->TakeStartTags();
  uint64_t last_run = 0;  // none recorded (a new store, or one from before the records)
  CLIO_ASSIGN_OR_RETURN(auto lr, kv_->Get(kLastRunKey));
  if (lr && !(Decoder(*lr).Get(&last_run) && lr->size() == sizeof(uint64_t))) {
    CLIO_LOG_WARN("metadata key {} is damaged; no file is shortened to a durable size at this start", kLastRunKey);
    last_run = 0;
  }
  std::vector<uint64_t> strays;
  size_t t = 0;
  uint64_t highest = kRootIno, inodes = 0;
  StartRepairs repairs;
  std::string after;
  while (true) {
    CLIO_ASSIGN_OR_RETURN(KvPairs page, kv_->Scan("i/", after, kScanPage));
    KvBatch fixes;
    for (auto& [k, v] : page) {
      if (k.size() != 10) {
        CLIO_LOG_WARN("metadata key of {} bytes under i/ is not an inode key; ignored", k.size());
        continue;
      }
      const uint64_t ino = ReadBigEndian64(std::string_view(k).substr(2));
      while (t < tags.size() && tags[t].tag < ino) strays.push_back(tags[t++].tag);
      const StartTag* st = t < tags.size() && tags[t].tag == ino ? &tags[t++] : nullptr;
      CLIO_RETURN_IF_ERROR(ReconcileFile(ino, v, st, last_run, &fixes, &repairs));
      highest = std::max(highest, ino);
      ++inodes;
    }
    if (!fixes.empty()) CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(fixes)));
    if (page.size() < kScanPage) break;
    after = page.back().first;
  }
  while (t < tags.size()) strays.push_back(tags[t++].tag);
  if (repairs.clipped != 0)
    CLIO_LOG_WARN("{} files had bytes past their size (writes whose size update a crash lost); clipped",
                  repairs.clipped);
  if (repairs.lost != 0)
    CLIO_LOG_WARN("{} files lost bytes that were never flushed or fsynced (a crash); {} of them had a size "
                  "past their remaining bytes and were shortened to them", repairs.lost, repairs.shrunk);
  if (repairs.recounted != 0)
    CLIO_LOG_INFO("stored-byte counts (st_blocks) of {} files set from the blob index", repairs.recounted);
  if (highest > kMaxIno) return Corruption("inode " + std::to_string(highest) + " is past the largest inode number");
  if (!stored.present) {
    // A new filesystem (nothing but the root) starts at 2; inodes without a mark are damage.
    if (highest != kRootIno)
      CLIO_LOG_WARN("metadata key {} is missing although inodes exist; rebuilt from the highest inode ({}) plus {}",
                    kInoHwmKey, highest, kRepairMargin);
    mark = highest == kRootIno ? kRootIno + 1 : highest + 1 + kRepairMargin;
  } else if (!stored.trusted) {
    mark = highest + 1 + kRepairMargin;
  } else if (mark <= highest) {
    CLIO_LOG_WARN("metadata key {} ({}) is not above the highest inode ({}): foreign or damaged; raised to {}",
                  stored.from_hwm ? kInoHwmKey : kLegacyNextInoKey, mark, highest, highest + 1 + kRepairMargin);
    mark = highest + 1 + kRepairMargin;
  }
  size_t removed = 0;
  for (uint64_t tag : strays) {
    Status s = cte_->DelTag(tag);
    if (s.ok()) {
      ++removed;
    } else {
      CLIO_LOG_ERROR("removing the blobs of inode number {}, which has no inode: {} (tried again at the next start)",
                     tag, s.ToString());
    }
  }
  if (!strays.empty()) {
    CLIO_LOG_WARN("removed the blobs of {} inode numbers that have no inode (the first: {}): data of files "
                  "whose creation a crash lost, or of a damaged index", removed, strays.front());
  }
  {
    // From here on the durable-size records of this run count (after the repairs above: a
    // crash before the sync below leaves neither or both).
    KvBatch b;
    Encoder e;
    e.Put<uint64_t>(incarnation_);
    b.Put(std::string(kLastRunKey), e.Take());
    CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
  }
  // This run's numbers start at the old mark: past everything handed out before, so a kernel
  // holding a node id from before the restart never meets it on another file.
  next_ino_ = mark;
  ino_hwm_ = mark;
  CLIO_RETURN_IF_ERROR(ReserveInodes());
  CLIO_LOG_INFO("{} inodes (the highest {}); new inode numbers from {}, reserved up to {}", inodes + 1, highest,
                next_ino_, ino_hwm_);
  return Status::Ok();
}

Status Namespace::ReconcileFile(uint64_t ino, std::string_view value, const StartTag* st, uint64_t last_run,
                                KvBatch* b, StartRepairs* r) {
  std::string target;
  auto decoded = DecodeInode(value, &target);
  if (!decoded.ok() || !S_ISREG(decoded->mode)) return Status::Ok();  // a damaged record fails when used
  InodeAttr a = std::move(decoded).value();
  // Where the file's bytes end; a damaged index naming a blob past every file counts as past it.
  uint64_t end = 0;
  if (st && st->has_data)
    end = st->last_blob >= kMaxFileSize / chunk_size_ ? kMaxFileSize + 1 : st->last_blob * chunk_size_ + st->last_end;
  const InodeAttr before = a;
  int64_t delta = 0;
  constexpr uint64_t kLogEach = 16;  // files named one by one; the rest are counted
  if (end > a.size) {
    CLIO_RETURN_IF_ERROR(ClipData(ino, a.size, &delta));
    if (++r->clipped <= kLogEach)
      CLIO_LOG_WARN("metadata key i/{}: the blobs of inode {} held bytes up to {}, past its size {} (a write "
                    "whose size update a crash lost); clipped to the size", ino, ino, end, a.size);
    end = a.size;
  }
  if (st && st->lost) {
    ++r->lost;
    // What was durable stays (the size at the crashed run's start or last fsync); past it,
    // only what the crash left. A file whose size that run never changed keeps it.
    uint64_t durable = a.size;
    CLIO_ASSIGN_OR_RETURN(auto dv, kv_->Get(DurableSizeKey(ino)));
    if (dv) {
      auto d = DecodeDurableSize(*dv);
      if (!d.ok()) {
        CLIO_LOG_WARN("metadata key s/{} is damaged ({}); the size of inode {} is kept", ino, d.status().message(), ino);
      } else if (d->run == last_run && last_run != 0) {
        durable = d->size;
      }
    }
    // The end of the file was lost: it goes back to its durable size, a state it had (where
    // the remaining bytes end may be no size it ever had: a chunk of a write flushed, the
    // next one not), and what lies past that is forgotten like any unsynced write.
    if (a.size > end && a.size > durable) {
      if (++r->shrunk <= kLogEach)
        CLIO_LOG_WARN("metadata key i/{}: the size {} of inode {} covered bytes a crash lost (never flushed or "
                      "fsynced; the remaining bytes end at {}); set back to its durable size {}",
                      ino, a.size, ino, end, durable);
      int64_t clipped = 0;
      CLIO_RETURN_IF_ERROR(ClipData(ino, durable, &clipped));
      delta += clipped;
      a.size = durable;
    }
  }
  const uint64_t stored = st ? (delta < 0 && static_cast<uint64_t>(-delta) > st->stored ? 0 : st->stored + delta) : 0;
  if (a.stored != stored) {
    ++r->recounted;
    a.stored = stored;
  }
  if (a.size != before.size || a.stored != before.stored) b->Put(InodeKey(ino), EncodeInode(a, target));
  return Status::Ok();
}

Status Namespace::ReserveInodes() {
  const uint64_t mark = ino_hwm_ + inode_batch_;
  if (mark > kMaxIno) return NoSpace("no inode numbers left (the largest is " + std::to_string(kMaxIno) + ")");
  KvBatch b;
  b.Put(std::string(kInoHwmKey), EncodeInoHwm(mark));
  // What a format-3 runtime reads as its next number: one started on this store after a
  // downgrade goes on past the mark instead of over existing inodes.
  Encoder legacy;
  legacy.Put<uint64_t>(mark);
  b.Put(std::string(kLegacyNextInoKey), legacy.Take());
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
  // Durable before the first number of the batch is handed out.
  CLIO_RETURN_IF_ERROR(kv_->Sync());
  ino_hwm_ = mark;
  return Status::Ok();
}

uint64_t Namespace::inode_high_water() {
  MutexLock l(&mu_);
  return ino_hwm_;
}

Status Namespace::FinishPendingTruncations() {
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

Status Namespace::EndReclaimWindow() {
  // Files whose last name went away and that nobody holds open: their keys go under mu_, so
  // no Reattach or open can count one in between; their blobs after.
  std::vector<uint64_t> gone;
  size_t kept = 0;
  {
    MutexLock l(&mu_);
    reclaiming_ = false;  // from here on a last close or unlink removes an orphan at once
    CLIO_ASSIGN_OR_RETURN(KvPairs orphans, kv_->Scan("o/", "", 0));
    for (auto& [k, _] : orphans) {
      const uint64_t ino = ReadBigEndian64(std::string_view(k).substr(2));
      auto it = open_counts_.find(ino);
      if (it != open_counts_.end() && it->second > 0) {
        ++kept;
        continue;
      }
      CLIO_RETURN_IF_ERROR(DeleteFileKeys(ino));
      gone.push_back(ino);
    }
  }
  for (uint64_t ino : gone) CLIO_RETURN_IF_ERROR(cte_->DelTag(ino));
  if (!gone.empty() || kept != 0)
    CLIO_LOG_INFO("removed the data of {} unlinked files; {} still open are kept until their last close", gone.size(), kept);
  return Status::Ok();
}

void Namespace::ReclaimerLoop() {
  {
    MutexLock l(&reclaim_mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(orphan_reclaim_s_);
    while (!closing_ && std::chrono::steady_clock::now() < deadline) {
      reclaim_cv_.WaitFor(&reclaim_mu_, deadline - std::chrono::steady_clock::now());
    }
    if (closing_) return;  // a stop within the window: the next start keeps them again
  }
  if (!reclaiming()) return;  // ended early (EndReclaimWindow)
  Status s = EndReclaimWindow();
  if (!s.ok()) CLIO_LOG_ERROR("removing unclaimed orphans after the reclaim window: {}", s.ToString());
}

bool Namespace::reclaiming() {
  MutexLock l(&mu_);
  return reclaiming_;
}

Result<std::vector<bool>> Namespace::Reattach(const std::vector<NodeClaim>& claims, bool begin, bool complete) {
  std::vector<bool> exists(claims.size(), false);
  {
    MutexLock l(&mu_);
    if (begin) open_counts_.clear();
    for (size_t i = 0; i < claims.size(); ++i) {
      const NodeClaim& c = claims[i];
      CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(c.ino)));
      exists[i] = v.has_value();
      if (!exists[i]) continue;
      // The mount's count replaces ours: it is every open it holds, none in flight.
      if (c.opens > 0) open_counts_[c.ino] = c.opens;
    }
  }
  if (complete) {
    // The mount (one per runtime) declared all it holds: no one else can claim an orphan.
    CLIO_RETURN_IF_ERROR(EndReclaimWindow());
  }
  return exists;
}

Result<InodeAttr> Namespace::LoadInode(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NoInode(ino);
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
  auto dent = LoadDentry(parent, name);
  if (!dent.ok()) {
    // No such name; in a directory that is gone itself, the kernel holds a stale node.
    if (dent.status().code() == Code::kNotFound) {
      CLIO_ASSIGN_OR_RETURN(auto dir, kv_->Get(InodeKey(parent)));
      if (!dir) return NoInode(parent);
    }
    return dent.status();
  }
  return LoadInode(dent->first);
}

Result<InodeAttr> Namespace::GetAttr(uint64_t ino) { return LoadInode(ino); }

Result<InodeAttr> Namespace::SetAttr(uint64_t ino, const SetAttrRequest& req) {
  MutexLock l(&mu_);
  std::string target;
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NoInode(ino);
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*v, &target));
  int64_t now = NowNs();
  bool shrink = false, clip_kept = false;
  KvBatch b;
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
    CLIO_RETURN_IF_ERROR(NoteSizeChange(ino, a.size, req.size, &b));
    // Room fallocate kept past the new end goes, as a truncation frees preallocated blocks
    // past it (also one to the same size; growing keeps them).
    clip_kept = req.size <= a.size && !KeptOf(ino).empty() && KeptOf(ino).max_end() > req.size;
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
  b.Put(InodeKey(ino), EncodeInode(a, target));
  if (shrink) {
    // The new size and the intent to clip commit together; a crash before the blobs are
    // clipped is finished at the next start, so no half-truncated file survives.
    Encoder e;
    e.Put<uint64_t>(a.size);
    b.Put(TruncateKey(ino), e.Take());
  }
  if (clip_kept) {
    const RangeSet kept = KeptOf(ino);
    RangeSet clipped = kept;
    clipped.ClipTo(a.size);
    CLIO_RETURN_IF_ERROR(KeepRanges(ino, kept, clipped));  // less room: cannot fail for room
    SetKept(ino, std::move(clipped), &b);
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
  if (next_ino_ >= ino_hwm_) CLIO_RETURN_IF_ERROR(ReserveInodes());
  int64_t now = NowNs();
  InodeAttr a;
  a.ino = next_ino_++;  // used up even if the commit fails: a number is never handed out twice
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
  // A new file's durable size is 0 until an fsync: its writes need not look it up.
  if (S_ISREG(mode)) b.Put(DurableSizeKey(a.ino), EncodeDurableSize({0, incarnation_}));
  CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
  if (S_ISREG(mode)) NotedDurable(a.ino);
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
  if (!v) return NoInode(ino);
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
    } else if (a.status().code() == Code::kStale) {
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
  // Room fallocate keeps counts as used, as preallocated blocks do: the copies' half that no
  // copy fills yet (the other half is the room a copy-on-write flush of the range needs).
  const uint64_t kept = cte_->KeptUnfilled();
  rem = rem > kept ? rem - kept : 0;
  s.blocks = cap / s.block_size;
  s.blocks_free = rem / s.block_size;
  s.files = 1ull << 40;
  s.files_free = (1ull << 40) - 1;
  return s;
}

}  // namespace clio
