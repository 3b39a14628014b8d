// pinned and hbm transports: memory reached through the GpuRuntime seam (storage/gpu.h).
//
//  - pinned: page-locked host memory from the GPU runtime, so device transfers can run
//    asynchronously. Reads and writes are memcpy. Not shared-memory backed.
//  - hbm: one device buffer covering the whole capacity; every read and write is a copy
//    through the runtime (enqueued on a stream and waited for).
//  - Without GPU support, or with no device, both are ordinary host memory (anonymous,
//    committed per the `alloc` policy like a ram tier) and hbm logs a warning saying so. With a
//    device, a failed hbm allocation fails the pool's creation: it never silently becomes host
//    memory. A failed pinned allocation falls back to unpinned host memory with a warning.
// Both are volatile.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "storage/bdev_base.h"
#include "storage/gpu.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

enum class Memory : uint8_t {
  kDevice,  // hbm on a GPU: DeviceAlloc, copies through the runtime
  kPinned,  // HostAllocPinned: memcpy
  kHost,    // mmap'd anonymous host memory (no GPU): memcpy, committed per the alloc policy
};

class GpuBdev final : public BdevBase {
 public:
  GpuBdev(BdevConfig config, uint64_t tier_id, uint64_t capacity,
          std::unique_ptr<GpuRuntime> gpu, char* base, Memory memory)
      : BdevBase(std::move(config), tier_id, capacity,
                 /*growable=*/memory == Memory::kHost, nullptr),
        gpu_(std::move(gpu)),
        base_(base),
        size_(capacity),
        memory_(memory) {}

  ~GpuBdev() override {
    Status s;
    switch (memory_) {
      case Memory::kDevice: s = gpu_->DeviceFree(base_); break;
      case Memory::kPinned: s = gpu_->HostFreePinned(base_); break;
      case Memory::kHost: ::munmap(base_, size_); break;
    }
    if (!s.ok()) CLIO_LOG_WARN("{}: releasing its memory: {}", Describe(), s.ToString());
  }

  Status Sync() override { return Status::Ok(); }

  Result<GpuMemoryInfo> GpuMemory() const override {
    GpuMemoryInfo info;
    info.address = reinterpret_cast<uint64_t>(base_);
    info.size = size_;
    info.device = memory_ == Memory::kDevice ? 0 : -1;
    info.device_memory = memory_ == Memory::kDevice;
    info.pinned = memory_ == Memory::kPinned;
    info.runtime = memory_ == Memory::kHost ? "none" : std::string(gpu_->name());
    return info;
  }

  // Commits the whole capacity at creation (host memory, alloc: eager).
  Status CommitAll() { return GrowTo(size_); }

 protected:
  Status WriteAt(uint64_t offset, std::string_view data) override {
    if (memory_ == Memory::kDevice) {
      return gpu_->CopyToDevice(base_ + offset, data.data(), data.size()).WithContext(Describe());
    }
    std::memcpy(base_ + offset, data.data(), data.size());
    return Status::Ok();
  }
  Status ReadAt(uint64_t offset, uint64_t len, char* out) override {
    if (memory_ == Memory::kDevice) {
      return gpu_->CopyFromDevice(out, base_ + offset, len).WithContext(Describe());
    }
    std::memcpy(out, base_ + offset, len);
    return Status::Ok();
  }

  // Host memory only: pre-faults one populate_unit at a time, so committed memory tracks the
  // allocation high-water mark and exhaustion shows at Allocate rather than on first touch.
  Result<uint64_t> Grow(uint64_t backed, uint64_t target) override {
    const uint64_t unit = std::max<uint64_t>(config_.populate_unit, alloc_->min_class());
    const uint64_t want = std::min(RoundUpTo(target, unit), size_);
#ifdef MADV_POPULATE_WRITE
    if (want > backed && ::madvise(base_ + backed, want - backed, MADV_POPULATE_WRITE) != 0) {
      const int err = errno;
      if (err == ENOMEM) return NoSpace(Describe() + ": host memory exhausted");
      // EINVAL: an older kernel; the pages are committed on first touch instead.
      if (err != EINVAL) return Status::FromErrno(err, Describe() + ": pre-fault host memory");
    }
#endif
    return want;
  }

