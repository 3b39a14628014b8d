// File data through the CTE: read, write, truncation, fsync.
#include "fs/namespace/namespace.h"

#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>
#include <linux/falloc.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "common/codec.h"
#include "common/log.h"
#include "fs/namespace/ns_keys.h"
#include "placement/blob_index.h"
#include "placement/cte.h"
#include "storage/kv.h"

namespace clio {

using namespace ns;  // keys and encodings of this module

Status Namespace::FinishTruncate(uint64_t ino, uint64_t size) {
  int64_t delta = 0;
  CLIO_RETURN_IF_ERROR(ClipData(ino, size, &delta));
  KvBatch b;
  b.Delete(TruncateKey(ino));
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (v) {
    CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*v, nullptr));
    AddStored(&a, delta);
    b.Put(InodeKey(ino), EncodeInode(a, {}));
  }
  return Commit(std::move(b));
}


Status Namespace::ClipData(uint64_t ino, uint64_t new_size, int64_t* stored_delta) {
  *stored_delta = 0;
  CLIO_ASSIGN_OR_RETURN(auto blobs, cte_->ListBlobs(ino));
  for (uint64_t b : blobs) {
    uint64_t start = b * chunk_size_;
    int64_t d = 0;
    if (start >= new_size) {
      CLIO_RETURN_IF_ERROR(cte_->DelBlob(ino, b, &d));
    } else if (start + chunk_size_ > new_size) {
      CLIO_RETURN_IF_ERROR(cte_->TruncateBlob(ino, b, new_size - start, &d));
    }
    *stored_delta += d;
  }
  return Status::Ok();
}

void Namespace::AddStored(InodeAttr* a, int64_t delta) {
  // A statistic for st_blocks: it may drift after a crash (blob and inode changes commit
  // apart, volatile copies vanish) but never goes below zero.
  a->stored = delta < 0 && static_cast<uint64_t>(-delta) > a->stored ? 0 : a->stored + static_cast<uint64_t>(delta);
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

Result<uint64_t> Namespace::Write(uint64_t ino, uint64_t offset, std::string_view data, bool touch_times) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  if (!S_ISREG(a.mode)) return Status(Code::kIsDirectory, "write to something not a regular file");
  if (data.empty()) return uint64_t{0};
  if (offset > kMaxFileSize || data.size() > kMaxFileSize - offset)
    return Status(Code::kOutOfRange, "write past the largest file size");
  uint64_t done = 0;
  int64_t stored_delta = 0;
  Status failed;
  while (done < data.size()) {
    uint64_t pos = offset + done;
    uint64_t chunk = pos / chunk_size_, in = pos % chunk_size_;
    uint64_t piece = std::min<uint64_t>(data.size() - done, chunk_size_ - in);
    int64_t d = 0;
    failed = cte_->PutBlob(ino, chunk, in, data.substr(done, piece), &d);
    if (!failed.ok()) break;
    stored_delta += d;
    done += piece;
  }
  // A write that stored only a prefix (a tier filled up) is a short write: the size covers
  // exactly the bytes stored, so nothing unwritten ever becomes visible.
  if (done == 0) return failed;
  // An overwrite inside the file that stored no new bytes, while the kernel keeps the times (a
  // mount with the writeback cache), changes nothing in the inode: no update, so no namespace
  // lock on the common path of random overwrites. What is left to check is that the file still
  // exists and is still that long (a truncate or unlink that came first goes the locked way).
  if (!touch_times && stored_delta == 0) {
    CLIO_ASSIGN_OR_RETURN(auto now, kv_->Get(InodeKey(ino)));
    if (now) {
      CLIO_ASSIGN_OR_RETURN(InodeAttr cur, DecodeInode(*now, nullptr));
      if (offset + done <= cur.size) return done;
    }
  }
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) {
    // Unlinked and released while this write was in flight: drop what it stored.
    (void)cte_->DelTag(ino);
    return Status(Code::kStale, "inode " + Hex(ino) + " was removed during the write");
  }
  CLIO_ASSIGN_OR_RETURN(a, DecodeInode(*v, nullptr));
  KvBatch b;
  const uint64_t old_size = a.size;
  a.size = std::max<uint64_t>(a.size, offset + done);
  CLIO_RETURN_IF_ERROR(NoteSizeChange(ino, old_size, a.size, &b));
  AddStored(&a, stored_delta);
  if (touch_times) a.mtime_ns = a.ctime_ns = NowNs();
  b.Put(InodeKey(ino), EncodeInode(a, {}));
  CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
  return done;
}

