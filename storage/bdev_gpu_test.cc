// pinned and hbm transports: host fallback round trips, the device path over a fake GPU
// runtime (the production interface, memory from the host), and a real-GPU test that reports
// itself skipped on a machine without one.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <set>

#include "storage/bdev.h"
#include "storage/bdev_base.h"
#include "storage/gpu.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Pattern;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// A GpuRuntime with one "device" whose memory is host memory the test can count copies into.
class FakeGpuRuntime final : public GpuRuntime {
 public:
  struct Counters {
    std::atomic<int> device_allocs{0}, device_frees{0}, pinned_allocs{0}, pinned_frees{0};
    std::atomic<int> to_device{0}, from_device{0};
  };
  FakeGpuRuntime(std::shared_ptr<Counters> c, bool fail_alloc) : c_(std::move(c)), fail_(fail_alloc) {}
  std::string_view name() const override { return "fake"; }
  int DeviceCount() override { return 1; }
  Result<void*> DeviceAlloc(uint64_t bytes) override {
    if (fail_) return NoSpace("fake: out of device memory");
    ++c_->device_allocs;
    return static_cast<void*>(new char[bytes]);
  }
  Status DeviceFree(void* p) override {
    ++c_->device_frees;
    delete[] static_cast<char*>(p);
    return Status::Ok();
  }
  Result<void*> HostAllocPinned(uint64_t bytes) override {
    if (fail_) return IoError("fake: cannot pin");
    ++c_->pinned_allocs;
    return static_cast<void*>(new char[bytes]);
  }
  Status HostFreePinned(void* p) override {
    ++c_->pinned_frees;
    delete[] static_cast<char*>(p);
    return Status::Ok();
  }
  Status CopyToDevice(void* dst, const void* src, uint64_t n) override {
    ++c_->to_device;
    std::memcpy(dst, src, n);
    return Status::Ok();
  }
  Status CopyFromDevice(void* dst, const void* src, uint64_t n) override {
    ++c_->from_device;
    std::memcpy(dst, src, n);
    return Status::Ok();
  }

 private:
  std::shared_ptr<Counters> c_;
  bool fail_;
};

BdevConfig GpuConfig(BdevType type, uint64_t capacity) {
  BdevConfig c;
  c.name = std::string(BdevTypeName(type)) + "::test" + std::to_string(::getpid());
  c.type = type;
  c.capacity = capacity;
  c.populate_unit = kMiB;
  return c;
}

// Write, read back across extents, bounds, stats: what every memory device must do.
void RoundTrip(Bdev* b) {
  auto e = b->Allocate(2 * kMiB + 700);
  REQUIRE_MESSAGE(e.ok(), e.status().ToString());
  const std::string data = Pattern(2 * kMiB, 3);
  REQUIRE(b->Write(*e, 300, data).ok());
  std::string back(data.size(), '\0');
  REQUIRE(b->Read(*e, 300, back.size(), back.data()).ok());
  CHECK(back == data);
  CHECK(b->Write(*e, TotalSize(*e), "x").code() == Code::kOutOfRange);
  BdevStats st = b->GetStats();
  CHECK(st.used == TotalSize(*e));
  CHECK(st.persistence == Persistence::kVolatile);
  CHECK(b->Sync().ok());
  REQUIRE(b->Free(*e).ok());
  CHECK(b->GetStats().used == 0);
}

}  // namespace

TEST_CASE("pinned and hbm without a GPU: host memory, round trips, Update says where") {
  for (BdevType type : {BdevType::kPinned, BdevType::kHbm}) {
    CAPTURE(BdevTypeName(type));
    // No GPU support at all, and (through Bdev::Open) whatever this build has.
    auto b = OpenGpuBdev(GpuConfig(type, 16 * kMiB), MakeNoGpuRuntime());
    REQUIRE_MESSAGE(b.ok(), b.status().ToString());
    RoundTrip(b->get());
    CHECK((*b)->GetStats().backend == "host");
    CHECK((*b)->GetStats().capacity == 16 * kMiB);
    auto g = (*b)->GpuMemory();
    REQUIRE(g.ok());
    CHECK_FALSE(g->device_memory);
    CHECK_FALSE(g->pinned);
    CHECK(g->device == -1);
    CHECK(g->size == 16 * kMiB);
    CHECK(g->runtime == "none");

    auto opened = Bdev::Open(GpuConfig(type, 16 * kMiB));
    REQUIRE_MESSAGE(opened.ok(), opened.status().ToString());
    RoundTrip(opened->get());
  }
}

