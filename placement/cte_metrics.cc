// The CTE's metrics: what placement decided (per tier), what the reorganizer moved, what the
// flusher did and how long data stayed dirty, and, sampled at each scrape, the write-back state.
// Device-level series (bytes, latency, capacity) come from the bdev decorator
// (storage/bdev_metrics.h); nothing here repeats them.
#include <algorithm>
#include <chrono>

#include "placement/cte.h"

namespace clio {

void Cte::InitMetrics() {
  flushes_ = metrics::GetCounter("clio_cte_flushes_total", "Dirty blobs copied to a persistent tier", {});
  flushed_bytes_ = metrics::GetCounter("clio_cte_flushed_bytes_total", "Bytes copied to a persistent tier by flushes", {});
  const char* moves = "clio_cte_moves_total";
  const char* moves_help = "Copies the reorganizer moved, by direction";
  promotions_ = metrics::GetCounter(moves, moves_help, {{"direction", "promote"}});
  demotions_ = metrics::GetCounter(moves, moves_help, {{"direction", "demote"}});
  moved_bytes_ = metrics::GetCounter("clio_cte_moved_bytes_total", "Bytes the reorganizer copied between tiers", {});
  flush_lag_ = metrics::GetHistogram("clio_cte_flush_lag_seconds",
                                     "Time from a blob becoming dirty to its flush, in seconds", {},
                                     metrics::LatencyBuckets());
  optimistic_retries_ = metrics::GetCounter(
      "clio_cte_read_retries_total",
      "Blob reads done again because the blob's stripe changed during their unlocked tier I/O", {});
  flush_retries_ = metrics::GetCounter(
      "clio_cte_flush_retries_total",
      "Flushes done again under the stripe lock because the blob changed while its copy was written", {});
}

void Cte::LabelTier(Tier& t) {
  const metrics::Labels tier = {{"tier", t.name}};
  t.hold = metrics::LabelHold("tier", t.name);
  t.placements = metrics::GetCounter("clio_cte_placements_total", "Blob writes placed on a tier", tier);
  t.placed_bytes = metrics::GetCounter("clio_cte_placed_bytes_total", "Bytes of blob writes placed on a tier", tier);
  const char* passed = "clio_cte_placement_fallthroughs_total";
  const char* passed_help = "Blob writes a tier did not take, by reason (full, refused: dying or "
                            "draining, dirty_limit: its dirty limit held past dirty_wait_ms)";
  auto with = [&](const char* reason) {
    metrics::Labels l = tier;
    l.emplace_back("reason", reason);
    return l;
  };
  t.passed_full = metrics::GetCounter(passed, passed_help, with("full"));
  t.passed_refused = metrics::GetCounter(passed, passed_help, with("refused"));
  t.passed_dirty_limit = metrics::GetCounter(passed, passed_help, with("dirty_limit"));
}

std::vector<metrics::Sample> Cte::SampleMetrics() {
  using Kind = metrics::Sample::Kind;
  const WritebackStats w = GetWritebackStats();
  const TierSnapshot tiers = Tiers();
  std::vector<metrics::Sample> out;
  for (const DirtyLedger::TierCounters& c : w.dirty) {
    const Tier* t = TierIn(*tiers, c.tier_id);
    if (!t) continue;
    out.push_back({"clio_cte_dirty_bytes", "Bytes of dirty copies on a volatile tier", {{"tier", t->name}},
                   static_cast<double>(c.dirty)});
    out.push_back({"clio_cte_dirty_limit_bytes", "A volatile tier's dirty limit", {{"tier", t->name}},
                   static_cast<double>(c.limit)});
  }
  for (const auto& t : *tiers) {
    out.push_back({"clio_cte_tier_score", "A tier's placement score", {{"tier", t->name}}, t->score});
    out.push_back({"clio_cte_tier_draining", "1 while a tier is being drained", {{"tier", t->name}},
                   t->draining.load() ? 1.0 : 0.0});
    out.push_back({"clio_cte_drained_bytes_total", "Bytes drains moved off a tier", {{"tier", t->name}},
                   static_cast<double>(t->drained_bytes.load()), Kind::kCounter});
  }
  auto add = [&](const char* name, const char* help, double v, Kind kind = Kind::kGauge) {
    out.push_back({name, help, {}, v, kind});
  };
  add("clio_cte_dirty_blobs", "Blobs waiting for the flusher", static_cast<double>(w.dirty_blobs));
  add("clio_cte_oldest_dirty_seconds", "Age of the oldest dirty blob (the flush lag now)", w.oldest_dirty_s);
  add("clio_cte_flush_reserved_bytes", "Bytes reserved on persistent tiers for flushes",
      static_cast<double>(w.reserved));
  add("clio_cte_dirty_waits_total", "Writers that waited for a tier's dirty limit",
      static_cast<double>(w.dirty_waits), Kind::kCounter);
  add("clio_cte_evictions_total", "Clean volatile copies dropped to make room",
      static_cast<double>(w.evictions), Kind::kCounter);
  add("clio_cte_evicted_bytes_total", "Bytes of clean volatile copies dropped",
      static_cast<double>(w.evicted_bytes), Kind::kCounter);
  add("clio_cte_flush_failures_total", "Background flushes that failed (and will retry)",
      static_cast<double>(w.flush_failures), Kind::kCounter);
  add("clio_cte_flush_passes_total", "Background flusher passes completed",
      static_cast<double>(w.flush_passes), Kind::kCounter);
  return out;
}

}  // namespace clio
