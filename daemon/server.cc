#include "daemon/server.h"

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/codec.h"
#include "common/log.h"
#include "common/thread_annotations.h"
#include "daemon/asio.h"
#include <boost/asio/ssl.hpp>  // after daemon/asio.h (NOTES-debian12.md)
#include "daemon/client_reaper.h"
#include "daemon/config.h"
#include "daemon/io_workers.h"
#include "daemon/ipc.h"
#include "daemon/peers.h"
#include "daemon/pool.h"
#include "daemon/server_limits.h"
#include "daemon/shm_channel.h"
#include "daemon/tcp_owner.h"
#include "daemon/tls.h"
#include "daemon/token.h"
#include "daemon/workers.h"

namespace clio {

using LocalSocket = asio::local::stream_protocol::socket;
using TcpSocket = asio::ip::tcp::socket;
using TlsSocket = asio::ssl::stream<TcpSocket>;
// TCP, plain or under TLS: a handshake, no channels, no peer credentials.
template <typename Socket>
constexpr bool kIsTcp = !std::is_same_v<Socket, LocalSocket>;

namespace {

// One client connection, shared by the coroutine reading its socket and, on a Unix socket with
// a shared-memory channel, the one serving the channel. The last of them to finish frees it
// (and with it the segment).
template <typename Socket>
struct Connection {
  explicit Connection(Socket s) : sock(std::move(s)) {}
  Socket sock;
  std::optional<ShmSegment> segment;
  std::optional<asio::posix::stream_descriptor> wake;  // the runtime's end of the eventfd
  bool authenticated = false;  // TCP: after a good Prove; Unix: from the start
  // TCP: the nonces of the handshake, from Hello until Prove.
  std::string client_nonce, server_nonce;
  // Who is on the other end (set before any request is read; TCP: at its Hello).
  std::shared_ptr<const Peer> peer;
  // The client's end of the channel's eventfd, from OpenChannel until it is sent.
  int client_wake = -1;
  std::atomic<int> in_request{0};  // requests running now (the reaper closes only an idle one)
  uint32_t tcp_owner = kUnknownOwner;  // TCP: the local uid that connected (LocalTcpOwner)
  // TCP: who this connection counts against until its hello (PreHelloHolder); empty: nobody.
  std::string pre_hello_holder;
  // While a frame waits for the in-flight budget: its timer, which closing the connection
  // cancels (on the connection's strand) so that the wait ends with it.
  std::shared_ptr<asio::steady_timer> budget_wait;
  bool IsOpen() { return sock.lowest_layer().is_open(); }
  void Close() {
    boost::system::error_code ec;
    sock.lowest_layer().close(ec);
    if (budget_wait) budget_wait->cancel();
  }
  ~Connection() {
    if (client_wake >= 0) ::close(client_wake);
  }
};

// Before its Hello, a TCP peer has proven nothing: its frames are small, it has this long to
// say Hello, and only so many such peers are kept at once.
constexpr uint32_t kMaxUnauthenticatedPayload = 1024;
constexpr auto kHelloDeadline = std::chrono::seconds(5);
constexpr int64_t kMaxUnauthenticated = 64;
// ... and of those, one local user (the owner of the connecting socket) or, off this machine,
// one address holds at most this many.
constexpr int kMaxUnauthenticatedPerUid = 8;

// Who a TCP peer waiting for its hello counts against: its local uid (the kernel names it), or
// its address when it is not of this machine (all remote peers under one name would let one of
// them lock the others out). Empty: the administrators (root, the runtime's user), under the
// global cap only.
std::string PreHelloHolder(uint32_t owner, const asio::ip::tcp::endpoint* remote) {
  if (owner == 0 || owner == ::geteuid()) return "";
  if (owner != kUnknownOwner) return "uid " + std::to_string(owner);
  if (!remote) return "a peer of unknown address";
  asio::ip::address a = remote->address();
  if (a.is_v6() && a.to_v6().is_v4_mapped()) a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  return "address " + a.to_string();
}
// A frame's payload is read in pieces of at most this, the buffer growing as they arrive.
constexpr size_t kPayloadChunk = 1u << 20;
// A peer that may call reader methods only (docs/security.md) sends paths and names: its
// frames and its channel hold at most this, and one uid keeps at most so many connections.
constexpr uint32_t kMaxReaderPayload = 64u << 10;
constexpr int kMaxReaderConnections = 32;

bool IsHandshake(const RequestHeader& h) {
  return h.pool == 0 && (h.method == static_cast<uint32_t>(AdminMethod::kHello) ||
                         h.method == static_cast<uint32_t>(AdminMethod::kProve));
}

bool IsTransportMethod(const RequestHeader& h) {
  return IsHandshake(h) || (h.pool == 0 && h.method == static_cast<uint32_t>(AdminMethod::kOpenChannel));
}

bool IsStop(const RequestHeader& h) { return h.pool == 0 && h.method == static_cast<uint32_t>(AdminMethod::kStop); }

}  // namespace

class Server::Impl {
 public:
  Impl(Options o, Dispatcher d, AsyncDispatcher a)
      : options_(WithLimits(std::move(o))), dispatch_(std::move(d)), async_(std::move(a)), costs_(options_.slow_task_us),
        slow_(1, std::max<uint32_t>(4, 4 * options_.threads), std::chrono::seconds(5)),
        workers_(options_.threads, options_.stuck_task_ms), ioc_(workers_.first()),
        unix_acceptor_(ioc_), tcp_acceptor_(ioc_), signals_(ioc_), reap_timer_(ioc_) {}

