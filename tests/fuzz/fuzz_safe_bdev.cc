// libFuzzer target: what a safe-bdev reads from outside. The first byte picks the input kind:
//   0: a superblock file's bytes (DecodeSuperblock)
//   1: a chunk trailer and its chunk (CheckTrailer)
//   2: a stripe journal file (StripeJournal::Open replays it)
//   3+: client request frames (pool, method, payload) to a safe-bdev pool over four ram
//       members (3 + 1), and the frames' writes and reads go through the real stripe code.
// Every input must yield a value or an error, never a crash, a hang or a huge allocation.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/codec.h"
#include "storage/bdev_pool.h"
#include "storage/safe/journal.h"
#include "storage/safe/safe_format.h"
#include "storage/safe/safe_pool.h"

namespace {

struct World {
  std::unique_ptr<clio::BdevPool> members[4];
  std::unique_ptr<clio::SafeBdevPool> array;
  std::string journal = "/tmp/fuzz_safe_journal." + std::to_string(getpid());
  World() {
    std::vector<clio::SafeMember> ms;
    for (int i = 0; i < 4; ++i) {
      clio::BdevConfig c;
      c.name = "ram::fuzz_safe_" + std::to_string(getpid()) + "_" + std::to_string(i);
      c.type = clio::BdevType::kRam;
      c.capacity = 4u << 20;
      c.alloc = clio::AllocPolicy::kLazy;
      c.populate_unit = 1u << 20;
      members[i] = std::make_unique<clio::BdevPool>(std::move(clio::Bdev::Open(c)).value());
      ms.push_back({c.name, members[i]->bdev()});
    }
    clio::SafeBdevConfig sc;
    sc.name = "safe::fuzz";
    sc.chunk_size = 16u << 10;
    sc.health_interval_ms = 3600000;
    array = std::make_unique<clio::SafeBdevPool>(std::move(clio::OpenSafeBdev(sc, ms, {})).value(), nullptr);
  }
  ~World() { std::remove(journal.c_str()); }
};

World& TheWorld() {
  static World* w = new World();  // lives for the whole fuzzing run
  return *w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  World& w = TheWorld();
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0]) {
    case 0:
      (void)clio::DecodeSuperblock(in, "fuzz");
      return 0;
    case 1: {
      if (in.size() < 16) return 0;
      const size_t cut = in.size() / 2;
      clio::ChunkTrailer t;
      (void)clio::CheckTrailer(7, in.substr(0, cut), in.substr(cut), 1, 0, 9, 3, &t);
      return 0;
    }
    case 2: {
      FILE* f = std::fopen(w.journal.c_str(), "wb");
      if (!f) return 0;
      std::fwrite(in.data(), 1, in.size(), f);
      std::fclose(f);
      uint64_t replayed = 0;
      (void)clio::StripeJournal::Open(w.journal, 7, 1u << 20, {}, [](const clio::StripeJournal::Entry&) {
        return clio::Status::Ok();
      }, &replayed);
      std::remove(w.journal.c_str());  // the world is never destroyed: leave nothing in /tmp
      return 0;
    }
    default:
      break;
  }
  clio::Decoder frames(in);
  while (frames.remaining() > 0) {
    uint8_t method = 0;
    std::string_view payload;
    if (!frames.Get(&method) || !frames.GetBytes(&payload)) break;
    // Membership changes need the runtime's registry; the fuzzer sticks to the data path.
    if (method % 24 >= 20) continue;
    (void)w.array->Handle(method % 24, payload);
  }
  return 0;
}