Status Namespace::Fsync(uint64_t ino) {
  CLIO_RETURN_IF_ERROR(cte_->FlushTag(ino));
  {
    // The size the flushed bytes back is durable from here: a crash that later loses
    // unsynced bytes of the file never takes it below this (ReconcileFile).
    MutexLock l(&mu_);
    CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
    if (!v) return NoInode(ino);
    CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*v, nullptr));
    if (S_ISREG(a.mode)) {
      CLIO_ASSIGN_OR_RETURN(auto was, kv_->Get(DurableSizeKey(ino)));
      std::string now = EncodeDurableSize({a.size, incarnation_});
      if (!was || *was != now) {
        KvBatch b;
        b.Put(DurableSizeKey(ino), std::move(now));
        CLIO_RETURN_IF_ERROR(Commit(std::move(b)));
      }
      NotedDurable(ino);
    }
  }
  return kv_->Sync();
}

void Namespace::NotedDurable(uint64_t ino) {
  constexpr size_t kMaxNoted = 1u << 20;
  if (durable_noted_.size() >= kMaxNoted) durable_noted_.clear();
  durable_noted_.insert(ino);
}

Status Namespace::NoteSizeChange(uint64_t ino, uint64_t old_size, uint64_t new_size, KvBatch* b) {
  if (new_size == old_size) return Status::Ok();
  const bool noted = durable_noted_.contains(ino);
  if (noted && new_size > old_size) return Status::Ok();  // growth keeps the record this run wrote
  // Before the first change of this run the size is the one the run started with (or the
  // last fsync's, which wrote its record).
  DurableSize rec{old_size, incarnation_};
  std::optional<std::string> was;
  CLIO_ASSIGN_OR_RETURN(was, kv_->Get(DurableSizeKey(ino)));
  if (was) {
    auto d = DecodeDurableSize(*was);
    if (d.ok() && d->run == incarnation_) rec = *d;
  }
  rec.size = std::min(rec.size, new_size);  // a truncation below it lowers it
  std::string now = EncodeDurableSize(rec);
  if (!was || *was != now) b->Put(DurableSizeKey(ino), std::move(now));
  NotedDurable(ino);
  return Status::Ok();
}

Result<FileLocation> Namespace::Locate(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  if (S_ISDIR(a.mode)) return Status(Code::kIsDirectory, "locate of a directory (it has no data chunks)");
  if (!S_ISREG(a.mode)) return InvalidArgument("locate of a special file (it has no data chunks)");
  FileLocation f;
  f.ino = ino;
  f.size = a.size;
  f.chunk_size = chunk_size_;
  CLIO_ASSIGN_OR_RETURN(std::vector<uint64_t> blobs, cte_->ListBlobs(ino));
  for (uint64_t blob : blobs) {
    CLIO_ASSIGN_OR_RETURN(std::vector<CopyLocation> copies, cte_->LocateBlob(ino, blob));
    if (copies.empty()) continue;  // removed since it was listed
    ChunkLocation c;
    c.index = blob;
    for (const CopyLocation& l : copies) {
      ChunkCopy k{l.tier_id, l.dirty, l.bytes, {}};
      for (const Extent& e : l.extents) k.extents.emplace_back(e.offset, e.size);
      c.copies.push_back(std::move(k));
    }
    f.chunks.push_back(std::move(c));
  }
  return f;
}

Status Namespace::Flush(uint64_t ino, bool* clean) {
  bool dirty = true;
  Status s = cte_->TakeFlushError(ino, &dirty);
  if (clean != nullptr) *clean = s.ok() && !dirty;
  return s;
}

