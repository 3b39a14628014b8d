// The client transports, each forced in turn against a real runtime in this process: shared
// memory (memfd channels over the Unix socket), the Unix socket alone, and TCP with its token;
// large messages past a channel's capacity; malformed channel requests; a client killed in the
// middle of a task; a dead client's connection reaped while a child it forked holds it; a
// runtime restarted under a connected client.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/codec.h"
#include "common/metrics.h"
#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/test_serving.h"
#include "daemon/shm_channel.h"
#include "daemon/token.h"

using namespace clio;
using testing::ConnectLoopback;
using testing::FreePort;

namespace {

std::atomic<bool> g_hold{false};     // method 5 blocks while set
std::atomic<int> g_inside{0};        // method-5 requests running
std::atomic<int> g_finished{0};      // method-5 requests that returned

// Echoes its payload; method 3 answers `n` bytes (u64 in the payload); method 5 blocks while
// g_hold is set.
class EchoPool : public Pool {
 public:
  Result<std::string> Handle(uint32_t method, std::string_view payload) override {
    if (method == 3) {
      Decoder d(payload);
      uint64_t n = 0;
      d.Get(&n);
      CLIO_RETURN_IF_ERROR(d.Finish("size"));
      std::string out(n, 'r');
      if (n > 0) out[n - 1] = 'z';
      return out;
    }
    if (method == 5) {
      ++g_inside;
      while (g_hold) std::this_thread::yield();
      --g_inside;
      ++g_finished;
    }
    return std::string(payload);
  }
};


struct Node {
  std::string dir;
  std::string extra;  // more runtime keys
  std::unique_ptr<Runtime> rt;
  testing::ServingThread serve;
  explicit Node(std::string more = "") : extra(std::move(more)) {
    char tmpl[] = "/tmp/clio_transport_XXXXXX";
    dir = mkdtemp(tmpl);
    Up();
  }
  void Up() {
    auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "\n  http_port: 0\n" + extra +
                                      "compose:\n  - mod_name: echo\n    pool_name: e\n    pool_id: \"7.0\"\n",
                                  "t.yaml");
    REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
    rt = std::make_unique<Runtime>(std::move(cfg).value());
    rt->RegisterModule("echo", testing::Makes<EchoPool>());
    REQUIRE(rt->Compose().ok());
    serve.Start(rt.get());
  }
  void Down() {
    if (!rt) return;
    serve.Stop();
    (void)rt->StopPools();
    rt.reset();
  }
  ~Node() {
    Down();
    std::filesystem::remove_all(dir);
  }
  RuntimeClient::Options Options(IpcMode mode) const {
    RuntimeClient::Options o = RuntimeClient::OptionsFor(rt->config());
    o.mode = mode;
    return o;
  }
  std::unique_ptr<RuntimeClient> Client(IpcMode mode) {
    auto c = RuntimeClient::Connect(Options(mode));
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    return std::move(c).value();
  }
  RuntimeStats Stats() {
    auto c = Client(IpcMode::kUnix);
    auto raw = c->Call(0, static_cast<uint32_t>(AdminMethod::kRuntimeStats), "");
    REQUIRE(raw.ok());
    auto s = DecodeRuntimeStats(*raw);
    REQUIRE(s.ok());
    return *s;
  }
};

std::string Size(uint64_t n) {
  Encoder e;
  e.Put<uint64_t>(n);
  return e.Take();
}

