// Runtime glue of the CTE core: module "clio_cte_core" as a pool, and its client messages.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/pool.h"
#include "placement/cte.h"
#include "placement/cte_protocol.h"
#include "storage/media.h"

namespace clio {

class KvStore;

class CtePool : public Pool {
 public:
  // `kv`: the metadata store the CTE uses (for the names of tiers added at run time);
  // `registry`: the runtime's pools (this pool's view). A tier added at run time may attach to
  // a bdev pool that comes back at every start (PoolRegistry::Lasting: the config's, or one
  // made with --restart); the lookup is recorded, so that pool is stopped after this one and
  // cannot be destroyed while the tier exists. Null: no pool can be attached.
  // `attached`: the tiers of the config that attach to a pool, by tier id.
  CtePool(std::unique_ptr<Cte> cte, KvStore* kv, uint32_t node_id, PoolRegistry* registry = nullptr,
          std::map<uint64_t, uint32_t> attached = {});
  ~CtePool() override;
  Result<std::string> Handle(uint32_t method, std::string_view payload) override;
  // Reports (tiers, drain progress, write-back) are readers'; every change is the admin's.
  CallerClass CallerOf(uint32_t method) const override;
  std::string MethodName(uint32_t method) const override;
  Status Stop() override { return cte_->Stop(); }
  std::string Describe() const override;
  // CteStatusJson of the tiers and write-back counters now.
  std::string MonitorJson() const override;
  Cte* cte() { return cte_.get(); }

 private:
  using Handlers = wire::Handlers<CtePool, cteproto::AllRequests>;
  friend Handlers;
  // One per request type.
  Result<cteproto::TierListReply> Run(const cteproto::ListTiers& r);
  Result<cteproto::TierStatesReply> Run(const cteproto::TierStates& r);
  Result<wire::Empty> Run(const cteproto::SetLifespan& r);
  Result<wire::Empty> Run(const cteproto::Drain& r);
  Result<cteproto::DrainProgressReply> Run(const cteproto::GetDrainProgress& r);
  Result<wire::Empty> Run(const cteproto::Undrain& r);
  Result<cteproto::ReorganizeReply> Run(const cteproto::Reorganize& r);
  Result<cteproto::TierListReply> Run(const cteproto::AddTier& r) EXCLUDES(attached_mu_);
  Result<wire::Empty> Run(const cteproto::RemoveTier& r) EXCLUDES(attached_mu_);
  Result<cteproto::WritebackReply> Run(const cteproto::Writeback& r);
  Result<wire::Empty> Run(const cteproto::FlushAll& r);

  std::unique_ptr<Cte> cte_;
  KvStore* const kv_;
  const uint32_t node_id_;
  // Gives the runtime back the use of `pool` unless a tier is still on its device.
  void ReleaseUnused(uint32_t pool) REQUIRES(attached_mu_);

  PoolRegistry* const registry_;
  // Tiers on another pool's device: tier id -> pool major id (AddTier, RemoveTier).
  Mutex attached_mu_;
  std::map<uint64_t, uint32_t> attached_ GUARDED_BY(attached_mu_);
};

// Factory for compose entries with mod_name clio_cte_core, on node `node_id` (NameTierForNode). Keys: flush_interval_ms,
// dirty_wait_ms, reorganize, reorganize_interval_ms, reorganize_bandwidth (bytes/s, a size),
// reorganize_threshold, score_decay (CteConfig), storage (list of tiers: path, score and, on volatile tiers, dirty_limit, plus
// every bdev key of storage/bdev_config.h, with the capacity spelled capacity_limit).
ModuleFactory MakeCteModuleFactory(KvStore* kv, uint32_t node_id);

// Names the tier for `node` (NodeTierName, storage/media.h), except a tier the metadata recorded under its bare
// path before node suffixes existed, whose device still holds its state (a file tier's file, an
// object tier's alloc log): it keeps that name, so its data is found. Attached tiers keep the
// pool's name.
Status NameTierForNode(KvStore* kv, uint32_t node, TierConfig* tc);

// Parses a CTE compose entry into its typed config (exposed for tests). Entries with
// existing_pool_id attach to a pool of `registry` (one that lasts; none without a registry).
Result<CteConfig> ParseCteConfig(const ComposeEntry& entry, const std::string& file,
                                 PoolRegistry* registry = nullptr);
// Parses one entry of the `storage:` list: path and the bdev keys, or existing_pool_id with
// existing_pool_module (a bdev pool of `registry`); score; dirty_limit on volatile tiers.
Result<TierConfig> ParseTierEntry(const ConfigValue& item, const std::string& file,
                                  PoolRegistry* registry = nullptr);

// A tier's keys as `clioctl tier add` sends them and the metadata keeps them for a tier added
// at run time: u8 version (kTierSpecVersion), u32 count, then (key, value) strings. A key
// "a.b" is key b of the map a (perf_metrics.iops=1000).
inline constexpr uint8_t kTierSpecVersion = 1;
std::string EncodeTierSpec(const std::vector<std::pair<std::string, std::string>>& keys);
// Decodes a spec and parses its keys as a `storage:` entry; errors name `where` and the key.
Result<TierConfig> ParseTierSpec(std::string_view spec, const std::string& where,
                                 PoolRegistry* registry = nullptr);
// Appends to `cfg` the tiers AddTier recorded (they come back after a restart, under the name
// they were added with), except one the config (`file`, its tiers already named for the node)
// now lists itself: that record is dropped and the config's entry used.
Status AddRecordedTiers(KvStore* kv, const std::string& file, PoolRegistry* registry, CteConfig* cfg);

// A tier as `clioctl tier stat --json` prints it: name, id, type, capacity, used, remaining,
// score, persistence, backend, lifetime_days, health.
nlohmann::json TierJson(const TierInfo& t);
// {"tiers": [TierJson and "dirty" (bytes), "dirty_limit" (null on persistent tiers, which hold
// no dirty copies)], "writeback": {dirty_bytes, dirty_blobs, oldest_dirty_s, reserved_bytes,
// flush_passes, flush_failures, dirty_waits, dirty_wait_timeouts, evictions, evicted_bytes}}:
// `clioctl stat --json`, the CTE pool's MonitorJson and the dashboard.
nlohmann::json CteStatusJson(const std::vector<TierInfo>& tiers, const WritebackStats& w);

}  // namespace clio
