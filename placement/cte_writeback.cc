// Write-back: the dirty set, the flusher, FlushTag/FlushAll, and eviction of clean copies
// from volatile tiers. See cte.h for the contract and tier_space.h for the space accounting.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <system_error>
#include <thread>

#include "common/log.h"
#include "placement/blob_index.h"
#include "placement/cte.h"

namespace clio {

void Cte::MarkDirty(uint64_t tag, uint64_t blob) {
  MutexLock d(&dirty_mu_);
  dirty_.emplace(std::pair{tag, blob}, std::chrono::steady_clock::now());  // keeps the first time
}

std::vector<std::pair<uint64_t, uint64_t>> Cte::DirtyKeys(const uint64_t* tag) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  auto it = tag ? dirty_.lower_bound({*tag, 0}) : dirty_.begin();
  for (; it != dirty_.end() && (!tag || it->first.first == *tag); ++it) out.push_back(it->first);
  return out;
}

void Cte::KickFlusher() {
  {
    MutexLock d(&dirty_mu_);
    kicked_ = true;
  }
  flusher_cv_.NotifyAll();
}

Result<std::optional<Cte::FlushSource>> Cte::PrepareFlush(uint64_t tag, uint64_t blob) {
  FlushSource src;
  CLIO_ASSIGN_OR_RETURN(src.entry, LoadEntry(tag, blob));
  const BlobEntry& e = src.entry;
  bool dirty = std::any_of(e.copies.begin(), e.copies.end(),
                           [](const BlobCopy& c) { return c.state == CopyState::kDirty; });
  if (!dirty) {
    dirty_bytes_.ReleaseBlob(tag, blob);
    reservations_->ReleaseBlob(tag, blob);
    return std::optional<FlushSource>();
  }
  if (e.size() == 0) {  // truncated to nothing
    CLIO_RETURN_IF_ERROR(RemoveLocked(tag, blob, std::move(src.entry)));
    return std::optional<FlushSource>();
  }
  for (const BlobCopy& c : e.copies)
    for (const auto& r : c.written.ranges()) src.written.Add(r.begin, r.end);
  src.tiers = Tiers();
  return std::optional<FlushSource>(std::move(src));
}

Status Cte::ReadFlushSource(FlushSource* src) {
  src->bytes.assign(src->entry.size(), '\0');
  return ReadMerged(src->entry, *src->tiers, 0, src->bytes.size(), src->bytes.data());
}

Result<Cte::FlushCopy> Cte::WriteFlushCopy(uint64_t tag, uint64_t blob, const FlushSource& src,
                                           uint64_t* spent_back) {
  *spent_back = 0;
  const uint64_t size = src.bytes.size();
  // The room was reserved when the blob became dirty (reservations_), so this allocation
  // finds it unless the host filesystem under a file tier filled up meanwhile.
  Status last = NoSpace("no persistent tier has room to flush " + std::to_string(size) + " bytes");
  // A blob that keeps room (fallocate) flushed twice within one commit interval finds its room
  // held by its previous copy, whose release is not durable yet: one commit frees it.
  bool committed = false;
  for (const auto& tp : *src.tiers) {
    Tier& t = *tp;
    if (!AcceptsPersistent(t)) continue;
    FlushCopy f;
    f.tier = &t;
    auto a = reservations_->AllocateFlush(tag, blob, t.bdev.get(), size, &f.spent);
    if (!a.ok() && a.status().code() == Code::kNoSpace && !committed && reservations_->keeps(tag, blob)) {
      committed = true;
      CLIO_RETURN_IF_ERROR(kv_->Sync());
      a = reservations_->AllocateFlush(tag, blob, t.bdev.get(), size, &f.spent);
    }
    if (!a.ok()) {
      last = a.status().WithContext("flushing to tier '" + t.name + "'");
      if (a.status().code() == Code::kNoSpace) continue;
      return last;
    }
    f.copy.tier_id = t.bdev->tier_id();
    f.copy.state = CopyState::kClean;
    f.copy.generation = generation_.fetch_add(1);
    f.copy.extents = std::move(a).value();
    f.copy.written = src.written;
    for (const auto& r : src.written.ranges()) {
      Status w = t.bdev->Write(f.copy.extents, r.begin, std::string_view(src.bytes).substr(r.begin, r.end - r.begin));
      if (!w.ok()) {
        (void)t.bdev->Free(f.copy.extents);  // nobody saw it
        *spent_back = f.spent;
        return w.WithContext("flushing to tier '" + t.name + "'");
      }
    }
    return f;
  }
  return last;
}

