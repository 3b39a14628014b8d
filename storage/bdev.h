// A bdev is one storage tier's block device: a flat byte space with a block allocator in front
// (see shared seeds/bdev-module.txt). It hands out extents, moves bytes in and out of them,
// frees them and reports how much room is left. It keeps no per-object metadata: which extents
// belong to which blob is the CTE's business (placement/).
//
// Transports: ram (shared-memory segment), file (io_uring / libaio / POSIX AIO through
// storage/io.h, with O_DIRECT for large aligned writes), pinned and hbm (GPU memory through
// storage/gpu.h; host memory without a GPU), s3 and gcs (one object per block in a bucket,
// storage/objstore; allocator state in a local log), noop (touches nothing). The config keys are
// parsed in one place: storage/bdev_config.h.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "storage/io.h"

namespace clio {

// One block handed out by the allocator. `size` is the block's full size class (a power of two
// from 512 B to 1 MiB, never below the device alignment); Free() must be given the same extent.
struct Extent {
  uint64_t offset = 0;  // from the start of the device's data area
  uint64_t size = 0;
  bool operator==(const Extent&) const = default;
};
using ExtentList = std::vector<Extent>;

inline uint64_t TotalSize(const ExtentList& extents) {
  uint64_t n = 0;
  for (const auto& e : extents) n += e.size;
  return n;
}

// The medium of a device: on the wire and in the metadata. What each one is: storage/media.h.
enum class BdevType : uint8_t { kFile, kRam, kHbm, kPinned, kNoop, kS3, kGcs };
enum class Persistence : uint8_t { kVolatile, kTemporary, kLongTerm };

std::string_view BdevTypeName(BdevType t);
Result<BdevType> ParseBdevType(std::string_view s);
std::string_view PersistenceName(Persistence p);
Result<Persistence> ParsePersistence(std::string_view s);

// Configured performance figures; placement ranks tiers by them. Not measured.
struct PerfMetrics {
  double read_bandwidth_mbps = 0;
  double write_bandwidth_mbps = 0;
  double read_latency_us = 0;
  double write_latency_us = 0;
  double iops = 0;
};
// Defaults by type, ordered hbm > ram > pinned > everything else.
PerfMetrics DefaultPerfMetrics(BdevType t);

// Page commit policy for ram and pinned devices (seed key `alloc`).
enum class AllocPolicy : uint8_t {
  kAuto,   // commit everything at creation when a capacity was given, else lazily
  kEager,  // commit the whole capacity at creation
  kLazy,   // commit populate_unit at a time as allocations advance
};
std::string_view AllocPolicyName(AllocPolicy p);
// "auto", "eager" or "lazy" (any case); InvalidArgument otherwise.
Result<AllocPolicy> ParseAllocPolicy(std::string_view s);
// kAuto resolved: eager when a capacity was given explicitly (non-zero), else lazy.
AllocPolicy ResolveAllocPolicy(AllocPolicy p, uint64_t configured_capacity);

struct BdevConfig {
  // File path for kFile; "bucket[/prefix]" or "s3://" / "gcs://bucket/prefix" for kS3 / kGcs;
  // any unique name ("ram::tier1") for memory types.
  std::string name;
  BdevType type = BdevType::kFile;
  // 0: ram = 80% of DRAM (capped by /dev/shm free space); file = as far as the host allows;
  // s3, gcs = 1 TiB of address space.
  uint64_t capacity = 0;
  uint64_t alignment = 4096;             // memory types lower 4096/0 to 512
  uint64_t growth_unit = 1ull << 30;     // file: how far the file grows (and reserves) at a time
  uint64_t populate_unit = 64ull << 20;  // ram: bytes committed per step as allocations advance
  std::string alloc_log;  // file: default "<name>.alloc_log"; s3, gcs: required (local path)
  std::optional<Persistence> persistence;  // default: volatile for memory types, temporary for file
  std::optional<PerfMetrics> perf;
  AllocPolicy alloc = AllocPolicy::kAuto;  // ram, pinned
  uint32_t io_depth = 32;                  // file: async I/O queue depth per worker
  IoOptions io;  // file: io.io_depth is replaced by io_depth; direct_writes is set for the data
  // Persistent tier id. 0: keep the id found in the device header, or make a new one.
  // Non-zero and different from the header: Open() fails with Corruption naming both ids.
  uint64_t tier_id = 0;
  // Name of the ram segment under /dev/shm; default "clio.<pid>.<sanitized name>".
  std::string shm_name;
  // s3, gcs: one HTTP request's timeout, and the total time one call may spend retrying.
  uint32_t request_timeout_ms = 30000;
  uint32_t retry_budget_ms = 60000;
};

struct BdevStats {
  BdevType type = BdevType::kFile;
  Persistence persistence = Persistence::kTemporary;
  uint64_t capacity = 0;   // configured capacity (the effective one when configured as 0)
  uint64_t remaining = 0;  // allocatable bytes; file: capped by the host filesystem's free space
  uint64_t used = 0;       // bytes in allocated blocks
  // Bytes of the device actually backed: the file's grown size, the committed part of a ram
  // segment or of lazily committed host memory, the whole buffer of GPU memory; 0 for noop.
  uint64_t committed = 0;
  double lifetime_days = 999999;  // 999999 = healthy
  PerfMetrics perf;
  // Redundant devices (safe-bdev): "ok", or what is degraded, failed or rebuilding and by
  // which member. Empty for a plain device.
  std::string health;
  std::string backend;     // "io_uring", "libaio", "posix_aio", "posix", "shm", "hip-device",
                           // "hip-pinned", "host", "noop"; with "+fault" in fault mode
};

// Where a pinned or hbm device's bytes live, published by the Update task so a GPU client can
// copy to and from them directly.
struct GpuMemoryInfo {
  uint64_t address = 0;        // base of the data area (a device pointer when device_memory)
  uint64_t size = 0;           // bytes
  int32_t device = -1;         // GPU ordinal; -1 when the bytes are host memory
  bool device_memory = false;  // hbm on a GPU
  bool pinned = false;         // host memory page-locked through the GPU runtime
  std::string runtime;         // "hip", or "none" for the host-memory fallback
};

class Bdev {
 public:
  virtual ~Bdev() = default;

