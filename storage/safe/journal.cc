#include "storage/safe/journal.h"

#include "common/codec.h"
#include "common/log.h"
#include "storage/safe/erasure.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

constexpr char kMagic[8] = {'C', 'L', 'I', 'O', 'S', 'J', 'R', 'N'};
constexpr uint32_t kRecordMagic = 0x4e524a53;  // "SJRN"

std::string EncodeHeader(uint64_t array_id, uint64_t epoch) {
  Encoder e;
  e.PutRaw(std::string_view(kMagic, sizeof kMagic)).Put<uint32_t>(StripeJournal::kVersion);
  e.Put<uint64_t>(array_id).Put<uint64_t>(epoch);
  const uint32_t crc = Crc32c(e.buffer().data(), e.buffer().size());
  e.Put<uint32_t>(crc);
  std::string out = e.Take();
  out.resize(StripeJournal::kHeaderSize, '\0');
  return out;
}

}  // namespace

uint64_t StripeJournal::RecordBytes(size_t entries, uint64_t image_bytes) {
  return RoundUpTo(kRecordHeaderSize + entries * (kEntryHeaderSize + image_bytes), kRecordAlign);
}

Result<std::unique_ptr<StripeJournal>> StripeJournal::Open(const std::string& path, uint64_t array_id,
                                                           uint64_t size, const IoOptions& io,
                                                           const ReplayFn& replay, uint64_t* replayed) {
  *replayed = 0;
  IoOptions o = io;
  o.create = true;
  o.direct_writes = false;
  CLIO_ASSIGN_OR_RETURN(auto file, OpenIoFile(path, o));
  CLIO_ASSIGN_OR_RETURN(uint64_t file_size, file->Size());
  std::unique_ptr<StripeJournal> j(new StripeJournal(path, std::move(file), array_id, size));
  MutexLock l(&j->mu_);
  if (file_size < kHeaderSize) {
    // New (or cut short before its header was ever synced: nothing was journaled then).
    CLIO_RETURN_IF_ERROR(j->WriteHeader(1));
    CLIO_RETURN_IF_ERROR(SyncParentDir(path));
    return j;
  }
  std::string hdr(kHeaderSize, '\0');
  CLIO_RETURN_IF_ERROR(j->file_->Read(0, kHeaderSize, hdr.data()));
  Decoder d(hdr);
  std::string_view magic;
  uint32_t version = 0, crc = 0;
  uint64_t id = 0, epoch = 0;
  d.GetRaw(sizeof kMagic, &magic);
  d.Get(&version);
  d.Get(&id);
  d.Get(&epoch);
  const size_t covered = sizeof kMagic + 4 + 8 + 8;
  d.Get(&crc);
  if (magic != std::string_view(kMagic, sizeof kMagic))
    return Corruption("stripe journal " + path + ": not a CLIO stripe journal (bad magic)");
  if (version != kVersion)
    return Corruption("stripe journal " + path + ": unknown version " + std::to_string(version) +
                      " (this build reads " + std::to_string(kVersion) + ")");
  if (crc != Crc32c(hdr.data(), covered))
    return Corruption("stripe journal " + path + ": header checksum mismatch");
  if (id != array_id)
    return Corruption("stripe journal " + path + " belongs to array " + std::to_string(id) + ", not " +
                      std::to_string(array_id));
  j->epoch_ = epoch;

  // Replay every complete record of this epoch, in sequence.
  uint64_t pos = kHeaderSize, seq = 1;
  std::string rec;
  while (pos + kRecordHeaderSize <= std::min(file_size, size)) {
    char rh[kRecordHeaderSize];
    CLIO_RETURN_IF_ERROR(j->file_->Read(pos, kRecordHeaderSize, rh));
    Decoder rd(std::string_view(rh, kRecordHeaderSize));
    uint32_t rmagic = 0, count = 0, rcrc = 0, len = 0;
    uint64_t repoch = 0, rseq = 0;
    rd.Get(&rmagic);
    rd.Get(&count);
    rd.Get(&repoch);
    rd.Get(&rseq);
    rd.Get(&len);
    rd.Get(&rcrc);
    if (rmagic != kRecordMagic || repoch != epoch || rseq != seq) break;
    const uint64_t total = RoundUpTo(kRecordHeaderSize + len, kRecordAlign);
    if (pos + total > std::min(file_size, size)) break;
    rec.resize(kRecordHeaderSize + len);
    std::memcpy(rec.data(), rh, kRecordHeaderSize);
    CLIO_RETURN_IF_ERROR(j->file_->Read(pos + kRecordHeaderSize, len, rec.data() + kRecordHeaderSize));
    uint32_t want = Crc32c(rec.data(), kRecordHeaderSize - 4);
    want = Crc32c(rec.data() + kRecordHeaderSize, len) ^ (want * 31u);
    if (want != rcrc) break;  // torn: the writer never returned from Commit
    Decoder ed(std::string_view(rec).substr(kRecordHeaderSize));
    for (uint32_t i = 0; i < count; ++i) {
      Entry e;
      uint32_t ilen = 0;
      ed.Get(&e.stripe);
      ed.Get(&e.incarnation);
      ed.Get(&e.slot);
      ed.Get(&ilen);
      if (!ed.GetRaw(ilen, &e.image)) break;
      CLIO_RETURN_IF_ERROR(replay(e));
    }
    CLIO_RETURN_IF_ERROR(ed.Finish("stripe journal " + path + " record " + std::to_string(seq)));
    ++*replayed;
    ++seq;
    pos += total;
  }
  j->head_ = pos;
  j->next_seq_ = seq;
  j->written_seq_ = j->synced_seq_ = seq - 1;
  return j;
}

