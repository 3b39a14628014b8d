#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <memory>
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

TEST_CASE("allocator: freed blocks are reused from their class, a larger range split if needed") {
  BlockAllocator a(4 * kMiB, 512, nullptr, /*sets=*/1);  // one set: no stealing order to mind
  ExtentList x = MustAllocate(&a, 4 * kKiB);
  ExtentList big = MustAllocate(&a, kMiB);  // [4 KiB, 1 MiB + 4 KiB): crosses a region boundary
  ExtentList guard = MustAllocate(&a, 4 * kKiB);
  REQUIRE(a.Free(x).ok());
  CHECK(MustAllocate(&a, 4 * kKiB) == x);  // same class first
  REQUIRE(a.Free(big).ok());
  // big left two free ranges, one per region. Bump space is left, so a small request takes
  // it rather than splitting a larger range.
  const uint64_t bump = a.bump();
  CHECK(bump == guard[0].offset + guard[0].size);
  CHECK(MustAllocate(&a, 512) == ExtentList{{bump, 512}});
  // Use up the bump space; then a small request splits the smallest larger range (big's 4 KiB
  // tail in the second region). Before coalescing, it took a whole block.
  while (a.Allocate(512, /*exact_only=*/true).ok()) {
  }
  CHECK(MustAllocate(&a, 512) == ExtentList{{kMiB, 512}});
  CHECK(MustAllocate(&a, 8 * kKiB) == ExtentList{{big[0].offset, 8 * kKiB}});
  CHECK(a.CheckConsistency().ok());
}

TEST_CASE("allocator: exhaustion returns NoSpace and changes nothing") {
  BlockAllocator a(4 * kMiB, 512);
  ExtentList e1 = MustAllocate(&a, kMiB + 512 * kKiB);
  ExtentList e2 = MustAllocate(&a, kMiB);
  ExtentList e3 = MustAllocate(&a, 256 * kKiB);
  REQUIRE(a.Free(e3).ok());
  CHECK(a.bump() == e3[0].offset);  // e3 ended at the bump pointer, which moved back over it
  const auto live_before = a.LiveExtents();
  const auto free_before = a.FreeExtents();
  const uint64_t used = a.used(), remaining = a.remaining(), bump = a.bump();
  // 1.5 MiB of bump space remain; 2 MiB cannot be served.
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
  CHECK(rest.size() == 2);  // 1 MiB and 512 KiB, both whole from the bump space
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
  // Every other block: four free ranges that cannot merge.
  for (size_t i = 0; i < smalls.size(); i += 2) REQUIRE(a.Free(smalls[i]).ok());
  CHECK(a.FreeExtents().size() == 4);
  ExtentList e = MustAllocate(&a, 512 * kKiB);
  CHECK(e.size() == 4);
  CHECK(TotalSize(e) == 512 * kKiB);
  CHECK(Disjoint(e));
  CHECK(a.remaining() == 0);
  REQUIRE(a.Free(e).ok());
  // A request smaller than the sum still works with a part of the blocks (the last one split).
  ExtentList part = MustAllocate(&a, 300 * kKiB);
  CHECK(TotalSize(part) >= 300 * kKiB);
  CHECK(part.size() == 3);
  CHECK(TotalSize(part) == 320 * kKiB);
  CHECK(a.CheckConsistency().ok());
  // Freed, everything merges again: the whole device is one 1 MiB block.
  REQUIRE(a.Free(part).ok());
  for (size_t i = 1; i < smalls.size(); i += 2) REQUIRE(a.Free(smalls[i]).ok());
  CHECK(a.bump() == 0);
  CHECK(MustAllocate(&a, kMiB) == ExtentList{{0, kMiB}});
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
  CHECK(a.CheckConsistency().ok());
}

