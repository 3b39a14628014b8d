// The admin pool's messages (pool 0): the runtime's own methods (docs/ipc.md, "admin"),
// typed (common/message.h). The runtime answers them (Runtime::HandleAdmin), except the two
// transport methods, which the server answers on the connection itself.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common/message.h"
#include "daemon/caller.h"

namespace clio {

enum class AdminMethod : uint32_t {
  kPing = 1,      // -> u64 runtime pid
  kStatus = 2,    // -> string (human text)
  kStop = 3,      // graceful stop; replies before stopping
  kFindPool = 4,  // string name -> u32 pool major
  kListPools = 5, // -> pool list, in creation order; pool-log pools not running last
  kRuntimeStats = 6,  // -> runtime stats
  // string source, string yaml (a compose document) -> pool list of the pools created.
  // Not idempotent: a resend would find its own pools. (pool create, compose start)
  kCreatePools = 7,
  kDestroyPool = 8,   // string name -> empty (pool destroy)
  kComposeStop = 9,   // string source, string yaml -> pool list of the pools destroyed
  // Transport methods, answered by the server itself:
  // u32 data bytes wanted -> u32 data bytes granted, then (Unix socket only) one byte carrying
  // two descriptors (SCM_RIGHTS): the channel's memfd segment and its eventfd.
  kOpenChannel = 10,
  // The TCP handshake, the first two requests on a TCP connection (docs/ipc.md); anything else
  // first, or a wrong proof, closes it (PermissionDenied). The token never crosses the wire.
  // string client nonce -> string server nonce, string server proof
  kHello = 11,
  // string client proof -> empty
  kProve = 12,
};

// One pool as ListPools reports it: u32 major, string name, module, describe.
struct PoolInfo {
  uint32_t id = 0;  // major id
  std::string name, module, describe;
  static constexpr size_t kMinWireSize = 4 + 3 * 4;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.id); f(s.name); f(s.module); f(s.describe); }
};

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
  template <class S, class F> static void Fields(S& s, F&& f) {
    f(s.pid); f(s.uptime_s); f(s.worker_threads); f(s.client_connections); f(s.pools);
    f(s.shm_channels); f(s.tcp_connections); f(s.malformed_frames); f(s.reaped_clients);
    f(s.extra_workers); f(s.workers_added); f(s.slow_threads); f(s.slow_tasks); f(s.async_tasks);
  }
};

// The requests and replies. `kCaller`: reports (ping, status, pools, stats) are readers'; stop
// and pool changes the admin's; the transport methods come before any class is known and count
// as readers'.
namespace adminproto {

using wire::Empty;
using wire::Raw;

#define CLIO_ADMIN_REQUEST(Method, ReplyType, idempotent, caller) \
  CLIO_WIRE_REQUEST(AdminMethod, Method, "", ReplyType, idempotent, CallerClass::caller)

struct PingReply {
  static constexpr const char* kName = "Ping reply";
  uint64_t pid = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.pid); }
};
struct FindPoolReply {
  static constexpr const char* kName = "FindPool reply";
  uint32_t id = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.id); }
};
struct PoolListReply {
  static constexpr const char* kName = "pool list";
  std::vector<PoolInfo> pools;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.pools); }
};
struct RuntimeStatsReply {
  static constexpr const char* kName = "runtime stats";
  RuntimeStats stats;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.stats); }
};
struct HelloReply {
  static constexpr const char* kName = "Hello reply";
  std::string nonce;  // the server's
  std::string proof;  // TokenProof(token, "clio-runtime", client nonce, server nonce)
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.nonce); f(s.proof); }
};
struct OpenChannelReply {
  static constexpr const char* kName = "OpenChannel reply";
  uint32_t granted = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.granted); }
};

struct Ping {
  CLIO_ADMIN_REQUEST(Ping, PingReply, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};
// Reply: human text.
struct GetStatus {
  CLIO_ADMIN_REQUEST(Status, Raw, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};
// Replies before stopping.
struct Stop {
  CLIO_ADMIN_REQUEST(Stop, Empty, false, kAdmin);
  template <class S, class F> static void Fields(S&, F&&) {}
};
struct FindPool {
  CLIO_ADMIN_REQUEST(FindPool, FindPoolReply, true, kReader);
  std::string name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.name); }
};
struct ListPools {
  CLIO_ADMIN_REQUEST(ListPools, PoolListReply, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};
struct GetRuntimeStats {
  CLIO_ADMIN_REQUEST(RuntimeStats, RuntimeStatsReply, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};
// `source`: where the document came from (a file, "clioctl pool create NAME"), for errors.
struct CreatePools {
  CLIO_ADMIN_REQUEST(CreatePools, PoolListReply, false, kAdmin);
  std::string source, yaml;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.source); f(s.yaml); }
};
struct DestroyPool {
  CLIO_ADMIN_REQUEST(DestroyPool, Empty, false, kAdmin);
  std::string name;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.name); }
};
struct ComposeStop {
  CLIO_ADMIN_REQUEST(ComposeStop, PoolListReply, false, kAdmin);
  std::string source, yaml;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.source); f(s.yaml); }
};
struct OpenChannel {
  CLIO_ADMIN_REQUEST(OpenChannel, OpenChannelReply, false, kReader);
  uint32_t wanted = 0;  // data bytes
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.wanted); }
};
struct Hello {
  CLIO_ADMIN_REQUEST(Hello, HelloReply, false, kReader);
  std::string nonce;  // the client's, kNonceBytes
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.nonce); }
};
struct Prove {
  CLIO_ADMIN_REQUEST(Prove, Empty, false, kReader);
  std::string proof;  // TokenProof(token, "clio-client", server nonce, client nonce)
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.proof); }
};

#undef CLIO_ADMIN_REQUEST

using AllRequests = std::tuple<Ping, GetStatus, Stop, FindPool, ListPools, GetRuntimeStats, CreatePools, DestroyPool,
                               ComposeStop, OpenChannel, Hello, Prove>;
static_assert(wire::CoversMethods<AllRequests>(AdminMethod::kPing, AdminMethod::kProve),
              "every AdminMethod needs one request type in AllRequests");

}  // namespace adminproto

// Who may call an admin method (its request type's kCaller); unknown methods are the admin's.
CallerClass AdminCallerOf(uint32_t method);

// Whole-reply decoders (clients, tests, the frame fuzzer).
Result<std::vector<PoolInfo>> DecodePoolList(std::string_view bytes);
Result<RuntimeStats> DecodeRuntimeStats(std::string_view bytes);

}  // namespace clio
