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

constexpr std::string_view kTierKeyPrefix = "t/";
constexpr size_t kRecoverPage = 1024;

std::string TierKey(const std::string& name) { return std::string(kTierKeyPrefix) + name; }

// An operator's lifespan and drain mark of a tier, kept across restarts.
constexpr std::string_view kTierMotionPrefix = "tm/";
std::string TierMotionKey(const std::string& name) { return std::string(kTierMotionPrefix) + name; }

std::string EncodeTierMotion(double lifespan_days, bool draining) {
  Encoder e;
  e.Put<uint8_t>(1).Put<double>(lifespan_days).Put<uint8_t>(draining ? 1 : 0);
  return e.Take();
}

Status DecodeTierMotion(std::string_view v, double* lifespan_days, bool* draining) {
  Decoder d(v);
  uint8_t version = 0, flag = 0;
  d.Get(&version);
  d.Get(lifespan_days);
  d.Get(&flag);
  CLIO_RETURN_IF_ERROR(d.Finish("tier lifespan record"));
  if (version != 1 || flag > 1 || !std::isfinite(*lifespan_days) || *lifespan_days < 0)
    return Corruption("tier lifespan record: unknown version or bad value");
  *draining = flag == 1;
  return Status::Ok();
}

struct TierRecord {
  uint64_t id = 0;
  Persistence persistence = Persistence::kTemporary;
  std::string name;
};

std::string EncodeTierRecord(uint64_t id, Persistence p) {
  Encoder e;
  e.Put<uint8_t>(1).Put<uint64_t>(id).Put<uint8_t>(static_cast<uint8_t>(p));
  return e.Take();
}

Result<TierRecord> DecodeTierRecord(std::string_view v) {
  Decoder d(v);
  uint8_t version = 0, p = 0;
  TierRecord r;
  d.Get(&version);
  d.Get(&r.id);
  d.Get(&p);
  CLIO_RETURN_IF_ERROR(d.Finish("tier record"));
  if (version != 1 || p > 2) return Corruption("tier record: unknown version or persistence");
  r.persistence = static_cast<Persistence>(p);
  return r;
}

}  // namespace

// What the KV store's commit thread may touch of this CTE: the pre-commit hook and deferred
// frees outlive the Cte object (the store closes after the pools), so they go through this
// shared state and do nothing once the tiers are closed.
struct Cte::TierLifetime {
  Mutex mu;
  bool open GUARDED_BY(mu) = true;
  std::vector<Bdev*> persistent GUARDED_BY(mu);
};