TEST_CASE("allocator: restore, mark allocated and mark free") {
  RecordingObserver obs;
  BlockAllocator a(16 * kMiB, 512, &obs);
  REQUIRE(a.Restore({{0, 4096}, {kMiB, kMiB}}, {{4096, 4096}}).ok());
  CHECK(a.used() == 4096 + kMiB);
  CHECK(a.bump() == 2 * kMiB);
  CHECK(obs.events.empty());
  // Everything below the bump pointer that is not live is free, listed or not: the free
  // block and the gap after it merge into one range. The live blocks are never handed out.
  CHECK(a.free_bytes() == kMiB - 4096);
  CHECK(a.CheckConsistency().ok());
  CHECK(MustAllocate(&a, 512 * kKiB) == ExtentList{{4096, 512 * kKiB}});
  CHECK(MustAllocate(&a, kMiB) == ExtentList{{2 * kMiB, kMiB}});

  CHECK(a.Restore({{0, 4096}, {2048, 4096}}, {}).code() == Code::kCorruption);  // overlap
  CHECK(a.Restore({{0, 3000}}, {}).code() == Code::kCorruption);               // not a class

  REQUIRE(a.Restore({{0, 4096}}, {{4096, 4096}}).ok());
  obs.events.clear();
  REQUIRE(a.MarkAllocated({4096, 4096}).ok());  // off the free list
  REQUIRE(a.MarkAllocated({4096, 4096}).ok());  // idempotent
  REQUIRE(a.MarkAllocated({64 * 1024, 8192}).ok());  // past the bump: the gap becomes free
  CHECK(a.bump() == 64 * 1024 + 8192);
  // Inside free space: carved out of it (an extent the index names but a torn log lost).
  REQUIRE(a.MarkAllocated({8192 + 512, 512}).ok());
  CHECK(a.MarkAllocated({0, 8192}).code() == Code::kCorruption);  // overlaps a live block
  CHECK(a.MarkAllocated({8192, 1024}).code() == Code::kCorruption);
  CHECK(a.free_bytes() == 64 * 1024 - 8192 - 512);
  CHECK(a.CheckConsistency().ok());
  CHECK(Disjoint([&] {
    auto v = a.LiveExtents();
    auto f = a.FreeExtents();
    v.insert(v.end(), f.begin(), f.end());
    return v;
  }()));
  REQUIRE(a.MarkFree({0, 4096}).ok());
  REQUIRE(a.MarkFree({0, 4096}).ok());
  CHECK(a.used() == 4096 + 8192 + 512);
  // Past the bump pointer: the bump pointer moves past it.
  REQUIRE(a.MarkFree({kMiB, 4096}).ok());
  CHECK(a.bump() == kMiB + 4096);
  CHECK(a.CheckConsistency().ok());
  // Every change was reported, allocations and the gap's free blocks alike.
  int allocs = 0, frees = 0;
  for (const auto& [alloc, e] : obs.events) (alloc ? allocs : frees)++;
  CHECK(allocs == 3);
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
  // ...the full algorithm splits it.
  CHECK(MustAllocate(&a, 4096) == ExtentList{{0, 4096}});
}

TEST_CASE("allocator: every size class, for either alignment") {
  for (uint64_t align : {uint64_t{512}, uint64_t{4096}}) {
    CAPTURE(align);
    BlockAllocator a(64 * kMiB, align);
    for (uint64_t cls = a.min_class(); cls <= kMiB; cls *= 2) {
      CAPTURE(cls);
      // The smallest and the largest request of the class, and one in between.
      for (uint64_t bytes : {cls == a.min_class() ? 1 : cls / 2 + 1, cls / 2 + cls / 4 + 1, cls}) {
        ExtentList e = MustAllocate(&a, bytes);
        REQUIRE(e.size() == 1);
        CHECK(e[0].size == cls);
        CHECK(e[0].offset % a.min_class() == 0);
        // Freed and carved again (now from a coalesced range), the class is still exact.
        REQUIRE(a.Free(e).ok());
        ExtentList again = MustAllocate(&a, bytes);
        REQUIRE(again.size() == 1);
        CHECK(again[0].size == cls);
      }
    }
    CHECK(a.CheckConsistency().ok());
  }
}

// Before coalescing (blocks never split or merged), this test failed: every block carved
// smaller than 1 MiB during the churn stayed that size on its free list forever, so after
// freeing everything the 64 MiB request could only be assembled from fragments (extents
// smaller than 1 MiB, more than 64 of them), and the "every extent is 1 MiB" checks failed.
TEST_CASE("allocator: after long random churn, freeing everything leaves no fragmentation") {
  constexpr uint64_t kCapacity = 64 * kMiB;
  BlockAllocator a(kCapacity, 512);
  std::mt19937_64 rng(20240611);
  std::vector<ExtentList> held;
  int allocs = 0, nospace = 0;
  for (int i = 0; i < 20000; ++i) {
    if (held.empty() || rng() % 5 < 3) {
      // 512 B .. 3 MiB: mostly small, a quarter of them large.
      const uint64_t bytes = 512 + rng() % (rng() % 4 == 0 ? 3 * kMiB - 511 : 64 * kKiB);
      auto r = a.Allocate(bytes);
      if (r.ok()) {
        REQUIRE(TotalSize(*r) >= bytes);
        held.push_back(std::move(r).value());
        ++allocs;
      } else {
        REQUIRE(r.status().code() == Code::kNoSpace);
        ++nospace;
      }
    } else {
      const size_t k = rng() % held.size();
      REQUIRE(a.Free(held[k]).ok());
      held[k] = std::move(held.back());
      held.pop_back();
    }
    if (i % 5000 == 0) REQUIRE(a.CheckConsistency().ok());
  }
  CHECK(allocs > 8000);
  CHECK(nospace > 0);  // the churn ran the device full, so free space was fragmented
  std::shuffle(held.begin(), held.end(), rng);
  for (const auto& e : held) REQUIRE(a.Free(e).ok());
  CHECK(a.used() == 0);
  CHECK(a.remaining() == kCapacity);
  REQUIRE(a.CheckConsistency().ok());

  ExtentList all = MustAllocate(&a, kCapacity);
  CHECK(all.size() == kCapacity / kMiB);
  for (const auto& e : all) CHECK(e.size == kMiB);
  CHECK(Disjoint(all));
  CHECK(a.remaining() == 0);
}

