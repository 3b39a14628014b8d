#include "placement/cte_pool.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "common/log.h"
#include "daemon/confine.h"
#include "storage/bdev_config.h"
#include "storage/bdev_pool.h"
#include "storage/kv.h"

namespace clio {
namespace {
constexpr uint64_t kMinDirtyLimit = 1ull << 20;  // one default chunk: smaller stalls every write
}  // namespace

Result<CteConfig> ParseCteConfig(const ComposeEntry& entry, const std::string& file, PoolRegistry* registry) {
  ConfigReader r = ModuleKeys(entry, file);
  CteConfig cfg;
  CLIO_ASSIGN_OR_RETURN(uint64_t interval, r.UInt("flush_interval_ms", 2000));
  if (interval == 0 || interval > 3600000) return r.Error("flush_interval_ms", "must be between 1 and 3600000");
  cfg.flush_interval_ms = static_cast<uint32_t>(interval);
  CLIO_ASSIGN_OR_RETURN(uint64_t threads, r.UInt("flush_threads", cfg.flush_threads));
  if (threads == 0 || threads > 64) return r.Error("flush_threads", "must be between 1 and 64");
  cfg.flush_threads = static_cast<uint32_t>(threads);
  CLIO_ASSIGN_OR_RETURN(uint64_t wait, r.UInt("dirty_wait_ms", cfg.dirty_wait_ms));
  if (wait == 0 || wait > 3600000) return r.Error("dirty_wait_ms", "must be between 1 and 3600000");
  cfg.dirty_wait_ms = static_cast<uint32_t>(wait);
  CLIO_ASSIGN_OR_RETURN(cfg.reorganize, r.Bool("reorganize", cfg.reorganize));
  CLIO_ASSIGN_OR_RETURN(uint64_t reorg_ms, r.UInt("reorganize_interval_ms", cfg.reorganize_interval_ms));
  cfg.reorganize_interval_ms = static_cast<uint32_t>(std::min<uint64_t>(reorg_ms, UINT32_MAX));
  if (reorg_ms > UINT32_MAX) cfg.reorganize_interval_ms = 0;  // out of range: refused below
  CLIO_ASSIGN_OR_RETURN(cfg.reorganize_bandwidth, r.Size("reorganize_bandwidth", cfg.reorganize_bandwidth));
  CLIO_ASSIGN_OR_RETURN(cfg.reorganize_threshold, r.Double("reorganize_threshold", cfg.reorganize_threshold));
  CLIO_ASSIGN_OR_RETURN(cfg.score_decay, r.Double("score_decay", cfg.score_decay));
  if (auto bad = MovementConfigError(cfg)) return r.Error(bad->first, bad->second);
  const ConfigValue* storage = r.Child("storage");
  CLIO_RETURN_IF_ERROR(r.Finish());
  if (!storage || storage->kind != ConfigValue::Kind::kList || storage->list.empty())
    return r.Error("storage", "the CTE needs a non-empty list of storage tiers");
  for (const ConfigValue& item : storage->list) {
    CLIO_ASSIGN_OR_RETURN(TierConfig tc, ParseTierEntry(item, file, registry));
    for (const TierConfig& other : cfg.tiers)
      if (other.bdev.name == tc.bdev.name)
        return ConfigReader(&item, file).Error("path", "tier '" + tc.bdev.name + "' is listed twice");
    cfg.tiers.push_back(std::move(tc));
  }
  return cfg;
}

namespace {

// A storage entry that attaches to a pool composed earlier (existing_pool_id and
// existing_pool_module, seeds/bdev-module.txt): the device and its keys are that pool's.
Status AttachExistingPool(ConfigReader& t, PoolRegistry* registry, TierConfig* tc) {
  CLIO_ASSIGN_OR_RETURN(std::string id, t.String("existing_pool_id", ""));
  CLIO_ASSIGN_OR_RETURN(std::string module, t.String("existing_pool_module", ""));
  if (module.empty()) return t.Error("existing_pool_module", "required with existing_pool_id (e.g. clio_bdev)");
  if (t.Has("path"))
    return t.Error("path", "a tier attached to an existing pool takes that pool's device; leave path out");
  auto pid = ParsePoolId(id);
  if (!pid.ok()) return t.Error("existing_pool_id", pid.status().message());
  if (!registry) return t.Error("existing_pool_id", "pools can be attached only from the runtime's compose list");
  Pool* p = registry->FindById(pid->first);
  if (!p)
    return t.Error("existing_pool_id", "no pool " + id + " is composed before this one (a pool must come "
                                       "before the pools that use it)");
  if (p->module_name() != module)
    return t.Error("existing_pool_module", "pool " + id + " ('" + p->name() + "') is a " + p->module_name() +
                                               " pool, not " + module);
  auto* bp = dynamic_cast<BdevPool*>(p);
  if (!bp)
    return t.Error("existing_pool_id", "pool " + id + " ('" + p->name() + "', " + module +
                                           ") is not a block device; tiers attach to bdev pools");
  // A tier is recorded in the metadata and must find its device at every start.
  if (!registry->Lasting(pid->first))
    return t.Error("existing_pool_id", "pool " + id + " ('" + p->name() +
                                           "') was made at run time without --restart and would not come back "
                                           "after a restart; make it with `clioctl pool create ... --restart`");
  tc->attached = bp->bdev();
  tc->attached_pool = pid->first;
  tc->bdev = bp->bdev()->config();
  return Status::Ok();
}

}  // namespace

Result<TierConfig> ParseTierEntry(const ConfigValue& item, const std::string& file, PoolRegistry* registry) {
  ConfigReader t(&item, file);
  if (item.kind != ConfigValue::Kind::kMap) return t.Error("", "expected a map describing one tier");
  TierConfig tc;
  if (t.Has("existing_pool_id") || t.Has("existing_pool_module")) {
    CLIO_RETURN_IF_ERROR(AttachExistingPool(t, registry, &tc));
  } else {
    CLIO_ASSIGN_OR_RETURN(tc.bdev.name, t.String("path", ""));
    if (tc.bdev.name.empty()) return t.Error("", "missing path");
    // Every bdev key (bdev_type, capacity_limit, alloc, ...) is parsed where the bdev lives.
    CLIO_RETURN_IF_ERROR(ParseBdevKeys(t, &tc.bdev));
  }
  if (t.Has("score")) {
    CLIO_ASSIGN_OR_RETURN(double score, t.Double("score", 0));
    if (!(score >= 0 && score <= 1)) return t.Error("score", "must be between 0 and 1");
    tc.score = score;
  }
  if (t.Has("dirty_limit")) {
    CLIO_ASSIGN_OR_RETURN(tc.dirty_limit, t.Size("dirty_limit", 0));
    const bool is_volatile = tc.attached ? tc.attached->GetStats().persistence == Persistence::kVolatile
                             : tc.bdev.persistence  ? *tc.bdev.persistence == Persistence::kVolatile
                                                    : DefaultPersistence(tc.bdev.type) == Persistence::kVolatile;
    if (!is_volatile)
      return t.Error("dirty_limit", "applies only to volatile tiers (a persistent tier holds no dirty data)");
    if (tc.dirty_limit < kMinDirtyLimit)
      return t.Error("dirty_limit", "must be at least 1MiB (one chunk), or left out for half the capacity");
    if (tc.bdev.capacity != 0 && tc.dirty_limit > tc.bdev.capacity)
      return t.Error("dirty_limit", "must not be larger than capacity_limit");
  }
  CLIO_RETURN_IF_ERROR(t.Finish());
  return tc;
}

std::string EncodeTierSpec(const std::vector<std::pair<std::string, std::string>>& keys) {
  Encoder e;
  e.Put<uint8_t>(kTierSpecVersion).Put<uint32_t>(static_cast<uint32_t>(keys.size()));
  for (const auto& [k, v] : keys) e.PutBytes(k).PutBytes(v);
  return e.Take();
}

Result<TierConfig> ParseTierSpec(std::string_view spec, const std::string& where, PoolRegistry* registry) {
  Decoder d(spec);
  uint8_t version = 0;
  uint32_t n = 0;
  d.Get(&version);
  d.Get(&n);
  if (!d.failed() && version != kTierSpecVersion)
    return Corruption(where + ": tier keys of version " + std::to_string(version) + ", this build reads " +
                      std::to_string(kTierSpecVersion));
  if (n > spec.size()) return Corruption(where + ": impossible key count");
  // Keys "a.b" are key b of the map a (perf_metrics.iops), as in the YAML of a storage entry.
  ConfigValue root;
  root.kind = ConfigValue::Kind::kMap;
  for (uint32_t i = 0; i < n && !d.failed(); ++i) {
    std::string key, value;
    d.GetString(&key);
    d.GetString(&value);
    if (d.failed()) break;
    ConfigValue* node = &root;
    std::string path;
    size_t start = 0;
    while (true) {
      const size_t dot = key.find('.', start);
      const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (part.empty()) return InvalidArgument(where + ": '" + key + "' is not a key name");
      path = path.empty() ? part : path + "." + part;
      auto it = std::find(node->keys.begin(), node->keys.end(), part);
      ConfigValue* child = nullptr;
      if (it == node->keys.end()) {
        node->keys.push_back(part);
        node->values.emplace_back();
        child = &node->values.back();
        child->path = path;
      } else {
        child = &node->values[static_cast<size_t>(it - node->keys.begin())];
      }
      if (dot == std::string::npos) {
        if (child->kind != ConfigValue::Kind::kNull)
          return InvalidArgument(where + ": " + key + ": given twice");
        child->kind = ConfigValue::Kind::kScalar;
        child->scalar = value;
        break;
      }
      if (child->kind == ConfigValue::Kind::kScalar)
        return InvalidArgument(where + ": " + path + ": given both as a value and as a map");
      child->kind = ConfigValue::Kind::kMap;
      node = child;
      start = dot + 1;
    }
  }
  CLIO_RETURN_IF_ERROR(d.Finish("tier keys"));
  return ParseTierEntry(root, where, registry);
}

Status AddRecordedTiers(KvStore* kv, const std::string& file, PoolRegistry* registry, CteConfig* cfg) {
  CLIO_ASSIGN_OR_RETURN(auto added, Cte::AddedTierSpecs(kv));
  for (const auto& [added_name, spec] : added) {
    const std::string& name = added_name;
    if (std::any_of(cfg->tiers.begin(), cfg->tiers.end(), [&](const TierConfig& t) { return t.bdev.name == name; })) {
      CLIO_LOG_INFO("tier '{}' was added at run time and is in {} now: the config's entry is used", name, file);
      CLIO_RETURN_IF_ERROR(Cte::ForgetAddedTier(kv, name));
      continue;
    }
    auto tc = ParseTierSpec(spec, "tier '" + name + "' (added at run time)", registry);
    if (!tc.ok()) {
      // Kept for the next start; the start fails later if the index names the tier.
      CLIO_LOG_WARN("tier '{}' (added at run time) is left out: {}", name, tc.status().ToString());
      continue;
    }
    tc->bdev.name = name;  // the spec holds the path as given; the tier's name is the recorded one
    tc->recorded = true;
    cfg->tiers.push_back(std::move(tc).value());
  }
  return Status::Ok();
}

Status NameTierForNode(KvStore* kv, uint32_t node, TierConfig* tc) {
  if (tc->attached) return Status::Ok();  // named by the pool that owns the device
  const std::string named = NodeTierName(tc->bdev.name, tc->bdev.type, node);
  CLIO_ASSIGN_OR_RETURN(bool bare, Cte::HasTierRecord(kv, tc->bdev.name));
  CLIO_ASSIGN_OR_RETURN(bool suffixed, Cte::HasTierRecord(kv, named));
  // Only a device that still holds the bare name's state keeps it: a file tier's file, an
  // object tier's local alloc log. Memory tiers keep nothing across a start.
  const std::string state = LocalStateFile(tc->bdev);
  const bool device = !state.empty() && access(state.c_str(), F_OK) == 0;
  if (bare && !suffixed && device) {
    CLIO_LOG_WARN("tier '{}' keeps its name from before node suffixes (new tiers are named like '{}')",
                  tc->bdev.name, named);
    return Status::Ok();
  }
  tc->bdev.name = named;
  return Status::Ok();
}

ModuleFactory MakeCteModuleFactory(KvStore* kv, uint32_t node_id) {
  return [kv, node_id](const ComposeEntry& entry, const std::string& file,
                       PoolRegistry& registry) -> Result<std::unique_ptr<Pool>> {
    CLIO_ASSIGN_OR_RETURN(CteConfig cfg, ParseCteConfig(entry, file, &registry));
    for (TierConfig& tc : cfg.tiers) CLIO_RETURN_IF_ERROR(NameTierForNode(kv, node_id, &tc));
    CLIO_RETURN_IF_ERROR(AddRecordedTiers(kv, file, &registry, &cfg));
    std::map<uint64_t, uint32_t> attached;
    for (const TierConfig& tc : cfg.tiers)
      if (tc.attached) attached[tc.attached->tier_id()] = tc.attached_pool;
    CLIO_ASSIGN_OR_RETURN(auto cte, Cte::Open(cfg, kv));
    return std::unique_ptr<Pool>(new CtePool(std::move(cte), kv, node_id, &registry, std::move(attached)));
  };
}

namespace {

// The pool registry, remembering which pools a parse looked up: the runtime records each
// lookup as a use, which a tier add that fails gives back.
class LookupsSeen final : public PoolRegistry {
 public:
  explicit LookupsSeen(PoolRegistry* all) : all_(all) {}
  Pool* FindByName(std::string_view name) override { return Seen(all_->FindByName(name)); }
  Pool* FindById(uint32_t id) override { return Seen(all_->FindById(id)); }
  std::vector<uint32_t> PoolIds() override { return all_->PoolIds(); }
  bool Lasting(uint32_t id) override { return all_->Lasting(id); }
  void Release(uint32_t id) override { all_->Release(id); }
  const std::vector<uint32_t>& seen() const { return seen_; }

