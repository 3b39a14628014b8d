#include "placement/cte.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

#include "common/codec.h"
#include "common/log.h"
#include "placement/blob_index.h"

namespace clio {
namespace {
constexpr size_t kRecoverPage = 1024;
}  // namespace

Result<std::unique_ptr<Cte>> Cte::Open(const CteConfig& config, KvStore* kv) {
  if (config.tiers.empty()) return InvalidArgument("the CTE needs at least one storage tier");
  if (auto bad = MovementConfigError(config)) return InvalidArgument(bad->first + ": " + bad->second);
  std::unique_ptr<Cte> cte(new Cte(kv, config));
  cte->lifetime_ = std::make_shared<TierLifetime>();
  KvBatch records;
  TierList tiers;
  std::string left_out;  // recorded tiers that could not be opened, and why
  for (const TierConfig& tc : config.tiers) {
    auto opened = cte->OpenTier(tc, &records);
    if (!opened.ok() && tc.recorded) {
      CLIO_LOG_WARN("tier '{}' (added at run time) is left out: {}; the start fails below if it holds data",
                    tc.bdev.name, opened.status().ToString());
      left_out += (left_out.empty() ? "" : "; ") + opened.status().ToString();
      continue;
    }
    CLIO_RETURN_IF_ERROR(opened.status());
    std::shared_ptr<Tier> tier = std::move(opened).value();
    for (const auto& t : tiers) {
      if (t->name == tier->name) return InvalidArgument("tier '" + t->name + "' is listed twice");
      if (t->bdev->tier_id() == tier->bdev->tier_id())
        return Corruption("tiers '" + t->name + "' and '" + tier->name + "' have the same id");
    }
    tiers.push_back(std::move(tier));
  }
  if (std::none_of(tiers.begin(), tiers.end(), [](const auto& t) { return !t->is_volatile; }))
    CLIO_LOG_WARN("no persistent tier is configured: fsync cannot make data durable");
  cte->PublishTiers(std::move(tiers));
  CLIO_RETURN_IF_ERROR(kv->Apply(std::move(records)));
  if (Status r = cte->Recover(); !r.ok()) {
    if (left_out.empty()) return r;
    return Status(r.code(), r.message() + " (left out at start: " + left_out + ")");
  }

  cte->reservations_ = std::make_unique<FlushReservations>(
      std::vector<Bdev*>{}, [c = cte.get()](const Bdev& b, const BdevStats& s) {
        // Under the reservations' mutex: TierIn on a snapshot takes only tiers_mu_ (a leaf).
        TierSnapshot now = c->Tiers();
        Tier* t = TierIn(*now, b.tier_id());
        return t && !t->is_volatile && AcceptsAt(*t, s.lifetime_days);
      });
  for (const auto& t : *cte->Tiers()) cte->EnlistTier(*t);
  // Bytes and allocations reach the disk before the index entries that name them. Once the
  // tiers are closed no index change may commit: it could name bytes that were never synced.
  kv->AddPreCommitHook([life = cte->lifetime_]() -> Status {
    MutexLock l(&life->mu);
    if (!life->open) return Unavailable("the CTE's tiers are closed; index changes cannot commit");
    for (Bdev* b : life->persistent) CLIO_RETURN_IF_ERROR(b->Sync());
    return Status::Ok();
  });
  cte->flusher_ = std::thread([c = cte.get()] { c->FlusherLoop(); });
  if (config.reorganize) cte->reorganizer_ = std::thread([c = cte.get()] { c->ReorganizerLoop(); });
  std::vector<uint64_t> resume;  // tiers a drain left marked and not yet empty
  for (const auto& t : *cte->Tiers())
    if (t->draining.load() && t->bdev->GetStats().used > 0) resume.push_back(t->bdev->tier_id());
  if (!resume.empty()) {
    MutexLock l(&cte->resume_mu_);
    cte->drain_resumer_ = std::thread([c = cte.get(), resume] {
      Status first;
      for (uint64_t id : resume) {
        CLIO_LOG_INFO("resuming the drain of tier {:#x}, interrupted by the last stop", id);
        Status s = c->Drain(id);
        if (!s.ok() && first.ok()) first = s;
      }
      c->resumed_drains_ = first;
    });
  }
  cte->sampler_ = metrics::SamplerRegistration([c = cte.get()] { return c->SampleMetrics(); });
  return cte;
}

Cte::~Cte() {
  sampler_ = metrics::SamplerRegistration();
  (void)Stop();
  MutexLock l(&lifetime_->mu);  // waits for a running hook or deferred free
  lifetime_->open = false;
  lifetime_->persistent.clear();
}

Status Cte::Recover() {
  // Metadata knows every tier ever configured; copies on a volatile one are dropped, copies on
  // an unconfigured persistent one mean that tier still holds data.
  CLIO_ASSIGN_OR_RETURN(auto known, KnownTiers());
  const TierSnapshot tiers = Tiers();
  std::map<uint64_t, ExtentList> referenced;
  std::vector<StartTag> tags;  // ascending: the keys are in (tag, blob) order
  uint64_t dropped = 0, entries = 0;
  std::string after;
  while (true) {
    CLIO_ASSIGN_OR_RETURN(KvPairs page, kv_->Scan(kBlobKeyPrefix, after, kRecoverPage));
    KvBatch batch;
    for (auto& [key, value] : page) {
      ++entries;
      uint64_t tag = 0, blob = 0;
      const bool parsed = ParseBlobKey(key, &tag, &blob);
      if (!parsed) {
        CLIO_LOG_WARN("blob index key of {} bytes does not parse; left alone", key.size());
      } else if (tags.empty() || tags.back().tag != tag) {
        tags.push_back(StartTag{.tag = tag});
      }
      auto e = DecodeBlobEntry(value);
      if (!e.ok()) return e.status().WithContext("blob index key of " + std::to_string(key.size()) + " bytes");
      BlobEntry kept;
      bool changed = false;
      RangeSet dropped_written;
      for (BlobCopy& c : e->copies) {
        const Tier* t = TierIn(*tiers, c.tier_id);
        if (!t || t->is_volatile)
          for (const auto& r : c.written.ranges()) dropped_written.Add(r.begin, r.end);
      }
      for (BlobCopy& c : e->copies) {
        Tier* t = TierIn(*tiers, c.tier_id);
        if (!t) {
          auto k = known.find(c.tier_id);
          if (k == known.end() || k->second.persistence != Persistence::kVolatile)
            return Corruption("the blob index has data on tier id " + std::to_string(c.tier_id) +
                              (k == known.end() ? "" : " ('" + k->second.name + "')") +
                              ", which is not in the config; add the tier back");
          changed = true;
          ++dropped;
          continue;
        }
        if (t->is_volatile) {
          changed = true;
          ++dropped;
          continue;
        }
        c.state = CopyState::kClean;
        auto& list = referenced[c.tier_id];
        list.insert(list.end(), c.extents.begin(), c.extents.end());
        kept.copies.push_back(std::move(c));
      }
      if (parsed) NoteStartBlob(&tags.back(), blob, kept, dropped_written);
      if (!changed) continue;
      if (kept.copies.empty())
        batch.Delete(key);
      else
        batch.Put(key, EncodeBlobEntry(kept));
    }
    if (!batch.empty()) CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(batch)));
    if (page.size() < kRecoverPage) break;
    after = page.back().first;
  }
  for (const auto& tp : *tiers) {
    Tier& t = *tp;
    Status s = t.bdev->Reconcile(referenced[t.bdev->tier_id()]);
    if (!s.ok()) return s.WithContext("reconciling tier '" + t.name + "'");
    // One record per live extent from here on: the log does not grow across restarts.
    s = t.bdev->FlushAllocLog();
    if (!s.ok()) return s.WithContext("compacting the allocator log of tier '" + t.name + "'");
  }
  CLIO_LOG_INFO("blob index: {} entries, {} volatile copies dropped at start", entries, dropped);
  {
    MutexLock l(&start_tags_mu_);
    start_tags_ = std::move(tags);
  }
  return kv_->Sync();
}

