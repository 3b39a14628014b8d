#include "storage/bdev_protocol.h"

#include <bit>

#include "storage/media.h"

namespace clio {
namespace {

constexpr uint64_t kExtentWireBytes = 8 + 8 + 1;

}  // namespace

void WireEncode(Encoder& e, const WireExtents& x) {
  e.Put<uint32_t>(static_cast<uint32_t>(x.list.size()));
  for (const Extent& ext : x.list) {
    const uint8_t size_class =
        std::has_single_bit(ext.size) ? static_cast<uint8_t>(std::countr_zero(ext.size)) : 0;
    e.Put<uint64_t>(ext.offset).Put<uint64_t>(ext.size).Put<uint8_t>(size_class);
  }
}

Status WireDecode(Decoder& d, WireExtents& x) {
  uint32_t n = 0;
  if (!d.Get(&n)) return Corruption("extents: message truncated");
  // Never reserve more than the input could hold.
  if (n > d.remaining() / kExtentWireBytes)
    return Corruption("extents: count " + std::to_string(n) + " exceeds the message");
  x.list.clear();
  x.list.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    Extent ext;
    uint8_t size_class = 0;
    if (!d.Get(&ext.offset) || !d.Get(&ext.size) || !d.Get(&size_class))
      return Corruption("extents: message truncated");
    if (!std::has_single_bit(ext.size) || std::countr_zero(ext.size) != size_class)
      return InvalidArgument("extent " + std::to_string(i) + ": size " + std::to_string(ext.size) +
                             " does not match its size class " + std::to_string(size_class));
    if (ext.offset > UINT64_MAX - ext.size)
      return InvalidArgument("extent " + std::to_string(i) + ": offset + size overflows");
    x.list.push_back(ext);
  }
  return Status::Ok();
}

void WireEncode(Encoder& e, const BdevStats& s) {
  e.Put<uint8_t>(static_cast<uint8_t>(s.type)).Put<uint8_t>(static_cast<uint8_t>(s.persistence));
  e.Put<uint64_t>(s.capacity).Put<uint64_t>(s.remaining).Put<uint64_t>(s.used);
  e.Put<uint64_t>(s.committed).Put<double>(s.lifetime_days);
  e.Put<double>(s.perf.read_bandwidth_mbps).Put<double>(s.perf.write_bandwidth_mbps);
  e.Put<double>(s.perf.read_latency_us).Put<double>(s.perf.write_latency_us);
  e.Put<double>(s.perf.iops);
  e.PutBytes(s.backend).PutBytes(s.health);
}

Status WireDecode(Decoder& d, BdevStats& s) {
  uint8_t type = 0, persistence = 0;
  d.Get(&type);
  d.Get(&persistence);
  d.Get(&s.capacity);
  d.Get(&s.remaining);
  d.Get(&s.used);
  d.Get(&s.committed);
  d.Get(&s.lifetime_days);
  d.Get(&s.perf.read_bandwidth_mbps);
  d.Get(&s.perf.write_bandwidth_mbps);
  d.Get(&s.perf.read_latency_us);
  d.Get(&s.perf.write_latency_us);
  d.Get(&s.perf.iops);
  d.GetString(&s.backend);
  d.GetString(&s.health);
  if (d.failed()) return Status::Ok();  // the message's Finish says truncated
  if (FindMedium(static_cast<BdevType>(type)) == nullptr)
    return Corruption("medium type " + std::to_string(type) + " is unknown here (a newer runtime?)");
  if (persistence > static_cast<uint8_t>(Persistence::kLongTerm)) return Corruption("bad persistence");
  s.type = static_cast<BdevType>(type);
  s.persistence = static_cast<Persistence>(persistence);
  return Status::Ok();
}

void WireEncode(Encoder& e, const GpuMemoryInfo& g) {
  e.Put<uint64_t>(g.address).Put<uint64_t>(g.size).Put<int32_t>(g.device);
  e.Put<uint8_t>(g.device_memory ? 1 : 0).Put<uint8_t>(g.pinned ? 1 : 0).PutBytes(g.runtime);
}

Status WireDecode(Decoder& d, GpuMemoryInfo& g) {
  uint8_t device_memory = 0, pinned = 0;
  d.Get(&g.address);
  d.Get(&g.size);
  d.Get(&g.device);
  d.Get(&device_memory);
  d.Get(&pinned);
  d.GetString(&g.runtime);
  g.device_memory = device_memory != 0;
  g.pinned = pinned != 0;
  return Status::Ok();
}

void EncodeExtents(Encoder& e, const ExtentList& extents) { WireEncode(e, WireExtents{extents}); }

Status DecodeExtents(Decoder& d, ExtentList* out) {
  WireExtents x;
  CLIO_RETURN_IF_ERROR(WireDecode(d, x));
  *out = std::move(x.list);
  return Status::Ok();
}

std::string EncodeBdevStats(const BdevStats& s) { return wire::Encode(bdevproto::StatsReply{s}); }

Result<BdevStats> DecodeBdevStats(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(bdevproto::StatsReply r, wire::Decode<bdevproto::StatsReply>(bytes));
  return r.stats;
}

std::string EncodeGpuMemoryInfo(const GpuMemoryInfo& g) { return wire::Encode(bdevproto::GpuMemoryReply{g}); }

Result<GpuMemoryInfo> DecodeGpuMemoryInfo(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(bdevproto::GpuMemoryReply r, wire::Decode<bdevproto::GpuMemoryReply>(bytes));
  return r.info;
}

}  // namespace clio
