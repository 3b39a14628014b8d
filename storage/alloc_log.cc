#include "storage/alloc_log.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "common/codec.h"
#include "common/log.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

constexpr char kMagic[8] = {'C', 'L', 'I', 'O', 'A', 'L', 'O', 'G'};
constexpr uint8_t kTypeAlloc = 1;
constexpr uint8_t kTypeFree = 2;
constexpr uint8_t kTypeWritten = 3;
// Replay reads this many records per I/O.
constexpr uint64_t kReplayChunkRecords = 40960;

uint64_t Checksum(const char* p, size_t n) { return XXH3_64bits(p, n); }

void EncodeRecord(std::string* out, uint8_t type, const Extent& e) {
  Encoder enc;
  enc.Put<uint8_t>(type).Put<uint64_t>(e.offset).Put<uint64_t>(e.size);
  std::string& b = enc.buffer();
  enc.Put<uint64_t>(Checksum(b.data(), b.size()));
  out->append(enc.buffer());
}

struct BlockState {
  uint64_t size = 0;
  bool live = false;
  bool written = false;
};
using BlockMap = std::map<uint64_t, BlockState>;

// Replay step: `e` (live or free) replaces whatever earlier blocks it overlaps.
void ApplyRecord(BlockMap* blocks, const Extent& e, bool live) {
  const uint64_t end = e.offset > UINT64_MAX - e.size ? UINT64_MAX : e.offset + e.size;
  auto it = blocks->lower_bound(e.offset);
  if (it != blocks->begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > e.offset) it = prev;
  }
  while (it != blocks->end() && it->first < end) it = blocks->erase(it);
  blocks->emplace(e.offset, BlockState{e.size, live, false});
}

// A written record marks the live block it names exactly; anything else is stale (the block
// was freed after it) and ignored.
void ApplyWritten(BlockMap* blocks, const Extent& e) {
  auto it = blocks->find(e.offset);
  if (it != blocks->end() && it->second.live && it->second.size == e.size) it->second.written = true;
}

}  // namespace

std::string EncodeAllocLogHeader(uint64_t tier_id, uint32_t version) {
  Encoder enc;
  enc.PutRaw(std::string_view(kMagic, sizeof(kMagic)));
  enc.Put<uint32_t>(version).Put<uint32_t>(0).Put<uint64_t>(tier_id);
  std::string& b = enc.buffer();
  enc.Put<uint64_t>(Checksum(b.data(), b.size()));
  return enc.Take();
}

std::string EncodeAllocLogRecord(bool alloc, const Extent& e) {
  std::string s;
  EncodeRecord(&s, alloc ? kTypeAlloc : kTypeFree, e);
  return s;
}

std::string EncodeAllocLogWrittenRecord(const Extent& e) {
  std::string s;
  EncodeRecord(&s, kTypeWritten, e);
  return s;
}

Result<uint64_t> ReadAllocLogTierId(const std::string& path) {
  IoOptions opts;
  CLIO_ASSIGN_OR_RETURN(auto file, OpenIoFile(path, opts));
  CLIO_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  if (size < AllocLog::kHeaderSize) return Corruption("alloc log " + path + ": no header");
  char hdr[AllocLog::kHeaderSize];
  CLIO_RETURN_IF_ERROR(file->Read(0, AllocLog::kHeaderSize, hdr));
  if (std::memcmp(hdr, kMagic, sizeof(kMagic)) != 0) {
    return Corruption("alloc log " + path + ": bad magic (not a CLIO allocator log)");
  }
  uint64_t id = 0, sum = 0;
  std::memcpy(&id, hdr + 16, 8);
  std::memcpy(&sum, hdr + 24, 8);
  if (sum != Checksum(hdr, AllocLog::kHeaderSize - 8)) {
    return Corruption("alloc log " + path + ": header checksum mismatch");
  }
  return id;
}

AllocLog::AllocLog(std::string path, uint64_t tier_id, IoOptions io, std::unique_ptr<IoFile> file,
                   uint64_t size)
    : path_(std::move(path)), tier_id_(tier_id), io_options_(io), file_(std::move(file)),
      file_size_(size) {}

AllocLog::~AllocLog() {
  // Best effort: hand buffered records to the file (the page cache). Durability is Sync()'s job.
  Status s = Flush();
  if (!s.ok()) CLIO_LOG_WARN("alloc log {}: final flush failed: {}", path_, s.ToString());
}

