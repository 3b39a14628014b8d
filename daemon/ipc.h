// Client <-> runtime messages over the Unix socket. Format documented in docs/ipc.md.
//
// Request:  RequestHeader (32 bytes, little-endian) + payload
// Response: ResponseHeader (24 bytes) + payload (on error: the error message)
// A frame with a bad magic, an unknown version or a payload over kMaxPayload closes the
// connection; the runtime never trusts a length it has not bounded.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/caller.h"
#include "daemon/defaults.h"
#include "daemon/pool_query.h"

namespace clio {

inline constexpr uint32_t kIpcMagic = 0x4f494c43;  // "CLIO"
// 2: attributes carry rdev, Open carries flags, status codes gained NoData..RangeError.
// 3: attributes carry the stored byte count.
// 4: shared-memory channels and TCP (OpenChannel, Hello), response flags, more runtime stats.
inline constexpr uint16_t kIpcVersion = 4;
inline constexpr uint32_t kMaxPayload = 64u << 20;

struct RequestHeader {
  uint32_t magic = kIpcMagic;
  uint16_t version = kIpcVersion;
  uint16_t flags = 0;   // kRequestResent
  uint32_t pool = 0;    // pool major id; 0 = the runtime's admin pool
  uint32_t method = 0;
  uint64_t request_id = 0;  // unique per client
  uint32_t payload_len = 0;
  uint32_t client = 0;  // the client's id (RequestContext); 0: none
};
static_assert(sizeof(RequestHeader) == 32);
// The request was sent before on a connection that broke: a pool that records requests with
// their effects (the filesystem's mutating methods) answers it from the record if it ran.
inline constexpr uint16_t kRequestResent = 1;
// The payload starts with a pool query (daemon/pool_query.h: 17 bytes); without the flag the
// query is local.
inline constexpr uint16_t kRequestHasQuery = 2;

struct ResponseHeader {
  uint32_t magic = kIpcMagic;
  uint16_t version = kIpcVersion;
  uint16_t code = 0;    // clio::Code
  uint64_t request_id = 0;
  uint32_t payload_len = 0;
  uint32_t flags = 0;   // kResponsePayloadOnSocket
};
static_assert(sizeof(ResponseHeader) == 24);
// A response to a request sent over a shared-memory channel whose payload does not fit the
// channel: the header is in the segment, the payload follows on the channel's socket.
inline constexpr uint32_t kResponsePayloadOnSocket = 1;

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
  // Transport methods, answered by the server itself:
  // u32 data bytes wanted -> u32 data bytes granted, then (Unix socket only) one byte carrying
  // two descriptors (SCM_RIGHTS): the channel's memfd segment and its eventfd.
  kOpenChannel = 10,
  // string token -> empty. The first request on a TCP connection; anything else first, or a
  // wrong token, closes it (PermissionDenied).
  kHello = 11,
};

// Who may call an admin method: reports (ping, status, pools, stats) are readers'; stop and
// pool changes the admin's; the transport methods (Hello, OpenChannel) come before any class
// is known and count as readers'.
CallerClass AdminCallerOf(uint32_t method);

// The payloads of the transport methods: Hello's token, OpenChannel's wanted data bytes.
// Corruption for anything else.
Result<std::string> DecodeHello(std::string_view payload);
Result<uint32_t> DecodeOpenChannel(std::string_view payload);

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
  uint64_t shm_channels = 0;      // connections with a shared-memory channel, open now
  uint64_t tcp_connections = 0;   // TCP connections open now
  uint64_t malformed_frames = 0;  // connections closed for a frame that failed its checks
  uint64_t reaped_clients = 0;    // connections closed because their client process died
  uint32_t extra_workers = 0;     // threads the monitor added to stuck I/O workers, now
  uint64_t workers_added = 0;     // ever
  uint32_t slow_threads = 0;      // threads of the slow class now
  uint64_t slow_tasks = 0;        // tasks run on the slow class
  uint64_t async_tasks = 0;       // tasks handled asynchronously (Pool::IsAsync)
};
// u64 pid, uptime_s, u32 worker_threads, u64 client_connections, u32 pools, u64 shm_channels,
// tcp_connections, malformed_frames, reaped_clients, u32 extra_workers, u64 workers_added, u32
// slow_threads, u64 slow_tasks, u64 async_tasks.
std::string EncodeRuntimeStats(const RuntimeStats& s);
Result<RuntimeStats> DecodeRuntimeStats(std::string_view bytes);

