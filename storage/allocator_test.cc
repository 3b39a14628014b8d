#include <doctest/doctest.h>

#include <random>
#include <thread>
#include <vector>

#include "storage/allocator.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Disjoint;

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

ExtentList MustAllocate(BlockAllocator* a, uint64_t bytes) {
  auto r = a->Allocate(bytes);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

// Records what the allocator reports, in order.
class RecordingObserver : public AllocObserver {
 public:
  void OnAllocate(const ExtentList& b) override {
    for (const auto& e : b) events.push_back({true, e});
  }
  void OnFree(const ExtentList& b) override {
    for (const auto& e : b) events.push_back({false, e});
  }
  std::vector<std::pair<bool, Extent>> events;
};

}  // namespace

TEST_CASE("allocator: one block of the smallest class for small requests") {
  BlockAllocator a(64 * kMiB, 512);
  CHECK(MustAllocate(&a, 1) == ExtentList{{0, 512}});
  CHECK(MustAllocate(&a, 512) == ExtentList{{512, 512}});
  CHECK(MustAllocate(&a, 513) == ExtentList{{1024, 1024}});
  CHECK(MustAllocate(&a, 100 * kKiB) == ExtentList{{2048, 128 * kKiB}});
  CHECK(MustAllocate(&a, kMiB).size() == 1);
  CHECK(a.used() == 512 + 512 + 1024 + 128 * kKiB + kMiB);
  CHECK(a.remaining() == 64 * kMiB - a.used());
  CHECK(a.Allocate(0).status().code() == Code::kInvalidArgument);
}

TEST_CASE("allocator: alignment raises the smallest class") {
  BlockAllocator a(64 * kMiB, 4096);
  CHECK(a.min_class() == 4096);
  CHECK(MustAllocate(&a, 1) == ExtentList{{0, 4096}});
  CHECK(MustAllocate(&a, 4097) == ExtentList{{4096, 8192}});
  CHECK_FALSE(BlockAllocator::ValidateAlignment(3000).ok());
  CHECK_FALSE(BlockAllocator::ValidateAlignment(2 * kMiB).ok());
  CHECK(BlockAllocator::ValidateAlignment(512).ok());
}

TEST_CASE("allocator: requests over 1 MiB take 1 MiB blocks and a smaller last one") {
  BlockAllocator a(64 * kMiB, 512);
  ExtentList e = MustAllocate(&a, 3 * kMiB + 300 * kKiB);
  REQUIRE(e.size() == 4);
  CHECK(e[0].size == kMiB);
  CHECK(e[1].size == kMiB);
  CHECK(e[2].size == kMiB);
  CHECK(e[3].size == 512 * kKiB);
  CHECK(Disjoint(e));
  CHECK(a.MaxBumpNeed(3 * kMiB + 300 * kKiB) == 3 * kMiB + 512 * kKiB);
  ExtentList two = MustAllocate(&a, 2 * kMiB);
  CHECK(two.size() == 2);
}

TEST_CASE("allocator: freed blocks are reused from their class, a larger one whole if needed") {
  BlockAllocator a(2 * kMiB, 512);
  ExtentList x = MustAllocate(&a, 4 * kKiB);
  ExtentList big = MustAllocate(&a, kMiB);
  REQUIRE(a.Free(x).ok());
  CHECK(MustAllocate(&a, 4 * kKiB) == x);  // same class list first
  REQUIRE(a.Free(big).ok());
  // Bump space is left (1 MiB - 4 KiB), so a small request takes bump space, not the big block.
  ExtentList small = MustAllocate(&a, 512);
  CHECK(small[0].size == 512);
  CHECK(small[0].offset != big[0].offset);
  // Use up the bump space, then a small request gets the free 1 MiB block whole.
  while (a.Allocate(512, /*exact_only=*/true).ok()) {
  }
  ExtentList whole = MustAllocate(&a, 512);
  CHECK(whole == big);
}