Status Cte::KeepRoom(uint64_t tag, uint64_t blob, uint64_t size) {
  if (size == 0) return reservations_->KeepRoom(tag, blob, 0);  // letting go needs no look
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);  // looks only: not a change (optimistic readers go on)
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  // What its persistent copies occupy lies inside the room it keeps.
  return reservations_->KeepRoom(tag, blob, size, PersistentFill(e));
}

uint64_t Cte::PersistentFill(const BlobEntry& e) {
  const TierSnapshot tiers = Tiers();
  uint64_t n = 0;
  for (const BlobCopy& c : e.copies) {
    Tier* t = TierIn(*tiers, c.tier_id);
    if (t && AcceptsPersistent(*t)) n += TotalSize(c.extents);
  }
  return n;
}

void Cte::NoteFill(uint64_t tag, uint64_t blob, const BlobEntry& e) {
  if (reservations_->keeps(tag, blob)) reservations_->SetFilled(tag, blob, PersistentFill(e));
}

uint64_t Cte::KeptRoom() const { return reservations_->kept(); }

uint64_t Cte::KeptUnfilled() const { return reservations_->kept_unfilled(); }

void Cte::NoteStartBlob(StartTag* st, uint64_t blob, const BlobEntry& kept, const RangeSet& dropped) {
  st->stored += kept.stored();
  if (kept.size() > 0) {  // blobs come in ascending order: the last one seen is the highest
    st->has_data = true;
    st->last_blob = blob;
    st->last_end = kept.size();
  }
  if (dropped.empty()) return;
  RangeSet held;
  for (const BlobCopy& c : kept.copies)
    for (const auto& r : c.written.ranges()) held.Add(r.begin, r.end);
  if (!dropped.Minus(held).empty()) st->lost = true;
}