namespace {

// ForClient looks at most this many chunks of a file's kept ranges for written bytes.
constexpr size_t kMaxKeptChunksLooked = 4096;

// The bytes of chunk `c` (of `cs` bytes) that a copy must span to hold what `r` covers in it:
// from the chunk's start to the furthest covered byte; 0 when nothing.
uint64_t ChunkSpan(const RangeSet& r, uint64_t c, uint64_t cs) {
  const RangeSet in = r.Intersect(c * cs, (c + 1) * cs);
  return in.empty() ? 0 : in.max_end() - c * cs;
}

// The chunks `r` touches, ascending.
std::vector<uint64_t> Chunks(const RangeSet& r, uint64_t cs) {
  std::vector<uint64_t> out;
  for (const auto& x : r.ranges())
    for (uint64_t c = x.begin / cs; c <= (x.end - 1) / cs; ++c)
      if (out.empty() || out.back() < c) out.push_back(c);
  return out;
}

}  // namespace

RangeSet Namespace::KeptOf(uint64_t ino) {
  auto it = kept_.find(ino);
  return it == kept_.end() ? RangeSet() : it->second;
}

void Namespace::SetKept(uint64_t ino, RangeSet r, KvBatch* b) {
  if (r.empty()) {
    kept_.erase(ino);
    b->Delete(KeptKey(ino));
  } else {
    b->Put(KeptKey(ino), EncodeKept(r));
    kept_[ino] = std::move(r);
  }
}

Status Namespace::KeepRanges(uint64_t ino, const RangeSet& before, const RangeSet& after) {
  RangeSet both = before;
  for (const auto& x : after.ranges()) both.Add(x.begin, x.end);
  std::vector<uint64_t> done;
  for (uint64_t c : Chunks(both, chunk_size_)) {
    const uint64_t want = ChunkSpan(after, c, chunk_size_);
    if (want == ChunkSpan(before, c, chunk_size_)) continue;
    Status s = cte_->KeepRoom(ino, c, want);
    if (!s.ok()) {
      for (uint64_t d : done) (void)cte_->KeepRoom(ino, d, ChunkSpan(before, d, chunk_size_));
      return s.WithContext("fallocate of inode " + Hex(ino));
    }
    done.push_back(c);
  }
  return Status::Ok();
}

Status Namespace::RestoreKept() {
  CLIO_ASSIGN_OR_RETURN(KvPairs all, kv_->Scan("r/", "", 0));
  for (auto& [k, v] : all) {
    const uint64_t ino = k.size() == 10 ? ReadBigEndian64(std::string_view(k).substr(2)) : 0;
    auto r = DecodeKept(v);
    CLIO_ASSIGN_OR_RETURN(auto inode, kv_->Get(InodeKey(ino)));
    Status bad = r.status();
    if (bad.ok() && !inode) bad = NotFound("no inode " + Hex(ino));
    if (bad.ok()) {
      auto a = DecodeInode(*inode, nullptr);
      if (!a.ok() || !S_ISREG(a->mode)) bad = InvalidArgument("inode " + Hex(ino) + " is not a regular file");
    }
    if (!bad.ok()) {
      // Nothing the record could stand for: dropped, said once.
      CLIO_LOG_WARN("metadata key r/{} (room fallocate kept): {}; removed", ino, bad.message());
      KvBatch b;
      b.Delete(k);
      CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
      continue;
    }
    Status s = KeepRanges(ino, {}, *r);
    if (!s.ok()) {
      // The room is not there now (a tier removed, dying or shrunk): the file keeps its data
      // and its record, and the next start tries again; until then writes may meet ENOSPC.
      CLIO_LOG_WARN("metadata key r/{}: the room fallocate kept for inode {} is not kept again ({}); "
                    "writes to its ranges may meet ENOSPC until a start finds the room", ino, ino, s.ToString());
    }
    kept_[ino] = std::move(r).value();
  }
  if (!kept_.empty()) CLIO_LOG_INFO("kept the room fallocate reserved for {} files", kept_.size());
  return Status::Ok();
}