TEST_CASE("allocator: exhaustion returns NoSpace and changes nothing") {
  BlockAllocator a(4 * kMiB, 512);
  ExtentList e1 = MustAllocate(&a, kMiB + 512 * kKiB);
  ExtentList e2 = MustAllocate(&a, kMiB);
  ExtentList e3 = MustAllocate(&a, 256 * kKiB);
  REQUIRE(a.Free(e3).ok());
  const auto live_before = a.LiveExtents();
  const auto free_before = a.FreeExtents();
  const uint64_t used = a.used(), remaining = a.remaining(), bump = a.bump();
  // 1.5 MiB remain (1.25 MiB of bump space + a free 256 KiB block); 2 MiB cannot be served.
  auto r = a.Allocate(2 * kMiB);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kNoSpace);
  CHECK(a.used() == used);
  CHECK(a.remaining() == remaining);
  CHECK(a.bump() == bump);
  CHECK(a.LiveExtents() == live_before);
  CHECK(a.FreeExtents() == free_before);
  CHECK(a.Allocate(5 * kMiB).status().code() == Code::kNoSpace);
  // What is left can still be had.
  ExtentList rest = MustAllocate(&a, kMiB + 512 * kKiB);
  CHECK(rest.size() == 3);  // 1 MiB, then 512 KiB assembled from the free block and bump space
  CHECK(a.remaining() == 0);
  CHECK(a.Allocate(1).status().code() == Code::kNoSpace);
  std::vector<Extent> all = a.LiveExtents();
  CHECK(Disjoint(all));
}

TEST_CASE("allocator: a large request is assembled from small free blocks") {
  BlockAllocator a(kMiB, 512);
  std::vector<ExtentList> smalls;
  for (int i = 0; i < 8; ++i) smalls.push_back(MustAllocate(&a, 128 * kKiB));
  CHECK(a.remaining() == 0);
  for (auto& s : smalls) REQUIRE(a.Free(s).ok());
  ExtentList e = MustAllocate(&a, kMiB);
  CHECK(e.size() == 8);
  CHECK(TotalSize(e) == kMiB);
  CHECK(Disjoint(e));
  CHECK(a.remaining() == 0);
  REQUIRE(a.Free(e).ok());
  // A request smaller than the sum still works with a part of the blocks.
  ExtentList part = MustAllocate(&a, 300 * kKiB);
  CHECK(TotalSize(part) >= 300 * kKiB);
  CHECK(part.size() == 3);
}

TEST_CASE("allocator: double free and foreign extents are rejected without change") {
  BlockAllocator a(8 * kMiB, 512);
  ExtentList e = MustAllocate(&a, 8 * kKiB);
  ExtentList f = MustAllocate(&a, 8 * kKiB);
  REQUIRE(a.Free(e).ok());
  Status s = a.Free(e);
  CHECK(s.code() == Code::kInternal);
  CHECK(a.Free({{f[0].offset, 4 * kKiB}}).code() == Code::kInternal);  // wrong size
  CHECK(a.Free({{12345, 512}}).code() == Code::kInternal);
  // A list with one bad extent frees none of them.
  CHECK(a.Free({f[0], e[0]}).code() == Code::kInternal);
  CHECK(a.Free({f[0], f[0]}).code() == Code::kInternal);
  CHECK(a.LiveExtents() == f);
  CHECK(a.used() == 8 * kKiB);
  REQUIRE(a.Free(f).ok());
  CHECK(a.used() == 0);
}

