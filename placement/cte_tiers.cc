// The CTE's tier set: the records that tie tier names to ids in the metadata, opening a
// configured tier, the published tier list (a snapshot per operation), and tiers added and
// removed while the CTE runs. Metadata keys in docs/blob-index.md.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/codec.h"
#include "common/log.h"
#include "common/size.h"
#include "placement/cte.h"
#include "storage/media.h"

namespace clio {
namespace {

constexpr std::string_view kTierKeyPrefix = "t/";
constexpr size_t kScanPage = 1024;

std::string TierKey(const std::string& name) { return std::string(kTierKeyPrefix) + name; }

// The keys of a tier added at run time (AddTier's spec), so it comes back after a restart.
constexpr std::string_view kTierSpecPrefix = "ta/";
std::string TierSpecKey(const std::string& name) { return std::string(kTierSpecPrefix) + name; }

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

// Calls fn(name, value) for every record under `prefix`, a page at a time; name is the key
// without the prefix. Stops at fn's first error.
Status ForEachRecord(KvStore* kv, std::string_view prefix,
                     const std::function<Status(std::string name, std::string_view value)>& fn) {
  std::string after;
  while (true) {
    CLIO_ASSIGN_OR_RETURN(KvPairs page, kv->Scan(prefix, after, kScanPage));
    for (auto& [k, v] : page) CLIO_RETURN_IF_ERROR(fn(k.substr(prefix.size()), v));
    if (page.size() < kScanPage) return Status::Ok();
    after = page.back().first;
  }
}

}  // namespace

double PerfScore(const PerfMetrics& p) {
  const double mbps = std::min(p.read_bandwidth_mbps, p.write_bandwidth_mbps);
  if (!(mbps > 1)) return 0;
  return std::clamp(std::log10(mbps) / 5, 0.0, 1.0);
}

bool RanksBefore(double score_a, const PerfMetrics& a, std::string_view name_a, double score_b,
                 const PerfMetrics& b, std::string_view name_b) {
  if (score_a != score_b) return score_a > score_b;
  if (a.write_bandwidth_mbps != b.write_bandwidth_mbps) return a.write_bandwidth_mbps > b.write_bandwidth_mbps;
  if (a.write_latency_us != b.write_latency_us) return a.write_latency_us < b.write_latency_us;
  if (a.read_bandwidth_mbps != b.read_bandwidth_mbps) return a.read_bandwidth_mbps > b.read_bandwidth_mbps;
  return name_a < name_b;
}

Result<std::shared_ptr<Cte::Tier>> Cte::OpenTier(const TierConfig& tc, KvBatch* records, bool restore_motion) {
  BdevConfig bc = tc.bdev;
  CLIO_ASSIGN_OR_RETURN(auto rec, kv_->Get(TierKey(bc.name)));
  std::shared_ptr<Bdev> bdev;
  if (tc.attached) {
    // Opened by its own pool, under the id in its device header.
    bdev = std::shared_ptr<Bdev>(tc.attached, [](Bdev*) {});
    if (rec) {
      CLIO_ASSIGN_OR_RETURN(TierRecord r, DecodeTierRecord(*rec));
      if (r.id != bdev->tier_id())
        return Corruption("tier '" + bc.name + "': the attached pool's device has id " +
                          std::to_string(bdev->tier_id()) + " but the metadata recorded id " +
                          std::to_string(r.id) + "; attach the pool that held this tier");
    }
  } else {
    if (rec) {
      CLIO_ASSIGN_OR_RETURN(TierRecord r, DecodeTierRecord(*rec));
      bc.tier_id = r.id;
      if (IsFileMedium(bc.type) && r.persistence != Persistence::kVolatile &&
          access(bc.name.c_str(), F_OK) != 0)
        return Corruption("tier '" + bc.name + "' (id " + std::to_string(r.id) +
                          ") is recorded in the metadata but its file is missing; restore the "
                          "file or erase the filesystem");
    }
    auto opened = Bdev::Open(bc);
    if (!opened.ok()) return opened.status().WithContext("opening tier '" + bc.name + "'");
    bdev = std::move(opened).value();
  }
  const BdevStats stats = bdev->GetStats();
  auto tier = std::make_shared<Tier>();
  tier->name = bc.name;
  LabelTier(*tier);
  tier->perf = stats.perf;
  tier->score = tc.score ? *tc.score : PerfScore(stats.perf);
  tier->is_volatile = stats.persistence == Persistence::kVolatile;
  tier->from_config = !tc.recorded;
  if (tier->is_volatile) {
    tier->dirty_limit = tc.dirty_limit ? tc.dirty_limit : stats.capacity / 2;
    if (tier->dirty_limit > stats.capacity)
      return InvalidArgument("tier '" + bc.name + "': dirty_limit (" + std::to_string(tier->dirty_limit) +
                             " bytes) is larger than the tier's capacity (" +
                             std::to_string(stats.capacity) + " bytes)");
  } else if (tc.dirty_limit) {
    return InvalidArgument("tier '" + bc.name + "': dirty_limit applies only to volatile tiers; "
                           "a persistent tier holds no dirty data");
  }
  records->Put(TierKey(bc.name), EncodeTierRecord(bdev->tier_id(), stats.persistence));
  tier->bdev = std::move(bdev);
  CLIO_ASSIGN_OR_RETURN(auto motion, kv_->Get(TierMotionKey(bc.name)));
  if (motion && !restore_motion) {
    records->Delete(TierMotionKey(bc.name));
  } else if (motion) {
    double days = 0;
    bool draining = false;
    Status m = DecodeTierMotion(*motion, &days, &draining);
    if (!m.ok()) return m.WithContext("tier '" + bc.name + "'");
    tier->bdev->SetLifespan(days);
    tier->draining.store(draining);
    if (draining || days < kDyingLifespanDays)
      CLIO_LOG_WARN("tier '{}': lifespan {} days{}, as set before the restart", bc.name, days,
                    draining ? ", draining" : "");
  }
  return tier;
}

void Cte::EnlistTier(Tier& t) {
  if (t.is_volatile) {
    dirty_bytes_.AddTier(t.bdev->tier_id(), std::max<uint64_t>(t.dirty_limit, 1));
    return;
  }
  reservations_->AddBdev(t.bdev.get());
  MutexLock l(&lifetime_->mu);
  lifetime_->persistent.push_back(t.bdev.get());
}

void Cte::RetireTier(Tier& t) {
  if (t.is_volatile) {
    dirty_bytes_.RemoveTier(t.bdev->tier_id());
    return;
  }
  reservations_->RemoveBdev(t.bdev.get());
  MutexLock l(&lifetime_->mu);  // waits for a commit's sync of it to finish
  auto& p = lifetime_->persistent;
  p.erase(std::remove(p.begin(), p.end(), t.bdev.get()), p.end());
}

Cte::TierSnapshot Cte::Tiers() const {
  MutexLock l(&tiers_mu_);
  return tiers_;
}

void Cte::PublishTiers(TierList next) {
  std::stable_sort(next.begin(), next.end(), [](const auto& a, const auto& b) {
    return RanksBefore(a->score, a->perf, a->name, b->score, b->perf, b->name);
  });
  auto snap = std::make_shared<const TierList>(std::move(next));
  MutexLock l(&tiers_mu_);
  tiers_ = std::move(snap);
}

Cte::Tier* Cte::TierIn(const TierList& tiers, uint64_t id) {
  for (const auto& t : tiers)
    if (t->bdev->tier_id() == id) return t.get();
  return nullptr;
}

std::shared_ptr<Cte::Tier> Cte::TierById(uint64_t id) {
  TierSnapshot now = Tiers();
  for (const auto& t : *now)
    if (t->bdev->tier_id() == id) return t;
  return nullptr;
}

Result<std::map<uint64_t, Cte::KnownTier>> Cte::KnownTiers() {
  std::map<uint64_t, KnownTier> known;
  CLIO_RETURN_IF_ERROR(ForEachRecord(kv_, kTierKeyPrefix, [&](std::string name, std::string_view v) -> Status {
    CLIO_ASSIGN_OR_RETURN(TierRecord r, DecodeTierRecord(v));
    known[r.id] = KnownTier{std::move(name), r.persistence};
    return Status::Ok();
  }));
  return known;
}

Status Cte::SaveMotion(const Tier& t) {
  KvBatch batch;
  batch.Put(TierMotionKey(t.name), EncodeTierMotion(t.bdev->GetStats().lifetime_days, t.draining.load()));
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(batch)));
  // An operator's decision: durable when the call returns.
  return kv_->Sync();
}

