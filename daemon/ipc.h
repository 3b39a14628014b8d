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

#include "common/message.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "daemon/admin_protocol.h"
#include "daemon/caller.h"
#include "daemon/defaults.h"
#include "daemon/pool_query.h"

namespace clio {

inline constexpr uint32_t kIpcMagic = 0x4f494c43;  // "CLIO"
// 2: attributes carry rdev, Open carries flags, status codes gained NoData..RangeError.
// 3: attributes carry the stored byte count.
// 4: shared-memory channels and TCP (OpenChannel, Hello), response flags, more runtime stats.
inline constexpr uint16_t kIpcVersion = 4;
// The oldest client version a runtime serves. A wire change raises kIpcVersion and leaves this
// at the previous release's version for one release, so a clio-fuse of that release keeps
// working across the package upgrade that restarts the runtime; the runtime answers each request
// in the version it came in. 4 is the first version of a release: nothing older to serve yet.
// The header layouts below never change (versions change payloads only), so a client of any
// version reads the runtime's refusal of its version.
inline constexpr uint16_t kIpcMinVersion = 4;
static_assert(kIpcMinVersion <= kIpcVersion);

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

// An answer never exceeds the frame limit: a bigger one becomes an OutOfRange error, not a
// truncation.
Result<std::string> BoundedAnswer(Result<std::string> r);
// The header answering `h` with `r` (passed through BoundedAnswer first), in the client's
// version (see kIpcMinVersion); `*body` is set to the payload to send after it.
ResponseHeader AnswerHeader(const RequestHeader& h, const Result<std::string>& r, std::string_view* body);

// Checks a received header; Corruption naming the problem, or NotSupported for a version outside
// kIpcMinVersion..kIpcVersion (naming both sides' versions and what to upgrade).
Status ValidateRequestHeader(const RequestHeader& h);
Status ValidateResponseHeader(const ResponseHeader& h);

// How a client reaches the runtime (CLIO_IPC_MODE, docs/ipc.md). kAuto: shared memory over the
// runtime's Unix socket, or the plain socket if the runtime cannot make a channel; never TCP,
// which a client uses only when asked (kTcp), so that no token goes to a port squatter.
enum class IpcMode : uint8_t { kAuto, kShm, kUnix, kTcp };
std::string_view IpcModeName(IpcMode m);
// "auto", "shm", "unix", "tcp" (case-insensitive); InvalidArgument naming the accepted words.
Result<IpcMode> ParseIpcMode(std::string_view s);

struct RuntimeConfig;
class TlsClientContext;

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
    // TLS on TCP (daemon/tls.h): on when either trust anchor is set. The CA bundle
    // (runtime.tls_ca_file), else the runtime's own certificate (runtime.tls_cert_file); the
    // name the certificate must carry (runtime.tls_server_name; default tcp_host).
    std::string tls_ca_file, tls_cert_file, tls_server_name;
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
  // A typed request (common/message.h), its reply decoded (wire::DecodeReply: fields a newer
  // runtime appended are passed over). Sent again after a broken connection only when the
  // request type says it is idempotent (`kIdempotent`).
  template <class Req>
  requires requires { Req::kMethod; Req::kIdempotent; }
  Result<typename Req::Reply> Call(uint32_t pool, const Req& req) {
    CLIO_ASSIGN_OR_RETURN(std::string r, Call(pool, static_cast<uint32_t>(Req::kMethod), wire::Encode(req),
                                              Req::kIdempotent ? Resend::kFreely : Resend::kNever));
    return wire::DecodeReply<typename Req::Reply>(std::move(r));
  }
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
  // Ends every wait for the runtime to come back (connect_wait_ms), now and from now on: a
  // call that would wait fails at once (Unavailable, "... the client is closing"). For a
  // client that is shutting down while the runtime is away. Calls to a runtime that answers
  // are unaffected.
  void CancelWaits() { cancelled_.store(true); }

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
  // The TCP handshake (docs/ipc.md): the server proves the token, then this client.
  Status Handshake(Conn& c);
  void ReturnConnection(std::unique_ptr<Conn> c);
  Result<std::string> CallOn(Conn& c, uint32_t pool, uint32_t method, std::string_view payload,
                             uint64_t request_id = 0, uint16_t flags = 0);

  const Options options_;
  const uint32_t client_id_;
  IpcMode wanted_ = IpcMode::kAuto;  // from options_.mode or the environment
  std::string token_;                // TCP only: read once at Connect
  std::shared_ptr<const TlsClientContext> tls_;  // TCP with TLS only: loaded at Connect
  Mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::atomic<uint8_t> used_{static_cast<uint8_t>(IpcMode::kAuto)};  // the mode a connection got
  std::atomic<bool> cancelled_{false};  // CancelWaits
};

}  // namespace clio
