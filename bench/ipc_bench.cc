// Round trips of a noop task (the admin pool's Ping) over each client transport, beside a bare
// ping-pong over the same kind of channel, in one run; then noop tasks per second with 1, 2
// and 8 client threads per transport, TCP also under TLS. The runtime runs in this process (its own worker
// threads, real sockets, futexes and eventfds); the bare ping-pongs run between two threads.
//
//   ipc_bench [round trips per figure (20000)] [seconds per throughput figure (1)]
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/shm_channel.h"
#include "daemon/test_certs.h"
#include "daemon/test_serving.h"

using namespace clio;
using Clock = std::chrono::steady_clock;

namespace {

struct Latency {
  double median_us = 0, p99_us = 0;
};

// Times `n` calls of `once` after a warm-up of n/10.
Latency Measure(size_t n, const std::function<void()>& once) {
  for (size_t i = 0; i < n / 10; ++i) once();
  std::vector<double> us(n);
  for (size_t i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    once();
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  std::sort(us.begin(), us.end());
  return {us[n / 2], us[std::min(n - 1, n * 99 / 100)]};
}

void Die(const std::string& what) {
  std::fprintf(stderr, "ipc_bench: %s\n", what.c_str());
  std::exit(1);
}

// Bare ping-pong over a stream socket pair (Unix or TCP): 32 bytes out, 24 back, as a frame.
Latency StreamPingPong(int client, int server, size_t n) {
  std::thread echo([&] {
    char req[32], resp[24] = {};
    while (true) {
      if (::recv(server, req, sizeof req, MSG_WAITALL) != sizeof req) return;
      if (::send(server, resp, sizeof resp, MSG_NOSIGNAL) != sizeof resp) return;
    }
  });
  char req[32] = {}, resp[24];
  Latency l = Measure(n, [&] {
    if (::send(client, req, sizeof req, MSG_NOSIGNAL) != sizeof req) Die("send");
    if (::recv(client, resp, sizeof resp, MSG_WAITALL) != sizeof resp) Die("recv");
  });
  ::shutdown(client, SHUT_RDWR);
  echo.join();
  ::close(client);
  ::close(server);
  return l;
}

Latency UnixPingPong(size_t n) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) Die("socketpair");
  return StreamPingPong(sv[0], sv[1], n);
}

Latency TcpPingPong(size_t n) {
  int l = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    Die("tcp listen");
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) Die("tcp connect");
  int s = ::accept(l, nullptr, nullptr);
  ::close(l);
  int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return StreamPingPong(c, s, n);
}

// Bare ping-pong over what a shared-memory channel uses: a memfd segment, the caller's
// eventfd write to wake the server, the server's futex wake of the caller. The server blocks in
// read(2) on the eventfd (the runtime waits in epoll among its other connections).
Latency ShmPingPong(size_t n) {
  auto seg = ShmSegment::Create(kMinShmChannelBytes);
  if (!seg.ok()) Die(seg.status().ToString());
  ShmChannelHeader* h = seg->header();
  int ev = ::eventfd(0, EFD_CLOEXEC);
  std::atomic<bool> stop{false};
  std::thread server([&] {
    uint64_t v;
    while (::read(ev, &v, sizeof v) == sizeof v && !stop) {
      if (h->state.load(std::memory_order_acquire) != static_cast<uint32_t>(ShmState::kRequest)) continue;
      h->response.request_id = h->request.request_id;
      h->state.store(static_cast<uint32_t>(ShmState::kResponse), std::memory_order_release);
      FutexWake(&h->state);
    }
  });
  uint64_t id = 0;
  Latency l = Measure(n, [&] {
    h->request.request_id = ++id;
    h->state.store(static_cast<uint32_t>(ShmState::kRequest), std::memory_order_release);
    const uint64_t one = 1;
    if (::write(ev, &one, sizeof one) != sizeof one) Die("eventfd write");
    while (h->state.load(std::memory_order_acquire) != static_cast<uint32_t>(ShmState::kResponse))
      FutexWait(&h->state, static_cast<uint32_t>(ShmState::kRequest), 1000);
    h->state.store(static_cast<uint32_t>(ShmState::kIdle), std::memory_order_relaxed);
  });
  stop = true;
  const uint64_t one = 1;
  (void)!::write(ev, &one, sizeof one);
  server.join();
  ::close(ev);
  return l;
}