Result<TierInfo> Cte::AddTier(const TierConfig& tc, std::string_view spec) {
  MutexLock change(&tier_change_mu_);
  const TierSnapshot now = Tiers();
  for (const auto& t : *now)
    if (t->name == tc.bdev.name)
      return Status(Code::kAlreadyExists, "a tier named '" + tc.bdev.name + "' is configured already");
  CLIO_ASSIGN_OR_RETURN(auto record, kv_->Get(TierKey(tc.bdev.name)));
  const bool recorded = record.has_value();
  KvBatch records;
  CLIO_ASSIGN_OR_RETURN(std::shared_ptr<Tier> tier, OpenTier(tc, &records, /*restore_motion=*/false));
  tier->from_config = false;
  for (const auto& t : *now)
    if (t->bdev->tier_id() == tier->bdev->tier_id())
      return Status(Code::kAlreadyExists, "tier '" + tier->name + "' has the id of tier '" + t->name +
                                              "' (" + std::to_string(t->bdev->tier_id()) +
                                              "): the same device under another name?");
  // No blob index entry names a tier that is not configured: Open() refuses to start while one
  // does, and RemoveTier() removes only empty tiers. So whatever the allocator log still holds
  // is garbage, if the tier is this filesystem's; a device with data that the metadata has no
  // record of belongs to someone else and is refused, not reused.
  const uint64_t held = tier->bdev->GetStats().used;
  if (!recorded && held > 0)
    return Status(Code::kBusy, "tier '" + tier->name + "' already holds " + FormatSize(held) +
                                   " of data (tier id " + std::to_string(tier->bdev->tier_id()) +
                                   ") that this filesystem has no record of; use a new path");
  Status s = tier->bdev->Reconcile({});
  if (s.ok()) s = tier->bdev->FlushAllocLog();
  if (!s.ok()) return s.WithContext("preparing tier '" + tier->name + "'");
  records.Put(TierSpecKey(tier->name), std::string(spec));
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(records)));
  CLIO_RETURN_IF_ERROR(kv_->Sync());
  EnlistTier(*tier);
  TierList next(*now);
  next.push_back(tier);
  PublishTiers(std::move(next));
  CLIO_LOG_INFO("tier '{}' (id {}, score {:g}) added", tier->name, tier->bdev->tier_id(), tier->score);
  return TierInfo{tier->name, tier->bdev->tier_id(), tier->score, tier->bdev->GetStats()};
}