Result<std::unique_ptr<Cte>> Cte::Open(const CteConfig& config, KvStore* kv) {
  if (config.tiers.empty()) return InvalidArgument("the CTE needs at least one storage tier");
  if (auto bad = MovementConfigError(config)) return InvalidArgument(bad->first + ": " + bad->second);
  std::unique_ptr<Cte> cte(new Cte(kv, config));
  cte->lifetime_ = std::make_shared<TierLifetime>();
  KvBatch records;
  for (const TierConfig& tc : config.tiers) {
    BdevConfig bc = tc.bdev;
    CLIO_ASSIGN_OR_RETURN(auto rec, kv->Get(TierKey(bc.name)));
    if (rec) {
      CLIO_ASSIGN_OR_RETURN(TierRecord r, DecodeTierRecord(*rec));
      bc.tier_id = r.id;
      if (bc.type == BdevType::kFile && r.persistence != Persistence::kVolatile &&
          access(bc.name.c_str(), F_OK) != 0)
        return Corruption("tier '" + bc.name + "' (id " + std::to_string(r.id) +
                          ") is recorded in the metadata but its file is missing; restore the "
                          "file or erase the filesystem");
    }
    auto bdev = Bdev::Open(bc);
    if (!bdev.ok()) return bdev.status().WithContext("opening tier '" + bc.name + "'");
    for (const Tier& t : cte->tiers_)
      if (t.bdev->tier_id() == (*bdev)->tier_id())
        return Corruption("tiers '" + t.name + "' and '" + bc.name + "' have the same id");
    const BdevStats stats = (*bdev)->GetStats();
    bool is_volatile = stats.persistence == Persistence::kVolatile;
    uint64_t dirty_limit = 0;
    if (is_volatile) {
      dirty_limit = tc.dirty_limit ? tc.dirty_limit : stats.capacity / 2;
      if (dirty_limit > stats.capacity)
        return InvalidArgument("tier '" + bc.name + "': dirty_limit (" + std::to_string(dirty_limit) +
                               " bytes) is larger than the tier's capacity (" +
                               std::to_string(stats.capacity) + " bytes)");
    } else if (tc.dirty_limit) {
      return InvalidArgument("tier '" + bc.name + "': dirty_limit applies only to volatile tiers; "
                             "a persistent tier holds no dirty data");
    }
    records.Put(TierKey(bc.name), EncodeTierRecord((*bdev)->tier_id(), stats.persistence));
    Tier tier{bc.name, tc.score, std::move(bdev).value(), is_volatile, dirty_limit};
    CLIO_ASSIGN_OR_RETURN(auto motion, kv->Get(TierMotionKey(bc.name)));
    if (motion) {
      double days = 0;
      bool draining = false;
      Status m = DecodeTierMotion(*motion, &days, &draining);
      if (!m.ok()) return m.WithContext("tier '" + bc.name + "'");
      tier.bdev->SetLifespan(days);
      tier.motion->draining.store(draining);
      if (draining || days < kDyingLifespanDays)
        CLIO_LOG_WARN("tier '{}': lifespan {} days{}, as set before the restart", bc.name, days,
                      draining ? ", draining" : "");
    }
    cte->tiers_.push_back(std::move(tier));
  }
  std::stable_sort(cte->tiers_.begin(), cte->tiers_.end(),
                   [](const Tier& a, const Tier& b) { return a.score > b.score; });
  if (std::none_of(cte->tiers_.begin(), cte->tiers_.end(), [](const Tier& t) { return !t.is_volatile; }))
    CLIO_LOG_WARN("no persistent tier is configured: fsync cannot make data durable");
  CLIO_RETURN_IF_ERROR(kv->Apply(std::move(records)));
  CLIO_RETURN_IF_ERROR(cte->Recover());

  std::vector<Bdev*> persistent;
  for (Tier& t : cte->tiers_) {
    if (t.is_volatile)
      cte->dirty_bytes_.AddTier(t.bdev->tier_id(), std::max<uint64_t>(t.dirty_limit, 1));
    else
      persistent.push_back(t.bdev.get());
  }
  cte->reservations_ = std::make_unique<FlushReservations>(
      persistent, [c = cte.get()](const Bdev& b, const BdevStats& s) {
        Tier* t = c->TierById(b.tier_id());
        return t && !t->is_volatile && AcceptsAt(*t, s.lifetime_days);
      });
  {
    MutexLock l(&cte->lifetime_->mu);
    cte->lifetime_->persistent = persistent;
  }
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
  return cte;
}

Cte::~Cte() {
  (void)Stop();
  MutexLock l(&lifetime_->mu);  // waits for a running hook or deferred free
  lifetime_->open = false;
  lifetime_->persistent.clear();
}