TEST_CASE("allocator: threads on empty sets steal, and no extent is handed out twice") {
  constexpr uint64_t kCapacity = 32 * kMiB, kAlign = 4096;
  constexpr int kSets = 4, kThreads = 8, kOps = 1500;
  BlockAllocator a(kCapacity, kAlign, nullptr, kSets);
  REQUIRE(a.num_sets() == kSets);
  // Fill the device, then free the regions whose home is set 0: all free space is in one set
  // and the bump pointer is at the end, so threads working on sets 1-3 can only steal.
  std::vector<ExtentList> pinned, blocks;
  for (uint64_t r = 0; r < kCapacity / kMiB; ++r) blocks.push_back(MustAllocate(&a, kMiB));
  for (const auto& e : blocks) {
    if ((e[0].offset / kMiB) % kSets == 0) {
      REQUIRE(a.Free(e).ok());
    } else {
      pinned.push_back(e);
    }
  }
  REQUIRE(a.bump() == kCapacity);
  REQUIRE(a.remaining() == kCapacity / kSets);

  // One owner word per 4 KiB unit: a block handed out twice at the same time is caught when
  // its second owner claims a unit the first still holds.
  auto owner = std::make_unique<std::atomic<int>[]>(kCapacity / kAlign);
  for (uint64_t i = 0; i < kCapacity / kAlign; ++i) owner[i].store(0);
  std::vector<std::vector<Extent>> held(kThreads);
  std::vector<int> errors(kThreads, 0), successes(kThreads, 0);
  std::barrier all_started(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 31 + 3);
      std::vector<ExtentList> mine;
      auto claim = [&](const ExtentList& l, int from, int to) {
        for (const auto& e : l) {
          for (uint64_t u = e.offset / kAlign; u < (e.offset + e.size) / kAlign; ++u) {
            int expected = from;
            if (!owner[u].compare_exchange_strong(expected, to)) ++errors[t];
          }
        }
      };
      // Every thread's first allocation happens before any thread goes on, while 8 MiB are
      // free: a thread on an empty set must steal to get it (whatever the scheduling).
      auto first = a.Allocate(kAlign);
      if (first.ok()) {
        claim(*first, 0, t + 1);
        mine.push_back(std::move(first).value());
        ++successes[t];
      } else {
        ++errors[t];
      }
      all_started.arrive_and_wait();
      for (int i = 0; i < kOps; ++i) {
        if (mine.empty() || rng() % 2 == 0) {
          const uint64_t bytes = 1 + rng() % (rng() % 8 == 0 ? 2 * kMiB : 128 * kKiB);
          auto r = a.Allocate(bytes);
          if (r.ok()) {
            claim(*r, 0, t + 1);
            mine.push_back(std::move(r).value());
            ++successes[t];
          } else if (r.status().code() != Code::kNoSpace) {
            ++errors[t];
          }
        } else {
          const size_t k = rng() % mine.size();
          claim(mine[k], t + 1, 0);
          if (!a.Free(mine[k]).ok()) ++errors[t];
          mine.erase(mine.begin() + static_cast<long>(k));
        }
      }
      for (auto& l : mine) held[t].insert(held[t].end(), l.begin(), l.end());
    });
  }
  for (auto& th : threads) th.join();
  std::vector<Extent> all;
  for (const auto& p : pinned) all.insert(all.end(), p.begin(), p.end());
  for (int t = 0; t < kThreads; ++t) {
    CAPTURE(t);
    CHECK(errors[t] == 0);
    // 8 threads take 8 consecutive worker numbers, so 6 of them start on an empty set.
    CHECK(successes[t] > 0);
    all.insert(all.end(), held[t].begin(), held[t].end());
  }
  CHECK(Disjoint(all));
  uint64_t total = 0;
  for (const auto& e : all) total += e.size;
  CHECK(a.used() == total);
  CHECK(a.LiveExtents().size() == all.size());
  CHECK(a.CheckConsistency().ok());

  // Everything freed from many threads still merges back into whole regions.
  ExtentList everything(all.begin(), all.end());
  REQUIRE(a.Free(everything).ok());
  CHECK(a.bump() == 0);
  ExtentList whole = MustAllocate(&a, kCapacity);
  CHECK(whole.size() == kCapacity / kMiB);
}