  // Creates or opens the device. For a file device with an alloc log, the log is replayed:
  // extents it records as live are not handed out again until Reconcile() or Free().
  static Result<std::unique_ptr<Bdev>> Open(const BdevConfig& config);

  // Allocates at least `bytes` (rounded up to the alignment). May return several extents.
  // NoSpace when the device (or the host filesystem under it) is full; nothing is leaked then.
  // The allocation is logged before it returns (file devices).
  virtual Result<ExtentList> Allocate(uint64_t bytes) = 0;
  // Returns blocks to the allocator (logged first). Freeing an extent that is not allocated is
  // an Internal error and changes nothing.
  virtual Status Free(const ExtentList& extents) = 0;

  // Writes `data` at byte `offset` of the concatenation of `extents`. OutOfRange if it does not
  // fit. IoError on a device fault (and while "<file>.fail" exists, for file devices).
  virtual Status Write(const ExtentList& extents, uint64_t offset, std::string_view data) = 0;
  // Reads `len` bytes at byte `offset` of the concatenation of `extents` into `out`.
  virtual Status Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out) = 0;

  // Makes written data and the allocator log durable (fdatasync). No-op on memory devices.
  virtual Status Sync() = 0;

  // Start-up reconciliation with the blob index: every extent the alloc log holds live that is
  // not in `referenced` is freed; every extent in `referenced` is marked allocated (never handed
  // out again). Call once, after Open() and before the first Allocate().
  virtual Status Reconcile(const ExtentList& referenced) = 0;

  // Flushes and compacts the allocator log to one record per live extent.
  virtual Status FlushAllocLog() = 0;

  virtual BdevStats GetStats() = 0;
  virtual void SetLifespan(double days) = 0;

  virtual uint64_t tier_id() const = 0;
  virtual const BdevConfig& config() const = 0;
  // ram only: the shared-memory segment's name, for clients that map it. Empty otherwise.
  virtual std::string shm_name() const { return {}; }
  // State only the device can see (what a member array did, how far a rebuild is), sampled at
  // each metrics scrape. Every device is already measured from outside (operations, bytes,
  // latency, capacity: storage/bdev_metrics.h); override this only for the rest, and publish
  // under a generic name (clio_bdev_medium_events_total, clio_bdev_medium_state) with the
  // specifics in a label. The tier and type labels are added for you.
  virtual std::vector<metrics::Sample> SampleMetrics() { return {}; }
  // pinned and hbm only: where the bytes live. NotSupported for the other types.
  virtual Result<GpuMemoryInfo> GpuMemory() const {
    return Status(Code::kNotSupported, "bdev '" + config().name + "' (" +
                                           std::string(BdevTypeName(config().type)) +
                                           ") holds no GPU memory");
  }
};

}  // namespace clio