std::vector<StartTag> Cte::TakeStartTags() {
  MutexLock l(&start_tags_mu_);
  return std::exchange(start_tags_, {});
}

Cte::Stripe& Cte::StripeFor(uint64_t tag, uint64_t blob) {
  return stripes_[std::hash<uint64_t>{}(tag * 0x9e3779b97f4a7c15ull ^ blob) % kStripes];
}

bool Cte::Accepts(const Tier& t) { return AcceptsAt(t, t.bdev->GetStats().lifetime_days); }

bool Cte::AcceptsAt(const Tier& t, double lifetime_days) {
  if (t.draining.load(std::memory_order_acquire)) return false;
  return lifetime_days >= (t.is_volatile ? kDeadLifespanDays : kDyingLifespanDays);
}

std::string Cte::Refusal(const Tier& t) {
  if (t.draining.load()) return "tier '" + t.name + "' is draining";
  char days[32];
  std::snprintf(days, sizeof days, "%g", t.bdev->GetStats().lifetime_days);
  return "tier '" + t.name + "' is dying (lifespan " + days + " days)";
}

Status Cte::SetLifespan(uint64_t tier_id, double days) {
  if (!std::isfinite(days) || days < 0)
    return InvalidArgument("lifespan must be a finite number of days >= 0, not " + std::to_string(days));
  MutexLock change(&tier_change_mu_);  // a removed tier's records stay removed
  std::shared_ptr<Tier> t = TierById(tier_id);
  if (!t) return NotFound("no tier with id " + std::to_string(tier_id));
  t->bdev->SetLifespan(days);
  CLIO_LOG_INFO("tier '{}': lifespan set to {} days", t->name, days);
  return SaveMotion(*t);
}

Result<BlobEntry> Cte::LoadEntry(uint64_t tag, uint64_t blob) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(BlobKey(tag, blob)));
  if (!v) return BlobEntry{};
  return DecodeBlobEntry(*v);
}