Status StripeJournal::WriteHeader(uint64_t epoch) {
  CLIO_RETURN_IF_ERROR(file_->Write(0, EncodeHeader(array_id_, epoch)));
  CLIO_RETURN_IF_ERROR(file_->Sync());
  epoch_ = epoch;
  head_ = kHeaderSize;
  next_seq_ = 1;
  written_seq_ = synced_seq_ = 0;
  return Status::Ok();
}

Status StripeJournal::Commit(const std::vector<Entry>& entries) {
  uint64_t payload = 0;
  for (const Entry& e : entries) payload += kEntryHeaderSize + e.image.size();
  const uint64_t total = RoundUpTo(kRecordHeaderSize + payload, kRecordAlign);
  uint64_t seq = 0;
  {
    MutexLock l(&mu_);
    // After a failed fdatasync nothing written since is known to be durable, whatever a
    // later sync says: the journal refuses every commit from then on.
    if (!sync_error_.ok()) return sync_error_;
    if (head_ + total > size_)
      return Status(Code::kBusy, "stripe journal " + path_ + ": full (" + std::to_string(head_) + " of " +
                                     std::to_string(size_) + " bytes)");
    seq = next_seq_++;
    Encoder e;
    e.buffer().reserve(total);
    e.Put<uint32_t>(kRecordMagic).Put<uint32_t>(static_cast<uint32_t>(entries.size()));
    e.Put<uint64_t>(epoch_).Put<uint64_t>(seq).Put<uint32_t>(static_cast<uint32_t>(payload));
    const uint32_t hcrc = Crc32c(e.buffer().data(), kRecordHeaderSize - 4);
    e.Put<uint32_t>(0);
    for (const Entry& en : entries) {
      e.Put<uint64_t>(en.stripe).Put<uint64_t>(en.incarnation).Put<uint32_t>(en.slot);
      e.Put<uint32_t>(static_cast<uint32_t>(en.image.size())).PutRaw(en.image);
    }
    std::string& buf = e.buffer();
    const uint32_t crc = Crc32c(buf.data() + kRecordHeaderSize, payload) ^ (hcrc * 31u);
    std::memcpy(buf.data() + kRecordHeaderSize - 4, &crc, 4);
    buf.resize(total, '\0');
    Status s = file_->Write(head_, buf);
    if (!s.ok()) {
      --next_seq_;
      return s.WithContext("stripe journal " + path_);
    }
    head_ += total;
    written_seq_ = seq;
  }
  // Group commit: one writer syncs for every record written so far; the others wait for it.
  MutexLock l(&mu_);
  while (synced_seq_ < seq) {
    if (!sync_error_.ok()) return sync_error_;
    if (!syncing_) {
      syncing_ = true;
      const uint64_t target = written_seq_;
      mu_.Unlock();
      Status s = file_->Sync();
      mu_.Lock();
      syncing_ = false;
      if (s.ok()) {
        synced_seq_ = std::max(synced_seq_, target);
      } else {
        sync_error_ = s.WithContext("stripe journal " + path_);
      }
      cv_.NotifyAll();
      if (!s.ok()) return sync_error_;
      continue;
    }
    cv_.Wait(&mu_);
  }
  return Status::Ok();
}

Status StripeJournal::Reset() {
  MutexLock l(&mu_);
  if (head_ == kHeaderSize) return Status::Ok();
  return WriteHeader(epoch_ + 1).WithContext("stripe journal " + path_);
}

uint64_t StripeJournal::used() {
  MutexLock l(&mu_);
  return head_ - kHeaderSize;
}

}  // namespace clio