TEST_CASE("allocator: concurrent allocate/free from 4 threads never hands out a block twice") {
  BlockAllocator a(64 * kMiB, 512);
  constexpr int kThreads = 4, kOps = 3000;
  std::vector<std::vector<Extent>> held(kThreads);
  std::vector<int> errors(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7 + 1);
      std::vector<ExtentList> mine;
      for (int i = 0; i < kOps; ++i) {
        bool alloc = mine.empty() || rng() % 3 != 0;
        if (alloc) {
          uint64_t bytes = 1 + rng() % (rng() % 8 == 0 ? 3 * kMiB : 64 * kKiB);
          auto r = a.Allocate(bytes);
          if (r.ok()) {
            if (TotalSize(*r) < bytes) ++errors[t];
            mine.push_back(*r);
          } else if (r.status().code() != Code::kNoSpace) {
            ++errors[t];
          }
        } else {
          size_t k = rng() % mine.size();
          if (!a.Free(mine[k]).ok()) ++errors[t];
          mine.erase(mine.begin() + static_cast<long>(k));
        }
      }
      for (auto& l : mine) held[t].insert(held[t].end(), l.begin(), l.end());
    });
  }
  for (auto& th : threads) th.join();
  std::vector<Extent> all;
  uint64_t total = 0;
  for (int t = 0; t < kThreads; ++t) {
    CHECK(errors[t] == 0);
    all.insert(all.end(), held[t].begin(), held[t].end());
  }
  for (const auto& e : all) total += e.size;
  CHECK(Disjoint(all));
  CHECK(a.used() == total);
  std::vector<Extent> live = a.LiveExtents();
  CHECK(live.size() == all.size());
  // Free blocks and live blocks never overlap either.
  std::vector<Extent> everything = live;
  auto free = a.FreeExtents();
  everything.insert(everything.end(), free.begin(), free.end());
  CHECK(Disjoint(everything));
}

TEST_CASE("allocator: restore, mark allocated and mark free") {
  RecordingObserver obs;
  BlockAllocator a(16 * kMiB, 512, &obs);
  REQUIRE(a.Restore({{0, 4096}, {kMiB, kMiB}}, {{4096, 4096}}).ok());
  CHECK(a.used() == 4096 + kMiB);
  CHECK(a.bump() == 2 * kMiB);
  CHECK(obs.events.empty());
  // The free block is reused first; the live ones are never handed out.
  CHECK(MustAllocate(&a, 4096) == ExtentList{{4096, 4096}});
  CHECK(MustAllocate(&a, kMiB) == ExtentList{{2 * kMiB, kMiB}});

  CHECK(a.Restore({{0, 4096}, {2048, 4096}}, {}).code() == Code::kCorruption);  // overlap
  CHECK(a.Restore({{0, 3000}}, {}).code() == Code::kCorruption);               // not a class

  REQUIRE(a.Restore({{0, 4096}}, {{4096, 4096}}).ok());
  obs.events.clear();
  REQUIRE(a.MarkAllocated({4096, 4096}).ok());  // off the free list
  REQUIRE(a.MarkAllocated({4096, 4096}).ok());  // idempotent
  REQUIRE(a.MarkAllocated({64 * 1024, 8192}).ok());  // past the bump: the gap becomes free
  CHECK(a.bump() == 64 * 1024 + 8192);
  CHECK(a.MarkAllocated({8192 + 512, 512}).code() == Code::kCorruption);  // inside a gap block
  CHECK(a.MarkAllocated({0, 8192}).code() == Code::kCorruption);
  CHECK(a.free_bytes() == 64 * 1024 - 8192);
  CHECK(Disjoint([&] {
    auto v = a.LiveExtents();
    auto f = a.FreeExtents();
    v.insert(v.end(), f.begin(), f.end());
    return v;
  }()));
  REQUIRE(a.MarkFree({0, 4096}).ok());
  REQUIRE(a.MarkFree({0, 4096}).ok());
  CHECK(a.used() == 4096 + 8192);
  // Every change was reported, allocations and the gap's free blocks alike.
  int allocs = 0, frees = 0;
  for (const auto& [alloc, e] : obs.events) (alloc ? allocs : frees)++;
  CHECK(allocs == 2);
  CHECK(frees >= 2);
}

TEST_CASE("allocator: exact-only mode and the bump limit") {
  BlockAllocator a(8 * kMiB, 512);
  a.SetLimit(kMiB);
  ExtentList e = MustAllocate(&a, kMiB);
  CHECK(a.Allocate(512, true).status().code() == Code::kNoSpace);
  a.SetLimit(2 * kMiB);
  CHECK(a.Allocate(512, true).ok());
  REQUIRE(a.Free(e).ok());
  // exact_only does not break up or take the free 1 MiB block for a small request...
  a.SetLimit(a.bump());
  CHECK(a.Allocate(4096, true).status().code() == Code::kNoSpace);
  // ...the full algorithm does.
  CHECK(MustAllocate(&a, 4096) == e);
}
