// HIP implementation of GpuRuntime (ROCm). Host-side runtime calls only, so a plain C++
// compiler builds it with -D__HIP_PLATFORM_AMD__ and -lamdhip64 (Debian's libamdhip64-dev).
//
// Copies run on streams taken from a small pool: hipMemcpyAsync, then hipStreamSynchronize
// before returning, so concurrent copies from several workers overlap on separate streams.
#include <hip/hip_runtime_api.h>

#include <mutex>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "storage/gpu.h"

namespace clio {
namespace {

Status HipError(hipError_t e, std::string_view what) {
  const Code code = e == hipErrorOutOfMemory ? Code::kNoSpace : Code::kIoError;
  return Status(code, "hip: " + std::string(what) + ": " + hipGetErrorString(e));
}

class HipRuntime final : public GpuRuntime {
 public:
  ~HipRuntime() override {
    MutexLock l(&mu_);
    for (hipStream_t s : idle_streams_) (void)hipStreamDestroy(s);
  }

  std::string_view name() const override { return "hip"; }

  int DeviceCount() override {
    std::call_once(count_once_, [this] {
      int n = 0;
      hipError_t e = hipGetDeviceCount(&n);
      if (e != hipSuccess) {
        // hipErrorNoDevice on a host without a GPU: an ordinary answer, not an error.
        if (e != hipErrorNoDevice) CLIO_LOG_WARN("hip: hipGetDeviceCount: {}", hipGetErrorString(e));
        n = 0;
      }
      device_count_ = n;
    });
    return device_count_;
  }

  Result<void*> DeviceAlloc(uint64_t bytes) override {
    void* p = nullptr;
    hipError_t e = hipMalloc(&p, bytes);
    if (e != hipSuccess) return HipError(e, "hipMalloc " + std::to_string(bytes) + " bytes");
    return p;
  }
  Status DeviceFree(void* p) override {
    hipError_t e = hipFree(p);
    return e == hipSuccess ? Status::Ok() : HipError(e, "hipFree");
  }
  Result<void*> HostAllocPinned(uint64_t bytes) override {
    void* p = nullptr;
    hipError_t e = hipHostMalloc(&p, bytes, hipHostMallocDefault);
    if (e != hipSuccess) return HipError(e, "hipHostMalloc " + std::to_string(bytes) + " bytes");
    return p;
  }
  Status HostFreePinned(void* p) override {
    hipError_t e = hipHostFree(p);
    return e == hipSuccess ? Status::Ok() : HipError(e, "hipHostFree");
  }
  Status CopyToDevice(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, hipMemcpyHostToDevice);
  }
  Status CopyFromDevice(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes, hipMemcpyDeviceToHost);
  }

 private:
  Status Copy(void* dst, const void* src, uint64_t bytes, hipMemcpyKind kind) {
    CLIO_ASSIGN_OR_RETURN(hipStream_t stream, TakeStream());
    hipError_t e = hipMemcpyAsync(dst, src, bytes, kind, stream);
    if (e == hipSuccess) e = hipStreamSynchronize(stream);
    ReturnStream(stream);
    return e == hipSuccess ? Status::Ok() : HipError(e, "copy of " + std::to_string(bytes) + " bytes");
  }
  Result<hipStream_t> TakeStream() {
    {
      MutexLock l(&mu_);
      if (!idle_streams_.empty()) {
        hipStream_t s = idle_streams_.back();
        idle_streams_.pop_back();
        return s;
      }
    }
    hipStream_t s = nullptr;
    hipError_t e = hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
    if (e != hipSuccess) return HipError(e, "hipStreamCreate");
    return s;
  }
  void ReturnStream(hipStream_t s) {
    MutexLock l(&mu_);
    idle_streams_.push_back(s);
  }

  std::once_flag count_once_;
  int device_count_ = 0;  // written once under count_once_
  Mutex mu_;
  std::vector<hipStream_t> idle_streams_ GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<GpuRuntime> MakeHipGpuRuntime() { return std::make_unique<HipRuntime>(); }

}  // namespace clio
