// libFuzzer target: client requests to bdev pools (module clio_bdev). The input is a sequence
// of (pool, method, payload) frames applied to real pools: a ram device (shared memory), a
// pinned device (host memory without a GPU) and a noop device. Every frame must yield a reply
// or an error, never a crash, a hang or a huge allocation.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/codec.h"
#include "storage/bdev_pool.h"

namespace {

struct World {
  std::unique_ptr<clio::BdevPool> pools[3];
  World() {
    const clio::BdevType types[] = {clio::BdevType::kRam, clio::BdevType::kPinned,
                                    clio::BdevType::kNoop};
    for (int i = 0; i < 3; ++i) {
      clio::BdevConfig c;
      c.name = "ram::fuzz_bdev_" + std::to_string(getpid()) + "_" + std::to_string(i);
      c.type = types[i];
      c.capacity = 8u << 20;
      c.alloc = clio::AllocPolicy::kLazy;
      c.populate_unit = 1u << 20;
      pools[i] = std::make_unique<clio::BdevPool>(std::move(clio::Bdev::Open(c)).value());
    }
  }
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
    uint8_t pool = 0, method = 0;
    std::string_view payload;
    if (!frames.Get(&pool) || !frames.Get(&method) || !frames.GetBytes(&payload)) break;
    (void)w.pools[pool % 3]->Handle(method % 24, payload);
  }
  return 0;
}
