// Messages of a bdev pool (module clio_bdev), shared by the pool (bdev_pool.cc) and its client
// (bdev_client.cc). Format documented in docs/ipc.md. Decoders are bounds-checked
// (common/codec.h): a malformed payload is InvalidArgument/Corruption, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/codec.h"
#include "common/status.h"
#include "storage/bdev.h"

namespace clio {

// Method ids 0-9 are reserved for the runtime's Create/Destroy/Monitor family; Monitor is 9.
enum class BdevMethod : uint32_t {
  kMonitor = 9,          // [string query: "" or "stats"] -> JSON text
  kAllocateBlocks = 10,  // u64 bytes -> extents
  kWrite = 11,           // extents, u64 offset, bytes data -> u64 bytes written
  kRead = 12,            // extents, u64 offset, u64 len -> bytes
  kFreeBlocks = 13,      // extents -> empty
  kGetStats = 14,        // -> stats
  kSync = 15,            // -> empty
  kSetLifespan = 16,     // f64 days -> empty
  kFlushAllocLog = 17,   // -> empty
  kUpdate = 18,          // -> GPU memory info (pinned, hbm); NotSupported for other types
};

// Largest Read or Write a single request may carry; BdevClient splits bigger ones.
inline constexpr uint64_t kMaxBdevIoBytes = 32ull << 20;

// Extents on the wire: u32 n, then n x (u64 offset, u64 size, u8 size_class), where
// size_class = log2(size) (the block's size class: 9 = 512 B ... 20 = 1 MiB).
void EncodeExtents(Encoder& e, const ExtentList& extents);
// Checks the count against the input, and that every size is a power of two matching its
// class and every range fits in 64 bits. Marks `d` failed on a short input.
Status DecodeExtents(Decoder& d, ExtentList* out);

std::string EncodeBdevStats(const BdevStats& s);
Result<BdevStats> DecodeBdevStats(std::string_view bytes);

std::string EncodeGpuMemoryInfo(const GpuMemoryInfo& g);
Result<GpuMemoryInfo> DecodeGpuMemoryInfo(std::string_view bytes);

}  // namespace clio