double Throughput(const RuntimeClient::Options& o, int threads, double seconds) {
  std::vector<std::unique_ptr<RuntimeClient>> clients;
  for (int i = 0; i < threads; ++i) {
    auto c = RuntimeClient::Connect(o);
    if (!c.ok()) Die(c.status().ToString());
    clients.push_back(std::move(c).value());
  }
  std::atomic<bool> go{false}, stop{false};
  std::atomic<uint64_t> done{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&, i] {
      while (!go) std::this_thread::yield();
      uint64_t mine = 0;
      while (!stop) {
        if (!clients[static_cast<size_t>(i)]->Call(0, static_cast<uint32_t>(AdminMethod::kPing), "").ok()) Die("ping");
        ++mine;
      }
      done += mine;
    });
  auto t0 = Clock::now();
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  return static_cast<double>(done.load()) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// A runtime of this process on a fresh state directory under `dir`, its TCP transport on a free
// port (with `keys`, more runtime: lines), served on its own thread until destroyed.
struct Served {
  std::unique_ptr<Runtime> rt;
  std::thread serve;
  Served(const std::string& dir, const std::string& keys) {
    auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "\n  http_port: 0\n  tcp_port: " +
                                      std::to_string(testing::FreePort()) + "\n" + keys,
                                  "ipc_bench.yaml");
    if (!cfg.ok()) Die(cfg.status().ToString());
    rt = std::make_unique<Runtime>(std::move(cfg).value());
    if (Status s = rt->Compose(); !s.ok()) Die(s.ToString());
    std::atomic<bool> ready{false};
    serve = std::thread([&] { (void)rt->Serve([&] { ready = true; }); });
    while (!ready) std::this_thread::yield();
  }
  ~Served() {
    rt->RequestStop();
    serve.join();
    (void)rt->StopPools();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 20000;
  const double seconds = argc > 2 ? std::strtod(argv[2], nullptr) : 1.0;
  char tmpl[] = "/tmp/clio_ipc_bench_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  // A second runtime serves TCP over TLS (a certificate made here), for the "tcp+tls" rows.
  testing::Identity cert;
  testing::MakeIdentity(&cert, dir, "runtime", false, "IP:127.0.0.1");
  std::optional<Served> plain(std::in_place, dir + "/plain", "");
  std::optional<Served> tls(std::in_place, dir + "/tls",
                            "  tls_cert_file: " + cert.cert_file + "\n  tls_key_file: " + cert.key_file + "\n");
  const Runtime& rt = *plain->rt;

  std::printf("round trip of a noop task (admin Ping), %zu calls each; runtime.num_threads %u\n", n,
              rt.config().num_threads);
  std::printf("%-10s %14s %14s %16s %16s %12s %12s\n", "transport", "median us", "p99 us", "bare median us",
              "bare p99 us", "median x", "p99 x");
  // The clients of each row: the mode, and the runtime (TLS rows: the second one).
  struct Row {
    const char* name;
    IpcMode mode;
    const Runtime* runtime;
    std::function<Latency(size_t)> bare;
  };
  const Row rows[] = {{"shm", IpcMode::kShm, &rt, ShmPingPong},
                      {"unix", IpcMode::kUnix, &rt, UnixPingPong},
                      {"tcp", IpcMode::kTcp, &rt, TcpPingPong},
                      {"tcp+tls", IpcMode::kTcp, tls->rt.get(), TcpPingPong}};
  auto options = [](const Row& row) {
    RuntimeClient::Options o = RuntimeClient::OptionsFor(row.runtime->config());
    o.mode = row.mode;
    return o;
  };
  for (const Row& row : rows) {
    auto c = RuntimeClient::Connect(options(row));
    if (!c.ok()) Die(c.status().ToString());
    // Alternate: runtime, bare, runtime, bare; report the better of each (less noise).
    Latency best{1e18, 1e18}, bare_best{1e18, 1e18};
    for (int round = 0; round < 2; ++round) {
      Latency r = Measure(n, [&] {
        if (!(*c)->Call(0, static_cast<uint32_t>(AdminMethod::kPing), "").ok()) Die("ping");
      });
      Latency b = row.bare(n);
      best = {std::min(best.median_us, r.median_us), std::min(best.p99_us, r.p99_us)};
      bare_best = {std::min(bare_best.median_us, b.median_us), std::min(bare_best.p99_us, b.p99_us)};
    }
    std::printf("%-10s %14.1f %14.1f %16.1f %16.1f %12.2f %12.2f\n", row.name, best.median_us, best.p99_us,
                bare_best.median_us, bare_best.p99_us, best.median_us / bare_best.median_us,
                best.p99_us / bare_best.p99_us);
  }
  std::printf("\nnoop tasks per second, %.1f s each\n%-10s %12s %12s %12s\n", seconds, "transport", "1 thread",
              "2 threads", "8 threads");
  for (const Row& row : rows) {
    std::printf("%-10s", row.name);
    for (int threads : {1, 2, 8}) std::printf(" %12.0f", Throughput(options(row), threads, seconds));
    std::printf("\n");
  }
  std::printf("target: shm median round trip <= 2 x the bare shared-memory ping-pong; tcp+tls's bare column is "
              "plain TCP, so its ratio is TLS's cost as well\n");
  tls.reset();
  plain.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
