// Fault-injection mode of the I/O layer (io.h): a wrapper over any backend that keeps unsynced
// writes in memory, so destroying it without Sync() is a power cut.
#include "storage/io_fault.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "common/thread_annotations.h"

namespace clio::io_internal {
namespace {

// Fault-injection mode: a power-cut simulation. Every write lands in an in-memory page map;
// reads merge the map over the file; Sync() writes the map out and fdatasyncs. Destroying the
// object without Sync() loses exactly the unsynced writes.
//
// Invariants (under mu_):
//  - logical_size_ is the size the caller sees (writes, truncates and allocates applied).
//  - bytes of the underlying file at offsets >= base_valid_ are stale (cut by a Truncate not
//    yet synced) and read as zeros.
//  - a page in pages_ holds the whole 4 KiB page as the caller sees it; bytes past
//    logical_size_ in it are zero.
// This is a test mode: one mutex is held across the underlying I/O for simplicity.
class FaultFile final : public IoFile {
 public:
  static constexpr uint64_t kPage = 4096;

  FaultFile(std::unique_ptr<IoFile> base, uint64_t size)
      : base_(std::move(base)),
        name_(std::string(base_->backend_name()) + "+fault"),
        logical_size_(size) {}

  Status Write(uint64_t offset, std::string_view data) override {
    MutexLock l(&mu_);
    uint64_t pos = 0;
    while (pos < data.size()) {
      uint64_t off = offset + pos;
      uint64_t page = off / kPage;
      uint64_t in_page = off % kPage;
      uint64_t n = std::min<uint64_t>(kPage - in_page, data.size() - pos);
      auto it = pages_.find(page);
      if (it == pages_.end()) {
        std::string buf(kPage, '\0');
        if (n != kPage) CLIO_RETURN_IF_ERROR(ReadBase(page * kPage, kPage, buf.data()));
        it = pages_.emplace(page, std::move(buf)).first;
      }
      std::memcpy(it->second.data() + in_page, data.data() + pos, n);
      pos += n;
    }
    logical_size_ = std::max(logical_size_, offset + data.size());
    return Status::Ok();
  }

  Status Read(uint64_t offset, uint64_t len, char* out) override {
    MutexLock l(&mu_);
    uint64_t pos = 0;
    while (pos < len) {
      uint64_t off = offset + pos;
      uint64_t page = off / kPage;
      uint64_t in_page = off % kPage;
      auto it = pages_.find(page);
      if (it != pages_.end()) {
        uint64_t n = std::min<uint64_t>(kPage - in_page, len - pos);
        std::memcpy(out + pos, it->second.data() + in_page, n);
        pos += n;
        continue;
      }
      // A run of pages not in the map: one read of the underlying file.
      uint64_t end_page = page + 1;
      uint64_t last_page = (offset + len - 1) / kPage;
      while (end_page <= last_page && pages_.find(end_page) == pages_.end()) ++end_page;
      uint64_t n = std::min(end_page * kPage - off, len - pos);
      CLIO_RETURN_IF_ERROR(ReadBase(off, n, out + pos));
      pos += n;
    }
    return Status::Ok();
  }

  Status Sync() override {
    MutexLock l(&mu_);
    CLIO_ASSIGN_OR_RETURN(uint64_t base_size, base_->Size());
    if (base_valid_ < base_size) {
      // Cut the stale bytes first, so a later extension reads as zeros. (A reservation made
      // by Allocate() past the cut in this same epoch becomes a sparse extension.)
      CLIO_RETURN_IF_ERROR(base_->Truncate(base_valid_));
      base_size = base_valid_;
    }
    if (base_size != logical_size_) CLIO_RETURN_IF_ERROR(base_->Truncate(logical_size_));
    for (const auto& [page, buf] : pages_) {
      uint64_t start = page * kPage;
      if (start >= logical_size_) continue;
      uint64_t n = std::min<uint64_t>(kPage, logical_size_ - start);
      CLIO_RETURN_IF_ERROR(base_->Write(start, std::string_view(buf.data(), n)));
    }
    CLIO_RETURN_IF_ERROR(base_->Sync());
    pages_.clear();
    base_valid_ = kAllValid;
    return Status::Ok();
  }

  Status Allocate(uint64_t offset, uint64_t len) override {
    // Reserving blocks changes no bytes; pass it through so a full disk still fails here.
    MutexLock l(&mu_);
    CLIO_RETURN_IF_ERROR(base_->Allocate(offset, len));
    logical_size_ = std::max(logical_size_, offset + len);
    return Status::Ok();
  }

  Result<uint64_t> Size() override {
    MutexLock l(&mu_);
    return logical_size_;
  }

  Status Truncate(uint64_t size) override {
    MutexLock l(&mu_);
    if (size < logical_size_) {
      base_valid_ = std::min(base_valid_, size);
      // Drop whole pages past the end; zero the tail of the page the new end falls in.
      for (auto it = pages_.lower_bound((size + kPage - 1) / kPage); it != pages_.end();) {
        it = pages_.erase(it);
      }
      if (size % kPage != 0) {
        uint64_t page = size / kPage;
        auto it = pages_.find(page);
        if (it == pages_.end()) {
          std::string buf(kPage, '\0');
          CLIO_RETURN_IF_ERROR(ReadBase(page * kPage, kPage, buf.data()));
          it = pages_.emplace(page, std::move(buf)).first;
        }
        std::memset(it->second.data() + size % kPage, 0, kPage - size % kPage);
      }
    }
    logical_size_ = size;
    return Status::Ok();
  }

  const std::string& path() const override { return base_->path(); }
  std::string_view backend_name() const override { return name_; }
  Result<FileIdentity> Identity() const override { return base_->Identity(); }

 private:
  static constexpr uint64_t kAllValid = std::numeric_limits<uint64_t>::max();

  // Reads the underlying file, with bytes cut by an unsynced Truncate reading as zeros.
  Status ReadBase(uint64_t offset, uint64_t len, char* out) REQUIRES(mu_) {
    CLIO_RETURN_IF_ERROR(base_->Read(offset, len, out));
    if (offset + len > base_valid_) {
      uint64_t from = std::max(offset, base_valid_);
      std::memset(out + (from - offset), 0, offset + len - from);
    }
    return Status::Ok();
  }

  const std::unique_ptr<IoFile> base_;
  const std::string name_;
  Mutex mu_;
  std::map<uint64_t, std::string> pages_ GUARDED_BY(mu_);
  uint64_t logical_size_ GUARDED_BY(mu_);
  uint64_t base_valid_ GUARDED_BY(mu_) = kAllValid;
};

}  // namespace

std::unique_ptr<IoFile> NewFaultFile(std::unique_ptr<IoFile> base, uint64_t size) {
  return std::make_unique<FaultFile>(std::move(base), size);
}

}  // namespace clio::io_internal