// How a client reaches the runtime (CLIO_IPC_MODE, docs/ipc.md). kAuto: shared memory when the
// runtime's Unix socket answers (same machine), a plain Unix socket if the runtime cannot make a
// shared-memory channel, TCP when no Unix socket answers and runtime.tcp_port is set.
enum class IpcMode : uint8_t { kAuto, kShm, kUnix, kTcp };
std::string_view IpcModeName(IpcMode m);
// "auto", "shm", "unix", "tcp" (case-insensitive); InvalidArgument naming the accepted words.
Result<IpcMode> ParseIpcMode(std::string_view s);

struct RuntimeConfig;

// A blocking client of the runtime: a small pool of connections, safe to call from many
// threads at once (the FUSE daemon's workers). Each connection carries one request at a time,
// over its shared-memory channel when it has one, else over its socket. Thread safety: all
// methods.
class RuntimeClient {
 public:
  struct Options {
    std::string socket_path;
    // How long Call() keeps trying to connect when the runtime is away (restarting).
    uint32_t connect_wait_ms = 0;
    // The transport; unset: CLIO_IPC_MODE from the environment, else kAuto.
    std::optional<IpcMode> mode;
    // TCP (runtime.tcp_address, runtime.tcp_port; port 0: the runtime serves no TCP) and the
    // file holding the runtime's token (runtime.token_file), which a TCP client presents first.
    std::string tcp_host;
    uint32_t tcp_port = 0;
    std::string token_file;
    // Data bytes of each shared-memory channel asked for (the runtime may grant less).
    uint32_t shm_bytes = kDefaultShmChannelBytes;
  };
  // The options for the runtime of `config`: its socket, TCP endpoint and token file.
  static Options OptionsFor(const RuntimeConfig& config);
  static Result<std::unique_ptr<RuntimeClient>> Connect(const Options& options);
  ~RuntimeClient();

  // What may happen to a request whose connection broke before its answer came.
  enum class Resend : uint8_t {
    kNever,   // not safe to run twice: the call fails (Unavailable)
    kFreely,  // idempotent: sent again once, on a new connection
    kMarked,  // sent again once with the same id and kRequestResent: the pool answers a
              // request it already ran from the record it kept with the request's effect
  };
  // Sends one request and waits for its response. Unavailable when the runtime cannot be
  // reached or the connection broke (and `resend` did not save it); the error the runtime
  // returned otherwise.
  Result<std::string> Call(uint32_t pool, uint32_t method, std::string_view payload,
                           Resend resend = Resend::kFreely, const PoolQuery& query = {});
  // The id of the pool named `name` (AdminMethod::kFindPool): NotFound when the runtime has
  // none, Internal on a reply that is not one u32.
  Result<uint32_t> FindPool(std::string_view name);
  // This client's id (RequestContext::client): random, never 0.
  uint32_t client_id() const { return client_id_; }
  // Blocks until the runtime goes away (a connection of its own hangs up: a stop, a crash):
  // true; or until `stop_fd` (an eventfd or a pipe) becomes readable: false. Unavailable
  // when the runtime cannot be reached now. `connected` (optional) runs once that connection
  // is up, before the wait: what it learns from the runtime is from the one being watched.
  Result<bool> WaitUntilGone(int stop_fd, const std::function<void()>& connected = nullptr);

  const std::string& socket_path() const { return options_.socket_path; }
  // The transport the connections use (never kAuto once connected).
  IpcMode mode() const;

 private:
  struct Conn;  // a socket, and maybe its shared-memory channel (ipc.cc)
  explicit RuntimeClient(Options o);
  Result<std::unique_ptr<Conn>> TakeConnection();
  // `channel`: ask for a shared-memory channel when the mode allows (not for a connection that
  // only watches the runtime).
  Result<std::unique_ptr<Conn>> NewConnection(bool channel = true);
  // Asks the runtime for a shared-memory channel on the connection's Unix socket. On an error,
  // *refused says whether the runtime answered it cleanly (the socket is still usable).
  Status OpenChannel(Conn& c, bool* refused);
  void ReturnConnection(std::unique_ptr<Conn> c);
  Result<std::string> CallOn(Conn& c, uint32_t pool, uint32_t method, std::string_view payload,
                             uint64_t request_id = 0, uint16_t flags = 0);

  const Options options_;
  const uint32_t client_id_;
  IpcMode wanted_ = IpcMode::kAuto;  // from options_.mode or the environment
  std::string token_;                // TCP only: read once at Connect
  Mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::atomic<uint8_t> used_{static_cast<uint8_t>(IpcMode::kAuto)};  // the mode a connection got
};

}  // namespace clio