Status Cte::SwapFlushed(uint64_t tag, uint64_t blob, FlushSource src, FlushCopy f, FreeAfterUnlock* drop) {
  const TierList& tiers = *src.tiers;
  const uint64_t size = src.bytes.size();
  BlobEntry next;
  std::vector<BlobCopy> released;
  const uint64_t kept_on = SplitForFlush(std::move(src.entry), f.copy, tiers, &next, &released);
  std::vector<std::pair<Bdev*, ExtentList>> free_now;
  std::vector<BlobCopy> persistent_released;
  // A copy that leaves a draining tier is part of that drain, whether the drain flushed the
  // blob or the flusher came first: a drain's answer counts what left the tier.
  std::vector<Tier*> drained;
  for (BlobCopy& c : released) {
    Tier* ct = TierIn(tiers, c.tier_id);
    if (ct && ct->draining.load(std::memory_order_acquire)) drained.push_back(ct);
    if (ct && ct->is_volatile)
      free_now.emplace_back(ct->bdev.get(), std::move(c.extents));
    else
      persistent_released.push_back(std::move(c));
  }
  KvBatch batch;
  batch.Put(BlobKey(tag, blob), EncodeBlobEntry(next));
  ReleaseCopies(std::move(persistent_released), tiers, &batch);
  Status s = kv_->Apply(std::move(batch));
  if (!s.ok()) {
    drop->Set(f.tier->bdev.get(), std::move(f.copy.extents));
    reservations_->RestoreBlobAtLeast(tag, blob, f.spent);
    return s;
  }
  // Volatile copies die with the process anyway: their room is reusable at once (a reader
  // still reading them finds the stripe changed, since this holds its StripeLock, and drops
  // what it read: GetBlob).
  for (auto& [b, ext] : free_now) (void)b->Free(ext);
  for (Tier* d : drained) d->drained_copies.fetch_add(1);
  // The persistent copy is allocated and recorded: its reservation and the dirty bytes
  // are spent.
  dirty_bytes_.ReleaseBlob(tag, blob);
  reservations_->ReleaseBlob(tag, blob);
  NoteFill(tag, blob, next);
  if (kept_on != 0) clean_lru_.Touch(kept_on, tag, blob);
  flushes_.Add();
  flushed_bytes_.Add(static_cast<double>(size));
  return Status::Ok();
}

Status Cte::FlushBlobLocked(uint64_t tag, uint64_t blob) {
  CLIO_ASSIGN_OR_RETURN(std::optional<FlushSource> src, PrepareFlush(tag, blob));
  if (!src) return Status::Ok();
  CLIO_RETURN_IF_ERROR(ReadFlushSource(&*src));
  uint64_t spent_back = 0;
  Result<FlushCopy> written = WriteFlushCopy(tag, blob, *src, &spent_back);
  if (spent_back) reservations_->RestoreBlobAtLeast(tag, blob, spent_back);
  CLIO_ASSIGN_OR_RETURN(FlushCopy f, std::move(written));
  FreeAfterUnlock drop;  // the caller holds the lock throughout (IoUnderLock): freed here
  return SwapFlushed(tag, blob, std::move(*src), std::move(f), &drop);
}