// Polls `cond` until it holds or 20 s pass (an event the test waits for, not a timing check).
template <typename F>
bool Eventually(F cond) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// For a forked child of this (multi-threaded) process, which may not allocate: connects to the
// runtime with system calls only, opens a shared-memory channel when `shm`, and when `pool` is
// not 0 posts one request (no payload) to it. Returns the socket, or -1.
int RawConnect(const char* socket_path, bool shm, uint32_t pool, uint32_t method) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, socket_path, sizeof addr.sun_path - 1);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  RequestHeader h;
  if (!shm) {
    if (pool == 0) return fd;
    h.pool = pool;
    h.method = method;
    return ::send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h ? fd : -1;
  }
  const uint32_t want = kMinShmChannelBytes;
  h.method = static_cast<uint32_t>(AdminMethod::kOpenChannel);
  h.payload_len = sizeof want;
  ResponseHeader r;
  uint32_t granted = 0;
  int fds[2];
  if (::send(fd, &h, sizeof h, MSG_NOSIGNAL) != sizeof h || ::send(fd, &want, sizeof want, MSG_NOSIGNAL) != sizeof want ||
      ::recv(fd, &r, sizeof r, MSG_WAITALL) != sizeof r || r.code != 0 ||
      ::recv(fd, &granted, sizeof granted, MSG_WAITALL) != sizeof granted || !ReceiveFds(fd, fds, 2).ok())
    return -1;
  if (pool == 0) return fd;
  void* p = ::mmap(nullptr, kShmDataOffset + granted, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  if (p == MAP_FAILED) return -1;
  auto* sh = static_cast<ShmChannelHeader*>(p);
  RequestHeader q;
  q.pool = pool;
  q.method = method;
  sh->request = q;
  sh->state.store(static_cast<uint32_t>(ShmState::kRequest));
  const uint64_t one = 1;
  return ::write(fds[1], &one, sizeof one) == sizeof one ? fd : -1;
}

}  // namespace

TEST_CASE("every transport, forced in turn, carries requests, errors and messages larger than a channel") {
  const uint32_t port = FreePort();
  // Small channels, so that a 1 MiB message does not fit and takes the socket.
  Node n("  tcp_port: " + std::to_string(port) + "\n  shm_channel_size: 64KiB\n");
  for (IpcMode mode : {IpcMode::kShm, IpcMode::kUnix, IpcMode::kTcp, IpcMode::kAuto}) {
    CAPTURE(IpcModeName(mode));
    auto c = n.Client(mode);
    CHECK(c->mode() == (mode == IpcMode::kAuto ? IpcMode::kShm : mode));
    CHECK(*c->Call(7, 1, "hello") == "hello");
    CHECK(*c->Call(7, 1, "") == "");
    std::string big(1u << 20, 'x');
    big[777] = 'y';
    CHECK(*c->Call(7, 1, big) == big);             // request past the channel
    auto r = c->Call(7, 3, Size(3u << 20));       // response past the channel
    REQUIRE(r.ok());
    CHECK(r->size() == 3u << 20);
    CHECK(r->back() == 'z');
    CHECK(*c->Call(7, 3, Size(60000)) == std::string(59999, 'r') + "z");  // fits
    CHECK(c->Call(99, 1, "").status().code() == Code::kNotFound);
    // Many threads share the client's connections.
    std::vector<std::thread> ts;
    std::atomic<int> ok{0};
    for (int i = 0; i < 6; ++i)
      ts.emplace_back([&, i] {
        for (int j = 0; j < 40; ++j) {
          std::string p = std::to_string(i * 1000 + j) + std::string(j * 97, 'p');
          auto x = c->Call(7, 1, p);
          if (x.ok() && *x == p) ++ok;
        }
      });
    for (auto& t : ts) t.join();
    CHECK(ok == 240);
  }
  RuntimeStats st = n.Stats();
  CHECK(st.malformed_frames == 0);
}

TEST_CASE("CLIO_IPC_MODE picks the transport; a bad value and TCP without a port are refused by name") {
  Node n;
  RuntimeClient::Options o = RuntimeClient::OptionsFor(n.rt->config());
  setenv("CLIO_IPC_MODE", "unix", 1);
  auto u = RuntimeClient::Connect(o);
  REQUIRE(u.ok());
  CHECK((*u)->mode() == IpcMode::kUnix);
  setenv("CLIO_IPC_MODE", "SHM", 1);
  auto s = RuntimeClient::Connect(o);
  REQUIRE(s.ok());
  CHECK((*s)->mode() == IpcMode::kShm);
  CHECK(n.Stats().shm_channels == 1);
  setenv("CLIO_IPC_MODE", "pigeon", 1);
  auto bad = RuntimeClient::Connect(o);
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK_MESSAGE(bad.status().message().find("unknown IPC mode 'pigeon'") != std::string::npos, bad.status().ToString());
  unsetenv("CLIO_IPC_MODE");
  auto tcp = RuntimeClient::Connect(n.Options(IpcMode::kTcp));
  CHECK_FALSE(tcp.ok());
  CHECK_MESSAGE(tcp.status().message().find("tcp_port") != std::string::npos, tcp.status().ToString());
}

