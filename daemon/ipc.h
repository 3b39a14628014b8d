// Client <-> runtime messages over the Unix socket. Format documented in docs/ipc.md.
//
// Request:  RequestHeader (32 bytes, little-endian) + payload
// Response: ResponseHeader (24 bytes) + payload (on error: the error message)
// A frame with a bad magic, an unknown version or a payload over kMaxPayload closes the
// connection; the runtime never trusts a length it has not bounded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"

namespace clio {

inline constexpr uint32_t kIpcMagic = 0x4f494c43;  // "CLIO"
// 2: attributes carry rdev, Open carries flags, status codes gained NoData..RangeError.
// 3: attributes carry the stored byte count.
inline constexpr uint16_t kIpcVersion = 3;
inline constexpr uint32_t kMaxPayload = 64u << 20;

struct RequestHeader {
  uint32_t magic = kIpcMagic;
  uint16_t version = kIpcVersion;
  uint16_t flags = 0;
  uint32_t pool = 0;    // pool major id; 0 = the runtime's admin pool
  uint32_t method = 0;
  uint64_t request_id = 0;
  uint32_t payload_len = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(RequestHeader) == 32);

struct ResponseHeader {
  uint32_t magic = kIpcMagic;
  uint16_t version = kIpcVersion;
  uint16_t code = 0;    // clio::Code
  uint64_t request_id = 0;
  uint32_t payload_len = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(ResponseHeader) == 24);

// Checks a received header; Corruption naming the problem.
Status ValidateRequestHeader(const RequestHeader& h);
Status ValidateResponseHeader(const ResponseHeader& h);

// Methods of the admin pool (pool 0).
enum class AdminMethod : uint32_t {
  kPing = 1,      // -> u64 runtime pid
  kStatus = 2,    // -> string (human text)
  kStop = 3,      // graceful stop; replies before stopping
  kFindPool = 4,  // string name -> u32 pool major
  kListPools = 5, // -> EncodePoolList, in creation order; pool-log pools not running last
  kRuntimeStats = 6,  // -> EncodeRuntimeStats
  // string source, string yaml (a compose document) -> EncodePoolList of the pools created.
  // Not idempotent: a resend would find its own pools. (pool create, compose start)
  kCreatePools = 7,
  kDestroyPool = 8,   // string name -> empty (pool destroy)
  kComposeStop = 9,   // string source, string yaml -> EncodePoolList of the pools destroyed
};

// One pool as ListPools reports it.
struct PoolInfo {
  uint32_t id = 0;  // major id
  std::string name, module, describe;
};
// u32 n, then per pool: u32 major, string name, module, describe.
std::string EncodePoolList(const std::vector<PoolInfo>& pools);
Result<std::vector<PoolInfo>> DecodePoolList(std::string_view bytes);

// What `clioctl stat` shows of the runtime itself.
struct RuntimeStats {
  uint64_t pid = 0;
  uint64_t uptime_s = 0;
  uint32_t worker_threads = 0;      // runtime.num_threads
  uint64_t client_connections = 0;  // open now, the asking one included
  uint32_t pools = 0;
};
// u64 pid, uptime_s, u32 worker_threads, u64 client_connections, u32 pools.
std::string EncodeRuntimeStats(const RuntimeStats& s);
Result<RuntimeStats> DecodeRuntimeStats(std::string_view bytes);

// A blocking client of the runtime: a small pool of connections, safe to call from many
// threads at once (the FUSE daemon's workers). Thread safety: all methods.
class RuntimeClient {
 public:
  struct Options {
    std::string socket_path;
    // How long Call() keeps trying to connect when the runtime is away (restarting).
    uint32_t connect_wait_ms = 0;
  };
  static Result<std::unique_ptr<RuntimeClient>> Connect(const Options& options);
  ~RuntimeClient();

  // Sends one request and waits for its response. Unavailable when the runtime cannot be
  // reached or the connection broke; the error the runtime returned otherwise. When
  // `idempotent`, a request whose connection broke is resent once on a new connection.
  Result<std::string> Call(uint32_t pool, uint32_t method, std::string_view payload,
                           bool idempotent = true);

  const std::string& socket_path() const { return options_.socket_path; }

 private:
  explicit RuntimeClient(Options o) : options_(std::move(o)) {}
  Result<int> TakeConnection();
  void ReturnConnection(int fd);
  Result<std::string> CallOn(int fd, uint32_t pool, uint32_t method, std::string_view payload);

  const Options options_;
  Mutex mu_;
  std::vector<int> idle_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
};

}  // namespace clio