void Namespace::ForClient(InodeAttr* a) {
  if (!S_ISREG(a->mode)) return;
  RangeSet kept;
  {
    MutexLock l(&mu_);
    if (kept_.empty()) return;
    kept = KeptOf(a->ino);
  }
  if (kept.empty()) return;
  // Kept bytes no copy holds yet count as the file's blocks, as preallocated ones do. One
  // look at the index per kept chunk; past a bound the kept bytes count whole.
  const std::vector<uint64_t> chunks = Chunks(kept, chunk_size_);
  if (chunks.size() > kMaxKeptChunksLooked) {
    a->stored = std::max(a->stored, kept.bytes());
    return;
  }
  uint64_t unwritten = 0;
  for (uint64_t c : chunks) {
    RangeSet in = kept.Intersect(c * chunk_size_, (c + 1) * chunk_size_);
    auto written = cte_->BlobRanges(a->ino, c);
    if (written.ok()) {
      for (const auto& w : written->ranges()) in.Subtract(c * chunk_size_ + w.begin, c * chunk_size_ + w.end);
    }
    unwritten += in.bytes();
  }
  a->stored += unwritten;
}

Status Namespace::Fallocate(uint64_t ino, uint32_t mode, uint64_t offset, uint64_t len) {
  if (len == 0) return InvalidArgument("fallocate of zero bytes");
  if (offset > kMaxFileSize || len > kMaxFileSize - offset)
    return Status(Code::kOutOfRange, "fallocate past the largest file size");
  const bool keep = mode & FALLOC_FL_KEEP_SIZE;
  const bool punch = mode & FALLOC_FL_PUNCH_HOLE;
  if (mode & ~static_cast<uint32_t>(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE))
    return Status(Code::kNotSupported, "fallocate mode not supported (only default, KEEP_SIZE, PUNCH_HOLE)");
  if (punch && !keep) return InvalidArgument("PUNCH_HOLE needs KEEP_SIZE");
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  if (S_ISDIR(a.mode)) return Status(Code::kIsDirectory, "fallocate on a directory");
  if (!S_ISREG(a.mode)) return Status(Code::kNoSuchOffset, "fallocate on a special file");
  int64_t stored_delta = 0;
  if (punch) {
    // Whole chunks inside the hole lose their blobs; the edges are clipped.
    uint64_t end = std::min(offset + len, a.size);
    for (uint64_t pos = offset; pos < end;) {
      uint64_t chunk = pos / chunk_size_, in = pos % chunk_size_;
      uint64_t piece = std::min(end - pos, chunk_size_ - in);
      int64_t d = 0;
      CLIO_RETURN_IF_ERROR(piece == chunk_size_ ? cte_->DelBlob(ino, chunk, &d)
                                                : cte_->PunchBlob(ino, chunk, in, piece, &d));
      stored_delta += d;
      pos += piece;
    }
  }
  // The size is compared and raised under mu_ against the current inode, never lowered, and
  // nothing is clipped: the kernel does not hold back writeback for fallocate as it does for
  // truncate, so a write may be storing blobs past the old size right now.
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(InodeKey(ino)));
  if (!v) return NoInode(ino);
  CLIO_ASSIGN_OR_RETURN(a, DecodeInode(*v, nullptr));
  const RangeSet before = KeptOf(ino);
  RangeSet after = before;
  if (punch) after.Subtract(offset, offset + len);
  else after.Add(offset, offset + len);
  CLIO_RETURN_IF_ERROR(KeepRanges(ino, before, after));
  KvBatch b;
  if (!(after == before)) SetKept(ino, after, &b);
  if (!keep || punch) {
    // The default mode sets the size (and the times); a punch changes the bytes. KEEP_SIZE
    // alone changes neither.
    if (!keep) {
      const uint64_t old_size = a.size;
      a.size = std::max(a.size, offset + len);
      CLIO_RETURN_IF_ERROR(NoteSizeChange(ino, old_size, a.size, &b));
    }
    AddStored(&a, stored_delta);
    a.mtime_ns = a.ctime_ns = NowNs();
    b.Put(InodeKey(ino), EncodeInode(a, {}));
  }
  Status s = b.empty() ? Status::Ok() : Commit(std::move(b));
  if (!s.ok()) {
    if (Status u = KeepRanges(ino, after, before); !u.ok())
      CLIO_LOG_ERROR("fallocate of inode {} failed ({}), and putting its kept room back failed too: {}", ino,
                     s.ToString(), u.ToString());
    if (!(after == before)) {
      KvBatch undo;  // only the map: the record was not written
      SetKept(ino, before, &undo);
    }
  }
  return s;
}

}  // namespace clio
