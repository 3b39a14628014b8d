// libFuzzer target: client requests to the CTE pool (module clio_cte_core, `clioctl tier ...`).
// The input is a sequence of (method, payload) frames applied to one real CTE (RocksDB, a ram
// and a file tier in a temp dir); every frame must yield a reply or an error, never a crash,
// a hang or a huge allocation. Two methods are only decoded, not run: AddTier would create
// files wherever its fuzzed spec points (its spec is parsed, as the pool would, short of
// opening the device), and Drain waits until a tier is empty, which a tier with nowhere to move
// its data never is.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "common/codec.h"
#include "placement/cte.h"
#include "placement/cte_pool.h"
#include "placement/cte_protocol.h"
#include "storage/kv.h"
#include "tests/fuzz/fuzz_world.h"

namespace {

struct World : clio::fuzz::CteWorld {
  std::unique_ptr<clio::CtePool> pool;
  World() : CteWorld("cte") { pool = std::make_unique<clio::CtePool>(std::move(cte), kv.get(), 0); }
};

World& TheWorld() {
  static World* w = new World();  // lives for the whole fuzzing run
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = TheWorld();
  clio::Decoder frames(std::string_view(reinterpret_cast<const char*>(data), size));
  while (frames.remaining() > 0) {
    uint8_t method = 0;
    std::string_view payload;
    if (!frames.Get(&method) || !frames.GetBytes(&payload)) break;
    // Every method from 8 (reserved ids and unknown ones included) to one past the last.
    const uint32_t m = 8 + method % 14;
    if (m == static_cast<uint32_t>(clio::CteMethod::kAddTier)) {
      auto add = clio::wire::Decode<clio::cteproto::AddTier>(payload);
      if (add.ok()) (void)clio::ParseTierSpec(add->spec.bytes, "fuzz");
    } else if (m == static_cast<uint32_t>(clio::CteMethod::kDrain)) {
      (void)clio::wire::Decode<clio::cteproto::Drain>(payload);
    } else {
      (void)w.pool->Handle(m, payload);
    }
  }
  return 0;
}
