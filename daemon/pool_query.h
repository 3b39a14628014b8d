// Pool queries (seeds/context-runtime.txt): which containers of a pool run a task. A pool has one
// container per node (the container id is the node id); a task names its containers with a
// query: this node, one container by id or by hash, a range, every container, a given node, or
// wherever the module decides. On one node every query resolves to this node's container or to
// none; the routing is here, tested over several nodes, so the cluster fits without a rewrite.
//
// On the wire a query travels only when it is not kLocal: the request header's flag
// kRequestHasQuery, and the payload starts with EncodePoolQuery's 17 bytes (docs/ipc.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace clio {

struct PoolQuery {
  enum class Kind : uint8_t {
    kLocal = 0,       // the container of the node the request arrives at
    kDirectId = 1,    // container `a`
    kDirectHash = 2,  // container `a` mod the number of containers
    kRange = 3,       // containers [a, a + b)
    kBroadcast = 4,   // every container
    kPhysical = 5,    // the container of node `a`
    kDynamic = 6,     // the pool decides (Pool::DynamicContainer), for each task
  };
  Kind kind = Kind::kLocal;
  uint64_t a = 0, b = 0;

  static PoolQuery Local() { return {}; }
  static PoolQuery DirectId(uint32_t id) { return {Kind::kDirectId, id, 0}; }
  static PoolQuery DirectHash(uint64_t hash) { return {Kind::kDirectHash, hash, 0}; }
  static PoolQuery Range(uint32_t first, uint32_t count) { return {Kind::kRange, first, count}; }
  static PoolQuery Broadcast() { return {Kind::kBroadcast, 0, 0}; }
  static PoolQuery Physical(uint32_t node) { return {Kind::kPhysical, node, 0}; }
  static PoolQuery Dynamic() { return {Kind::kDynamic, 0, 0}; }
  bool operator==(const PoolQuery&) const = default;
};

std::string_view PoolQueryName(PoolQuery::Kind k);

// The containers (ascending, no repeats) that run a task with query `q` in a pool of
// `containers` containers, asked at node `here`; for kDynamic, `dynamic` is the pool's choice.
// InvalidArgument for a container, range or node outside the pool, naming it.
Result<std::vector<uint32_t>> ResolvePoolQuery(const PoolQuery& q, uint32_t containers, uint32_t here,
                                               uint32_t dynamic = 0);

// 17 bytes: u8 kind, u64 a, u64 b (little-endian). Decode consumes them from the front of
// `payload`; Corruption for a short payload or an unknown kind.
inline constexpr size_t kPoolQueryBytes = 17;
std::string EncodePoolQuery(const PoolQuery& q);
Result<PoolQuery> DecodePoolQuery(std::string_view* payload);

}  // namespace clio