uint64_t Cte::SplitForFlush(BlobEntry e, BlobCopy p, const TierList& tiers, BlobEntry* next,
                           std::vector<BlobCopy>* released) {
  uint64_t kept_on = 0;
  for (size_t i = 0; i < e.copies.size(); ++i) {
    BlobCopy& c = e.copies[i];
    Tier* ct = TierIn(tiers, c.tier_id);
    bool keep = false;
    if (i == 0 && ct && ct->is_volatile && Accepts(*ct)) {
      BdevStats st = ct->bdev->GetStats();
      keep = st.capacity > 0 && static_cast<double>(st.used) < kCacheKeepFill * static_cast<double>(st.capacity);
    }
    if (keep) {
      c.state = CopyState::kClean;
      kept_on = c.tier_id;
      next->copies.push_back(std::move(c));
    } else {
      released->push_back(std::move(c));
    }
  }
  next->copies.push_back(std::move(p));
  return kept_on;
}

// A flush reads the blob and writes its copy with no lock held (a disk read, an S3 PUT): the
// blob's readers and writers, and the other blobs of its stripe, go on meanwhile. Its entry is
// loaded under the stripe lock, and the copy goes in under it only if the entry did not change
// meanwhile (copy and swap, as a move: an equal entry means the bytes read were the blob's and
// no extent read was reused meanwhile); else the copy, which nobody saw, is given back and the
// flush runs again under the lock throughout, which always finishes (a blob written without
// pause would otherwise never flush). The dirty set is settled under the stripe lock too: a
// write that makes the blob dirty again right after is never taken off it.
Status Cte::FlushOne(uint64_t tag, uint64_t blob) {
  {
    MutexLock d(&dirty_mu_);
    while (flushing_.count({tag, blob})) flushing_cv_.Wait(&dirty_mu_);
    flushing_.insert({tag, blob});
  }
  Stripe& s = StripeFor(tag, blob);
  Status st;
  std::optional<FlushSource> src;
  {
    StripeLock l(s);
    auto prepared = PrepareFlush(tag, blob);
    if (prepared.ok()) src = std::move(prepared).value();
    st = prepared.status();
    if (!src) SettleDirty(tag, blob, st);  // nothing to copy, or an error
  }
  if (src) {
    // The bytes and the copy with no lock held. A read that failed because a change freed what
    // it read is told apart below: the entry changed.
    const Status read = ReadFlushSource(&*src);
    uint64_t spent_back = 0;
    Result<FlushCopy> f = read.ok() ? WriteFlushCopy(tag, blob, *src, &spent_back) : Result<FlushCopy>(read);
    bool again = false;
    {
      FreeAfterUnlock drop;  // a dropped copy is freed after the lock, before the retry
      StripeLock l(s);
      // Under the lock, as a write's reservation changes are: a reservation set meanwhile stays.
      if (spent_back) reservations_->RestoreBlobAtLeast(tag, blob, spent_back);
      auto now = LoadEntry(tag, blob);
      // The copy's tier was chosen without the lock: a drain or a removal of it since (both
      // mark it and then pass a barrier of every stripe lock) means the copy may not go in.
      const bool tier_ok = !f.ok() || (AcceptsPersistent(*f->tier) && TierIn(*Tiers(), f->copy.tier_id) == f->tier);
      if (now.ok() && *now == src->entry && tier_ok) {
        st = f.ok() ? SwapFlushed(tag, blob, std::move(*src), std::move(f).value(), &drop) : f.status();
      } else {
        if (f.ok()) {
          drop.Set(f->tier->bdev.get(), std::move(f->copy.extents));
          reservations_->RestoreBlobAtLeast(tag, blob, f->spent);
        }
        st = now.status();
        again = now.ok();
      }
      if (!again) SettleDirty(tag, blob, st);
    }
    if (again) {
      flush_retries_.Add();
      StripeLock l(s);
      IoUnderLock io(kStripeLockName, "FlushOne: the flush that always finishes, after the blob changed under its copy");
      st = FlushBlobLocked(tag, blob);
      SettleDirty(tag, blob, st);
    }
  }
  MutexLock d(&dirty_mu_);
  flushing_.erase({tag, blob});
  flushing_cv_.NotifyAll();
  return st;
}

void Cte::FlushBarrier() {
  MutexLock d(&dirty_mu_);
  const auto running = flushing_;
  for (const auto& key : running)
    while (flushing_.count(key)) flushing_cv_.Wait(&dirty_mu_);
}