  // A budget below one frame would keep the largest frames waiting for ever.
  static Options WithLimits(Options o) {
    o.max_inflight_bytes = std::max<uint64_t>(o.max_inflight_bytes, kMaxPayload);
    return o;
  }

  Status Listen() {
    const std::string& path = options_.socket_path;
    MakeClientDir(std::filesystem::path(path).parent_path().string());
    // A socket file that answers belongs to a live runtime; one that does not is stale.
    if (access(path.c_str(), F_OK) == 0) {
      RuntimeClient::Options o;
      o.socket_path = path;
      o.mode = IpcMode::kUnix;
      if (RuntimeClient::Connect(o).ok())
        return Status(Code::kBusy, "another CLIO runtime is already serving on " + path +
                                       " (stop it with 'clio_run stop')");
      ::unlink(path.c_str());
    }
    boost::system::error_code ec;
    asio::local::stream_protocol::endpoint ep(path);
    unix_acceptor_.open(ep.protocol(), ec);
    if (!ec) unix_acceptor_.bind(ep, ec);
    if (!ec) unix_acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return Status::FromErrno(ec.value(), "listening on " + path);
    ShareWithClioGroup(path);
    if (options_.tcp_port != 0) {
      if (options_.token.empty()) return InvalidArgument("TCP needs the runtime's token (runtime.token_file)");
      auto addr = asio::ip::make_address(options_.tcp_address, ec);
      if (ec) return InvalidArgument("runtime.tcp_address '" + options_.tcp_address + "': " + ec.message());
      if (!options_.tls_cert_file.empty()) {
        tls_.emplace(asio::ssl::context::tls_server);
        CLIO_RETURN_IF_ERROR(SetUpServerTls(tls_->native_handle(), options_.tls_cert_file, options_.tls_key_file));
      } else if (!IsLoopbackAddress(options_.tcp_address)) {
        return InvalidArgument("runtime.tcp_address '" + options_.tcp_address +
                               "' is not a loopback address: the runtime serves TCP off this machine only over TLS; "
                               "set runtime.tls_cert_file and runtime.tls_key_file");
      }
      asio::ip::tcp::endpoint tep(addr, static_cast<uint16_t>(options_.tcp_port));
      tcp_acceptor_.open(tep.protocol(), ec);
      if (!ec) tcp_acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
      if (!ec) tcp_acceptor_.bind(tep, ec);
      if (!ec) tcp_acceptor_.listen(asio::socket_base::max_listen_connections, ec);
      if (ec)
        return Status::FromErrno(ec.value(), "listening on TCP " + options_.tcp_address + ":" +
                                                 std::to_string(options_.tcp_port) + " (runtime.tcp_port)");
      tcp_port_ = tcp_acceptor_.local_endpoint().port();
    }
    return Status::Ok();
  }

