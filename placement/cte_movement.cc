// Moving blobs between tiers: the copy-and-swap primitive (CopyBlobTo) and Drain(). The
// reorganizer (cte_reorganize.cc) moves blobs with the same primitive.
//
// Copy and swap: the blob's entry is loaded under its stripe lock, its bytes are read and
// written to the new tier without the lock (readers and writers of the blob proceed), and the
// new copy is swapped in under the lock only if the entry is still equal to the one loaded.
// Equality is what makes the unlocked read safe: every write gives the copy it lands in a new
// generation, truncate and punch change a copy's written ranges, a flush changes states and
// copies, and an extent is freed only after its copy left the entry, so an equal entry means
// the bytes read were the blob's bytes, and no extent read was reused meanwhile.
#include <algorithm>

#include "common/log.h"
#include "placement/blob_index.h"
#include "placement/cte.h"

namespace clio {
namespace {

// Attempts at moving one blob while it keeps changing under the mover, before giving up with
// Busy. A drained tier takes no new writes, so a blob changes only a bounded number of times.
constexpr int kMoveAttempts = 16;
// Drain passes in a row that move nothing while bytes stay allocated on the tier.
constexpr int kIdleDrainPasses = 3;
constexpr size_t kScanPage = 1024;

std::string BlobName(uint64_t tag, uint64_t blob) { return std::to_string(tag) + ":" + std::to_string(blob); }

}  // namespace

Result<uint64_t> Cte::CopyBlobTo(uint64_t tag, uint64_t blob, Tier& t, uint64_t off_tier, bool* changed) {
  *changed = false;
  // The caller chose the target a while ago (a reorganizer pass plans first): it may have been
  // marked draining or dying since.
  if (!(t.is_volatile ? Accepts(t) : AcceptsPersistent(t))) return NoSpace(Refusal(t));
  const uint64_t tid = t.bdev->tier_id();
  Stripe& s = StripeFor(tag, blob);
  BlobEntry before;
  {
    MutexLock l(&s.mu);  // looks only
    CLIO_ASSIGN_OR_RETURN(before, LoadEntry(tag, blob));
  }
  if (before.copies.empty()) return uint64_t{0};
  // Taken after the entry was loaded, so it has every tier the entry's copies name (a copy is
  // placed only on a published tier; a tier holding one is never removed).
  const TierSnapshot snapshot = Tiers();
  const TierList& tiers = *snapshot;
  // Dirty (written since the caller looked): the caller flushes it or leaves it be.
  for (const BlobCopy& c : before.copies) {
    if (c.state == CopyState::kDirty) {
      *changed = true;
      return uint64_t{0};
    }
  }
  RangeSet all;
  for (const BlobCopy& c : before.copies)
    for (const auto& r : c.written.ranges()) all.Add(r.begin, r.end);
  const uint64_t size = before.size();
  std::string buf(size, '\0');
  // No lock: validated below by comparing the entry (see the top of this file).
  CLIO_RETURN_IF_ERROR(ReadMerged(before, tiers, 0, size, buf.data()));

  // A persistent target may not take room reserved for dirty blobs' flushes.
  auto a = t.is_volatile ? t.bdev->Allocate(size) : reservations_->AllocateDirect(tag, blob, t.bdev.get(), size, /*new_copy=*/true);
  if (!a.ok()) return a.status().WithContext("tier '" + t.name + "'");
  BlobCopy fresh;
  fresh.tier_id = tid;
  fresh.state = CopyState::kClean;
  fresh.extents = std::move(a).value();
  fresh.written = all;
  for (const auto& r : all.ranges()) {
    Status w = t.bdev->Write(fresh.extents, r.begin, std::string_view(buf).substr(r.begin, r.end - r.begin));
    if (!w.ok()) {
      (void)t.bdev->Free(fresh.extents);
      return w.WithContext("moving blob " + BlobName(tag, blob) + " to tier '" + t.name + "'");
    }
  }

  FreeAfterUnlock drop;
  StripeLock l(s);
  auto now = LoadEntry(tag, blob);
  if (!now.ok() || !(*now == before)) {
    drop.Set(t.bdev.get(), std::move(fresh.extents));
    if (!now.ok()) return now.status();
    *changed = true;
    return uint64_t{0};
  }
  fresh.generation = generation_.fetch_add(1);
  BlobEntry next;
  std::vector<BlobCopy> released;
  if (t.is_volatile) {
    // A read cache in front; every other copy stays, except an older one on this tier.
    next.copies.push_back(fresh);
    for (BlobCopy& c : before.copies) {
      if (c.tier_id == tid || c.tier_id == off_tier)
        released.push_back(std::move(c));
      else
        next.copies.push_back(std::move(c));
    }
  } else {
    // The new persistent copy holds every byte: it replaces every persistent copy. Volatile
    // read caches stay in front (they hold the same bytes as the merged view).
    for (BlobCopy& c : before.copies) {
      Tier* ct = TierIn(tiers, c.tier_id);
      if (ct && ct->is_volatile && c.tier_id != off_tier)
        next.copies.push_back(std::move(c));
      else
        released.push_back(std::move(c));
    }
    next.copies.push_back(fresh);
  }
  std::vector<std::pair<Tier*, BlobCopy>> free_now;
  std::vector<BlobCopy> persistent_released;
  for (BlobCopy& c : released) {
    Tier* ct = TierIn(tiers, c.tier_id);
    if (ct && ct->is_volatile)
      free_now.emplace_back(ct, std::move(c));
    else
      persistent_released.push_back(std::move(c));
  }
  KvBatch batch;
  batch.Put(BlobKey(tag, blob), EncodeBlobEntry(next));
  ReleaseCopies(std::move(persistent_released), tiers, &batch);
  Status ap = kv_->Apply(std::move(batch));
  if (!ap.ok()) {
    drop.Set(t.bdev.get(), std::move(fresh.extents));
    return ap;
  }
  NoteFill(tag, blob, next);
  // Volatile copies are freed at once: a reader still reading them finds the stripe changed
  // (this holds its StripeLock) and drops what it read (GetBlob).
  for (auto& [ct, c] : free_now) {
    Status f = ct->bdev->Free(c.extents);
    if (!f.ok()) CLIO_LOG_ERROR("freeing a moved volatile copy: {}", f.ToString());
    clean_lru_.Remove(c.tier_id, tag, blob);
  }
  if (t.is_volatile) clean_lru_.Touch(tid, tag, blob);
  return all.bytes();
}

Status Cte::DrainBlob(uint64_t tag, uint64_t blob, Tier& t, uint64_t* moved) {
  const uint64_t tid = t.bdev->tier_id();
  for (int attempt = 0; attempt < kMoveAttempts; ++attempt) {
    BlobEntry e;
    {
      Stripe& s = StripeFor(tag, blob);
      MutexLock l(&s.mu);  // looks only
      CLIO_ASSIGN_OR_RETURN(e, LoadEntry(tag, blob));
    }
    if (std::none_of(e.copies.begin(), e.copies.end(), [&](const BlobCopy& c) { return c.tier_id == tid; }))
      return Status::Ok();
    if (std::any_of(e.copies.begin(), e.copies.end(), [](const BlobCopy& c) { return c.state == CopyState::kDirty; })) {
      // Dirty data is flushed rather than moved dirty: the flush lands on a healthy
      // persistent tier and releases every copy but a read cache (never kept on a draining
      // tier), with the reservation and dirty accounting it already keeps; it counts the
      // copies it releases from this tier as drained.
      Status f = FlushOne(tag, blob);
      if (!f.ok()) return f.WithContext("flushing blob " + BlobName(tag, blob) + " before moving it off");
      continue;
    }
    if (t.is_volatile) {
      CLIO_RETURN_IF_ERROR(DropCleanCopies(t, tag, blob).status());  // counts what it drops
      continue;
    }
    Status last = NoSpace("no other persistent tier takes data");
    bool changed = false, done = false;
    const TierSnapshot snapshot = Tiers();  // a tier added during the drain takes blobs too
    const TierList& tiers = *snapshot;
    for (size_t ti = 0; ti < tiers.size() && !done; ++ti) {
      Tier& to = *tiers[ti];
      if (&to == &t || !AcceptsPersistent(to)) continue;
      auto r = CopyBlobTo(tag, blob, to, tid, &changed);
      if (!r.ok()) {
        if (r.status().code() != Code::kNoSpace) return r.status();
        last = r.status();
        continue;
      }
      *moved += *r;
      t.drained_bytes.fetch_add(*r);
      if (!changed) t.drained_copies.fetch_add(1);
      done = true;
    }
    if (!done)
      return NoSpace("no other tier has room for blob " + BlobName(tag, blob) + " (" + std::to_string(e.size()) +
                     " bytes): " + last.message() + "; free space or add a tier, then drain again");
  }
  return Status(Code::kBusy, "blob " + BlobName(tag, blob) + " changed " + std::to_string(kMoveAttempts) +
                                 " times while being moved; drain again");
}

Status Cte::Drain(uint64_t tier_id) {
  std::shared_ptr<Tier> tp;
  {
    // Marked while the tier is surely in the list (RemoveTier and Undrain take this lock).
    MutexLock change(&tier_change_mu_);
    tp = TierById(tier_id);
    if (!tp) return NotFound("no tier with id " + std::to_string(tier_id));
    tp->draining.store(true, std::memory_order_release);
    if (Status sm = SaveMotion(*tp); !sm.ok())
      return sm.WithContext("recording the drain of tier '" + tp->name + "'");
  }
  Tier& t = *tp;
  MutexLock m(&move_mu_);
  // A barrier: every allocation on a tier happens under some blob's stripe lock (a write; the
  // reorganizer is kept out by move_mu_) or in a flush, which checks the tier again under the
  // lock before its copy goes in. So once each stripe has been taken and released and every
  // flush running now has ended, every placement that read the tier as open has committed or
  // given up, and every later one sees the mark. From here on, bytes on the tier are named by
  // the index or about to be freed by a durable commit.
  StripeBarrier();
  FlushBarrier();
  CLIO_LOG_INFO("draining tier '{}' ({} bytes in use)", t.name, t.bdev->GetStats().used);
  auto fail = [&](Status s) {
    CLIO_LOG_WARN("draining tier '{}' stopped: {}", t.name, s.ToString());
    return s.WithContext("draining tier '" + t.name + "'");
  };
  int idle = 0;
  while (true) {
    // Each pass walks the whole index: a write that picked the tier just before the mark was
    // set may commit after the scan passed its key, and is caught by the next pass.
    uint64_t moved = 0, handled = 0;
    std::string after;
    while (true) {
      auto page = kv_->Scan(kBlobKeyPrefix, after, kScanPage);
      if (!page.ok()) return fail(page.status());
      for (auto& [key, value] : *page) {
        auto e = DecodeBlobEntry(value);
        if (!e.ok()) return fail(e.status());
        if (std::none_of(e->copies.begin(), e->copies.end(),
                         [&](const BlobCopy& c) { return c.tier_id == tier_id; }))
          continue;
        if (movers_stop_.load())
          return fail(Unavailable("the placement engine is stopping; the drain resumes at the next start"));
        uint64_t tag = 0, blob = 0;
        if (!ParseBlobKey(key, &tag, &blob)) return fail(Corruption("a blob index key that does not parse"));
        Status s = DrainBlob(tag, blob, t, &moved);
        if (!s.ok()) return fail(s);
        ++handled;
      }
      if (page->size() < kScanPage) break;
      after = page->back().first;
    }
    // Persistent extents released by the moves are freed once the index change is durable.
    Status sy = kv_->Sync();
    if (!sy.ok()) return fail(sy);
    const uint64_t used = t.bdev->GetStats().used;
    if (used == 0) {
      CLIO_LOG_INFO("tier '{}' drained: it holds nothing and can be removed", t.name);
      return Status::Ok();
    }
    if (handled > 0) {
      idle = 0;
    } else if (++idle >= kIdleDrainPasses) {
      return fail(Status(Code::kBusy, std::to_string(used) +
                                          " bytes stay allocated that no blob index entry names "
                                          "(writes in flight?); drain again"));
    }
  }
}

Status Cte::WaitResumedDrains() {
  MutexLock l(&resume_mu_);
  if (drain_resumer_.joinable()) drain_resumer_.join();
  return resumed_drains_;
}

Result<DrainProgress> Cte::GetDrainProgress(uint64_t tier_id) {
  std::shared_ptr<Tier> t = TierById(tier_id);
  if (!t) return NotFound("no tier with id " + std::to_string(tier_id));
  DrainProgress p;
  p.draining = t->draining.load();
  p.bytes_left = t->bdev->GetStats().used;
  p.moved_bytes = t->drained_bytes.load();
  p.moved_copies = t->drained_copies.load();
  return p;
}

Status Cte::Undrain(uint64_t tier_id) {
  MutexLock change(&tier_change_mu_);
  std::shared_ptr<Tier> t = TierById(tier_id);
  if (!t) return NotFound("no tier with id " + std::to_string(tier_id));
  t->draining.store(false, std::memory_order_release);
  CLIO_LOG_INFO("tier '{}': drain mark lifted", t->name);
  return SaveMotion(*t);
}

}  // namespace clio