namespace {


// One request on a raw connection; the answer's code and payload.
std::pair<Code, std::string> RawCall(int fd, AdminMethod m, const std::string& payload) {
  RequestHeader h;
  h.method = static_cast<uint32_t>(m);
  h.payload_len = static_cast<uint32_t>(payload.size());
  REQUIRE(::send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h);
  REQUIRE(::send(fd, payload.data(), payload.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(payload.size()));
  ResponseHeader r;
  REQUIRE(::recv(fd, &r, sizeof r, MSG_WAITALL) == sizeof r);
  std::string body(r.payload_len, '\0');
  if (!body.empty()) REQUIRE(::recv(fd, body.data(), body.size(), MSG_WAITALL) == static_cast<ssize_t>(body.size()));
  return {static_cast<Code>(r.code), body};
}

}  // namespace

TEST_CASE("TCP: a wrong token or a request before the hello closes the connection") {
  const uint32_t port = FreePort();
  Node n("  tcp_port: " + std::to_string(port) + "\n");
  const std::string token_file = n.rt->config().token_file;
  struct stat st{};
  REQUIRE(stat(token_file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  RuntimeClient::Options o = n.Options(IpcMode::kTcp);
  o.token_file = n.dir + "/wrong.token";
  std::ofstream(o.token_file) << "not-the-token-at-all-0123456789\n";
  auto wrong = RuntimeClient::Connect(o);
  CHECK(wrong.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(wrong.status().message().find("wrong token") != std::string::npos, wrong.status().ToString());
  o.token_file = n.dir + "/missing.token";
  CHECK(RuntimeClient::Connect(o).status().code() == Code::kPermissionDenied);

  // A raw TCP client that skips the hello is answered PermissionDenied and closed.
  int fd = ConnectLoopback(port);
  RequestHeader h;
  h.pool = 7;
  h.method = 1;
  REQUIRE(::send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h);
  ResponseHeader r;
  REQUIRE(::recv(fd, &r, sizeof r, MSG_WAITALL) == sizeof r);
  CHECK(r.code == static_cast<uint16_t>(Code::kPermissionDenied));
  std::string body(r.payload_len, '\0');
  REQUIRE(::recv(fd, body.data(), body.size(), MSG_WAITALL) == static_cast<ssize_t>(body.size()));
  char b;
  CHECK(::recv(fd, &b, 1, 0) == 0);  // closed
  ::close(fd);
  // Before its hello, a peer may not send a large frame: the connection closes unanswered.
  fd = ConnectLoopback(port);
  RequestHeader big;
  big.method = static_cast<uint32_t>(AdminMethod::kHello);
  big.payload_len = 1u << 20;
  REQUIRE(::send(fd, &big, sizeof big, MSG_NOSIGNAL) == sizeof big);
  CHECK(::recv(fd, &b, 1, 0) == 0);
  ::close(fd);
  CHECK(*n.Client(IpcMode::kTcp)->Call(7, 1, "ok") == "ok");
}


TEST_CASE("TCP handshake: the runtime proves the token first, the token never crosses, a wrong proof closes") {
  const uint32_t port = FreePort();
  Node n("  tcp_port: " + std::to_string(port) + "\n");
  auto token = ReadTokenFile(n.rt->config().token_file);
  REQUIRE(token.ok());
  // The runtime's answer to a Hello proves the token over both nonces.
  int fd = ConnectLoopback(port);
  const std::string nonce = NewNonce();
  auto [code, raw] = RawCall(fd, AdminMethod::kHello, wire::Encode(adminproto::Hello{nonce}));
  REQUIRE(code == Code::kOk);
  auto hello = wire::Decode<adminproto::HelloReply>(raw);
  REQUIRE(hello.ok());
  CHECK(hello->nonce.size() == kNonceBytes);
  CHECK(hello->proof == TokenProof(*token, "clio-runtime", nonce, hello->nonce));
  CHECK(raw.find(*token) == std::string::npos);
  // A client that cannot prove the token is refused and closed.
  auto [wrong, why] = RawCall(fd, AdminMethod::kProve, wire::Encode(adminproto::Prove{std::string(32, 'x')}));
  CHECK(wrong == Code::kPermissionDenied);
  CHECK(why.find("wrong token") != std::string::npos);
  char b;
  CHECK(::recv(fd, &b, 1, 0) == 0);
  ::close(fd);
  // A replayed proof of another connection is wrong on this one (fresh nonces).
  fd = ConnectLoopback(port);
  auto first = RawCall(fd, AdminMethod::kHello, wire::Encode(adminproto::Hello{nonce}));
  REQUIRE(first.first == Code::kOk);
  const std::string old_proof = TokenProof(*token, "clio-client", hello->nonce, nonce);
  CHECK(RawCall(fd, AdminMethod::kProve, wire::Encode(adminproto::Prove{old_proof})).first == Code::kPermissionDenied);
  ::close(fd);
  // Prove before Hello, and a short nonce, are refused.
  fd = ConnectLoopback(port);
  CHECK(RawCall(fd, AdminMethod::kProve, wire::Encode(adminproto::Prove{old_proof})).first == Code::kPermissionDenied);
  ::close(fd);
  fd = ConnectLoopback(port);
  CHECK(RawCall(fd, AdminMethod::kHello, wire::Encode(adminproto::Hello{"short"})).first == Code::kPermissionDenied);
  ::close(fd);
  CHECK(*n.Client(IpcMode::kTcp)->Call(7, 1, "ok") == "ok");
}

TEST_CASE("TCP handshake: a client refuses a server that cannot prove the token, and tells it nothing") {
  // A squatter on the port: answers every Hello with a made-up proof, and records what it got.
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(listener, 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  std::string received;
  std::thread squatter([&] {
    int c = ::accept(listener, nullptr, nullptr);
    RequestHeader h;
    if (::recv(c, &h, sizeof h, MSG_WAITALL) != sizeof h) return ::close(c), void();
    std::string body(h.payload_len, '\0');
    ::recv(c, body.data(), body.size(), MSG_WAITALL);
    received.append(reinterpret_cast<const char*>(&h), sizeof h).append(body);
    const std::string answer = wire::Encode(adminproto::HelloReply{NewNonce(), std::string(32, 'p')});
    ResponseHeader r;
    r.request_id = h.request_id;
    r.payload_len = static_cast<uint32_t>(answer.size());
    ::send(c, &r, sizeof r, MSG_NOSIGNAL);
    ::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(c, buf, sizeof buf, 0)) > 0) received.append(buf, static_cast<size_t>(n));
    ::close(c);
  });
  char tmpl[] = "/tmp/clio_squat_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string token = "the-node-token-0123456789abcdef";
  std::ofstream(dir + "/token") << token << "\n";
  RuntimeClient::Options o;
  o.socket_path = dir + "/none.sock";
  o.mode = IpcMode::kTcp;
  o.tcp_host = "127.0.0.1";
  o.tcp_port = ntohs(a.sin_port);
  o.token_file = dir + "/token";
  auto c = RuntimeClient::Connect(o);
  squatter.join();
  ::close(listener);
  std::filesystem::remove_all(dir);
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(c.status().message().find("not this node's runtime") != std::string::npos, c.status().ToString());
  CHECK(received.size() == sizeof(RequestHeader) + 4 + kNonceBytes);  // the Hello, and nothing after it
  CHECK(received.find(token) == std::string::npos);
}

TEST_CASE("a malformed request in a shared-memory channel closes that connection only, and is counted") {
  Node n;
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    // A hand-made client: open a channel, then write a bad request into it.
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, n.rt->config().socket_path.c_str());
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    Encoder want;
    want.Put<uint32_t>(8192);
    RequestHeader h;
    h.method = static_cast<uint32_t>(AdminMethod::kOpenChannel);
    h.payload_len = static_cast<uint32_t>(want.buffer().size());
    REQUIRE(::send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h);
    REQUIRE(::send(fd, want.buffer().data(), want.buffer().size(), MSG_NOSIGNAL) == 4);
    ResponseHeader r;
    REQUIRE(::recv(fd, &r, sizeof r, MSG_WAITALL) == sizeof r);
    REQUIRE(r.code == 0);
    std::string granted(r.payload_len, '\0');
    REQUIRE(::recv(fd, granted.data(), granted.size(), MSG_WAITALL) == 4);
    int fds[2];
    REQUIRE(ReceiveFds(fd, fds, 2).ok());
    // Sealed: the client cannot shrink the segment under the runtime's mapping.
    CHECK(::ftruncate(fds[0], 0) == -1);
    CHECK(errno == EPERM);
    auto seg = ShmSegment::Attach(fds[0]);
    REQUIRE(seg.ok());
    CHECK(seg->capacity() == 8192);
    RequestHeader bad;
    bad.pool = 7;
    bad.method = 1;
    if (variant == 0) bad.magic = 0x12345678;
    if (variant == 1) bad.payload_len = 8193;  // past the channel
    if (variant == 2) bad.version = 3;
    seg->header()->request = bad;
    seg->header()->state.store(static_cast<uint32_t>(ShmState::kRequest));
    const uint64_t one = 1;
    REQUIRE(::write(fds[1], &one, sizeof one) == sizeof one);
    char b;
    CHECK(::recv(fd, &b, 1, 0) == 0);  // the runtime closed the connection
    ::close(fds[1]);
    ::close(fd);
  }
  CHECK(Eventually([&] { return n.Stats().malformed_frames == 3; }));
  CHECK(Eventually([&] { return n.Stats().shm_channels == 0; }));
  CHECK(*n.Client(IpcMode::kShm)->Call(7, 1, "still serving") == "still serving");
}

TEST_CASE("a client killed in the middle of a task does not wedge its worker") {
  // One worker, every task inline, no monitor: the held task keeps the only thread, so only
  // its own end can free the worker.
  Node n("  num_threads: 1\n  slow_task_us: 60000000\n  stuck_task_ms: 3600000\n");
  const std::string path = n.rt->config().socket_path;
  for (IpcMode mode : {IpcMode::kShm, IpcMode::kUnix}) {
    CAPTURE(IpcModeName(mode));
    g_hold = true;
    const int finished = g_finished.load();
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      if (RawConnect(path.c_str(), mode == IpcMode::kShm, 7, 5) >= 0) ::pause();
      _exit(1);
    }
    REQUIRE(Eventually([] { return g_inside.load() == 1; }));
    REQUIRE(::kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    g_hold = false;  // the task ends, its client long gone
    CHECK(Eventually([&] { return g_finished.load() == finished + 1; }));
    CHECK(*n.Client(mode)->Call(7, 1, "next") == "next");
  }
  CHECK(n.Stats().workers_added == 0);  // the worker freed itself; no thread came to help
}

TEST_CASE("the connection of a client that died is reaped after the grace, though a child it forked holds it") {
  Node n("  client_reap_grace_s: 0\n");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t parent = fork();
  REQUIRE(parent >= 0);
  const std::string path = n.rt->config().socket_path;
  if (parent == 0) {
    // The client: connect over shared memory, fork a child that keeps every descriptor (and so
    // the connection) open, then die.
    if (RawConnect(path.c_str(), true, 0, 0) < 0) _exit(1);
    if (fork() == 0) {
      const pid_t me = getpid();
      (void)!::write(ready[1], &me, sizeof me);
      ::pause();  // killed by the test
      _exit(0);
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(parent, &status, 0) == parent);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  pid_t orphan = 0;
  REQUIRE(::read(ready[0], &orphan, sizeof orphan) == sizeof orphan);
  ::close(ready[0]);
  ::close(ready[1]);
  CHECK(::kill(orphan, 0) == 0);  // alive, holding the dead client's connection open
  CHECK(Eventually([&] { return n.Stats().shm_channels == 1; }));
  CHECK(Eventually([&] { return n.Stats().reaped_clients == 1; }));
  CHECK(Eventually([&] { return n.Stats().shm_channels == 0; }));
  ::kill(orphan, SIGKILL);
  CHECK(*n.Client(IpcMode::kShm)->Call(7, 1, "alive") == "alive");
}

TEST_CASE("a client rides out a runtime restart: its next call reconnects, over a new channel") {
  Node n;
  RuntimeClient::Options o = n.Options(IpcMode::kShm);
  o.connect_wait_ms = 20000;
  auto c = RuntimeClient::Connect(o);
  REQUIRE(c.ok());
  CHECK(*(*c)->Call(7, 1, "before") == "before");
  n.Down();
  // The call waits for the runtime to come back (connect_wait_ms), then goes over a new
  // connection: idempotent calls are resent once after the old one broke.
  Result<std::string> r = Status(Code::kInternal, "not called");
  std::thread caller([&] { r = (*c)->Call(7, 1, "after"); });
  n.Up();
  caller.join();
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  CHECK(*r == "after");
  CHECK((*c)->mode() == IpcMode::kShm);
  // A pooled connection that died with the runtime is found dead before anything is sent on
  // it: even a call that is never resent goes out once, on a new connection.
  n.Down();
  n.Up();
  auto once = (*c)->Call(7, 1, "once", RuntimeClient::Resend::kNever);
  REQUIRE_MESSAGE(once.ok(), once.status().ToString());
  CHECK(*once == "once");
}

TEST_CASE("CancelWaits ends a call waiting for an absent runtime, and every wait after it") {
  Node n;
  RuntimeClient::Options o = n.Options(IpcMode::kUnix);
  o.connect_wait_ms = 600000;  // without the cancel, the call would wait ten minutes
  auto c = RuntimeClient::Connect(o);
  REQUIRE(c.ok());
  CHECK(*(*c)->Call(7, 1, "before") == "before");
  n.Down();
  Result<std::string> r = Status(Code::kInternal, "not called");
  std::thread caller([&] { r = (*c)->Call(7, 1, "after"); });
  (*c)->CancelWaits();  // before or during the caller's wait: either way it ends
  caller.join();
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK_MESSAGE(r.status().message().find("the client is closing") != std::string::npos, r.status().ToString());
  auto later = (*c)->Call(7, 1, "later");
  CHECK_MESSAGE(later.status().message().find("the client is closing") != std::string::npos, later.status().ToString());
  // A runtime that answers is still served.
  n.Up();
  CHECK(*(*c)->Call(7, 1, "back") == "back");
}

TEST_CASE("a worker stuck on one task gets a thread: the connections behind it are served, and it retires") {
  // One I/O worker, and no task is slow enough for the slow class: only the monitor can help.
  Node n("  num_threads: 1\n  stuck_task_ms: 20\n  slow_task_us: 60000000\n");
  auto held = n.Client(IpcMode::kShm);
  auto other = n.Client(IpcMode::kShm);
  g_hold = true;
  const int finished = g_finished.load();
  std::thread holder([&] { (void)held->Call(7, 5, "held"); });
  REQUIRE(Eventually([] { return g_inside.load() == 1; }));
  // The held task keeps the only worker's thread; the other client is still served.
  CHECK(*other->Call(7, 1, "behind it") == "behind it");
  RuntimeStats st = n.Stats();
  CHECK(st.workers_added >= 1);
  CHECK(st.extra_workers >= 1);
  CHECK(g_inside.load() == 1);  // still held
  g_hold = false;
  holder.join();
  CHECK(g_finished.load() == finished + 1);
  // Free again: the added thread retires.
  CHECK(Eventually([&] { return n.Stats().extra_workers == 0; }));
}

TEST_CASE("a method observed to be slow runs on the slow class; the I/O worker keeps serving meanwhile") {
  // slow_task_us 1: every method seen once is "slow"; the monitor is kept out of the way.
  Node n("  num_threads: 1\n  slow_task_us: 1\n  stuck_task_ms: 3600000\n");
  auto held = n.Client(IpcMode::kUnix);
  auto other = n.Client(IpcMode::kUnix);
  CHECK(*held->Call(7, 5, "learn") == "learn");  // the first run is inline: nothing known yet
  CHECK(*other->Call(7, 1, "learn") == "learn");
  const uint64_t before = n.Stats().slow_tasks;
  g_hold = true;
  std::thread holder([&] { (void)held->Call(7, 5, "held"); });
  REQUIRE(Eventually([] { return g_inside.load() == 1; }));
  // The held task runs on the slow class, so the one I/O worker answers the others (and their
  // tasks, slow too now, run on further threads of the class: it grows while saturated).
  CHECK(*other->Call(7, 1, "meanwhile") == "meanwhile");
  RuntimeStats st = n.Stats();
  CHECK(st.slow_tasks >= before + 1);
  CHECK(st.slow_threads >= 2);
  CHECK(st.workers_added == 0);
  g_hold = false;
  holder.join();
}

namespace {

// A device whose method 1 is asynchronous: the task is parked until the device "completes"
// (CompleteAll, from the test's thread, as an I/O completion would come). Method 3 echoes.
class DevicePool : public Pool {
 public:
  Result<std::string> Handle(uint32_t, std::string_view payload) override { return std::string(payload); }
  bool IsAsync(uint32_t method) const override { return method == 1; }
  void HandleAsync(uint32_t, std::string payload, Done done) override {
    std::lock_guard<std::mutex> l(mu_);
    parked_.emplace_back(std::move(payload), std::move(done));
  }
  size_t Parked() {
    std::lock_guard<std::mutex> l(mu_);
    return parked_.size();
  }
  void CompleteAll(const std::string& suffix) {
    std::vector<std::pair<std::string, Done>> now;
    {
      std::lock_guard<std::mutex> l(mu_);
      now.swap(parked_);
    }
    for (auto& [p, done] : now) done(p + suffix);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::string, Done>> parked_;
};

// Its method 2 awaits a subtask: the device's method 1, through the registry.
class GatherPool : public Pool {
 public:
  GatherPool(PoolRegistry* registry, uint32_t device) : registry_(registry), device_(device) {}
  Result<std::string> Handle(uint32_t, std::string_view) override { return Status(Code::kNotSupported, "asynchronous only"); }
  bool IsAsync(uint32_t method) const override { return method == 2; }
  void HandleAsync(uint32_t, std::string payload, Done done) override {
    registry_->Submit(device_, 1, std::move(payload), [done](Result<std::string> r) {
      done(r.ok() ? Result<std::string>("gather:" + *r) : r);
    });
  }

 private:
  PoolRegistry* const registry_;
  const uint32_t device_;
};

DevicePool* g_device = nullptr;

}  // namespace

TEST_CASE("an asynchronous task yields its worker while it awaits a device or a subtask") {
  // One worker; neither the monitor nor the slow class may help: only yielding frees it.
  char tmpl[] = "/tmp/clio_async_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir +
                                    "\n  http_port: 0\n  num_threads: 1\n  stuck_task_ms: 3600000\n  slow_task_us: 60000000\n"
                                    "compose:\n  - mod_name: device\n    pool_name: dev\n    pool_id: \"8.0\"\n"
                                    "  - mod_name: gather\n    pool_name: g\n    pool_id: \"9.0\"\n",
                                "a.yaml");
  REQUIRE(cfg.ok());
  Runtime rt(std::move(cfg).value());
  rt.RegisterModule("device", [](const ComposeEntry&, const std::string&, PoolRegistry&) -> Result<std::unique_ptr<Pool>> {
    auto p = std::make_unique<DevicePool>();
    g_device = p.get();
    return std::unique_ptr<Pool>(std::move(p));
  });
  rt.RegisterModule("gather", [](const ComposeEntry&, const std::string&, PoolRegistry& r) -> Result<std::unique_ptr<Pool>> {
    return std::unique_ptr<Pool>(new GatherPool(&r, 8));
  });
  REQUIRE(rt.Compose().ok());
  {
    testing::ServingThread serve(&rt);
    auto opts = RuntimeClient::OptionsFor(rt.config());
    auto a = RuntimeClient::Connect(opts);
    auto b = RuntimeClient::Connect(opts);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    Result<std::string> waited = Status(Code::kInternal, "not answered");
    std::thread device_wait([&] { waited = (*a)->Call(8, 1, "io"); });
    REQUIRE(Eventually([] { return g_device->Parked() == 1; }));
    CHECK(*(*b)->Call(8, 3, "meanwhile") == "meanwhile");  // the only worker is free
    g_device->CompleteAll("-done");
    device_wait.join();
    REQUIRE_MESSAGE(waited.ok(), waited.status().ToString());
    CHECK(*waited == "io-done");

    Result<std::string> gathered = Status(Code::kInternal, "not answered");
    std::thread subtask_wait([&] { gathered = (*a)->Call(9, 2, "x"); });
    REQUIRE(Eventually([] { return g_device->Parked() == 1; }));  // the subtask, parked
    CHECK(*(*b)->Call(8, 3, "still") == "still");
    g_device->CompleteAll("!");
    subtask_wait.join();
    REQUIRE_MESSAGE(gathered.ok(), gathered.status().ToString());
    CHECK(*gathered == "gather:x!");

    auto raw = (*b)->Call(0, static_cast<uint32_t>(AdminMethod::kRuntimeStats), "");
    REQUIRE(raw.ok());
    auto st = DecodeRuntimeStats(*raw);
    REQUIRE(st.ok());
    CHECK(st->async_tasks == 2);
    CHECK(st->workers_added == 0);
    CHECK(st->slow_tasks == 0);
  }
  (void)rt.StopPools();
  std::filesystem::remove_all(dir);
}

namespace {

// The value of an unlabelled series in this process's /metrics text.
double Series(const std::string& name) {
  const std::string text = metrics::Scrape();
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

TEST_CASE("a frame past runtime.max_inflight waits unread, in turn, and its wait ends with its connection") {
  const uint32_t port = FreePort();
  Node n("  tcp_port: " + std::to_string(port) + "\n  max_inflight: 64MiB\n");
  const std::string sock = n.rt->config().socket_path;
  const double waits_before = Series("clio_runtime_inflight_waits_total");
  // A: a frame that takes all but 32 bytes of the budget, its payload held back.
  const uint32_t big = (64u << 20) - 32;
  int a = RawConnect(sock.c_str(), false, 0, 0);
  REQUIRE(a >= 0);
  RequestHeader ha;
  ha.pool = 7;
  ha.method = 1;
  ha.request_id = 1;
  ha.payload_len = big;
  REQUIRE(::send(a, &ha, sizeof ha, MSG_NOSIGNAL) == sizeof ha);
  REQUIRE(Eventually([] { return Series("clio_runtime_inflight_bytes") == (64u << 20) - 32; }));
  // B: a TCP peer's Hello of 64 bytes does not fit: it waits. It never completes its hello, so
  // the hello deadline closes it, and its wait (and session) ends with the connection.
  int b = ConnectLoopback(port);
  RequestHeader hb;
  hb.method = static_cast<uint32_t>(AdminMethod::kHello);
  hb.payload_len = 64;
  REQUIRE(::send(b, &hb, sizeof hb, MSG_NOSIGNAL) == sizeof hb);
  REQUIRE(Eventually([&] { return Series("clio_runtime_inflight_waits_total") >= waits_before + 1; }));
  char c;
  CHECK(::recv(b, &c, 1, 0) == 0);  // closed by the deadline
  ::close(b);
  CHECK(Eventually([&] { return n.Stats().tcp_connections == 0; }));
  // C: a small frame waits too (the budget is A's), and is answered once A's task has run.
  int cfd = RawConnect(sock.c_str(), false, 0, 0);
  REQUIRE(cfd >= 0);
  const std::string small(100, 's');
  RequestHeader hc;
  hc.pool = 7;
  hc.method = 1;
  hc.request_id = 2;
  hc.payload_len = static_cast<uint32_t>(small.size());
  REQUIRE(::send(cfd, &hc, sizeof hc, MSG_NOSIGNAL) == sizeof hc);
  REQUIRE(::send(cfd, small.data(), small.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(small.size()));
  REQUIRE(Eventually([&] { return Series("clio_runtime_inflight_waits_total") >= waits_before + 2; }));
  // A's payload arrives; A's answer (its echo) is read after C's, which must not need it.
  std::thread sender([&] {
    const std::string payload(big, 'a');
    size_t sent = 0;
    while (sent < payload.size()) {
      const ssize_t k = ::send(a, payload.data() + sent, payload.size() - sent, MSG_NOSIGNAL);
      if (k <= 0) break;
      sent += static_cast<size_t>(k);
    }
  });
  ResponseHeader rc;
  REQUIRE(::recv(cfd, &rc, sizeof rc, MSG_WAITALL) == sizeof rc);
  CHECK(rc.code == 0);
  std::string echoed(rc.payload_len, '\0');
  REQUIRE(::recv(cfd, echoed.data(), echoed.size(), MSG_WAITALL) == static_cast<ssize_t>(echoed.size()));
  CHECK(echoed == small);
  ResponseHeader ra;
  REQUIRE(::recv(a, &ra, sizeof ra, MSG_WAITALL) == sizeof ra);
  CHECK(ra.code == 0);
  CHECK(ra.payload_len == big);
  std::string answer(ra.payload_len, '\0');
  REQUIRE(::recv(a, answer.data(), answer.size(), MSG_WAITALL) == static_cast<ssize_t>(answer.size()));
  sender.join();
  CHECK(Series("clio_runtime_inflight_bytes") == 0);
  ::close(a);
  ::close(cfd);
}
