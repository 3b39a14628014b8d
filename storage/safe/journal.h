// StripeJournal: the safe-bdev's write-ahead journal of stripe updates (docs/safe-bdev.md).
//
// Every stripe update is appended here, and made durable, before any of its chunks is written
// in place on the members. After a crash, Open() hands back every complete record of the
// current epoch, in order, and the array rewrites those chunks: a stripe is never left with
// parity that disagrees with its data (no write hole). Reset() starts a new epoch once every
// journaled update is durable on the members (a checkpoint).
//
// File: a 4 KiB header (magic, version, array id, epoch, checksum), then records, each
// aligned to 4 KiB: a 32-byte header (magic, entry count, epoch, sequence number, payload
// length, CRC32C of header and payload) and entries (u64 stripe, u64 incarnation, u32 slot,
// u32 length, the slot image). Replay stops at the first record that is torn, of another
// epoch, or out of sequence.
//
// Thread safety: Commit() may be called concurrently (appends are serialized, fdatasync is
// shared by the writers waiting for it); Reset() must not run concurrently with Commit().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "storage/io.h"

namespace clio {

class StripeJournal {
 public:
  static constexpr uint32_t kVersion = 1;
  static constexpr uint64_t kHeaderSize = 4096;
  static constexpr uint64_t kRecordAlign = 4096;
  static constexpr uint64_t kRecordHeaderSize = 32;
  static constexpr uint64_t kEntryHeaderSize = 24;

  struct Entry {
    uint64_t stripe = 0;
    uint64_t incarnation = 0;  // which device of the slot the image is for (member or target)
    uint32_t slot = 0;
    std::string_view image;  // chunk + trailer
  };
  using ReplayFn = std::function<Status(const Entry&)>;

  // Opens or creates the journal at `path` for array `array_id`, `size` bytes long, and calls
  // `replay` for every entry of every complete record, in order. Corruption when the file
  // belongs to another array or has an unknown version.
  static Result<std::unique_ptr<StripeJournal>> Open(const std::string& path, uint64_t array_id,
                                                     uint64_t size, const IoOptions& io,
                                                     const ReplayFn& replay, uint64_t* replayed);

  // Bytes one record of `entries` images of `image_bytes` each takes in the journal.
  static uint64_t RecordBytes(size_t entries, uint64_t image_bytes);

  // Appends one record and returns once it is durable. Busy when it does not fit before
  // the next Reset() (the caller checkpoints and retries); IoError from the file.
  Status Commit(const std::vector<Entry>& entries) EXCLUDES(mu_);

  // Starts a new epoch: every earlier record is discarded. Call only when no Commit() runs and
  // every committed update is durable where it belongs.
  Status Reset() EXCLUDES(mu_);

  uint64_t size() const { return size_; }
  uint64_t used() EXCLUDES(mu_);
  const std::string& path() const { return path_; }

 private:
  StripeJournal(std::string path, std::unique_ptr<IoFile> file, uint64_t array_id, uint64_t size)
      : path_(std::move(path)), file_(std::move(file)), array_id_(array_id), size_(size) {}
  Status WriteHeader(uint64_t epoch) REQUIRES(mu_);

  const std::string path_;
  const std::unique_ptr<IoFile> file_;
  const uint64_t array_id_;
  const uint64_t size_;

  // Appends hold mu_ across their (page-cache) write so records land in sequence order; the
  // fdatasync runs outside it, by one writer for all who wait.
  Mutex mu_;
  CondVar cv_;
  uint64_t epoch_ GUARDED_BY(mu_) = 1;
  uint64_t head_ GUARDED_BY(mu_) = kHeaderSize;  // where the next record goes
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;
  uint64_t written_seq_ GUARDED_BY(mu_) = 0;  // records written (not yet synced) up to this
  uint64_t synced_seq_ GUARDED_BY(mu_) = 0;   // records durable up to this
  bool syncing_ GUARDED_BY(mu_) = false;
  Status sync_error_ GUARDED_BY(mu_);
};

}  // namespace clio
