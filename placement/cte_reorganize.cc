// The reorganizer: blob scores from decayed access counts, and passes that promote hot blobs
// to higher-score tiers and demote cold ones, within a byte budget per pass. Moves go through
// CopyBlobTo (cte_movement.cc) and DropCleanCopies (cte_writeback.cc).
#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/log.h"
#include "placement/blob_index.h"
#include "placement/cte.h"

namespace clio {
namespace {

// A decayed count below this is forgotten: the blob scores 0 like one never accessed.
constexpr double kForgetHeat = 0.01;
constexpr size_t kScanPage = 1024;
// Index entries a pass reads looking for cold blobs; the next pass goes on from there.
constexpr size_t kDemoteScanPerPass = 64 * 1024;

double ScoreOf(double heat) { return heat / (heat + 1); }

}  // namespace

std::optional<std::pair<std::string, std::string>> MovementConfigError(const CteConfig& c) {
  if (c.reorganize_interval_ms < 1000 || c.reorganize_interval_ms > 3600000)
    return std::pair<std::string, std::string>{"reorganize_interval_ms", "must be between 1000 and 3600000"};
  if (c.reorganize_bandwidth < (1ull << 20))
    return std::pair<std::string, std::string>{"reorganize_bandwidth",
                                               "must be at least 1MiB (bytes per second), so a pass can move a chunk"};
  if (!(c.reorganize_threshold > 0 && c.reorganize_threshold <= 1))
    return std::pair<std::string, std::string>{"reorganize_threshold", "must be a score difference in (0, 1]"};
  if (!(c.score_decay > 0 && c.score_decay < 1))
    return std::pair<std::string, std::string>{"score_decay", "must be between 0 and 1, exclusive"};
  return std::nullopt;
}

double Cte::BlobScore(uint64_t tag, uint64_t blob) {
  Stripe& s = StripeFor(tag, blob);
  MutexLock l(&s.mu);  // the access counts only: no blob changes
  auto it = s.access.find({tag, blob});
  if (it == s.access.end()) return 0;
  return ScoreOf(it->second.heat * score_decay_ + it->second.recent);
}

Result<ReorganizeStats> Cte::ReorganizePass(bool paced) {
  MutexLock m(&move_mu_);
  const auto start = std::chrono::steady_clock::now();
  ReorganizeStats st;
  st.budget = reorganize_budget_;
  const BlobScores scores = FoldAccessCounts();
  // The tiers for the whole pass; candidates point into it.
  const TierSnapshot tiers = Tiers();
  CLIO_ASSIGN_OR_RETURN(MovePlan plan, PlanMoves(*tiers, scores, &st));
  bool going = true;
  for (const MoveCandidate& c : plan.up)
    if (going) going = MoveOne(c, true, paced ? &start : nullptr, &st);
  for (const MoveCandidate& c : plan.down)
    if (going) going = MoveOne(c, false, paced ? &start : nullptr, &st);
  promotions_.Add(static_cast<double>(st.promoted));
  demotions_.Add(static_cast<double>(st.demoted));
  moved_bytes_.Add(static_cast<double>(st.moved_bytes));
  if (st.promoted + st.demoted > 0)
    CLIO_LOG_DEBUG("reorganizer: {} promoted, {} demoted, {} bytes moved, {} left for later", st.promoted,
                   st.demoted, st.moved_bytes, st.over_budget);
  return st;
}

Cte::BlobScores Cte::FoldAccessCounts() {
  BlobScores scores;
  for (size_t i = 0; i < kStripes; ++i) {
    Stripe& s = stripes_[i];
    MutexLock l(&s.mu);  // the access counts only
    for (auto it = s.access.begin(); it != s.access.end();) {
      AccessCount& a = it->second;
      a.heat = a.heat * score_decay_ + a.recent;
      a.recent = 0;
      if (a.heat < kForgetHeat) {
        it = s.access.erase(it);
      } else {
        scores[it->first] = ScoreOf(a.heat);
        ++it;
      }
    }
  }
  return scores;
}

// Candidates: blobs whose newest copy sits on a tier their score is far from. Hot blobs
// (promotions) are exactly the ones with a score, looked up one by one; cold ones (demotions)
// are found by scanning at most kDemoteScanPerPass index entries, from where the last pass
// stopped. The entries read here are hints; each move re-checks the entry under the blob's lock.
Result<Cte::MovePlan> Cte::PlanMoves(const TierList& tiers, const BlobScores& scores, ReorganizeStats* st) {
  MovePlan plan;
  auto consider = [&](uint64_t tag, uint64_t blob, const BlobEntry& e, double score, bool promotions) {
    if (e.copies.empty()) return;
    if (std::any_of(e.copies.begin(), e.copies.end(),
                    [](const BlobCopy& c) { return c.state == CopyState::kDirty; }))
      return;  // the flusher's
    Tier* cur = TierIn(tiers, e.copies.front().tier_id);
    if (!cur) return;
    const bool promote = score > cur->score + reorganize_threshold_;
    const bool demote = score < cur->score - reorganize_threshold_;
    if (promotions ? !promote : !demote) return;
    if (demote && cur->is_volatile) {
      // A clean cache on a volatile tier costs nothing while the tier has room, and a write
      // that finds the tier full evicts caches itself (LRU): drop cold ones only above the
      // fill at which flushes stop keeping caches.
      BdevStats bs = cur->bdev->GetStats();
      if (static_cast<double>(bs.used) < kCacheKeepFill * static_cast<double>(bs.capacity)) return;
    }
    // The tier, on the blob's side of its current one, whose score is nearest the blob's.
    Tier* best = nullptr;
    for (const auto& tp : tiers) {
      Tier& t = *tp;
      if (promote ? t.score <= cur->score : t.score >= cur->score) continue;
      if (!Accepts(t)) continue;
      if (!best || std::abs(t.score - score) < std::abs(best->score - score)) best = &t;
    }
    if (!best) return;
    ++st->candidates;
    (promote ? plan.up : plan.down).push_back(MoveCandidate{tag, blob, e.stored(), score, cur, best});
  };
  for (const auto& [key, score] : scores) {
    if (score <= reorganize_threshold_) continue;  // cannot pass any tier's score by more
    CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(BlobKey(key.first, key.second)));
    if (!v) continue;
    auto e = DecodeBlobEntry(*v);
    if (e.ok()) consider(key.first, key.second, *e, score, true);
  }
  size_t scanned = 0;
  while (scanned < kDemoteScanPerPass) {
    const size_t want = std::min(kScanPage, kDemoteScanPerPass - scanned);
    CLIO_ASSIGN_OR_RETURN(KvPairs page, kv_->Scan(kBlobKeyPrefix, reorg_after_, want));
    scanned += page.size();
    for (auto& [key, value] : page) {
      uint64_t tag = 0, blob = 0;
      if (!ParseBlobKey(key, &tag, &blob)) continue;
      auto e = DecodeBlobEntry(value);
      if (!e.ok()) continue;
      auto sc = scores.find({tag, blob});
      consider(tag, blob, *e, sc == scores.end() ? 0 : sc->second, false);
    }
    if (page.size() < want) {
      reorg_after_.clear();  // the end of the index: the next pass starts over
      break;
    }
    reorg_after_ = page.back().first;
  }
  // Hottest first, coldest first; ties in key order, so a pass is deterministic.
  auto key = [](const MoveCandidate& c) { return std::make_pair(c.tag, c.blob); };
  std::sort(plan.up.begin(), plan.up.end(), [&](const MoveCandidate& a, const MoveCandidate& b) {
    return a.score != b.score ? a.score > b.score : key(a) < key(b);
  });
  std::sort(plan.down.begin(), plan.down.end(), [&](const MoveCandidate& a, const MoveCandidate& b) {
    return a.score != b.score ? a.score < b.score : key(a) < key(b);
  });
  return plan;
}

