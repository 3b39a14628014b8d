#include "storage/safe/safe_pool.h"

#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "storage/bdev_config.h"
#include "storage/bdev_protocol.h"

namespace clio {
namespace {

// A member reference: a pool id ("301.0") or a pool name; it must be a clio_bdev pool.
Result<SafeMember> ResolveMember(PoolRegistry& registry, const std::string& ref) {
  Pool* p = nullptr;
  if (auto id = ParsePoolId(ref); id.ok()) p = registry.FindById(id->first);
  if (!p) p = registry.FindByName(ref);
  if (!p) return NotFound("no pool " + ref + " is composed before this one (members come first)");
  auto* bp = dynamic_cast<BdevPool*>(p);
  if (!bp || p->module_name() != "clio_bdev")
    return InvalidArgument("pool " + ref + " ('" + p->name() + "') is a " + p->module_name() +
                           " pool; members are clio_bdev pools");
  return SafeMember{p->name(), bp->bdev()};
}

Status ReadMemberList(ConfigReader& r, std::string_view key, PoolRegistry& registry, bool required,
                      std::vector<SafeMember>* out) {
  const ConfigValue* v = r.Child(key);
  if (!v) return required ? r.Error(key, "required: the clio_bdev pools of the array (ids or names)") : Status::Ok();
  if (v->kind != ConfigValue::Kind::kList) return r.Error(key, "expected a list of pool ids or names");
  for (const ConfigValue& item : v->list) {
    if (item.kind != ConfigValue::Kind::kScalar) return r.Error(key, "expected a list of pool ids or names");
    auto m = ResolveMember(registry, item.scalar);
    if (!m.ok()) return r.Error(key, m.status().message());
    out->push_back(std::move(m).value());
  }
  return Status::Ok();
}

}  // namespace

Result<SafeBdevSpec> ParseSafeBdevComposeEntry(const ComposeEntry& entry, const std::string& file,
                                               PoolRegistry& registry) {
  ConfigReader r = ModuleKeys(entry, file);
  SafeBdevSpec spec;
  SafeBdevConfig& c = spec.config;
  CLIO_ASSIGN_OR_RETURN(c.name, r.String("pool_name", ""));
  if (c.name.empty()) return r.Error("pool_name", "a clio_safe_bdev pool needs a pool_name (e.g. safe::array0)");
  CLIO_RETURN_IF_ERROR(ReadMemberList(r, "members", registry, true, &spec.members));
  CLIO_RETURN_IF_ERROR(ReadMemberList(r, "spares", registry, false, &spec.spares));
  CLIO_ASSIGN_OR_RETURN(uint64_t m, r.UInt("max_failures", c.max_failures));
  if (m == 0) return r.Error("max_failures", "must be at least 1 (m = 0 is no redundancy)");
  if (m >= spec.members.size())
    return r.Error("max_failures", std::to_string(m) + " leaves no data member among " +
                                       std::to_string(spec.members.size()) + " members (k = members - max_failures)");
  if (spec.members.size() > 255) return r.Error("members", "k + m is at most 255 (GF(2^8))");
  c.max_failures = static_cast<uint32_t>(m);
  CLIO_ASSIGN_OR_RETURN(c.chunk_size, r.Size("chunk_size", c.chunk_size));
  if (c.chunk_size < 4096 || c.chunk_size > (16ull << 20))
    return r.Error("chunk_size", "must be between 4KB and 16MB");
  CLIO_ASSIGN_OR_RETURN(c.alloc_log, r.String("alloc_log", ""));
  CLIO_ASSIGN_OR_RETURN(c.journal_size, r.Size("journal_size", c.journal_size));
  CLIO_ASSIGN_OR_RETURN(c.rebuild_bandwidth, r.Size("rebuild_bandwidth", c.rebuild_bandwidth));
  CLIO_ASSIGN_OR_RETURN(c.replace_below_days, r.Double("replace_below_days", c.replace_below_days));
  if (!(c.replace_below_days >= 0 && c.replace_below_days <= 3650))
    return r.Error("replace_below_days", "must be between 0 and 3650");
  CLIO_ASSIGN_OR_RETURN(uint64_t interval, r.UInt("health_interval_ms", c.health_interval_ms));
  if (interval < 10 || interval > 3600000) return r.Error("health_interval_ms", "must be between 10 and 3600000");
  c.health_interval_ms = static_cast<uint32_t>(interval);
  CLIO_RETURN_IF_ERROR(r.Finish().WithContext("safe-bdev '" + c.name + "'"));
  return spec;
}

ModuleFactory MakeSafeBdevModuleFactory() {
  return [](const ComposeEntry& entry, const std::string& file,
            PoolRegistry& registry) -> Result<std::unique_ptr<Pool>> {
    CLIO_ASSIGN_OR_RETURN(SafeBdevSpec spec, ParseSafeBdevComposeEntry(entry, file, registry));
    auto opened = OpenSafeBdev(spec.config, spec.members, spec.spares);
    if (!opened.ok()) {
      // The message starts with the key it is about ("members: ...", "chunk_size: ...").
      const std::string& msg = opened.status().message();
      const size_t colon = msg.find(':');
      std::string key = colon != std::string::npos && msg.find(' ') > colon ? msg.substr(0, colon) : "pool_name";
      ConfigReader r(entry.node, file);
      const std::string rest = key != "pool_name" && colon + 2 <= msg.size() ? msg.substr(colon + 2) : msg;
      return Status(opened.status().code(),
                    r.Error(key, "safe-bdev '" + spec.config.name + "': " + rest).message());
    }
    return std::unique_ptr<Pool>(new SafeBdevPool(std::move(opened).value(), &registry));
  };
}

Result<SafeMember> SafeBdevPool::Resolve(const std::string& ref) const { return ResolveMember(*registry_, ref); }

std::string SafeBdevPool::Describe() const {
  SafeArrayStatus a = array_->ArrayStatus();
  return "safe " + std::to_string(a.k) + "+" + std::to_string(a.m) + ", " + bdev()->GetStats().health + ", " +
         BdevPool::Describe();
}

std::string SafeBdevPool::MonitorJson() const {
  BdevStats s = bdev()->GetStats();
  SafeArrayStatus a = array_->ArrayStatus();
  nlohmann::json j;
  j["pool"] = name();
  j["type"] = "safe";
  j["k"] = a.k;
  j["m"] = a.m;
  j["chunk_size"] = a.chunk_size;
  j["stripes"] = a.stripes;
  j["capacity"] = s.capacity;
  j["used"] = s.used;
  j["remaining"] = s.remaining;
  j["tier_id"] = bdev()->tier_id();
  j["health"] = s.health;
  j["degraded"] = a.degraded;
  j["rebuilding"] = a.rebuilding;
  j["failed_members"] = a.failed;
  nlohmann::json members = nlohmann::json::array();
  for (const SafeMemberStatus& m : a.members)
    members.push_back({{"name", m.name}, {"state", m.state}, {"reason", m.reason}, {"target", m.target},
                       {"rebuilt_stripes", m.rebuilt_stripes}, {"lifetime_days", m.lifetime_days}});
  j["members"] = members;
  j["spares"] = a.spares;
  j["checksum_errors"] = a.checksum_errors;
  j["repaired_chunks"] = a.repaired_chunks;
  j["reconstructed_reads"] = a.reconstructed_reads;
  j["journal_replayed"] = a.journal_replayed;
  j["rebuilds_done"] = a.rebuilds_done;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<std::string> SafeBdevPool::Handle(uint32_t method, std::string_view payload) {
  if (auto serve = Handlers::Find(method)) return serve(*this, payload);
  return BdevPool::Handle(method, payload);
}

CallerClass SafeBdevPool::CallerOf(uint32_t method) const {
  return Handlers::Find(method) != nullptr ? DeclaredCaller<safeproto::AllRequests>(method) : BdevPool::CallerOf(method);
}
std::string SafeBdevPool::MethodName(uint32_t method) const {
  return Handlers::Find(method) != nullptr ? DeclaredName<safeproto::AllRequests>(method) : BdevPool::MethodName(method);
}

Result<wire::Empty> SafeBdevPool::Run(const safeproto::AddBdev& r) {
  CLIO_ASSIGN_OR_RETURN(SafeMember m, Resolve(r.pool));
  CLIO_RETURN_IF_ERROR(array_->AddSpare(m));
  return wire::Empty{};
}

Result<wire::Empty> SafeBdevPool::Run(const safeproto::RemoveBdev& r) {
  CLIO_RETURN_IF_ERROR(array_->RemoveMember(r.member, r.reason));
  return wire::Empty{};
}

Result<wire::Empty> SafeBdevPool::Run(const safeproto::RecoverBdev& r) {
  CLIO_ASSIGN_OR_RETURN(SafeMember m, Resolve(r.pool));
  CLIO_RETURN_IF_ERROR(array_->Recover(r.member, m));
  return wire::Empty{};
}

Result<safeproto::VerifyReply> SafeBdevPool::Run(const safeproto::Verify&) {
  CLIO_ASSIGN_OR_RETURN(uint64_t bad, array_->Verify());
  return safeproto::VerifyReply{bad};
}

}  // namespace clio