Status Cte::PutBlob(uint64_t tag, uint64_t blob, uint64_t offset, std::string_view data,
                    int64_t* stored_delta) {
  if (data.empty()) return Status::Ok();
  if (offset + data.size() < offset) return InvalidArgument("blob write past 2^64");
  // One tier list for every attempt: the indices in `skip`, `evicted` and PutAttempt refer
  // to it. A tier added meanwhile is used by the next write.
  const TierSnapshot tiers = Tiers();
  std::vector<bool> skip(tiers->size(), false), evicted(tiers->size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(dirty_wait_ms_);
  while (true) {
    PutAttempt a = PutOnce(tag, blob, offset, data, stored_delta, *tiers, skip, evicted);
    switch (a.step) {
      case PutStep::kDone:
        return a.status;
      case PutStep::kWaitDirty:
        // No lock is held here: the flusher needs this blob's stripe to make room.
        KickFlusher();
        if (!dirty_bytes_.WaitForRoom((*tiers)[a.tier]->bdev->tier_id(), a.bytes, deadline)) {
          CLIO_LOG_WARN("tier '{}' stayed at its dirty limit for {} ms; placing the write on the next tier",
                        (*tiers)[a.tier]->name, dirty_wait_ms_);
          (*tiers)[a.tier]->passed_dirty_limit.Add();
          skip[a.tier] = true;
        }
        break;
      case PutStep::kEvict:
        evicted[a.tier] = true;
        EvictClean(*(*tiers)[a.tier], a.bytes);
        break;
    }
  }
}

Cte::PutAttempt Cte::PutOnce(uint64_t tag, uint64_t blob, uint64_t offset, std::string_view data,
                             int64_t* stored_delta, const TierList& tiers,
                             const std::vector<bool>& skip, const std::vector<bool>& evicted) {
  auto done = [](Status s) { return PutAttempt{PutStep::kDone, std::move(s), 0, 0}; };
  const uint64_t end = offset + data.size();
  Stripe& s = StripeFor(tag, blob);
  StripeLock l(s);
  // Known, and left for later: a write allocates and writes its bytes under the lock (a RAM
  // copy is a memcpy; a persistent tier that comes first is real I/O).
  IoUnderLock io(kStripeLockName, "PutOnce: a write's allocation and bytes under the blob's stripe lock");
  auto loaded = LoadEntry(tag, blob);
  if (!loaded.ok()) return done(loaded.status());
  const BlobEntry& e = *loaded;
  const uint64_t stored_before = e.stored();
  Status last = NoSpace("no tier has room for " + std::to_string(data.size()) + " bytes");
  for (size_t ti = 0; ti < tiers.size(); ++ti) {
    Tier& t = *tiers[ti];
    if (skip[ti]) continue;
    if (!Accepts(t)) {  // dying or draining: place elsewhere
      t.passed_refused.Add();
      if (last.code() == Code::kNoSpace) last = NoSpace("no tier can take " + std::to_string(data.size()) +
                                                        " bytes; " + Refusal(t));
      continue;
    }
    const uint64_t tid = t.bdev->tier_id();
    const bool in_place = !e.copies.empty() && e.copies.front().tier_id == tid;
    ExtentList added;
    uint64_t have = in_place ? TotalSize(e.copies.front().extents) : 0;
    if (end > have) {
      // A direct write to a persistent tier may not take room reserved for flushes.
      auto a = t.is_volatile ? t.bdev->Allocate(end - have)
                             : reservations_->AllocateDirect(tag, blob, t.bdev.get(), end - have, !in_place);
      if (!a.ok()) {
        if (a.status().code() != Code::kNoSpace) return done(a.status().WithContext("tier '" + t.name + "'"));
        if (t.is_volatile && !evicted[ti] && clean_lru_.Count(tid) > 0)
          return PutAttempt{PutStep::kEvict, Status::Ok(), ti, end - have};
        last = a.status();
        t.passed_full.Add();
        continue;  // full: fall through to the next tier
      }
      added = std::move(a).value();
    }
    auto free_added = [&] {
      if (!added.empty()) (void)t.bdev->Free(added);
    };
    BlobEntry next = e;
    if (!in_place) {
      BlobCopy fresh;
      fresh.tier_id = tid;
      next.copies.insert(next.copies.begin(), std::move(fresh));
    }
    BlobCopy& c = next.copies.front();
    c.extents.insert(c.extents.end(), added.begin(), added.end());
    c.written.Add(offset, end);
    c.generation = generation_.fetch_add(1);
    c.state = t.is_volatile ? CopyState::kDirty : CopyState::kClean;

    uint64_t prev_reserved = 0, prev_dirty = 0;
    if (t.is_volatile) {
      // Room for the flushed copy first, so a full persistent tier fails the write now.
      Status r = reservations_->ReserveBlob(tag, blob, next.size(), &prev_reserved);
      if (!r.ok()) {
        free_added();
        return done(r.WithContext("writing to volatile tier '" + t.name + "'"));
      }
      uint64_t dirty_here = 0;
      for (const BlobCopy& x : next.copies)
        if (x.tier_id == tid && x.state == CopyState::kDirty) dirty_here += TotalSize(x.extents);
      if (!dirty_bytes_.TryCharge(tid, tag, blob, dirty_here, &prev_dirty)) {
        free_added();
        reservations_->RestoreBlob(tag, blob, prev_reserved);
        return PutAttempt{PutStep::kWaitDirty, Status::Ok(), ti, dirty_here - prev_dirty};
      }
    }
    auto undo = [&] {
      free_added();
      if (t.is_volatile) {
        dirty_bytes_.SetCharge(tid, tag, blob, prev_dirty);
        reservations_->RestoreBlob(tag, blob, prev_reserved);
      }
    };
    Status w = t.bdev->Write(c.extents, offset, data);
    if (!w.ok()) {
      undo();
      return done(w.WithContext("writing blob to tier '" + t.name + "'"));
    }
    KvBatch batch;
    batch.Put(BlobKey(tag, blob), EncodeBlobEntry(next));
    Status a = kv_->Apply(std::move(batch));
    if (!a.ok()) {
      undo();
      return done(a);
    }
    if (t.is_volatile) {
      clean_lru_.Remove(tid, tag, blob);  // its copy here is dirty now
      MarkDirty(tag, blob);
    } else if (!added.empty()) {
      NoteFill(tag, blob, next);
    }
    if (stored_delta) *stored_delta = static_cast<int64_t>(next.stored()) - static_cast<int64_t>(stored_before);
    NoteAccess(s, tag, blob);
    t.placements.Add();
    t.placed_bytes.Add(static_cast<double>(data.size()));
    return done(Status::Ok());
  }
  return done(last);
}

Status Cte::ReadMerged(const BlobEntry& e, const TierList& tiers, uint64_t offset, uint64_t len, char* out) {
  std::fill(out, out + len, 0);
  RangeSet need;
  need.Add(offset, offset + len);
  for (const BlobCopy& c : e.copies) {
    if (need.empty()) break;
    RangeSet have;
    for (const auto& r : need.ranges()) {
      RangeSet part = c.written.Intersect(r.begin, r.end);
      for (const auto& p : part.ranges()) have.Add(p.begin, p.end);
    }
    if (have.empty()) continue;
    Tier* t = TierIn(tiers, c.tier_id);
    if (!t) return Internal("blob copy on unknown tier id " + std::to_string(c.tier_id));
    for (const auto& r : have.ranges()) {
      Status s = t->bdev->Read(c.extents, r.begin, r.end - r.begin, out + (r.begin - offset));
      if (!s.ok()) return s.WithContext("reading blob from tier '" + t->name + "'");
    }
    need = need.Minus(have);
  }
  return Status::Ok();
}

// A read loads the blob's entry and reads its tiers without the stripe lock, so a slow tier (an
// S3 GET, a disk) never stalls the blob's writers, the flusher or the mover, nor the other blobs
// of its stripe. The stripe's change count, read under the lock before and after, validates it:
// unchanged, no change to any blob of the stripe ran in between, so the entry was current and
// no extent read was freed (an extent is freed only after a change under the lock released
// it). Changed, the bytes may be stale or another blob's: they are dropped and the read tries
// again, in the end under the lock, which always finishes. A tier error seen while the count
// moved is retried the same way (an S3 object deleted by the change, say).
Status Cte::GetBlob(uint64_t tag, uint64_t blob, uint64_t offset, uint64_t len, char* out) {
  Stripe& s = StripeFor(tag, blob);
  for (int attempt = 0; attempt < kOptimisticReads; ++attempt) {
    uint64_t seen = 0;
    {
      MutexLock l(&s.mu);
      seen = s.changes;
    }
    // Taken before the entry: a copy on a tier added after this snapshot was placed by a change,
    // which the check below sees.
    const TierSnapshot tiers = Tiers();
    Result<BlobEntry> e = LoadEntry(tag, blob);
    Status read = e.ok() ? ReadMerged(*e, *tiers, offset, len, out) : e.status();
    MutexLock l(&s.mu);
    if (s.changes != seen) {
      optimistic_retries_.Add();
      continue;
    }
    if (e.ok()) NoteRead(s, tag, blob, *e, *tiers);
    return read;
  }
  MutexLock l(&s.mu);  // looks only: not a change (optimistic readers go on)
  IoUnderLock io(kStripeLockName, "GetBlob: the read that always finishes, after its unlocked tries");
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  const TierSnapshot tiers = Tiers();
  NoteRead(s, tag, blob, e, *tiers);
  return ReadMerged(e, *tiers, offset, len, out);
}

void Cte::NoteRead(Stripe& s, uint64_t tag, uint64_t blob, const BlobEntry& e, const TierList& tiers) {
  for (const BlobCopy& c : e.copies) {
    if (c.state != CopyState::kClean) continue;
    Tier* t = TierIn(tiers, c.tier_id);
    if (t && t->is_volatile) clean_lru_.Touch(c.tier_id, tag, blob);
  }
  if (!e.copies.empty()) NoteAccess(s, tag, blob);
}

Result<std::vector<CopyLocation>> Cte::LocateBlob(uint64_t tag, uint64_t blob) {
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);  // looks only: not a change (optimistic readers go on)
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  std::vector<CopyLocation> out;
  for (const BlobCopy& c : e.copies)
    out.push_back({c.tier_id, c.state == CopyState::kDirty, c.written.bytes(), c.extents});
  return out;
}

