// BdevClient: the bdev task interface as seen by a caller (the CTE, safe-bdev, tests,
// benchmarks). Two ways to reach a pool:
//   - remote: requests go over a RuntimeClient to the pool's id (docs/ipc.md);
//   - in-process: given the BdevPool itself, allocate, free, read and write run inline as
//     direct calls on its Bdev (no task, no copy into a message); the other calls go through
//     the pool's request handler without a socket.
// Errors are the device's (NoSpace, OutOfRange, IoError, ...) or, remotely, Unavailable when
// the runtime cannot be reached.
//
// Thread safety: all methods, when the RuntimeClient (remote) or the pool (in-process) is.
// Neither is owned; both must outlive the client.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/ipc.h"
#include "storage/bdev.h"
#include "storage/bdev_protocol.h"

namespace clio {

class BdevPool;

class BdevClient {
 public:
  BdevClient(RuntimeClient* rpc, uint32_t pool_id) : rpc_(rpc), pool_id_(pool_id) {}
  explicit BdevClient(BdevPool* pool) : pool_(pool) {}
  // Resolves `pool_name` (the device location) with the runtime's FindPool.
  static Result<BdevClient> Connect(RuntimeClient* rpc, std::string_view pool_name);

  // True when allocate, free, read and write run as direct calls.
  bool inline_io() const { return pool_ != nullptr; }

  // AllocateBlocks: at least `bytes`, possibly as several extents. NoSpace when full.
  Result<ExtentList> Allocate(uint64_t bytes);
  // FreeBlocks.
  Status Free(const ExtentList& extents);
  // Writes `data` at byte `offset` of the extents' concatenation; returns the bytes written.
  // Requests larger than kMaxBdevIoBytes are split.
  Result<uint64_t> Write(const ExtentList& extents, uint64_t offset, std::string_view data);
  // Reads `len` bytes at byte `offset` of the extents' concatenation into `out`.
  Status Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out);

  Result<BdevStats> GetStats();
  Status Sync();
  Status SetLifespan(double days);
  Status FlushAllocLog();
  // pinned and hbm: where the device's bytes live. NotSupported for the other types.
  Result<GpuMemoryInfo> Update();
  // A JSON object of the device's figures (the dashboard's query).
  Result<std::string> Monitor();

 private:
  // One request, to the pool in process or over the runtime client.
  template <class Req>
  Result<typename Req::Reply> Call(const Req& req);

  RuntimeClient* rpc_ = nullptr;
  uint32_t pool_id_ = 0;
  BdevPool* pool_ = nullptr;
};

}  // namespace clio