Result<std::unique_ptr<AllocLog>> AllocLog::Open(const std::string& path, uint64_t tier_id,
                                                 const IoOptions& io, Replay* replay) {
  *replay = Replay{};
  IoOptions opts = io;
  opts.create = true;
  opts.exclusive = false;
  CLIO_ASSIGN_OR_RETURN(auto file, OpenIoFile(path, opts));
  CLIO_ASSIGN_OR_RETURN(uint64_t size, file->Size());

  if (size < kHeaderSize) {
    // A new log, or one whose creation was cut short: no record can follow a header that was
    // never synced, so starting over loses nothing.
    if (size > 0) {
      CLIO_LOG_WARN("alloc log {}: torn header ({} bytes); starting a new log", path, size);
      CLIO_RETURN_IF_ERROR(file->Truncate(0));
    }
    CLIO_RETURN_IF_ERROR(file->Write(0, EncodeAllocLogHeader(tier_id)));
    CLIO_RETURN_IF_ERROR(file->Sync());
    CLIO_RETURN_IF_ERROR(SyncParentDir(path));
    return std::unique_ptr<AllocLog>(new AllocLog(path, tier_id, io, std::move(file),
                                                  kHeaderSize));
  }

  // Header.
  char hdr[kHeaderSize];
  CLIO_RETURN_IF_ERROR(file->Read(0, kHeaderSize, hdr));
  if (std::memcmp(hdr, kMagic, sizeof(kMagic)) != 0) {
    return Corruption("alloc log " + path + ": bad magic (not a CLIO allocator log)");
  }
  Decoder dec(std::string_view(hdr + sizeof(kMagic), kHeaderSize - sizeof(kMagic)));
  uint32_t version = 0, flags = 0;
  uint64_t log_tier = 0, sum = 0;
  dec.Get(&version);
  dec.Get(&flags);
  dec.Get(&log_tier);
  dec.Get(&sum);
  if (version < 1 || version > kVersion) {
    return Corruption("alloc log " + path + ": format version " + std::to_string(version) +
                      " is unknown (this build reads versions 1 to " + std::to_string(kVersion) + ")");
  }
  if (sum != Checksum(hdr, kHeaderSize - 8)) {
    return Corruption("alloc log " + path + ": header checksum mismatch");
  }
  if (log_tier != tier_id) {
    return Corruption("alloc log " + path + " belongs to tier " + std::to_string(log_tier) +
                      ", not tier " + std::to_string(tier_id));
  }

  // Records, in order, until EOF or the first one that does not check out.
  // offset -> (size, live). A record supersedes every earlier block it overlaps: free space
  // is coalesced and split again, so a later block may cover parts of several earlier ones.
  BlockMap blocks;
  uint64_t pos = kHeaderSize;
  std::string buf;
  bool torn = false;
  while (pos < size && !torn) {
    uint64_t n = std::min<uint64_t>(size - pos, kReplayChunkRecords * kRecordSize);
    buf.resize(n);
    CLIO_RETURN_IF_ERROR(file->Read(pos, n, buf.data()));
    uint64_t i = 0;
    for (; i + kRecordSize <= n; i += kRecordSize) {
      const char* r = buf.data() + i;
      Decoder rd(std::string_view(r, kRecordSize));
      uint8_t type = 0;
      Extent e;
      uint64_t rsum = 0;
      rd.Get(&type);
      rd.Get(&e.offset);
      rd.Get(&e.size);
      rd.Get(&rsum);
      if (rsum != Checksum(r, kRecordSize - 8)) {
        torn = true;
        break;
      }
      if (type == kTypeWritten && version >= 3) {
        ApplyWritten(&blocks, e);
      } else if (type == kTypeAlloc || type == kTypeFree) {
        ApplyRecord(&blocks, e, type == kTypeAlloc);
      } else {
        return Corruption("alloc log " + path + ": record at " + std::to_string(pos + i) +
                          " has unknown type " + std::to_string(type));
      }
      ++replay->records;
    }
    pos += i;
    if (i < n && !torn) torn = true;  // a partial record at the end
  }
  if (pos < size) {
    replay->ignored_bytes = size - pos;
    CLIO_LOG_WARN("alloc log {}: ignored a torn tail of {} bytes after {} records", path,
                  replay->ignored_bytes, replay->records);
    // Cut it off, or records appended from now on would sit behind garbage and be lost.
    CLIO_RETURN_IF_ERROR(file->Truncate(pos));
    CLIO_RETURN_IF_ERROR(file->Sync());
  }
  for (const auto& [off, v] : blocks) {
    (v.live ? replay->live : replay->free).push_back({off, v.size});
    if (v.live && v.written) replay->written.push_back({off, v.size});
  }
  auto by_offset = [](const Extent& a, const Extent& b) { return a.offset < b.offset; };
  std::sort(replay->live.begin(), replay->live.end(), by_offset);
  std::sort(replay->free.begin(), replay->free.end(), by_offset);
  return std::unique_ptr<AllocLog>(new AllocLog(path, tier_id, io, std::move(file), pos));
}