void Cte::ReleaseCopies(std::vector<BlobCopy> copies, const TierList& tiers, KvBatch* batch) {
  for (BlobCopy& c : copies) {
    if (c.extents.empty()) continue;
    auto it = std::find_if(tiers.begin(), tiers.end(), [&](const auto& t) { return t->bdev->tier_id() == c.tier_id; });
    if (it == tiers.end()) {
      // A bug (callers take their tier list after loading the entry): the extents stay
      // allocated until the next start's reconciliation frees them.
      CLIO_LOG_ERROR("releasing a copy on tier id {}, which is not in the tier list; its extents are freed at "
                     "the next start", c.tier_id);
      continue;
    }
    std::shared_ptr<Tier> t = *it;
    // Persistent extents are reused only once the index change that released them is
    // durable; until then a crash would bring the old entry back, naming them. If the tiers
    // closed first, the next start's reconciliation frees them instead.
    batch->OnDurable([t, life = lifetime_, ext = std::move(c.extents)] {
      MutexLock l(&life->mu);
      if (!life->open) return;
      Status s = t->bdev->Free(ext);
      if (!s.ok()) CLIO_LOG_ERROR("freeing released extents: {}", s.ToString());
    });
  }
}

Status Cte::DelBlob(uint64_t tag, uint64_t blob, int64_t* stored_delta) {
  Stripe& s = StripeFor(tag, blob);
  StripeLock l(s);
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  return RemoveLocked(tag, blob, std::move(e), stored_delta);
}