void Cte::SettleDirty(uint64_t tag, uint64_t blob, const Status& flushed) {
  MutexLock d(&dirty_mu_);
  if (flushed.ok()) {
    auto it = dirty_.find({tag, blob});
    if (it != dirty_.end()) {
      flush_lag_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count());
      dirty_.erase(it);
    }
  } else {
    dirty_.emplace(std::pair{tag, blob}, std::chrono::steady_clock::now());
  }
}

void Cte::NoteFlushFailure(uint64_t tag, uint64_t blob, const Status& s) {
  flush_failures_.fetch_add(1);
  CLIO_LOG_WARN("flushing blob {}:{}: {} (kept dirty, will retry)", tag, blob, s.ToString());
  MutexLock d(&dirty_mu_);
  for (auto& [t, st] : flush_errors_)
    if (t == tag) return;
  flush_errors_.emplace_back(tag, s);
}

std::vector<Status> Cte::FlushMany(const std::vector<std::pair<uint64_t, uint64_t>>& blobs, bool background) {
  std::vector<Status> out(blobs.size());
  // Each blob is flushed under its own stripe lock: different blobs go in parallel, and each
  // thread takes the next blob in order. A background failure is recorded at once, so an
  // fsync that flushes the blob again meanwhile is not answered with an older error.
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < blobs.size(); i = next.fetch_add(1)) {
      out[i] = FlushOne(blobs[i].first, blobs[i].second);
      if (background && !out[i].ok()) NoteFlushFailure(blobs[i].first, blobs[i].second, out[i]);
    }
  };
  const size_t threads = std::min<size_t>(flush_threads_, blobs.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error& e) {
      // No thread to be had (a task limit): the threads started and this one do the rest.
      CLIO_LOG_WARN("flushing with {} threads instead of {}: {}", pool.size() + 1, threads, e.what());
      break;
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

Status Cte::FlushTag(uint64_t tag) {
  std::vector<std::pair<uint64_t, uint64_t>> blobs;
  {
    MutexLock d(&dirty_mu_);
    blobs = DirtyKeys(&tag);
  }
  Status first = TakeFlushError(tag);
  for (Status& s : FlushMany(blobs))
    if (!s.ok() && first.ok()) first = s;
  return first;
}

Status Cte::TakeFlushError(uint64_t tag, bool* dirty) {
  MutexLock d(&dirty_mu_);
  if (dirty != nullptr) {
    auto first = dirty_.lower_bound({tag, 0});
    *dirty = first != dirty_.end() && first->first.first == tag;
  }
  for (auto it = flush_errors_.begin(); it != flush_errors_.end(); ++it) {
    if (it->first == tag) {
      Status s = it->second;
      flush_errors_.erase(it);
      return s;
    }
  }
  return Status::Ok();
}

Status Cte::FlushAll() {
  std::vector<std::pair<uint64_t, uint64_t>> all;
  {
    MutexLock d(&dirty_mu_);
    all = DirtyKeys(nullptr);
  }
  Status first;
  for (Status& s : FlushMany(all))
    if (!s.ok() && first.ok()) first = s;
  return first;
}

void Cte::FlusherLoop() {
  while (true) {
    std::vector<std::pair<uint64_t, uint64_t>> batch;
    {
      MutexLock d(&dirty_mu_);
      // Runs every flush interval, or at once when a writer reached a tier's dirty limit.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(flush_interval_ms_);
      while (!stopping_ && !kicked_) {
        const auto now = std::chrono::steady_clock::now();
        if (now >= deadline) break;
        flusher_cv_.WaitFor(&dirty_mu_, deadline - now);
      }
      if (stopping_) return;
      kicked_ = false;
      batch = DirtyKeys(nullptr);
    }
    (void)FlushMany(batch, /*background=*/true);  // failures are recorded as they happen
    flush_passes_.fetch_add(1);
  }
}

void Cte::EvictClean(Tier& t, uint64_t bytes) {
  const uint64_t tid = t.bdev->tier_id();
  uint64_t freed = 0, tag = 0, blob = 0;
  while (freed < bytes && clean_lru_.PopOldest(tid, &tag, &blob)) {
    auto dropped = DropCleanCopies(t, tag, blob);
    if (!dropped.ok()) {
      CLIO_LOG_ERROR("evicting blob {}:{}: {}", tag, blob, dropped.status().ToString());
      continue;
    }
    if (*dropped == 0) continue;  // written again, flushed away or removed since
    freed += *dropped;
    evicted_bytes_.fetch_add(*dropped);
    evictions_.fetch_add(1);
  }
}

Result<uint64_t> Cte::DropCleanCopies(Tier& t, uint64_t tag, uint64_t blob) {
  const uint64_t tid = t.bdev->tier_id();
  Stripe& s = StripeFor(tag, blob);
  StripeLock l(s);
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  BlobEntry next;
  std::vector<BlobCopy> drop;
  for (BlobCopy& c : e.copies) {
    if (c.tier_id == tid && c.state == CopyState::kClean)
      drop.push_back(std::move(c));
    else
      next.copies.push_back(std::move(c));
  }
  if (drop.empty()) return uint64_t{0};
  // A clean copy was flushed, so the copies left hold every byte it holds; check rather
  // than trust it, since dropping the only copy of a byte would lose data.
  RangeSet left;
  for (const BlobCopy& c : next.copies)
    for (const auto& r : c.written.ranges()) left.Add(r.begin, r.end);
  bool covered = std::all_of(drop.begin(), drop.end(),
                             [&](const BlobCopy& c) { return c.written.Minus(left).empty(); });
  if (!covered)
    return Internal("blob " + std::to_string(tag) + ":" + std::to_string(blob) + ": a clean copy on tier '" +
                    t.name + "' holds bytes no other copy holds; not dropped");
  KvBatch batch;
  if (next.copies.empty())
    batch.Delete(BlobKey(tag, blob));  // nothing was written in it
  else
    batch.Put(BlobKey(tag, blob), EncodeBlobEntry(next));
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(batch)));
  // As in a flush: the copy is volatile, and a reader of it finds the stripe changed.
  uint64_t freed = 0;
  for (const BlobCopy& c : drop) {
    Status f = t.bdev->Free(c.extents);
    if (!f.ok()) CLIO_LOG_ERROR("freeing a dropped clean copy: {}", f.ToString());
    freed += TotalSize(c.extents);
  }
  clean_lru_.Remove(tid, tag, blob);
  // Part of a drain whoever dropped it (the drain, or a reorganizer pass it waited for).
  if (freed > 0 && t.draining.load(std::memory_order_acquire)) t.drained_copies.fetch_add(1);
  return freed;
}