Status Cte::Recover() {
  // Metadata knows every tier ever configured; copies on a volatile one are dropped, copies on
  // an unconfigured persistent one mean that tier still holds data.
  std::map<uint64_t, TierRecord> known;
  {
    std::string after;
    while (true) {
      CLIO_ASSIGN_OR_RETURN(KvPairs page, kv_->Scan(kTierKeyPrefix, after, kRecoverPage));
      for (auto& [k, v] : page) {
        CLIO_ASSIGN_OR_RETURN(TierRecord r, DecodeTierRecord(v));
        r.name = k.substr(kTierKeyPrefix.size());
        known[r.id] = r;
      }
      if (page.size() < kRecoverPage) break;
      after = page.back().first;
    }
  }
  std::map<uint64_t, ExtentList> referenced;
  uint64_t dropped = 0, entries = 0;
  std::string after;
  while (true) {
    CLIO_ASSIGN_OR_RETURN(KvPairs page, kv_->Scan(kBlobKeyPrefix, after, kRecoverPage));
    KvBatch batch;
    for (auto& [key, value] : page) {
      ++entries;
      auto e = DecodeBlobEntry(value);
      if (!e.ok()) return e.status().WithContext("blob index key of " + std::to_string(key.size()) + " bytes");
      BlobEntry kept;
      bool changed = false;
      for (BlobCopy& c : e->copies) {
        Tier* t = TierById(c.tier_id);
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
  for (Tier& t : tiers_) {
    Status s = t.bdev->Reconcile(referenced[t.bdev->tier_id()]);
    if (!s.ok()) return s.WithContext("reconciling tier '" + t.name + "'");
    // One record per live extent from here on: the log does not grow across restarts.
    s = t.bdev->FlushAllocLog();
    if (!s.ok()) return s.WithContext("compacting the allocator log of tier '" + t.name + "'");
  }
  CLIO_LOG_INFO("blob index: {} entries, {} volatile copies dropped at start", entries, dropped);
  return kv_->Sync();
}

Cte::Stripe& Cte::StripeFor(uint64_t tag, uint64_t blob) {
  return stripes_[std::hash<uint64_t>{}(tag * 0x9e3779b97f4a7c15ull ^ blob) % kStripes];
}

Cte::Tier* Cte::TierById(uint64_t id) {
  for (Tier& t : tiers_)
    if (t.bdev->tier_id() == id) return &t;
  return nullptr;
}

bool Cte::Accepts(const Tier& t) { return AcceptsAt(t, t.bdev->GetStats().lifetime_days); }

bool Cte::AcceptsAt(const Tier& t, double lifetime_days) {
  if (t.motion->draining.load(std::memory_order_acquire)) return false;
  return lifetime_days >= (t.is_volatile ? kDeadLifespanDays : kDyingLifespanDays);
}

std::string Cte::Refusal(const Tier& t) {
  if (t.motion->draining.load()) return "tier '" + t.name + "' is draining";
  char days[32];
  std::snprintf(days, sizeof days, "%g", t.bdev->GetStats().lifetime_days);
  return "tier '" + t.name + "' is dying (lifespan " + days + " days)";
}

Status Cte::SetLifespan(uint64_t tier_id, double days) {
  if (!std::isfinite(days) || days < 0)
    return InvalidArgument("lifespan must be a finite number of days >= 0, not " + std::to_string(days));
  Tier* t = TierById(tier_id);
  if (!t) return NotFound("no tier with id " + std::to_string(tier_id));
  t->bdev->SetLifespan(days);
  CLIO_LOG_INFO("tier '{}': lifespan set to {} days", t->name, days);
  return SaveMotion(*t);
}

Status Cte::SaveMotion(const Tier& t) {
  KvBatch batch;
  batch.Put(TierMotionKey(t.name), EncodeTierMotion(t.bdev->GetStats().lifetime_days, t.motion->draining.load()));
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(batch)));
  // An operator's decision: durable when the call returns.
  return kv_->Sync();
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
  std::vector<bool> skip(tiers_.size(), false), evicted(tiers_.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(dirty_wait_ms_);
  while (true) {
    PutAttempt a = PutOnce(tag, blob, offset, data, stored_delta, skip, evicted);
    switch (a.step) {
      case PutStep::kDone:
        return a.status;
      case PutStep::kWaitDirty:
        // No lock is held here: the flusher needs this blob's stripe to make room.
        KickFlusher();
        if (!dirty_bytes_.WaitForRoom(tiers_[a.tier].bdev->tier_id(), a.bytes, deadline)) {
          CLIO_LOG_WARN("tier '{}' stayed at its dirty limit for {} ms; placing the write on the next tier",
                        tiers_[a.tier].name, dirty_wait_ms_);
          skip[a.tier] = true;
        }
        break;
      case PutStep::kEvict:
        evicted[a.tier] = true;
        EvictClean(a.tier, a.bytes);
        break;
    }
  }
}

Cte::PutAttempt Cte::PutOnce(uint64_t tag, uint64_t blob, uint64_t offset, std::string_view data,
                             int64_t* stored_delta, const std::vector<bool>& skip,
                             const std::vector<bool>& evicted) {
  auto done = [](Status s) { return PutAttempt{PutStep::kDone, std::move(s), 0, 0}; };
  const uint64_t end = offset + data.size();
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);
  auto loaded = LoadEntry(tag, blob);
  if (!loaded.ok()) return done(loaded.status());
  const BlobEntry& e = *loaded;
  const uint64_t stored_before = e.stored();
  Status last = NoSpace("no tier has room for " + std::to_string(data.size()) + " bytes");
  for (size_t ti = 0; ti < tiers_.size(); ++ti) {
    Tier& t = tiers_[ti];
    if (skip[ti]) continue;
    if (!Accepts(t)) {  // dying or draining: place elsewhere
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
                             : reservations_->AllocateDirect(t.bdev.get(), end - have);
      if (!a.ok()) {
        if (a.status().code() != Code::kNoSpace) return done(a.status().WithContext("tier '" + t.name + "'"));
        if (t.is_volatile && !evicted[ti] && clean_lru_.Count(tid) > 0)
          return PutAttempt{PutStep::kEvict, Status::Ok(), ti, end - have};
        last = a.status();
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
    }
    if (stored_delta) *stored_delta = static_cast<int64_t>(next.stored()) - static_cast<int64_t>(stored_before);
    NoteAccess(s, tag, blob);
    return done(Status::Ok());
  }
  return done(last);
}

Status Cte::ReadMerged(const BlobEntry& e, uint64_t offset, uint64_t len, char* out) {
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
    Tier* t = TierById(c.tier_id);
    if (!t) return Internal("blob copy on unknown tier id " + std::to_string(c.tier_id));
    for (const auto& r : have.ranges()) {
      Status s = t->bdev->Read(c.extents, r.begin, r.end - r.begin, out + (r.begin - offset));
      if (!s.ok()) return s.WithContext("reading blob from tier '" + t->name + "'");
    }
    need = need.Minus(have);
  }
  return Status::Ok();
}

Status Cte::GetBlob(uint64_t tag, uint64_t blob, uint64_t offset, uint64_t len, char* out) {
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  for (const BlobCopy& c : e.copies) {
    if (c.state != CopyState::kClean) continue;
    Tier* t = TierById(c.tier_id);
    if (t && t->is_volatile) clean_lru_.Touch(c.tier_id, tag, blob);
  }
  if (!e.copies.empty()) NoteAccess(s, tag, blob);
  return ReadMerged(e, offset, len, out);
}

Result<std::vector<CopyLocation>> Cte::LocateBlob(uint64_t tag, uint64_t blob) {
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);
  CLIO_ASSIGN_OR_RETURN(BlobEntry e, LoadEntry(tag, blob));
  std::vector<CopyLocation> out;
  for (const BlobCopy& c : e.copies)
    out.push_back({c.tier_id, c.state == CopyState::kDirty, c.written.bytes()});
  return out;
}

