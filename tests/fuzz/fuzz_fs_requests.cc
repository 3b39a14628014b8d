// libFuzzer target: client requests to the filesystem pool. The input is a sequence of
// (method, payload) frames applied to one real namespace (RocksDB + shm and file tiers in a
// temp dir); every frame must yield a reply or an error, never a crash or a hang.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "common/codec.h"
#include "fs/namespace/fs_pool.h"
#include "fs/protocol/fs_protocol.h"
#include "placement/cte.h"
#include "storage/kv.h"
#include "tests/fuzz/fuzz_world.h"

namespace {

struct World : clio::fuzz::CteWorld {
  std::unique_ptr<clio::FsPool> pool;
  World() : CteWorld("fs") {
    auto ns = std::move(clio::Namespace::Open(kv.get(), cte.get(), {.chunk_size = 1u << 20, .orphan_reclaim_s = 0})).value();
    pool = std::make_unique<clio::FsPool>(std::move(ns), kv.get());
  }
  ~World() {
    pool.reset();
    cte.reset();
    kv.reset();
    std::filesystem::remove_all(dir);
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
    uint8_t method = 0;
    std::string_view payload;
    if (!frames.Get(&method) || !frames.GetBytes(&payload)) break;
    // Keep writes and reads small so a run explores operations, not memory limits.
    // Every method (each through its typed decoder), and one unknown.
    (void)w.pool->Handle(method % (clio::kFsMethodCount + 1), payload);
  }
  return 0;
}
