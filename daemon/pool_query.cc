#include "daemon/pool_query.h"

#include "common/codec.h"

namespace clio {

std::string_view PoolQueryName(PoolQuery::Kind k) {
  switch (k) {
    case PoolQuery::Kind::kLocal: return "local";
    case PoolQuery::Kind::kDirectId: return "direct id";
    case PoolQuery::Kind::kDirectHash: return "direct hash";
    case PoolQuery::Kind::kRange: return "range";
    case PoolQuery::Kind::kBroadcast: return "broadcast";
    case PoolQuery::Kind::kPhysical: return "physical";
    case PoolQuery::Kind::kDynamic: return "dynamic";
  }
  return "?";
}

Result<std::vector<uint32_t>> ResolvePoolQuery(const PoolQuery& q, uint32_t containers, uint32_t here,
                                               uint32_t dynamic) {
  if (containers == 0) return InvalidArgument("a pool with no containers");
  auto one = [&](uint64_t c, const char* what) -> Result<std::vector<uint32_t>> {
    if (c >= containers)
      return InvalidArgument(std::string(what) + " " + std::to_string(c) + " is outside the pool's " +
                             std::to_string(containers) + " containers (0.." + std::to_string(containers - 1) + ")");
    return std::vector<uint32_t>{static_cast<uint32_t>(c)};
  };
  switch (q.kind) {
    case PoolQuery::Kind::kLocal: return one(here, "this node's container");
    case PoolQuery::Kind::kDirectId: return one(q.a, "container");
    case PoolQuery::Kind::kDirectHash: return std::vector<uint32_t>{static_cast<uint32_t>(q.a % containers)};
    case PoolQuery::Kind::kRange: {
      if (q.b == 0) return InvalidArgument("an empty range of containers");
      if (q.a >= containers || q.b > containers - q.a)
        return InvalidArgument("containers " + std::to_string(q.a) + ".." + std::to_string(q.a + q.b - 1) +
                               " are not all in the pool's " + std::to_string(containers));
      std::vector<uint32_t> out;
      for (uint64_t c = q.a; c < q.a + q.b; ++c) out.push_back(static_cast<uint32_t>(c));
      return out;
    }
    case PoolQuery::Kind::kBroadcast: {
      std::vector<uint32_t> out;
      for (uint32_t c = 0; c < containers; ++c) out.push_back(c);
      return out;
    }
    case PoolQuery::Kind::kPhysical: return one(q.a, "node");  // a container's id is its node's
    case PoolQuery::Kind::kDynamic: return one(dynamic, "the container the pool chose,");
  }
  return InvalidArgument("unknown pool query");
}

std::string EncodePoolQuery(const PoolQuery& q) {
  Encoder e;
  e.Put<uint8_t>(static_cast<uint8_t>(q.kind)).Put<uint64_t>(q.a).Put<uint64_t>(q.b);
  return e.Take();
}

Result<PoolQuery> DecodePoolQuery(std::string_view* payload) {
  if (payload->size() < kPoolQueryBytes) return Corruption("a pool query shorter than 17 bytes");
  Decoder d(payload->substr(0, kPoolQueryBytes));
  uint8_t kind = 0;
  PoolQuery q;
  d.Get(&kind);
  d.Get(&q.a);
  d.Get(&q.b);
  CLIO_RETURN_IF_ERROR(d.Finish("pool query"));
  if (kind > static_cast<uint8_t>(PoolQuery::Kind::kDynamic)) return Corruption("unknown pool query kind " + std::to_string(kind));
  q.kind = static_cast<PoolQuery::Kind>(kind);
  payload->remove_prefix(kPoolQueryBytes);
  return q;
}

}  // namespace clio