Status Cte::RemoveLocked(uint64_t tag, uint64_t blob, BlobEntry e, int64_t* stored_delta) {
  if (stored_delta) *stored_delta = -static_cast<int64_t>(e.stored());
  if (e.copies.empty()) return Status::Ok();
  std::vector<uint64_t> tier_ids;
  for (const BlobCopy& c : e.copies) tier_ids.push_back(c.tier_id);
  KvBatch batch;
  batch.Delete(BlobKey(tag, blob));
  ReleaseCopies(std::move(e.copies), *Tiers(), &batch);
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(batch)));
  // Nothing left to flush: its reservation and dirty bytes go with it.
  dirty_bytes_.ReleaseBlob(tag, blob);
  reservations_->ReleaseBlob(tag, blob);
  NoteFill(tag, blob, {});
  for (uint64_t id : tier_ids) clean_lru_.Remove(id, tag, blob);
  MutexLock d(&dirty_mu_);
  dirty_.erase({tag, blob});
  return Status::Ok();
}

Status Cte::TruncateBlob(uint64_t tag, uint64_t blob, uint64_t size, int64_t* stored_delta) {
  if (stored_delta) *stored_delta = 0;
  if (size == 0) return DelBlob(tag, blob, stored_delta);
  Stripe& s = StripeFor(tag, blob);
  StripeLock l(s);
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  if (e.copies.empty() || e.size() <= size) return Status::Ok();
  const uint64_t stored_before = e.stored();
  for (BlobCopy& c : e.copies) c.written.ClipTo(size);
  KvBatch batch;
  if (e.size() == 0) {  // nothing left to keep
    if (stored_delta) *stored_delta = -static_cast<int64_t>(stored_before);
    return RemoveLocked(tag, blob, std::move(e));
  }
  if (stored_delta) *stored_delta = static_cast<int64_t>(e.stored()) - static_cast<int64_t>(stored_before);
  batch.Put(BlobKey(tag, blob), EncodeBlobEntry(e));
  return kv_->Apply(std::move(batch));
}