Status Cte::RemoveTier(uint64_t tier_id) {
  MutexLock change(&tier_change_mu_);
  // No drain or reorganizer pass is moving blobs meanwhile (a pass that saw the tier open could
  // otherwise still copy onto it).
  MutexLock movers(&move_mu_);
  const TierSnapshot now = Tiers();
  std::shared_ptr<Tier> t;
  for (const auto& x : *now)
    if (x->bdev->tier_id() == tier_id) t = x;
  if (!t) return NotFound("no tier with id " + std::to_string(tier_id));
  if (!t->draining.load())
    return Status(Code::kBusy, "tier '" + t->name + "' is not drained; drain it first (clioctl tier drain " +
                                   t->name + ") to move its data to the other tiers");
  // A barrier first: every allocation happens under some blob's stripe lock, after that
  // operation checked the tier takes data, or in a flush, which checks it again under the lock
  // before its copy goes in. Once each stripe was taken and released and every flush running
  // now has ended, every placement that saw the tier open before the drain mark has committed
  // (and shows in `used` below) or given its room back, and every later one sees the mark.
  StripeBarrier();
  FlushBarrier();
  if (const uint64_t used = t->bdev->GetStats().used; used > 0)
    return Status(Code::kBusy, "tier '" + t->name + "' still holds " + FormatSize(used) +
                                   "; drain it again until it is empty");
  bool other_persistent = false, other_volatile = false;
  for (const auto& x : *now) {
    if (x == t) continue;
    (x->is_volatile ? other_volatile : other_persistent) = true;
  }
  if (!other_persistent && !other_volatile)
    return Status(Code::kBusy, "tier '" + t->name + "' is the only tier; add another first");
  if (!t->is_volatile && !other_persistent && other_volatile)
    return Status(Code::kBusy, "tier '" + t->name + "' is the last persistent tier: without it fsync could "
                                   "not make data durable; add another persistent tier first");
  // The frees the drain made reach the device's allocator log, so an add of the same device
  // later finds it empty, not holding data this filesystem has no record of.
  if (Status s = t->bdev->Sync(); !s.ok()) return s.WithContext("removing tier '" + t->name + "'");
  // The records go first: if that fails nothing has changed; once they are durable a crash
  // leaves the tier out (it held nothing).
  KvBatch batch;
  batch.Delete(TierKey(t->name));
  batch.Delete(TierMotionKey(t->name));
  batch.Delete(TierSpecKey(t->name));
  CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(batch)));
  CLIO_RETURN_IF_ERROR(kv_->Sync());
  TierList next;
  for (const auto& x : *now)
    if (x != t) next.push_back(x);
  PublishTiers(std::move(next));
  RetireTier(*t);
  clean_lru_.RemoveTier(tier_id);
  CLIO_LOG_INFO("tier '{}' (id {}) removed; its device is closed once no operation holds it", t->name, tier_id);
  return Status::Ok();
}

Result<std::vector<std::pair<std::string, std::string>>> Cte::AddedTierSpecs(KvStore* kv) {
  std::vector<std::pair<std::string, std::string>> out;
  CLIO_RETURN_IF_ERROR(ForEachRecord(kv, kTierSpecPrefix, [&](std::string name, std::string_view v) {
    out.emplace_back(std::move(name), std::string(v));
    return Status::Ok();
  }));
  return out;
}

Result<bool> Cte::HasTierRecord(KvStore* kv, const std::string& name) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv->Get(TierKey(name)));
  return v.has_value();
}

Status Cte::ForgetAddedTier(KvStore* kv, const std::string& name) {
  KvBatch batch;
  batch.Delete(TierSpecKey(name));
  return kv->Apply(std::move(batch));
}

}  // namespace clio