TEST_CASE("pinned host fallback: alloc eager commits everything at creation, lazy as it goes") {
  BdevConfig eager = GpuConfig(BdevType::kPinned, 8 * kMiB);  // auto + a capacity = eager
  auto e = OpenGpuBdev(eager, MakeNoGpuRuntime());
  REQUIRE(e.ok());
  CHECK((*e)->GetStats().committed == 8 * kMiB);

  BdevConfig lazy = GpuConfig(BdevType::kPinned, 8 * kMiB);
  lazy.alloc = AllocPolicy::kLazy;
  auto l = OpenGpuBdev(lazy, MakeNoGpuRuntime());
  REQUIRE(l.ok());
  CHECK((*l)->GetStats().committed == 0);
  auto x = (*l)->Allocate(4096);
  REQUIRE(x.ok());
  CHECK((*l)->GetStats().committed == kMiB);  // one populate_unit
}

TEST_CASE("pinned and hbm: a capacity is required; volatile only") {
  for (BdevType type : {BdevType::kPinned, BdevType::kHbm}) {
    auto zero = OpenGpuBdev(GpuConfig(type, 0), MakeNoGpuRuntime());
    CHECK(zero.status().code() == Code::kConfigError);
    CHECK(zero.status().message().find("capacity") != std::string::npos);
    BdevConfig p = GpuConfig(type, kMiB);
    p.persistence = Persistence::kTemporary;
    CHECK(OpenGpuBdev(p, MakeNoGpuRuntime()).status().code() == Code::kConfigError);
  }
}

TEST_CASE("hbm on a GPU: one device buffer, every read and write copied through the runtime") {
  auto counters = std::make_shared<FakeGpuRuntime::Counters>();
  {
    auto b = OpenGpuBdev(GpuConfig(BdevType::kHbm, 8 * kMiB),
                         std::make_unique<FakeGpuRuntime>(counters, false));
    REQUIRE_MESSAGE(b.ok(), b.status().ToString());
    CHECK(counters->device_allocs == 1);
    RoundTrip(b->get());
    CHECK(counters->to_device >= 3);  // 3 extents written
    CHECK(counters->from_device >= 3);
    CHECK((*b)->GetStats().backend == "fake-device");
    CHECK((*b)->GetStats().committed == 8 * kMiB);
    auto g = (*b)->GpuMemory();
    REQUIRE(g.ok());
    CHECK(g->device_memory);
    CHECK(g->device == 0);
    CHECK(g->runtime == "fake");
  }
  CHECK(counters->device_frees == 1);
}

TEST_CASE("hbm on a GPU: a failed device allocation fails creation (no silent host memory)") {
  auto counters = std::make_shared<FakeGpuRuntime::Counters>();
  auto b = OpenGpuBdev(GpuConfig(BdevType::kHbm, 8 * kMiB),
                       std::make_unique<FakeGpuRuntime>(counters, true));
  CHECK(b.status().code() == Code::kNoSpace);
  CHECK(b.status().message().find("hbm bdev") != std::string::npos);
}

TEST_CASE("pinned on a GPU: page-locked memory; a failed pin falls back to host memory") {
  auto counters = std::make_shared<FakeGpuRuntime::Counters>();
  {
    auto b = OpenGpuBdev(GpuConfig(BdevType::kPinned, 8 * kMiB),
                         std::make_unique<FakeGpuRuntime>(counters, false));
    REQUIRE(b.ok());
    RoundTrip(b->get());
    CHECK(counters->pinned_allocs == 1);
    CHECK(counters->to_device == 0);  // host memory: plain copies
    CHECK((*b)->GpuMemory()->pinned);
    CHECK((*b)->GetStats().backend == "fake-pinned");
  }
  CHECK(counters->pinned_frees == 1);
  auto f = OpenGpuBdev(GpuConfig(BdevType::kPinned, 8 * kMiB),
                       std::make_unique<FakeGpuRuntime>(counters, true));
  REQUIRE(f.ok());
  CHECK((*f)->GetStats().backend == "host");
  RoundTrip(f->get());
}

TEST_CASE("real GPU: hbm and pinned through this build's runtime") {
  auto gpu = MakeGpuRuntime();
  if (gpu->DeviceCount() == 0) {
    MESSAGE("skipped: no GPU (" << gpu->name() << " runtime reports no device)");
    return;
  }
  for (BdevType type : {BdevType::kHbm, BdevType::kPinned}) {
    auto b = Bdev::Open(GpuConfig(type, 64 * kMiB));
    REQUIRE_MESSAGE(b.ok(), b.status().ToString());
    RoundTrip(b->get());
    auto g = (*b)->GpuMemory();
    REQUIRE(g.ok());
    CHECK(g->device_memory == (type == BdevType::kHbm));
    CHECK(g->pinned == (type == BdevType::kPinned));
  }
}
