// The "none" GPU runtime and the build-time choice of runtime.
#include "storage/gpu.h"

namespace clio {
namespace {

class NoGpuRuntime final : public GpuRuntime {
 public:
  std::string_view name() const override { return "none"; }
  int DeviceCount() override { return 0; }
  Result<void*> DeviceAlloc(uint64_t) override { return Unsupported(); }
  Status DeviceFree(void*) override { return Unsupported(); }
  Result<void*> HostAllocPinned(uint64_t) override { return Unsupported(); }
  Status HostFreePinned(void*) override { return Unsupported(); }
  Status CopyToDevice(void*, const void*, uint64_t) override { return Unsupported(); }
  Status CopyFromDevice(void*, const void*, uint64_t) override { return Unsupported(); }

 private:
  static Status Unsupported() {
    return Status(Code::kNotSupported, "this build has no GPU support (CLIO_WITH_HIP=OFF)");
  }
};

}  // namespace

std::unique_ptr<GpuRuntime> MakeNoGpuRuntime() { return std::make_unique<NoGpuRuntime>(); }

std::unique_ptr<GpuRuntime> MakeGpuRuntime() {
#if defined(CLIO_WITH_HIP)
  return MakeHipGpuRuntime();
#else
  return MakeNoGpuRuntime();
#endif
}

}  // namespace clio
