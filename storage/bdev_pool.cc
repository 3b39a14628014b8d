#include "storage/bdev_pool.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "storage/bdev_config.h"
#include "storage/bdev_protocol.h"

namespace clio {
Result<BdevConfig> ParseBdevComposeEntry(const ComposeEntry& entry, const std::string& file) {
  ConfigReader r = ModuleKeys(entry, file);
  BdevConfig c;
  CLIO_ASSIGN_OR_RETURN(c.name, r.String("pool_name", ""));
  if (c.name.empty()) {
    return r.Error("pool_name", "a clio_bdev pool needs a pool_name: the device location (a file "
                                "path, or ram::NAME for memory devices)");
  }
  CLIO_RETURN_IF_ERROR(ParseBdevKeys(r, &c));
  Status unknown = r.Finish();
  if (!unknown.ok()) return unknown.WithContext("bdev '" + c.name + "'");
  return c;
}

ModuleFactory MakeBdevModuleFactory() {
  return [](const ComposeEntry& entry, const std::string& file,
            PoolRegistry&) -> Result<std::unique_ptr<Pool>> {
    CLIO_ASSIGN_OR_RETURN(BdevConfig config, ParseBdevComposeEntry(entry, file));
    Result<std::unique_ptr<Bdev>> bdev = Bdev::Open(config);
    if (!bdev.ok()) {
      // Keep the code (NoSpace stays NoSpace) but say where in the config the device is.
      ConfigReader r(entry.node, file);
      const Status located = r.Error("pool_name", "bdev '" + config.name + "': " +
                                                      bdev.status().ToString());
      return Status(bdev.status().code(), located.message());
    }
    return std::unique_ptr<Pool>(new BdevPool(std::move(bdev).value()));
  };
}

std::string BdevPool::Describe() const {
  BdevStats s = bdev_->GetStats();
  return std::string(BdevTypeName(s.type)) + " " + std::to_string(s.used) + "/" +
         std::to_string(s.capacity) + " bytes used (" + s.backend + ")";
}

std::string BdevPool::MonitorJson() const {
  BdevStats s = bdev_->GetStats();
  nlohmann::json j;
  j["pool"] = name();
  j["device"] = bdev_->config().name;
  j["type"] = BdevTypeName(s.type);
  j["persistence"] = PersistenceName(s.persistence);
  j["backend"] = s.backend;
  j["tier_id"] = bdev_->tier_id();
  j["capacity"] = s.capacity;
  j["used"] = s.used;
  j["remaining"] = s.remaining;
  j["committed"] = s.committed;
  j["lifetime_days"] = s.lifetime_days;
  j["perf"] = {{"read_bandwidth_mbps", s.perf.read_bandwidth_mbps},
               {"write_bandwidth_mbps", s.perf.write_bandwidth_mbps},
               {"read_latency_us", s.perf.read_latency_us},
               {"write_latency_us", s.perf.write_latency_us},
               {"iops", s.perf.iops}};
  // Names come from the config and may hold any bytes: never throw on bad UTF-8.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

CallerClass BdevPool::CallerOf(uint32_t method) const { return DeclaredCaller<bdevproto::AllRequests>(method); }
std::string BdevPool::MethodName(uint32_t method) const { return DeclaredName<bdevproto::AllRequests>(method); }

Result<std::string> BdevPool::Handle(uint32_t method, std::string_view payload) {
  if (auto serve = Handlers::Find(method)) return serve(*this, payload);
  return Status(Code::kNotSupported, "clio_bdev: unknown method " + std::to_string(method));
}

Result<wire::Raw> BdevPool::Run(const bdevproto::Monitor& r) {
  if (!r.query.value.empty() && r.query.value != "stats")
    return InvalidArgument("clio_bdev Monitor: unknown query '" + r.query.value + "' (expected stats)");
  return wire::Raw{MonitorJson()};
}

Result<bdevproto::ExtentsReply> BdevPool::Run(const bdevproto::AllocateBlocks& r) {
  if (r.bytes == 0) return InvalidArgument("clio_bdev AllocateBlocks: 0 bytes");
  CLIO_ASSIGN_OR_RETURN(ExtentList extents, bdev_->Allocate(r.bytes));
  return bdevproto::ExtentsReply{{std::move(extents)}};
}

Result<bdevproto::WriteReply> BdevPool::Run(const bdevproto::Write& r) {
  CLIO_RETURN_IF_ERROR(bdev_->Write(r.extents.list, r.offset, r.data));
  return bdevproto::WriteReply{r.data.size()};
}

Result<wire::Raw> BdevPool::Run(const bdevproto::Read& r) {
  // Bound the buffer before allocating it: never trust a length from the wire.
  const uint64_t total = TotalSize(r.extents.list);
  if (r.len > kMaxBdevIoBytes || r.offset > total || r.len > total - r.offset) {
    return Status(Code::kOutOfRange, "clio_bdev Read: " + std::to_string(r.len) + " bytes at " +
                                         std::to_string(r.offset) + " of " + std::to_string(total) +
                                         " bytes of extents (at most " + std::to_string(kMaxBdevIoBytes) +
                                         " per request)");
  }
  wire::Raw buf{std::string(r.len, '\0')};
  CLIO_RETURN_IF_ERROR(bdev_->Read(r.extents.list, r.offset, r.len, buf.bytes.data()));
  return buf;
}

Result<wire::Empty> BdevPool::Run(const bdevproto::FreeBlocks& r) {
  CLIO_RETURN_IF_ERROR(bdev_->Free(r.extents.list));
  return wire::Empty{};
}

Result<bdevproto::StatsReply> BdevPool::Run(const bdevproto::GetStats&) {
  return bdevproto::StatsReply{bdev_->GetStats()};
}

Result<wire::Empty> BdevPool::Run(const bdevproto::Sync&) {
  CLIO_RETURN_IF_ERROR(bdev_->Sync());
  return wire::Empty{};
}

Result<wire::Empty> BdevPool::Run(const bdevproto::SetLifespan& r) {
  if (!std::isfinite(r.days) || r.days < 0)
    return InvalidArgument("clio_bdev SetLifespan: days must be a finite number >= 0");
  bdev_->SetLifespan(r.days);
  return wire::Empty{};
}

Result<wire::Empty> BdevPool::Run(const bdevproto::FlushAllocLog&) {
  CLIO_RETURN_IF_ERROR(bdev_->FlushAllocLog());
  return wire::Empty{};
}

Result<bdevproto::GpuMemoryReply> BdevPool::Run(const bdevproto::Update&) {
  CLIO_ASSIGN_OR_RETURN(GpuMemoryInfo info, bdev_->GpuMemory());
  return bdevproto::GpuMemoryReply{info};
}

}  // namespace clio