Status Cte::PunchBlob(uint64_t tag, uint64_t blob, uint64_t offset, uint64_t len,
                      int64_t* stored_delta) {
  if (stored_delta) *stored_delta = 0;
  if (len == 0) return Status::Ok();
  const uint64_t end = offset + len < offset ? UINT64_MAX : offset + len;
  Stripe& s = StripeFor(tag, blob);
  StripeLock l(s);
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  if (e.copies.empty()) return Status::Ok();
  const uint64_t stored_before = e.stored();
  for (BlobCopy& c : e.copies) c.written.Subtract(offset, end);
  if (stored_delta) *stored_delta = static_cast<int64_t>(e.stored()) - static_cast<int64_t>(stored_before);
  if (e.size() == 0) return RemoveLocked(tag, blob, std::move(e));
  KvBatch batch;
  batch.Put(BlobKey(tag, blob), EncodeBlobEntry(e));
  return kv_->Apply(std::move(batch));
}

Result<RangeSet> Cte::BlobRanges(uint64_t tag, uint64_t blob) {
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);  // looks only: not a change (optimistic readers go on)
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  RangeSet all;
  for (const BlobCopy& c : e.copies)
    for (const auto& r : c.written.ranges()) all.Add(r.begin, r.end);
  return all;
}

Result<std::vector<uint64_t>> Cte::ListBlobs(uint64_t tag) {
  std::vector<uint64_t> out;
  std::string prefix = BlobTagPrefix(tag), after;
  while (true) {
    CLIO_ASSIGN_OR_RETURN(KvPairs page, kv_->Scan(prefix, after, kRecoverPage));
    for (auto& [k, _] : page) {
      uint64_t t = 0, b = 0;
      if (ParseBlobKey(k, &t, &b)) out.push_back(b);
    }
    if (page.size() < kRecoverPage) break;
    after = page.back().first;
  }
  return out;
}

Status Cte::DelTag(uint64_t tag) {
  CLIO_ASSIGN_OR_RETURN(auto blobs, ListBlobs(tag));
  for (uint64_t b : blobs) CLIO_RETURN_IF_ERROR(DelBlob(tag, b));
  return Status::Ok();
}

std::vector<TierInfo> Cte::ListTiers() {
  std::vector<TierInfo> out;
  for (const auto& t : *Tiers()) out.push_back({t->name, t->bdev->tier_id(), t->score, t->bdev->GetStats()});
  return out;
}

std::string_view TierConditionName(TierCondition c) {
  switch (c) {
    case TierCondition::kDrained: return "drained";
    case TierCondition::kDraining: return "draining";
    case TierCondition::kDead: return "dead";
    case TierCondition::kDying: return "dying";
    case TierCondition::kDegraded: return "degraded";
    case TierCondition::kActive: return "active";
  }
  return "unknown";
}

std::vector<TierState> Cte::TierStates() {
  std::vector<TierState> out;
  for (const auto& t : *Tiers()) {
    const BdevStats s = t->bdev->GetStats();
    TierState st;
    st.tier_id = t->bdev->tier_id();
    st.bytes_left = s.used;
    st.from_config = t->from_config;
    if (t->draining.load(std::memory_order_acquire)) {
      st.condition = s.used == 0 ? TierCondition::kDrained : TierCondition::kDraining;
    } else if (s.lifetime_days < kDeadLifespanDays) {
      st.condition = TierCondition::kDead;
    } else if (!AcceptsAt(*t, s.lifetime_days)) {
      st.condition = TierCondition::kDying;  // persistent, under kDyingLifespanDays
    } else if (!s.health.empty() && s.health != "ok") {
      st.condition = TierCondition::kDegraded;
    }
    out.push_back(st);
  }
  return out;
}

std::pair<uint64_t, uint64_t> Cte::PersistentSpace() {
  uint64_t cap = 0, rem = 0;
  for (const auto& t : *Tiers()) {
    if (t->is_volatile) continue;
    BdevStats s = t->bdev->GetStats();
    cap += s.capacity;
    rem += s.remaining;
  }
  return {cap, rem};
}

}  // namespace clio