void Cte::ReleaseCopies(std::vector<BlobCopy> copies, KvBatch* batch) {
  for (BlobCopy& c : copies) {
    Tier* t = TierById(c.tier_id);
    if (!t || c.extents.empty()) continue;
    Bdev* b = t->bdev.get();
    // Persistent extents are reused only once the index change that released them is
    // durable; until then a crash would bring the old entry back, naming them. If the tiers
    // closed first, the next start's reconciliation frees them instead.
    batch->OnDurable([b, life = lifetime_, ext = std::move(c.extents)] {
      MutexLock l(&life->mu);
      if (!life->open) return;
      Status s = b->Free(ext);
      if (!s.ok()) CLIO_LOG_ERROR("freeing released extents: {}", s.ToString());
    });
  }
}

Status Cte::DelBlob(uint64_t tag, uint64_t blob, int64_t* stored_delta) {
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);
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
  ReleaseCopies(std::move(e.copies), &batch);
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(batch)));
  // Nothing left to flush: its reservation and dirty bytes go with it.
  dirty_bytes_.ReleaseBlob(tag, blob);
  reservations_->ReleaseBlob(tag, blob);
  for (uint64_t id : tier_ids) clean_lru_.Remove(id, tag, blob);
  MutexLock d(&dirty_mu_);
  dirty_.erase({tag, blob});
  return Status::Ok();
}

Status Cte::TruncateBlob(uint64_t tag, uint64_t blob, uint64_t size, int64_t* stored_delta) {
  if (stored_delta) *stored_delta = 0;
  if (size == 0) return DelBlob(tag, blob, stored_delta);
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);
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
  MutexLock l(&s.mu);
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
  MutexLock l(&s.mu);
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
  for (Tier& t : tiers_) out.push_back({t.name, t.bdev->tier_id(), t.score, t.bdev->GetStats()});
  return out;
}

std::pair<uint64_t, uint64_t> Cte::PersistentSpace() {
  uint64_t cap = 0, rem = 0;
  for (Tier& t : tiers_) {
    if (t.is_volatile) continue;
    BdevStats s = t.bdev->GetStats();
    cap += s.capacity;
    rem += s.remaining;
  }
  return {cap, rem};
}

}  // namespace clio