  void Run(const std::function<void()>& on_ready) {
    signals_.add(SIGINT);
    signals_.add(SIGTERM);
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (!ec) {
        CLIO_LOG_INFO("signal {}: stopping", sig);
        ioc_.stop();
      }
    });
    asio::co_spawn(ioc_, AcceptUnix(), asio::detached);
    if (tcp_acceptor_.is_open()) asio::co_spawn(ioc_, AcceptTcp(), asio::detached);
    ScheduleReap();
    if (on_ready) on_ready();
    workers_.Run();  // returns on Stop(), a signal or a Stop request
    slow_.Stop();  // the slow tasks running finish; their answers go nowhere
    budget_.Stop();
    boost::system::error_code ec;
    unix_acceptor_.close(ec);
    tcp_acceptor_.close(ec);
    ::unlink(options_.socket_path.c_str());
  }

  void Stop() { ioc_.stop(); }

  Stats stats() const {
    Stats s;
    s.connections = connections_.load();
    s.shm_channels = shm_channels_.load();
    s.tcp_connections = tcp_connections_.load();
    s.malformed_frames = malformed_.load();
    s.reaped_clients = reaped_.load();
    s.tcp_port = tcp_port_;
    s.extra_workers = workers_.extra_threads();
    s.workers_added = workers_.added();
    s.slow_threads = slow_.threads();
    s.slow_tasks = slow_tasks_.load();
    s.async_tasks = async_tasks_.load();
    s.budget_waits = budget_.waits();
    s.refused_connections = refused_.load();
    s.tls_handshake_failures = tls_failures_.load();
    s.inflight_bytes = budget_.inflight();
    return s;
  }

 private:
  asio::strand<asio::io_context::executor_type> NextStrand() { return workers_.NextStrand(); }

  // Runs one request. Tasks predicted cheap run inline on this I/O worker (marked busy for the
  // monitor); the others run on the slow class while this coroutine waits, so the worker
  // serves its other connections meanwhile. Every run time feeds the prediction.
  // `peer` by reference: the connection's, which outlives the request.
  asio::awaitable<Result<std::string>> RunTask(const RequestHeader& h, const std::string& payload,
                                               const std::shared_ptr<const Peer>& peer) {
    const uint32_t pool = h.pool, method = h.method;
    const RequestContext context{h.client, h.request_id, (h.flags & kRequestResent) != 0, peer.get()};
    // A pool query, when one travels, is the front of the payload.
    std::string_view body = payload;
    PoolQuery query;
    if (h.flags & kRequestHasQuery) {
      auto q = DecodePoolQuery(&body);
      if (!q.ok()) co_return q.status();
      query = *q;
    }
    if (async_.handles && async_.handles(pool, method)) {
      // The pool's task waits on something: this coroutine yields until it ends; the worker
      // serves its other connections meanwhile.
      ++async_tasks_;
      co_return co_await AwaitElsewhere([this, pool, method, context, query, body](Answered answered) {
        ScopedRequest scope(context);
        async_.start(pool, method, std::string(body), query, std::move(answered));
      });
    }
    if (costs_.Slow(pool, method)) {
      co_return co_await AwaitElsewhere([this, pool, method, context, query, body](Answered answered) {
        slow_.Submit([this, pool, method, context, query, payload = std::string(body), answered = std::move(answered)] {
          const int64_t t0 = NowNs();
          ScopedRequest scope(context);
          Result<std::string> r = dispatch_(pool, method, payload, query);
          Learn(pool, method, r.status(), t0);
          ++slow_tasks_;  // before the answer: whoever gets it sees the task counted
          answered(std::move(r));
        });
      });
    }
    const int64_t t0 = NowNs();
    server_internal::IoWorkers::MarkBusy(t0);
    Result<std::string> r = Status(Code::kInternal, "unanswered");
    {
      ScopedRequest scope(context);
      r = dispatch_(pool, method, body, query);
    }
    server_internal::IoWorkers::MarkBusy(0);
    Learn(pool, method, r.status(), t0);
    co_return r;
  }

  // Runs `start` (which hands the answer, once, to the callback it gets, from any thread) and
  // waits for the answer without holding the worker. The answer reaches this coroutine through
  // a post to its own executor (the connection's strand), which wakes a timer it waits on:
  // plain co_awaits only (g++ 12 mishandles temporaries in fancier co_await expressions).
  using Answered = std::function<void(Result<std::string>)>;
  asio::awaitable<Result<std::string>> AwaitElsewhere(std::function<void(Answered)> start) {
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer signal(ex, asio::steady_timer::time_point::max());
    auto result = std::make_shared<std::optional<Result<std::string>>>();
    asio::steady_timer* wake = &signal;  // lives until the answer came: this frame waits for it
    start([ex, result, wake](Result<std::string> r) {
      auto answer = std::make_shared<Result<std::string>>(std::move(r));
      asio::post(ex, [result, wake, answer] {
        *result = std::move(*answer);
        wake->cancel();
      });
    });
    boost::system::error_code ec;
    // The answer may come (posted) before the wait begins: its post runs after this coroutine
    // suspends, so the cancel always finds the wait; the loop guards against anything else.
    while (!result->has_value()) co_await signal.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_return std::move(**result);
  }

  // A frame from a peer that may call reader methods only: at most kMaxReaderPayload bytes.
  static Status ReaderFrame(const Peer& peer, uint64_t payload_len) {
    if (peer.May(CallerClass::kMount) || payload_len <= kMaxReaderPayload) return Status::Ok();
    return Status(Code::kPermissionDenied, "a frame of " + std::to_string(payload_len) + " bytes from " +
                                               peer.Describe() + ", who may call reader methods only (at most " +
                                               std::to_string(kMaxReaderPayload) + " bytes)");
  }

  // Connections per reader uid: at most kMaxReaderConnections. Root and the runtime's user are
  // not counted (they may do anything anyway).
  static std::string ReaderHolder(const Peer& peer) {
    return peer.May(CallerClass::kMount) ? std::string() : "uid " + std::to_string(peer.uid);
  }
  template <typename Socket>
  void EndUnauthenticated(const Connection<Socket>& c) {
    --unauthenticated_;
    pre_hello_.Release(c.pre_hello_holder);
  }

  // The in-flight payload budget (runtime.max_inflight; server_limits.h). Closing the
  // connection (the hello deadline, the reaper, a stop) cancels a wait: the frame then gives
  // its place up.
  template <typename Socket>
  asio::awaitable<bool> Admit(Connection<Socket>& conn, uint64_t n) {
    bool admitted = false;
    admitted = co_await budget_.Admit(n, &conn.budget_wait, [&conn] { return conn.IsOpen(); });
    co_return admitted;
  }
  void Release(uint64_t n) { budget_.Release(n); }
  // A frame's share of the budget, given back once its task has run (before its answer is
  // sent: a client slow to read an answer holds no budget) or when the session ends, with a
  // payload buffer larger than a chunk (a connection keeps at most that between frames).
  struct Admitted {
    Impl* s;
    uint64_t n;
    std::string* payload;
    void Done() {
      if (payload->capacity() > kPayloadChunk) std::string().swap(*payload);
      s->Release(std::exchange(n, 0));
    }
    ~Admitted() { Done(); }
  };

  // A request that ran (not one refused for an unknown pool or method, which a client may
  // send at will) teaches the cost model its run time.
  void Learn(uint32_t pool, uint32_t method, const Status& s, int64_t t0_ns) {
    if (s.code() == Code::kNotFound || s.code() == Code::kNotSupported) return;
    costs_.Observe(pool, method, static_cast<double>(NowNs() - t0_ns) / 1000.0);
  }

  asio::awaitable<void> AcceptUnix() {
    while (true) {
      boost::system::error_code ec;
      auto strand = NextStrand();
      LocalSocket sock = co_await unix_acceptor_.async_accept(strand, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        CLIO_LOG_WARN("accept on {}: {}", options_.socket_path, ec.message());
        continue;
      }
      auto conn = std::make_shared<Connection<LocalSocket>>(std::move(sock));
      conn->peer = UnixPeer(conn->sock.native_handle());
      if (!readers_.Admit(ReaderHolder(*conn->peer))) {
        if (const uint64_t n = ++refused_; LogThisOne(n))
          CLIO_LOG_WARN("uid {} holds {} connections already, the most for a reader: one more refused ({} so far)",
                        conn->peer->uid, kMaxReaderConnections, n);
        conn->sock.close(ec);
        continue;
      }
      // The socket's mode and group decided who may connect; the peer's class, what it may call.
      conn->authenticated = true;
      asio::co_spawn(strand, Session(conn, static_cast<pid_t>(conn->peer->pid)), asio::detached);
    }
  }

  asio::awaitable<void> AcceptTcp() {
    while (true) {
      boost::system::error_code ec;
      auto strand = NextStrand();
      TcpSocket sock = co_await tcp_acceptor_.async_accept(strand, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted) co_return;
        CLIO_LOG_WARN("accept on TCP port {}: {}", tcp_port_, ec.message());
        continue;
      }
      if (unauthenticated_.load() >= kMaxUnauthenticated) {
        if (const uint64_t n = ++refused_; LogThisOne(n))
          CLIO_LOG_WARN("TCP: {} connections wait for their hello already; one more refused ({} so far)",
                        kMaxUnauthenticated, n);
        sock.close(ec);
        continue;
      }
      boost::system::error_code pe, le;
      const auto remote = sock.remote_endpoint(pe), local = sock.local_endpoint(le);
      const uint32_t owner = pe || le ? kUnknownOwner : LocalTcpOwner(remote.data(), local.data());
      const std::string holder = PreHelloHolder(owner, pe ? nullptr : &remote);
      if (!pre_hello_.Admit(holder)) {
        if (const uint64_t n = ++refused_; LogThisOne(n))
          CLIO_LOG_WARN("TCP: {} holds {} connections waiting for their hello already; one more refused ({} so far)",
                        holder, kMaxUnauthenticatedPerUid, n);
        sock.close(ec);
        continue;
      }
      sock.set_option(asio::ip::tcp::no_delay(true), ec);
      if (tls_) {
        // SSL_new may fail (memory): that connection is dropped, the slot given back, and the
        // acceptor goes on.
        std::shared_ptr<Connection<TlsSocket>> conn;
        try {
          conn = std::make_shared<Connection<TlsSocket>>(TlsSocket(std::move(sock), *tls_));
        } catch (const std::exception& e) {
          CLIO_LOG_WARN("TCP: a TLS session could not be made: {}", e.what());
          pre_hello_.Release(holder);
          continue;
        }
        ++unauthenticated_;
        conn->tcp_owner = owner;
        conn->pre_hello_holder = holder;
        asio::co_spawn(strand, HelloDeadline(conn), asio::detached);
        asio::co_spawn(strand, TlsSession(conn), asio::detached);
      } else {
        ++unauthenticated_;
        auto conn = std::make_shared<Connection<TcpSocket>>(std::move(sock));
        conn->tcp_owner = owner;
        conn->pre_hello_holder = holder;
        asio::co_spawn(strand, HelloDeadline(conn), asio::detached);
        asio::co_spawn(strand, Session(conn, 0), asio::detached);
      }
    }
  }

  // The TLS handshake, then the session. The hello deadline covers both: a peer that opens a
  // connection and stalls the handshake is closed as one that says no Hello.
  asio::awaitable<void> TlsSession(std::shared_ptr<Connection<TlsSocket>> conn) {
    boost::system::error_code ec;
    co_await conn->sock.async_handshake(asio::ssl::stream_base::server, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      if (const uint64_t n = ++tls_failures_; LogThisOne(n))
        CLIO_LOG_WARN("TCP: TLS handshake failed: {} ({} so far)", ec.message(), n);
      EndUnauthenticated(*conn);
      conn->Close();
      co_return;
    }
    co_await Session(conn, 0);
  }

  // Closes a TCP connection that has not said Hello in time.
  template <typename Socket>
  asio::awaitable<void> HelloDeadline(std::shared_ptr<Connection<Socket>> conn) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    t.expires_after(kHelloDeadline);
    boost::system::error_code ec;
    co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!conn->authenticated && conn->IsOpen()) {
      if (const uint64_t n = ++hello_timeouts_; LogThisOne(n))
        CLIO_LOG_WARN("TCP client said no hello within {} s: connection closed ({} so far)", kHelloDeadline.count(), n);
      conn->Close();
    }
  }

  // Reads frames in order and answers each; transport methods (OpenChannel, Hello) are
  // answered here, the rest dispatched. A frame that fails its checks closes the connection.
  template <typename Socket>
  asio::awaitable<void> Session(std::shared_ptr<Connection<Socket>> conn, pid_t pid) {
    constexpr bool kTcp = kIsTcp<Socket>;
    ++connections_;
    if (kTcp) ++tcp_connections_;
    const uint64_t id = next_conn_id_++;
    if constexpr (!kTcp) Register(id, conn, pid);
    struct Closed {
      Impl* s;
      std::shared_ptr<Connection<Socket>> c;
      uint64_t id;
      ~Closed() {
        --s->connections_;
        if (kTcp) --s->tcp_connections_;
        if (kTcp && !c->authenticated) s->EndUnauthenticated(*c);
        if constexpr (kTcp) {
          // Closed now, not when the hello deadline's timer lets go of the connection: a dropped
          // peer's socket must not outlive its session.
          c->Close();
        }
        if constexpr (!kTcp) {
          s->reaper_.Forget(id);
          s->readers_.Release(ReaderHolder(*c->peer));
          if (c->wake) {
            boost::system::error_code ec;
            c->wake->close(ec);  // ends the channel's coroutine
          }
        }
      }
    } closed{this, conn, id};
    boost::system::error_code ec;
    std::string payload;
    while (true) {
      RequestHeader h;
      co_await asio::async_read(conn->sock, asio::buffer(&h, sizeof h), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;  // client went away
      Status valid = ValidateRequestHeader(h);
      if (valid.ok() && !conn->authenticated && h.payload_len > kMaxUnauthenticatedPayload)
        valid = Corruption("a frame of " + std::to_string(h.payload_len) + " bytes before the hello");
      if (valid.ok() && conn->peer) valid = ReaderFrame(*conn->peer, h.payload_len);
      if (!valid.ok()) {
        ++malformed_;
        CLIO_LOG_WARN("dropping client connection: {}", valid.ToString());
        // A version not served: the client is told why, then closed. A small payload is read
        // first, so the close does not reset the connection under the answer.
        if (valid.code() == Code::kNotSupported && h.magic == kIpcMagic) {
          if (h.payload_len <= kMaxUnauthenticatedPayload) {
            payload.resize(h.payload_len);
            co_await asio::async_read(conn->sock, asio::buffer(payload.data(), payload.size()),
                                      asio::redirect_error(asio::use_awaitable, ec));
          }
          if (!ec) co_await Reply(conn->sock, h, valid);
        }
        co_return;
      }
      // The payload's bytes count against the runtime's in-flight budget (runtime.max_inflight)
      // from before they are read until the answer is sent: past it, frames wait unread, and
      // their clients' sends block in the kernel. The payload grows as its bytes arrive: a peer
      // that announces a 64 MiB frame and sends nothing costs what it sent, not 64 MiB. Plain
      // co_await statements (g++ 12).
      bool admitted_now = false;
      admitted_now = co_await Admit(*conn, h.payload_len);
      if (!admitted_now) co_return;  // closed while it waited
      Admitted admitted{this, h.payload_len, &payload};
      payload.clear();
      // Admitted, the whole frame is counted: its buffer is reserved at once (address space,
      // no pages until bytes arrive), so growing it never copies.
      payload.reserve(h.payload_len);
      while (payload.size() < h.payload_len) {
        const size_t have = payload.size();
        const size_t n = std::min<size_t>(kPayloadChunk, h.payload_len - have);
        payload.resize(have + n);
        co_await asio::async_read(conn->sock, asio::buffer(payload.data() + have, n),
                                  asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return;
      }
      if (!conn->authenticated && !IsHandshake(h)) {
        CLIO_LOG_WARN("TCP client sent a request before its hello: connection closed");
        co_await Reply(conn->sock, h, Status(Code::kPermissionDenied, "send Hello with the runtime's token first"));
        co_return;
      }
      // Not a conditional expression: g++ 12 miscompiles co_await inside one (a temporary is
      // destroyed twice).
      Result<std::string> r = Status(Code::kInternal, "unanswered");
      const bool was_authenticated = conn->authenticated;
      ++conn->in_request;
      if (IsTransportMethod(h)) r = Transport(*conn, h, payload);
      else r = co_await RunTask(h, payload, conn->peer);
      --conn->in_request;
      admitted.Done();
      if (kTcp && !was_authenticated && conn->authenticated) EndUnauthenticated(*conn);
      // A failed handshake step (a wrong proof, a step out of order): the answer says why, and
      // the connection ends.
      const bool refused = !conn->authenticated && !r.ok();
      if (!co_await Reply(conn->sock, h, r)) co_return;
      if (refused) co_return;
      if constexpr (!kTcp) {
        if (h.method == static_cast<uint32_t>(AdminMethod::kOpenChannel) && h.pool == 0 && r.ok()) {
          // The descriptors follow the answer, in one byte of their own. The channel counts
          // from here (before its client can ask), until ServeChannel ends.
          const int fds[2] = {conn->segment->fd(), conn->client_wake};
          ++shm_channels_;
          Status sent = SendFds(conn->sock.native_handle(), fds, 2);
          ::close(conn->client_wake);
          conn->client_wake = -1;
          if (!sent.ok()) {
            --shm_channels_;
            CLIO_LOG_WARN("handing a shared-memory channel to pid {}: {}", pid, sent.ToString());
            co_return;
          }
          asio::co_spawn(conn->sock.get_executor(), ServeChannel(conn), asio::detached);
        }
      }
      if (IsStop(h) && r.ok()) {
        ioc_.stop();  // after the reply is on its way
        co_return;
      }
    }
  }

  template <typename Socket>
  asio::awaitable<bool> Reply(Socket& sock, const RequestHeader& h, Result<std::string> answer) {
    const Result<std::string> r = BoundedAnswer(std::move(answer));
    std::string_view body;
    const ResponseHeader rh = AnswerHeader(h, r, &body);
    std::array<asio::const_buffer, 2> out = {asio::buffer(&rh, sizeof rh), asio::buffer(body.data(), rh.payload_len)};
    boost::system::error_code ec;
    co_await asio::async_write(sock, out, asio::redirect_error(asio::use_awaitable, ec));
    co_return !ec;
  }

  // OpenChannel and Hello. Runs on the connection's own coroutine.
  template <typename Socket>
  Result<std::string> Transport(Connection<Socket>& conn, const RequestHeader& h, std::string_view payload) {
    if (IsHandshake(h)) {
      if constexpr (!kIsTcp<Socket>) {
        return Status(Code::kNotSupported, "the Unix socket needs no handshake: the kernel names the peer");
      } else {
        return Handshake(conn, h, payload);
      }
    }
    CLIO_ASSIGN_OR_RETURN(adminproto::OpenChannel open, wire::Decode<adminproto::OpenChannel>(payload));
    const uint32_t wanted = open.wanted;
    if constexpr (kIsTcp<Socket>) {
      return Status(Code::kNotSupported, "shared-memory channels need the runtime on this machine (Unix socket)");
    } else {
      if (conn.segment) return Status(Code::kAlreadyExists, "this connection has a shared-memory channel already");
      const uint32_t most = conn.peer && !conn.peer->May(CallerClass::kMount)
                                ? std::min(options_.shm_channel_bytes, kMaxReaderPayload)
                                : options_.shm_channel_bytes;
      const uint32_t bytes = std::clamp(wanted, kMinShmChannelBytes, std::max(most, kMinShmChannelBytes));
      CLIO_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(bytes));
      const int ev = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (ev < 0) return Status::FromErrno(errno, "eventfd for a shared-memory channel");
      const int client_end = ::dup(ev);
      if (client_end < 0) {
        ::close(ev);
        return Status::FromErrno(errno, "dup of a channel's eventfd");
      }
      conn.segment.emplace(std::move(seg));
      conn.wake.emplace(conn.sock.get_executor(), ev);
      conn.client_wake = client_end;  // sent right after the answer
      return wire::Encode(adminproto::OpenChannelReply{bytes});
    }
  }

  // The TCP handshake: Hello (the client's nonce) is answered with the server's nonce and its
  // proof of the token; Prove (the client's proof over both nonces) authenticates the
  // connection as the node's administrator. Neither side sends the token.
  template <typename Socket>
  Result<std::string> Handshake(Connection<Socket>& conn, const RequestHeader& h, std::string_view payload) {
    if (conn.authenticated) return Status(Code::kAlreadyExists, "this connection has made its handshake already");
    // Over TLS both proofs cover the session's keys (TokenProof): no relaying into another one.
    std::string binding;
    if constexpr (std::is_same_v<Socket, TlsSocket>) {
      CLIO_ASSIGN_OR_RETURN(binding, TlsBinding(conn.sock.native_handle()));
    }
    if (h.method == static_cast<uint32_t>(AdminMethod::kHello)) {
      CLIO_ASSIGN_OR_RETURN(adminproto::Hello hello, wire::Decode<adminproto::Hello>(payload));
      if (!conn.server_nonce.empty()) return Status(Code::kPermissionDenied, "a second Hello on one connection");
      if (hello.nonce.size() != kNonceBytes)
        return Status(Code::kPermissionDenied, "a Hello nonce of " + std::to_string(hello.nonce.size()) + " bytes, not " +
                                                   std::to_string(kNonceBytes) + " (an older client?)");
      conn.client_nonce = hello.nonce;
      conn.server_nonce = NewNonce();
      return wire::Encode(adminproto::HelloReply{
          conn.server_nonce,
          TokenProof(options_.token, "clio-runtime", conn.client_nonce, conn.server_nonce, binding)});
    }
    CLIO_ASSIGN_OR_RETURN(adminproto::Prove prove, wire::Decode<adminproto::Prove>(payload));
    if (conn.server_nonce.empty()) return Status(Code::kPermissionDenied, "Prove before Hello");
    if (!TokensMatch(prove.proof,
                     TokenProof(options_.token, "clio-client", conn.server_nonce, conn.client_nonce, binding))) {
      CLIO_LOG_WARN("TCP client proved a wrong token: connection closed");
      return Status(Code::kPermissionDenied, "wrong token (the runtime's runtime.token_file)");
    }
    conn.peer = TokenPeer();
    conn.authenticated = true;
    return std::string();
  }

  // Serves a connection's shared-memory channel: each wake-up on its eventfd is a request in
  // the segment. The request is copied out before it is decoded (the client can write the
  // segment at any time); the answer goes back into the segment, or its payload over the
  // socket when it does not fit.
  asio::awaitable<void> ServeChannel(std::shared_ptr<Connection<LocalSocket>> conn) {
    // Counted from OpenChannel (Transport) until the channel ends, whichever way it ends; then
    // the connection goes too, so that its client, waiting on the futex, sees the hang-up.
    struct Gone {
      std::atomic<int64_t>& n;
      std::shared_ptr<Connection<LocalSocket>> c;
      ~Gone() {
        --n;
        boost::system::error_code ec;
        c->sock.close(ec);
      }
    } gone{shm_channels_, conn};
    ShmSegment& seg = *conn->segment;
    ShmChannelHeader* sh = seg.header();
    std::string payload;
    boost::system::error_code ec;
    while (true) {
      co_await conn->wake->async_wait(asio::posix::descriptor_base::wait_read,
                                      asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;  // closed with the connection
      uint64_t count = 0;  // the wake-ups since the last read; a request is in the segment
      if (::read(conn->wake->native_handle(), &count, sizeof count) < 0 && errno != EAGAIN) co_return;
      auto taken = TakeChannelRequest(seg, &payload);
      if (!taken.ok() && taken.status().code() == Code::kNotFound) continue;  // nothing posted
      if (!taken.ok()) {
        ++malformed_;
        CLIO_LOG_WARN("dropping client connection: shared-memory channel: {}", taken.status().ToString());
        co_return;
      }
      const RequestHeader h = *taken;
      // Copied out already: the channel's size bounded it, and the reader's cap on that size
      // holds here too (a segment granted before a config change may be larger).
      Status reader = ReaderFrame(*conn->peer, h.payload_len);
      if (!reader.ok()) {
        ++malformed_;
        CLIO_LOG_WARN("dropping client connection: shared-memory channel: {}", reader.ToString());
        co_return;
      }
      Result<std::string> r = Status(Code::kNotSupported, "transport methods go over the socket");
      ++conn->in_request;
      if (!IsTransportMethod(h)) r = co_await RunTask(h, payload, conn->peer);
      --conn->in_request;
      r = BoundedAnswer(std::move(r));
      std::string_view body;
      ResponseHeader rh = AnswerHeader(h, r, &body);
      const bool fits = rh.payload_len <= seg.capacity();
      if (fits) std::memcpy(seg.data(), body.data(), rh.payload_len);
      else rh.flags = kResponsePayloadOnSocket;
      sh->response = rh;
      sh->state.store(static_cast<uint32_t>(ShmState::kResponse), std::memory_order_release);
      FutexWake(&sh->state);
      if (!fits) {
        co_await asio::async_write(conn->sock, asio::buffer(body.data(), rh.payload_len),
                                   asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return;
      }
      if (IsStop(h) && r.ok()) {
        ioc_.stop();
        co_return;
      }
    }
  }

  // The reaper (client_reaper.h) looks once a second.
  void ScheduleReap() {
    reap_timer_.expires_after(std::chrono::seconds(1));
    reap_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      reaped_ += reaper_.Reap(std::chrono::steady_clock::now());
      ScheduleReap();
    });
  }
  void Register(uint64_t id, const std::shared_ptr<Connection<LocalSocket>>& conn, pid_t pid) {
    std::weak_ptr<Connection<LocalSocket>> weak = conn;
    reaper_.Watch(id, {pid,
                       [weak] {
                         auto c = weak.lock();
                         return c && c->in_request.load() > 0;
                       },
                       [weak] {
                         auto c = weak.lock();
                         if (!c) return;
                         asio::post(c->sock.get_executor(), [c] {
                           boost::system::error_code ec;
                           c->Close();  // the session's read (or budget wait) fails: it ends, the channel too
                           if (c->wake) c->wake->close(ec);
                         });
                       }});
  }

  const Options options_;
  const Dispatcher dispatch_;
  const AsyncDispatcher async_;
  // What the coroutines touch as they end, declared before the io_contexts: destroying an
  // io_context destroys the coroutines still suspended in it.
  std::atomic<int64_t> connections_{0}, shm_channels_{0}, tcp_connections_{0};
  std::atomic<uint64_t> malformed_{0}, reaped_{0};
  std::atomic<int64_t> unauthenticated_{0};  // TCP connections waiting for their hello
  server_internal::InflightBudget budget_{options_.max_inflight_bytes};
  server_internal::HolderCounts readers_{kMaxReaderConnections};   // by ReaderHolder
  server_internal::HolderCounts pre_hello_{kMaxUnauthenticatedPerUid};  // TCP, by PreHelloHolder
  std::atomic<uint64_t> refused_{0};  // connections closed at accept for a limit, ever
  std::atomic<uint64_t> tls_failures_{0};  // TLS handshakes that failed, ever
  std::atomic<uint64_t> hello_timeouts_{0};  // TCP connections closed by the hello deadline, ever
  ClientReaper reaper_{options_.reap_grace_s};
  CostModel costs_;
  TaskClass slow_;  // declared before the homes: its tasks post their answers into them
  std::atomic<uint64_t> slow_tasks_{0}, async_tasks_{0};
  server_internal::IoWorkers workers_;  // runtime.num_threads
  asio::io_context& ioc_;  // the first worker's: the acceptors, signals, the reaper and stop
  std::atomic<uint64_t> next_conn_id_{1};
  asio::local::stream_protocol::acceptor unix_acceptor_;
  asio::ip::tcp::acceptor tcp_acceptor_;
  std::optional<asio::ssl::context> tls_;  // TCP speaks TLS (runtime.tls_cert_file)
  asio::signal_set signals_;
  asio::steady_timer reap_timer_;
  uint32_t tcp_port_ = 0;
};

Server::Server(Options options, Dispatcher dispatch, AsyncDispatcher async)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(dispatch), std::move(async))) {}
Server::~Server() = default;
Status Server::Listen() { return impl_->Listen(); }
void Server::Run(const std::function<void()>& on_ready) { impl_->Run(on_ready); }
void Server::Stop() { impl_->Stop(); }
Server::Stats Server::stats() const { return impl_->stats(); }

}  // namespace clio
