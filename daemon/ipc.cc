#include "daemon/ipc.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <vector>

#include "common/codec.h"
#include "daemon/config.h"
#include "daemon/shm_channel.h"
#include "daemon/tls.h"
#include "daemon/token.h"

namespace clio {
namespace {

Status WriteAll(int fd, const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("runtime connection lost while sending: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReadAll(int fd, void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n == 0) return Unavailable("runtime closed the connection");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("runtime connection lost while receiving: ") + std::strerror(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// The uid of the package's runtime user (`clio`), when it exists.
std::optional<uid_t> ClioUserUid() {
  static const std::optional<uid_t> uid = []() -> std::optional<uid_t> {
    passwd pw{};
    passwd* found = nullptr;
    std::vector<char> buf(4096);
    if (::getpwnam_r("clio", &pw, buf.data(), buf.size(), &found) != 0 || !found) return std::nullopt;
    return found->pw_uid;
  }();
  return uid;
}

// A client hands the runtime its users' writes (clio-fuse) or its administration (clioctl):
// it talks only to a runtime run by root, by itself or by the package's user `clio`, never to a
// process of another user squatting on the socket path while the runtime is away.
Status CheckRuntimePeer(int fd, const std::string& path) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return Status::FromErrno(errno, "reading the credentials of the runtime on " + path);
  if (cred.uid == 0 || cred.uid == ::geteuid() || cred.uid == ClioUserUid()) return Status::Ok();
  return Status(Code::kPermissionDenied,
                "refusing the runtime socket " + path + ": the process serving it (pid " + std::to_string(cred.pid) +
                    ") runs as uid " + std::to_string(cred.uid) +
                    ", not root, you or the user clio; another user may be squatting on the socket path");
}

Result<int> ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return InvalidArgument("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::FromErrno(errno, "socket");
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(fd);
    if (err == EACCES || err == EPERM)
      return Status(Code::kPermissionDenied, "cannot connect to the CLIO runtime's socket " + path +
                                                 ": permission denied (uid " + std::to_string(::geteuid()) +
                                                 "; the socket is for root, the runtime's user and group clio)");
    return Unavailable("the CLIO runtime is not running (cannot connect to " + path + ": " +
                       std::strerror(err) + "); start it with 'clio_run start'");
  }
  if (Status s = CheckRuntimePeer(fd, path); !s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

Result<int> ConnectTcp(const std::string& host, uint32_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int g = ::getaddrinfo(host.empty() ? "127.0.0.1" : host.c_str(), service.c_str(), &hints, &res); g != 0)
    return InvalidArgument("runtime address " + host + ":" + service + ": " + ::gai_strerror(g));
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ::freeaddrinfo(res);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // request/response: no Nagle
      return fd;
    }
    last = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return Unavailable("the CLIO runtime does not answer on TCP " + host + ":" + service + " (" + last +
                     "); is runtime.tcp_port set and the runtime started?");
}

}  // namespace

CallerClass AdminCallerOf(uint32_t method) {
  return DeclaredCaller<adminproto::AllRequests>(method);
}

Result<std::vector<PoolInfo>> DecodePoolList(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(adminproto::PoolListReply r, wire::Decode<adminproto::PoolListReply>(bytes));
  return std::move(r.pools);
}

Result<RuntimeStats> DecodeRuntimeStats(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(adminproto::RuntimeStatsReply r, wire::Decode<adminproto::RuntimeStatsReply>(bytes));
  return r.stats;
}

Result<std::string> BoundedAnswer(Result<std::string> r) {
  if (r.ok() && r->size() > kMaxPayload)
    return Status(Code::kOutOfRange, "the answer of " + std::to_string(r->size()) + " bytes exceeds the " +
                                         std::to_string(kMaxPayload) + "-byte frame limit");
  return r;
}

ResponseHeader AnswerHeader(const RequestHeader& h, const Result<std::string>& r, std::string_view* body) {
  ResponseHeader rh;
  rh.version = h.version;
  rh.request_id = h.request_id;
  *body = r.ok() ? std::string_view(r.value()) : std::string_view(r.status().message());
  rh.code = static_cast<uint16_t>(r.status().code());
  rh.payload_len = static_cast<uint32_t>(std::min<size_t>(body->size(), kMaxPayload));
  return rh;
}

Status ValidateRequestHeader(const RequestHeader& h) {
  if (h.magic != kIpcMagic) return Corruption("bad frame magic");
  if (h.version < kIpcMinVersion || h.version > kIpcVersion) {
    const std::string versions = "the client speaks CLIO IPC version " + std::to_string(h.version) +
                                 ", this runtime versions " + std::to_string(kIpcMinVersion) + " to " +
                                 std::to_string(kIpcVersion);
    return Status(Code::kNotSupported,
                  h.version > kIpcVersion
                      ? versions + ": the client is newer than the runtime (restart the runtime after "
                                   "upgrading the package, or use the client of the runtime's release)"
                      : versions + ": the client is older than the runtime supports (upgrade it: remount, "
                                   "or run the clioctl of the runtime's release)");
  }
  if (h.payload_len > kMaxPayload)
    return Corruption("payload of " + std::to_string(h.payload_len) + " bytes exceeds the limit");
  return Status::Ok();
}

Status ValidateResponseHeader(const ResponseHeader& h) {
  if (h.magic != kIpcMagic) return Corruption("bad response magic");
  if (h.version != kIpcVersion) {
    // A runtime answers in the version it was asked in: another one is not a CLIO runtime of a
    // release that serves this client.
    return Corruption("the runtime answered in CLIO IPC version " + std::to_string(h.version) +
                      "; this client speaks version " + std::to_string(kIpcVersion) +
                      " (a runtime and client of releases too far apart?)");
  }
  if (h.payload_len > kMaxPayload) return Corruption("oversized response");
  if (h.code >= static_cast<uint16_t>(Code::kCount)) return Corruption("unknown status code in response");
  return Status::Ok();
}

std::string_view IpcModeName(IpcMode m) {
  switch (m) {
    case IpcMode::kAuto: return "auto";
    case IpcMode::kShm: return "shm";
    case IpcMode::kUnix: return "unix";
    case IpcMode::kTcp: return "tcp";
  }
  return "?";
}

Result<IpcMode> ParseIpcMode(std::string_view s) {
  std::string l(s);
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (l == "auto" || l.empty()) return IpcMode::kAuto;
  if (l == "shm") return IpcMode::kShm;
  if (l == "unix") return IpcMode::kUnix;
  if (l == "tcp") return IpcMode::kTcp;
  return InvalidArgument("unknown IPC mode '" + std::string(s) + "' (CLIO_IPC_MODE: auto, shm, unix or tcp)");
}

// One connection to the runtime: its socket and, when the runtime made one, the shared-memory
// channel riding on it (the socket then carries only what does not fit the channel).
struct RuntimeClient::Conn {
  int fd = -1;
  pid_t owner = ::getpid();  // a forked child must not share its parent's connection
  IpcMode mode = IpcMode::kUnix;
  std::unique_ptr<TlsStream> tls;  // TCP with TLS: the session over fd
  std::unique_ptr<ShmSegment> shm;
  int evfd = -1;  // the runtime's wake-up for this channel
  Status Send(const void* data, size_t len) { return tls ? tls->WriteAll(data, len) : WriteAll(fd, data, len); }
  Status Receive(void* data, size_t len) { return tls ? tls->ReadAll(data, len) : ReadAll(fd, data, len); }
  ~Conn() {
    tls.reset();  // before its socket closes
    if (fd >= 0) ::close(fd);
    if (evfd >= 0) ::close(evfd);
  }
};

RuntimeClient::Options RuntimeClient::OptionsFor(const RuntimeConfig& config) {
  Options o;
  o.socket_path = config.socket_path;
  o.tcp_port = config.tcp_port;
  o.tcp_host = config.tcp_address;
  o.token_file = config.token_file;
  o.tls_ca_file = config.tls_ca_file;
  o.tls_cert_file = config.tls_cert_file;
  o.tls_server_name = config.tls_server_name;
  o.shm_bytes = config.shm_channel_bytes;
  return o;
}

namespace {
uint32_t RandomClientId() {
  uint32_t id = 0;
  while (id == 0)
    if (::getrandom(&id, sizeof id, 0) != sizeof id) id = static_cast<uint32_t>(::getpid()) ^ 0x9e3779b9u;
  return id;
}
}  // namespace

RuntimeClient::RuntimeClient(Options o) : options_(std::move(o)), client_id_(RandomClientId()) {}

IpcMode RuntimeClient::mode() const { return static_cast<IpcMode>(used_.load()); }

Result<std::unique_ptr<RuntimeClient>> RuntimeClient::Connect(const Options& options) {
  std::unique_ptr<RuntimeClient> c(new RuntimeClient(options));
  if (options.mode) {
    c->wanted_ = *options.mode;
  } else if (const char* env = std::getenv("CLIO_IPC_MODE"); env && *env) {
    CLIO_ASSIGN_OR_RETURN(c->wanted_, ParseIpcMode(env));
  }
  if (c->wanted_ == IpcMode::kTcp) {
    if (options.tcp_port == 0) return InvalidArgument("CLIO_IPC_MODE=tcp, but the config sets no runtime.tcp_port");
    // Read once, now: a TCP client without the right to read it says so at once.
    CLIO_ASSIGN_OR_RETURN(c->token_, ReadTokenFile(options.token_file));
    if (!options.tls_ca_file.empty() || !options.tls_cert_file.empty()) {
      CLIO_ASSIGN_OR_RETURN(c->tls_, TlsClientContext::Make({options.tls_ca_file, options.tls_cert_file,
                                                             options.tls_server_name, options.tcp_host}));
    }
  }
  CLIO_ASSIGN_OR_RETURN(auto conn, c->TakeConnection());
  c->ReturnConnection(std::move(conn));
  return c;
}

RuntimeClient::~RuntimeClient() = default;

Result<std::unique_ptr<RuntimeClient::Conn>> RuntimeClient::TakeConnection() {
  {
    MutexLock l(&mu_);
    while (!idle_.empty()) {
      std::unique_ptr<Conn> c = std::move(idle_.back());
      idle_.pop_back();
      // Made by the process we forked from: the parent may use it too (and the runtime reaps
      // it once the parent is gone). This process makes its own.
      if (c->owner != ::getpid()) continue;
      // The runtime never speaks first: a readable or hung-up idle socket belongs to a runtime
      // that went away (restart). Drop it rather than lose a request on it.
      pollfd p{c->fd, POLLIN, 0};
      if (::poll(&p, 1, 0) == 0) return c;
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.connect_wait_ms);
  while (true) {
    auto c = NewConnection();
    if (c.ok() || c.status().code() != Code::kUnavailable || std::chrono::steady_clock::now() >= deadline) return c;
    if (cancelled_.load()) return c.status().WithContext("no more waiting for it: the client is closing");
    // The runtime is restarting: poll every 100 ms, seeing a cancel within 10.
    for (int i = 0; i < 10 && !cancelled_.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<std::unique_ptr<RuntimeClient::Conn>> RuntimeClient::NewConnection(bool channel) {
  auto conn = std::make_unique<Conn>();
  const bool local = wanted_ != IpcMode::kTcp;
  Status unix_error;
  if (local) {
    auto fd = ConnectUnix(options_.socket_path);
    if (fd.ok()) {
      conn->fd = *fd;
      conn->mode = IpcMode::kUnix;
    } else {
      unix_error = fd.status();
    }
  }
  if (conn->fd < 0) {
    // Never a fallback: a client that cannot reach the Unix socket does not hand the token to
    // whoever listens on the TCP port (a squatter while the runtime restarts). TCP is asked for.
    if (wanted_ != IpcMode::kTcp) return unix_error;
    if (options_.tcp_port == 0)
      return InvalidArgument("CLIO_IPC_MODE=tcp, but the config sets no runtime.tcp_port");
    CLIO_ASSIGN_OR_RETURN(conn->fd, ConnectTcp(options_.tcp_host, options_.tcp_port));
    conn->mode = IpcMode::kTcp;
    const std::string where = options_.tcp_host + ":" + std::to_string(options_.tcp_port);
    if (tls_) {
      auto tls = tls_->Handshake(conn->fd);
      if (!tls.ok()) return tls.status().WithContext("TLS with the runtime at " + where);
      conn->tls = std::move(*tls);
    }
    Status hs = Handshake(*conn);
    // A runtime that serves TLS hangs up on a plain Hello.
    if (!hs.ok() && !tls_ && hs.code() == Code::kUnavailable)
      return hs.WithContext("TCP handshake with " + where +
                            " (if the runtime serves TLS: on its node, give this client the runtime's "
                            "runtime.tls_cert_file; elsewhere, runtime.tls_ca_file)");
    CLIO_RETURN_IF_ERROR(hs.WithContext("TCP handshake with " + where));
  }
  if (channel && conn->mode == IpcMode::kUnix && (wanted_ == IpcMode::kShm || wanted_ == IpcMode::kAuto)) {
    bool refused = false;
    Status s = OpenChannel(*conn, &refused);
    if (!s.ok()) {
      if (wanted_ == IpcMode::kShm) return s.WithContext("CLIO_IPC_MODE=shm: opening a shared-memory channel");
      // Auto: a runtime that answered that it cannot make a channel (no memfd) still serves
      // the socket. Any other failure may have left the stream out of step: not reused.
      if (!refused) return s.WithContext("opening a shared-memory channel");
    }
  }
  if (channel) used_.store(static_cast<uint8_t>(conn->mode));
  return conn;
}

Status RuntimeClient::Handshake(Conn& c) {
  const std::string nonce = NewNonce();
  // Over TLS the proofs cover this session's keys (TokenProof).
  std::string binding;
  if (c.tls) {
    CLIO_ASSIGN_OR_RETURN(binding, c.tls->Binding());
  }
  CLIO_ASSIGN_OR_RETURN(std::string raw, CallOn(c, 0, static_cast<uint32_t>(AdminMethod::kHello),
                                                wire::Encode(adminproto::Hello{nonce})));
  CLIO_ASSIGN_OR_RETURN(adminproto::HelloReply hello, wire::Decode<adminproto::HelloReply>(raw));
  // The server proves it knows the token before this client proves anything: a squatter on the
  // port learns a nonce and nothing else.
  if (hello.nonce.size() != kNonceBytes ||
      !TokensMatch(hello.proof, TokenProof(token_, "clio-runtime", nonce, hello.nonce, binding)))
    return Status(Code::kPermissionDenied,
                  "the server's proof does not match this client's token: a wrong token (runtime.token_file " +
                      options_.token_file + "), or not this node's runtime");
  CLIO_ASSIGN_OR_RETURN(raw, CallOn(c, 0, static_cast<uint32_t>(AdminMethod::kProve),
                                    wire::Encode(adminproto::Prove{TokenProof(token_, "clio-client", hello.nonce, nonce, binding)})));
  return Status::Ok();
}

Status RuntimeClient::OpenChannel(Conn& c, bool* refused) {
  auto granted = CallOn(c, 0, static_cast<uint32_t>(AdminMethod::kOpenChannel),
                        wire::Encode(adminproto::OpenChannel{options_.shm_bytes}));
  if (!granted.ok()) {
    // An answer with an error code is a clean refusal; a broken or garbled exchange is not.
    const Code code = granted.status().code();
    *refused = code != Code::kUnavailable && code != Code::kCorruption;
    return granted.status();
  }
  int fds[2] = {-1, -1};
  CLIO_RETURN_IF_ERROR(ReceiveFds(c.fd, fds, 2));
  c.evfd = fds[1];
  auto seg = ShmSegment::Attach(fds[0]);  // owns fds[0] from here, mapped or not
  if (!seg.ok()) return seg.status();
  c.shm = std::make_unique<ShmSegment>(std::move(seg).value());
  c.mode = IpcMode::kShm;
  return Status::Ok();
}

Result<bool> RuntimeClient::WaitUntilGone(int stop_fd, const std::function<void()>& connected) {
  CLIO_ASSIGN_OR_RETURN(std::unique_ptr<Conn> c, NewConnection(/*channel=*/false));
  if (connected) connected();
  // The runtime never speaks first: the connection turns readable only when it hangs up.
  pollfd p[2] = {{c->fd, POLLIN | POLLRDHUP, 0}, {stop_fd, POLLIN, 0}};
  while (::poll(p, 2, -1) < 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "waiting on the runtime's connection");
  }
  return p[1].revents == 0;
}

void RuntimeClient::ReturnConnection(std::unique_ptr<Conn> c) {
  MutexLock l(&mu_);
  idle_.push_back(std::move(c));
}

Result<std::string> RuntimeClient::CallOn(Conn& c, uint32_t pool, uint32_t method, std::string_view payload,
                                          uint64_t request_id, uint16_t flags) {
  RequestHeader h;
  h.pool = pool;
  h.method = method;
  h.payload_len = static_cast<uint32_t>(payload.size());
  h.client = client_id_;
  h.flags = flags;
  if (request_id == 0) {
    MutexLock l(&mu_);
    request_id = next_id_++;
  }
  h.request_id = request_id;
  if (payload.size() > kMaxPayload) return InvalidArgument("request too large");
  ResponseHeader r;
  bool body_on_socket = true;
  std::string body;
  if (c.shm && payload.size() <= c.shm->capacity()) {
    ShmChannelHeader* sh = c.shm->header();
    if (!payload.empty()) std::memcpy(c.shm->data(), payload.data(), payload.size());
    sh->request = h;
    sh->state.store(static_cast<uint32_t>(ShmState::kRequest), std::memory_order_release);
    const uint64_t one = 1;
    if (::write(c.evfd, &one, sizeof one) != sizeof one)
      return Unavailable(std::string("waking the runtime: ") + std::strerror(errno));
    // The runtime answers by moving the state and waking the futex. A heartbeat every second
    // notices a runtime that died meanwhile: its end of the socket hangs up.
    while (sh->state.load(std::memory_order_acquire) != static_cast<uint32_t>(ShmState::kResponse)) {
      if (FutexWait(&sh->state, static_cast<uint32_t>(ShmState::kRequest), 1000)) continue;
      pollfd p{c.fd, POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
        return Unavailable("runtime went away while answering");
    }
    r = sh->response;
    CLIO_RETURN_IF_ERROR(ValidateResponseHeader(r));
    body_on_socket = (r.flags & kResponsePayloadOnSocket) != 0;
    if (!body_on_socket) {
      if (r.payload_len > c.shm->capacity()) return Corruption("response larger than the channel");
      body.assign(c.shm->data(), r.payload_len);
    }
    sh->state.store(static_cast<uint32_t>(ShmState::kIdle), std::memory_order_release);
  } else {
    std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
    frame.append(payload);
    CLIO_RETURN_IF_ERROR(c.Send(frame.data(), frame.size()));
    CLIO_RETURN_IF_ERROR(c.Receive(&r, sizeof r));
    CLIO_RETURN_IF_ERROR(ValidateResponseHeader(r));
  }
  if (r.request_id != h.request_id) return Corruption("response for another request");
  if (body_on_socket) {
    body.assign(r.payload_len, '\0');
    CLIO_RETURN_IF_ERROR(c.Receive(body.data(), body.size()));
  }
  if (r.code != 0) return Status(static_cast<Code>(r.code), std::move(body));
  return body;
}

Result<uint32_t> RuntimeClient::FindPool(std::string_view name) {
  CLIO_ASSIGN_OR_RETURN(std::string reply, Call(0, static_cast<uint32_t>(AdminMethod::kFindPool),
                                                 wire::Encode(adminproto::FindPool{std::string(name)})));
  auto r = wire::Decode<adminproto::FindPoolReply>(reply);
  if (!r.ok()) return Internal("bad FindPool reply from the runtime");
  return r->id;
}

Result<std::string> RuntimeClient::Call(uint32_t pool, uint32_t method, std::string_view payload,
                                        Resend resend, const PoolQuery& query) {
  std::string with_query;
  uint16_t flags = 0;
  if (query.kind != PoolQuery::Kind::kLocal) {
    with_query = EncodePoolQuery(query);
    with_query.append(payload);
    payload = with_query;
    flags |= kRequestHasQuery;
  }
  uint64_t id = 0;
  {
    MutexLock l(&mu_);
    id = next_id_++;
  }
  for (int attempt = 0;; ++attempt) {
    CLIO_ASSIGN_OR_RETURN(std::unique_ptr<Conn> c, TakeConnection());
    auto r = CallOn(*c, pool, method, payload, id, static_cast<uint16_t>(flags | (attempt > 0 ? kRequestResent : 0)));
    if (r.ok() || (r.status().code() != Code::kUnavailable && r.status().code() != Code::kCorruption)) {
      ReturnConnection(std::move(c));
      return r;
    }
    c.reset();  // broken connection: never reuse it
    // The runtime went away mid-call (a restart): once more on a fresh connection, when that
    // is safe. TakeConnection waits for the runtime to come back (connect_wait_ms).
    if (attempt >= 1 || resend == Resend::kNever) return r;
  }
}

}  // namespace clio