Status Cte::Stop() {
  // A resumed drain first: it gives up between two blobs and resumes at the next start.
  movers_stop_.store(true);
  (void)WaitResumedDrains();
  {
    // The reorganizer first: it moves data the final flush must see.
    MutexLock r(&reorg_mu_);
    reorg_stop_ = true;
  }
  reorg_cv_.NotifyAll();
  if (reorganizer_.joinable()) reorganizer_.join();
  {
    MutexLock d(&dirty_mu_);
    if (stopping_) return Status::Ok();
    stopping_ = true;
  }
  flusher_cv_.NotifyAll();
  if (flusher_.joinable()) flusher_.join();
  Status s = FlushAll();
  Status k = kv_->Sync();
  return s.ok() ? k : s;
}

WritebackStats Cte::GetWritebackStats() {
  WritebackStats w;
  w.dirty = dirty_bytes_.Counters();
  w.reserved = reservations_->reserved();
  w.dirty_waits = dirty_bytes_.waits();
  w.dirty_wait_timeouts = dirty_bytes_.timeouts();
  w.evictions = evictions_.load();
  w.evicted_bytes = evicted_bytes_.load();
  w.flush_failures = flush_failures_.load();
  w.flush_passes = flush_passes_.load();
  MutexLock d(&dirty_mu_);
  w.dirty_blobs = dirty_.size();
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [key, since] : dirty_)
    w.oldest_dirty_s = std::max(w.oldest_dirty_s, std::chrono::duration<double>(now - since).count());
  return w;
}

}  // namespace clio