  std::string BackendName() const override {
    switch (memory_) {
      case Memory::kDevice: return std::string(gpu_->name()) + "-device";
      case Memory::kPinned: return std::string(gpu_->name()) + "-pinned";
      case Memory::kHost: return "host";
    }
    return "host";
  }

 private:
  const std::unique_ptr<GpuRuntime> gpu_;
  char* const base_;
  const uint64_t size_;
  const Memory memory_;
};

Result<char*> MapHostMemory(const std::string& what, uint64_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, what + ": mmap " + std::to_string(bytes) + " bytes");
  return static_cast<char*>(p);
}

}  // namespace

Result<std::unique_ptr<Bdev>> OpenGpuBdev(const BdevConfig& config,
                                          std::unique_ptr<GpuRuntime> gpu) {
  BdevConfig c = config;
  const bool hbm = c.type == BdevType::kHbm;
  const std::string what = std::string(BdevTypeName(c.type)) + " bdev '" + c.name + "'";
  if (c.type != BdevType::kHbm && c.type != BdevType::kPinned) {
    return InvalidArgument(what + ": not a GPU memory type");
  }
  if (c.alignment == 0 || c.alignment == 4096) c.alignment = 512;
  CLIO_RETURN_IF_ERROR(BlockAllocator::ValidateAlignment(c.alignment).WithContext(what));
  if (c.persistence.value_or(Persistence::kVolatile) != Persistence::kVolatile) {
    return ConfigError(what + " can only be volatile");
  }
  c.persistence = Persistence::kVolatile;
  const uint64_t min_class = std::max(BlockAllocator::kMinClass, c.alignment);
  const uint64_t capacity = c.capacity - c.capacity % min_class;
  if (capacity < min_class) {
    return ConfigError(what + ": capacity must be given (at least one " +
                       std::to_string(min_class) + "-byte block; got " +
                       std::to_string(c.capacity) + ")");
  }

  const int devices = gpu->DeviceCount();
  char* base = nullptr;
  Memory memory = Memory::kHost;
  if (devices > 0 && hbm) {
    // With a GPU, hbm is device memory or nothing.
    Result<void*> p = gpu->DeviceAlloc(capacity);
    if (!p.ok()) return p.status().WithContext(what + ": device memory for the whole capacity");
    base = static_cast<char*>(*p);
    memory = Memory::kDevice;
  } else if (devices > 0) {
    Result<void*> p = gpu->HostAllocPinned(capacity);
    if (p.ok()) {
      base = static_cast<char*>(*p);
      memory = Memory::kPinned;
    } else {
      CLIO_LOG_WARN("{}: page-locked allocation failed ({}); using unpinned host memory", what,
                    p.status().ToString());
    }
  } else if (hbm) {
    CLIO_LOG_WARN("{}: no GPU ({} runtime, {} devices); hbm is ordinary host memory", what,
                  gpu->name(), devices);
  }
  if (base == nullptr) {
    CLIO_ASSIGN_OR_RETURN(base, MapHostMemory(what, capacity));
  }

  const uint64_t id = c.tier_id != 0 ? c.tier_id : RandomTierId();
  const AllocPolicy policy = ResolveAllocPolicy(c.alloc, config.capacity);
  auto bdev = std::make_unique<GpuBdev>(std::move(c), id, capacity, std::move(gpu), base, memory);
  if (memory == Memory::kHost && policy == AllocPolicy::kEager) {
    CLIO_RETURN_IF_ERROR(bdev->CommitAll().WithContext(what + ": alloc: eager"));
  }
  return std::unique_ptr<Bdev>(std::move(bdev));
}

}  // namespace clio
