// AllocLog: the allocator's write-ahead log for file tiers. Format: docs/alloc-log.md.
//
// The allocator tells the log about every allocation and free under its lock (AllocObserver);
// the log buffers those records in allocator order, and Flush() writes them to the log file
// through the I/O layer. The file transport flushes before Allocate()/Free() return and syncs
// in Bdev::Sync() (and every 50 ms from its background thread).
//
// Replay applies the records in order to a map offset -> (size, live|free), each record
// replacing the earlier entries it overlaps (free space is split and merged): the live blocks
// become allocated and everything else below the highest block end is free, so a live extent
// is never handed out twice after a restart. A torn tail (a record whose checksum fails, or a partial record) is
// ignored and cut off.
//
// Lock order: allocator mutex -> io_mu_ -> buf_mu_.
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "storage/allocator.h"
#include "storage/bdev.h"
#include "storage/io.h"

namespace clio {

class AllocLog final : public AllocObserver {
 public:
  // 2: blocks may be split and merged (records can overlap earlier ones).
  // 3: "written" records (object tiers: the block's object has been stored).
  // Versions 1 and 2 replay the same way and are still read.
  static constexpr uint32_t kVersion = 3;
  static constexpr size_t kHeaderSize = 32;
  static constexpr size_t kRecordSize = 25;

  struct Replay {
    ExtentList live;
    ExtentList free;
    ExtentList written;          // live blocks with a "written" record since their allocation
    uint64_t records = 0;        // valid records applied
    uint64_t ignored_bytes = 0;  // torn tail cut off
  };

  // Opens the log at `path`, creating it (header synced) when missing or empty. An existing
  // log is checked (Corruption on a bad magic, an unknown version or another tier's id) and
  // replayed into `*replay`.
  static Result<std::unique_ptr<AllocLog>> Open(const std::string& path, uint64_t tier_id,
                                                const IoOptions& io, Replay* replay);

  ~AllocLog() override;

  void OnAllocate(const ExtentList& blocks) override EXCLUDES(buf_mu_);
  void OnFree(const ExtentList& blocks) override EXCLUDES(buf_mu_);
  // Records that live `blocks` now hold data (object tiers, where a never-written block reads
  // as zeros without a request and a written one whose object is missing is an error).
  // Buffered like the others; durable at the next Sync().
  void OnWritten(const ExtentList& blocks) EXCLUDES(buf_mu_);

  // Writes every buffered record to the log file. On error the records stay buffered and are
  // written by the next Flush().
  Status Flush() EXCLUDES(io_mu_, buf_mu_);
  // Flush() then fdatasync of the log.
  Status Sync() EXCLUDES(io_mu_, buf_mu_);
  // True when records were appended since the last successful Sync().
  bool NeedsSync() EXCLUDES(io_mu_, buf_mu_);

  // Rewrites the log as one alloc record per live block, one free record per free block and
  // one written record per block of `written` (a subset of `live`): "<path>.tmp", fsync,
  // rename over the log, fsync the directory. Buffered records are dropped (the snapshot
  // supersedes them), so call it inside BlockAllocator::WithSnapshot, and with whatever lock
  // orders OnWritten() calls against the snapshot of `written`.
  Status Compact(const ExtentList& live, const ExtentList& free, const ExtentList& written = {})
      EXCLUDES(io_mu_, buf_mu_);

  const std::string& path() const { return path_; }
  uint64_t size_bytes() EXCLUDES(io_mu_);

 private:
  AllocLog(std::string path, uint64_t tier_id, IoOptions io, std::unique_ptr<IoFile> file,
           uint64_t size);
  void Append(uint8_t type, const ExtentList& blocks) EXCLUDES(buf_mu_);
  Status FlushLocked() REQUIRES(io_mu_) EXCLUDES(buf_mu_);

  const std::string path_;
  const uint64_t tier_id_;
  const IoOptions io_options_;

  Mutex io_mu_ ACQUIRED_BEFORE(buf_mu_);
  std::unique_ptr<IoFile> file_ GUARDED_BY(io_mu_);
  uint64_t file_size_ GUARDED_BY(io_mu_);  // end of the last record written
  bool unsynced_ GUARDED_BY(io_mu_) = false;

  Mutex buf_mu_;
  std::string pending_ GUARDED_BY(buf_mu_);  // encoded records not yet written
};

// The tier id in the header of the log at `path` (Corruption when it is not a valid log).
Result<uint64_t> ReadAllocLogTierId(const std::string& path);

// Encoding helpers, exposed for tests that forge torn or foreign logs.
std::string EncodeAllocLogHeader(uint64_t tier_id, uint32_t version = AllocLog::kVersion);
std::string EncodeAllocLogRecord(bool alloc, const Extent& e);
std::string EncodeAllocLogWrittenRecord(const Extent& e);

}  // namespace clio