 private:
  Pool* Seen(Pool* p) {
    if (p) seen_.push_back(p->id());
    return p;
  }
  PoolRegistry* const all_;
  std::vector<uint32_t> seen_;
};

}  // namespace

CtePool::CtePool(std::unique_ptr<Cte> cte, KvStore* kv, uint32_t node_id, PoolRegistry* registry,
                 std::map<uint64_t, uint32_t> attached)
    : cte_(std::move(cte)), kv_(kv), node_id_(node_id), registry_(registry), attached_(std::move(attached)) {}

CtePool::~CtePool() = default;

void CtePool::ReleaseUnused(uint32_t pool) {
  if (!registry_) return;
  for (const auto& [tier, p] : attached_)
    if (p == pool) return;  // another tier is still on that pool's device
  registry_->Release(pool);
}

std::string CtePool::Describe() const {
  return std::to_string(cte_->ListTiers().size()) + " tiers";
}

CallerClass CtePool::CallerOf(uint32_t method) const { return DeclaredCaller<cteproto::AllRequests>(method); }
std::string CtePool::MethodName(uint32_t method) const { return DeclaredName<cteproto::AllRequests>(method); }

Result<std::string> CtePool::Handle(uint32_t method, std::string_view payload) {
  if (auto serve = Handlers::Find(method)) return serve(*this, payload);
  return Status(Code::kNotSupported, "clio_cte_core: unknown method " + std::to_string(method));
}

Result<cteproto::TierListReply> CtePool::Run(const cteproto::ListTiers&) {
  return cteproto::TierListReply{cte_->ListTiers()};
}

Result<wire::Empty> CtePool::Run(const cteproto::SetLifespan& r) {
  CLIO_RETURN_IF_ERROR(cte_->SetLifespan(r.tier, r.days));
  return wire::Empty{};
}

Result<wire::Empty> CtePool::Run(const cteproto::Drain& r) {
  CLIO_RETURN_IF_ERROR(cte_->Drain(r.tier));
  return wire::Empty{};
}

Result<cteproto::TierStatesReply> CtePool::Run(const cteproto::TierStates&) {
  return cteproto::TierStatesReply{cte_->TierStates()};
}

Result<cteproto::DrainProgressReply> CtePool::Run(const cteproto::GetDrainProgress& r) {
  CLIO_ASSIGN_OR_RETURN(DrainProgress p, cte_->GetDrainProgress(r.tier));
  return cteproto::DrainProgressReply{p};
}

Result<wire::Empty> CtePool::Run(const cteproto::Undrain& r) {
  CLIO_RETURN_IF_ERROR(cte_->Undrain(r.tier));
  return wire::Empty{};
}

Result<cteproto::ReorganizeReply> CtePool::Run(const cteproto::Reorganize&) {
  CLIO_ASSIGN_OR_RETURN(ReorganizeStats st, cte_->ReorganizeOnce());
  return cteproto::ReorganizeReply{st};
}

// One runtime-added tier; its keys are checked by the same parser as the config's. Attaching
// looks the pool up, which the runtime records as a use (so the pool cannot be destroyed under
// the tier); a tier that was not added gives the use back.
Result<cteproto::TierListReply> CtePool::Run(const cteproto::AddTier& r) {
  // A client's tier makes its files beneath the runtime's allowed directories (docs/security.md).
  ScopedConfinement confine(CurrentRequest().peer != nullptr);
  MutexLock l(&attached_mu_);
  std::optional<LookupsSeen> seen;
  if (registry_) seen.emplace(registry_);
  auto tc = ParseTierSpec(r.spec.bytes, "clioctl tier add", seen ? &*seen : nullptr);
  Status named = tc.ok() ? NameTierForNode(kv_, node_id_, &*tc) : tc.status();
  auto info = named.ok() ? cte_->AddTier(*tc, r.spec.bytes) : Result<TierInfo>(named);
  if (!info.ok()) {
    if (seen)
      for (uint32_t pool : seen->seen()) ReleaseUnused(pool);
    return info.status();
  }
  if (tc->attached_pool) attached_[info->tier_id] = tc->attached_pool;
  return cteproto::TierListReply{{*info}};
}

Result<wire::Empty> CtePool::Run(const cteproto::RemoveTier& r) {
  MutexLock l(&attached_mu_);
  CLIO_RETURN_IF_ERROR(cte_->RemoveTier(r.tier));
  if (auto it = attached_.find(r.tier); it != attached_.end()) {
    // The pool's device is no tier any more: it may be destroyed now.
    const uint32_t pool = it->second;
    attached_.erase(it);
    ReleaseUnused(pool);
  }
  return wire::Empty{};
}

Result<cteproto::WritebackReply> CtePool::Run(const cteproto::Writeback&) {
  return cteproto::WritebackReply{cte_->GetWritebackStats()};
}

Result<wire::Empty> CtePool::Run(const cteproto::FlushAll&) {
  CLIO_RETURN_IF_ERROR(cte_->FlushAll());
  CLIO_RETURN_IF_ERROR(kv_->Sync());
  return wire::Empty{};
}

nlohmann::json TierJson(const TierInfo& t) {
  return {{"name", t.name},
          {"id", t.tier_id},
          {"type", BdevTypeName(t.stats.type)},
          {"capacity", t.stats.capacity},
          {"used", t.stats.used},
          {"remaining", t.stats.remaining},
          {"score", t.score},
          {"persistence", PersistenceName(t.stats.persistence)},
          {"backend", t.stats.backend},
          {"lifetime_days", t.stats.lifetime_days},
          {"health", t.stats.health}};
}

nlohmann::json CteStatusJson(const std::vector<TierInfo>& tiers, const WritebackStats& w) {
  std::map<uint64_t, DirtyLedger::TierCounters> dirty;  // volatile tiers, by id
  uint64_t dirty_total = 0;
  for (const DirtyLedger::TierCounters& d : w.dirty) {
    dirty[d.tier_id] = d;
    dirty_total += d.dirty;
  }
  nlohmann::json t = nlohmann::json::array();
  for (const TierInfo& info : tiers) {
    nlohmann::json j = TierJson(info);
    auto it = dirty.find(info.tier_id);
    j["dirty"] = it != dirty.end() ? it->second.dirty : 0;
    j["dirty_limit"] = it != dirty.end() ? nlohmann::json(it->second.limit) : nlohmann::json(nullptr);
    t.push_back(std::move(j));
  }
  return {{"tiers", std::move(t)},
          {"writeback",
           {{"dirty_bytes", dirty_total},
            {"dirty_blobs", w.dirty_blobs},
            {"oldest_dirty_s", w.oldest_dirty_s},
            {"reserved_bytes", w.reserved},
            {"flush_passes", w.flush_passes},
            {"flush_failures", w.flush_failures},
            {"dirty_waits", w.dirty_waits},
            {"dirty_wait_timeouts", w.dirty_wait_timeouts},
            {"evictions", w.evictions},
            {"evicted_bytes", w.evicted_bytes}}}};
}

std::string CtePool::MonitorJson() const {
  // Tier names come from the config and may hold any bytes: never throw on bad UTF-8.
  return CteStatusJson(cte_->ListTiers(), cte_->GetWritebackStats())
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace clio
