// GpuRuntime: the one seam between CLIO and a GPU API. The pinned and hbm transports
// (bdev_gpu.cc) call nothing else.
//
// Implementations: gpu_hip.cc (ROCm HIP, built with the CMake option CLIO_WITH_HIP) and the
// "none" runtime (no GPU support: no device, every allocation NotSupported). A CUDA backend
// would be one more file beside gpu_hip.cc behind this interface, plus one case in
// MakeGpuRuntime() (gpu.cc).
//
// Thread safety: all methods may be called concurrently. Memory is allocated on device 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "common/status.h"

namespace clio {

class GpuRuntime {
 public:
  virtual ~GpuRuntime() = default;

  // "hip", "none".
  virtual std::string_view name() const = 0;
  // Usable devices; 0 without GPU support or when the runtime reports no device
  // (hipErrorNoDevice). Never an error: no device is an ordinary answer.
  virtual int DeviceCount() = 0;

  // `bytes` of device memory (hbm). NoSpace when the device is full, IoError otherwise.
  virtual Result<void*> DeviceAlloc(uint64_t bytes) = 0;
  virtual Status DeviceFree(void* device_ptr) = 0;
  // `bytes` of page-locked host memory (pinned), so device transfers can run asynchronously.
  virtual Result<void*> HostAllocPinned(uint64_t bytes) = 0;
  virtual Status HostFreePinned(void* host_ptr) = 0;

  // Copies between host memory and device memory from DeviceAlloc(). The copy is enqueued on a
  // stream and waited for before the call returns. IoError on failure.
  virtual Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) = 0;
  virtual Status CopyFromDevice(void* host_dst, const void* device_src, uint64_t bytes) = 0;
};

// The runtime this build was made with: HIP when CLIO_WITH_HIP, else the "none" runtime.
std::unique_ptr<GpuRuntime> MakeGpuRuntime();
// No GPU support: DeviceCount() is 0 and every allocation is NotSupported.
std::unique_ptr<GpuRuntime> MakeNoGpuRuntime();
#if defined(CLIO_WITH_HIP)
std::unique_ptr<GpuRuntime> MakeHipGpuRuntime();  // gpu_hip.cc
#endif

}  // namespace clio
