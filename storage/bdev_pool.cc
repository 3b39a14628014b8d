#include "storage/bdev_pool.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/codec.h"
#include "storage/bdev_config.h"
#include "storage/bdev_protocol.h"

namespace clio {
namespace {

Status BadRequest(std::string_view method, const Status& s) {
  return Status(s.code(), "clio_bdev " + std::string(method) + ": " + s.message());
}

}  // namespace

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

CallerClass BdevPool::CallerOf(uint32_t method) const {
  switch (static_cast<BdevMethod>(method)) {
    case BdevMethod::kMonitor:
    case BdevMethod::kGetStats:
      return CallerClass::kReader;
    default:
      return CallerClass::kAdmin;
  }
}

Result<std::string> BdevPool::Handle(uint32_t method, std::string_view payload) {
  Decoder d(payload);
  Encoder out;
  switch (static_cast<BdevMethod>(method)) {
    case BdevMethod::kMonitor: {
      std::string query;
      if (!payload.empty()) d.GetString(&query);
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev Monitor"));
      if (!query.empty() && query != "stats")
        return InvalidArgument("clio_bdev Monitor: unknown query '" + query + "' (expected stats)");
      return MonitorJson();
    }
    case BdevMethod::kAllocateBlocks: {
      uint64_t bytes = 0;
      d.Get(&bytes);
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev AllocateBlocks"));
      if (bytes == 0) return InvalidArgument("clio_bdev AllocateBlocks: 0 bytes");
      CLIO_ASSIGN_OR_RETURN(ExtentList extents, bdev_->Allocate(bytes));
      EncodeExtents(out, extents);
      return out.Take();
    }
    case BdevMethod::kWrite: {
      ExtentList extents;
      uint64_t offset = 0;
      std::string_view data;
      Status s = DecodeExtents(d, &extents);
      if (!s.ok()) return BadRequest("Write", s);
      d.Get(&offset);
      d.GetBytes(&data);
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev Write"));
      CLIO_RETURN_IF_ERROR(bdev_->Write(extents, offset, data));
      out.Put<uint64_t>(data.size());
      return out.Take();
    }
    case BdevMethod::kRead: {
      ExtentList extents;
      uint64_t offset = 0, len = 0;
      Status s = DecodeExtents(d, &extents);
      if (!s.ok()) return BadRequest("Read", s);
      d.Get(&offset);
      d.Get(&len);
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev Read"));
      // Bound the buffer before allocating it: never trust a length from the wire.
      const uint64_t total = TotalSize(extents);
      if (len > kMaxBdevIoBytes || offset > total || len > total - offset) {
        return Status(Code::kOutOfRange, "clio_bdev Read: " + std::to_string(len) + " bytes at " +
                                             std::to_string(offset) + " of " +
                                             std::to_string(total) + " bytes of extents (at most " +
                                             std::to_string(kMaxBdevIoBytes) + " per request)");
      }
      std::string buf(len, '\0');
      CLIO_RETURN_IF_ERROR(bdev_->Read(extents, offset, len, buf.data()));
      return buf;
    }
    case BdevMethod::kFreeBlocks: {
      ExtentList extents;
      Status s = DecodeExtents(d, &extents);
      if (!s.ok()) return BadRequest("FreeBlocks", s);
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev FreeBlocks"));
      CLIO_RETURN_IF_ERROR(bdev_->Free(extents));
      return std::string();
    }
    case BdevMethod::kGetStats:
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev GetStats"));
      return EncodeBdevStats(bdev_->GetStats());
    case BdevMethod::kSync:
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev Sync"));
      CLIO_RETURN_IF_ERROR(bdev_->Sync());
      return std::string();
    case BdevMethod::kSetLifespan: {
      double days = 0;
      d.Get(&days);
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev SetLifespan"));
      if (!std::isfinite(days) || days < 0)
        return InvalidArgument("clio_bdev SetLifespan: days must be a finite number >= 0");
      bdev_->SetLifespan(days);
      return std::string();
    }
    case BdevMethod::kFlushAllocLog:
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev FlushAllocLog"));
      CLIO_RETURN_IF_ERROR(bdev_->FlushAllocLog());
      return std::string();
    case BdevMethod::kUpdate: {
      CLIO_RETURN_IF_ERROR(d.Finish("clio_bdev Update"));
      CLIO_ASSIGN_OR_RETURN(GpuMemoryInfo info, bdev_->GpuMemory());
      return EncodeGpuMemoryInfo(info);
    }
  }
  return Status(Code::kNotSupported, "clio_bdev: unknown method " + std::to_string(method));
}

}  // namespace clio