bool Cte::MoveOne(const MoveCandidate& c, bool promote, const std::chrono::steady_clock::time_point* paced_from,
                  ReorganizeStats* st) {
  Tier& from = *c.from;
  Tier& to = *c.to;
  if (!promote && from.is_volatile) {
    // Demoting a read cache costs no bandwidth: drop it; its persistent copy holds the bytes.
    auto d = DropCleanCopies(from, c.tag, c.blob);
    if (d.ok() && *d > 0)
      ++st->demoted;
    else
      ++st->skipped;
    return true;
  }
  if (st->moved_bytes + c.bytes > st->budget) {
    ++st->over_budget;
    return true;
  }
  if (to.is_volatile) {
    BdevStats bs = to.bdev->GetStats();
    if (static_cast<double>(bs.used + c.bytes) > kCacheKeepFill * static_cast<double>(bs.capacity)) {
      ++st->skipped;  // keep room for writes on the volatile tier
      return true;
    }
  }
  bool changed = false;
  auto r = CopyBlobTo(c.tag, c.blob, to, 0, &changed);
  if (!r.ok() || changed || *r == 0) {
    if (!r.ok() && r.status().code() != Code::kNoSpace)
      CLIO_LOG_WARN("reorganizer: moving blob {}:{} to tier '{}': {}", c.tag, c.blob, to.name,
                    r.status().ToString());
    ++st->skipped;
    return true;
  }
  st->moved_bytes += *r;
  ++(promote ? st->promoted : st->demoted);
  if (!paced_from) return true;
  const auto due = *paced_from + std::chrono::microseconds(st->moved_bytes * 1000000 / reorganize_bandwidth_);
  return ReorganizerWait(due);
}

bool Cte::ReorganizerWait(std::chrono::steady_clock::time_point until) {
  MutexLock r(&reorg_mu_);
  while (!reorg_stop_) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return true;
    reorg_cv_.WaitFor(&reorg_mu_, until - now);
  }
  return false;
}

void Cte::ReorganizerLoop() {
  // A pass starts every interval; a paced pass spends at most the interval moving its budget.
  auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(reorganize_interval_ms_);
  while (ReorganizerWait(next)) {
    next = std::chrono::steady_clock::now() + std::chrono::milliseconds(reorganize_interval_ms_);
    auto st = ReorganizePass(true);
    if (!st.ok()) CLIO_LOG_WARN("reorganizer pass: {}", st.status().ToString());
  }
}

}  // namespace clio