void AllocLog::Append(uint8_t type, const ExtentList& blocks) {
  MutexLock l(&buf_mu_);
  for (const auto& e : blocks) EncodeRecord(&pending_, type, e);
}

void AllocLog::OnAllocate(const ExtentList& blocks) { Append(kTypeAlloc, blocks); }
void AllocLog::OnFree(const ExtentList& blocks) { Append(kTypeFree, blocks); }
void AllocLog::OnWritten(const ExtentList& blocks) { Append(kTypeWritten, blocks); }

Status AllocLog::FlushLocked() {
  std::string batch;
  {
    MutexLock l(&buf_mu_);
    batch.swap(pending_);
  }
  if (batch.empty()) return Status::Ok();
  Status s = file_->Write(file_size_, batch);
  if (!s.ok()) {
    // Keep the records, in order, ahead of anything appended meanwhile; the next flush
    // rewrites them at the same offset.
    MutexLock l(&buf_mu_);
    pending_.insert(0, batch);
    return s.WithContext("alloc log");
  }
  file_size_ += batch.size();
  unsynced_ = true;
  return Status::Ok();
}

Status AllocLog::Flush() {
  MutexLock l(&io_mu_);
  return FlushLocked();
}

Status AllocLog::Sync() {
  MutexLock l(&io_mu_);
  CLIO_RETURN_IF_ERROR(FlushLocked());
  if (!unsynced_) return Status::Ok();
  CLIO_RETURN_IF_ERROR(file_->Sync().WithContext("alloc log"));
  unsynced_ = false;
  return Status::Ok();
}

bool AllocLog::NeedsSync() {
  MutexLock l(&io_mu_);
  if (unsynced_) return true;
  MutexLock b(&buf_mu_);
  return !pending_.empty();
}

uint64_t AllocLog::size_bytes() {
  MutexLock l(&io_mu_);
  return file_size_;
}

Status AllocLog::Compact(const ExtentList& live, const ExtentList& free,
                         const ExtentList& written) {
  MutexLock l(&io_mu_);
  const std::string tmp = path_ + ".tmp";
  if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    return Status::FromErrno(errno, "unlink " + tmp);
  }
  std::string data = EncodeAllocLogHeader(tier_id_);
  data.reserve(kHeaderSize + (live.size() + free.size() + written.size()) * kRecordSize);
  for (const auto& e : live) EncodeRecord(&data, kTypeAlloc, e);
  for (const auto& e : free) EncodeRecord(&data, kTypeFree, e);
  for (const auto& e : written) EncodeRecord(&data, kTypeWritten, e);

  IoOptions opts = io_options_;
  opts.create = true;
  opts.exclusive = true;
  CLIO_ASSIGN_OR_RETURN(auto out, OpenIoFile(tmp, opts));
  CLIO_RETURN_IF_ERROR(out->Write(0, data));
  CLIO_RETURN_IF_ERROR(out->Sync());
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return Status::FromErrno(errno, "rename " + tmp + " to " + path_);
  }
  CLIO_RETURN_IF_ERROR(SyncParentDir(path_));
  // Reopen under the log's own name so later errors name the right file.
  opts.exclusive = false;
  auto reopened = OpenIoFile(path_, opts);
  file_ = reopened.ok() ? std::move(reopened).value() : std::move(out);
  file_size_ = data.size();
  unsynced_ = false;
  MutexLock b(&buf_mu_);
  pending_.clear();
  return Status::Ok();
}

}  // namespace clio
