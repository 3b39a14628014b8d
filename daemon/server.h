// The runtime's client server: the Unix socket (with shared-memory channels opened over it)
// and, when configured, TCP. Frames and channels are described in docs/ipc.md. Boost.Asio
// stays inside server.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/defaults.h"
#include "daemon/pool_query.h"

namespace clio {

class Server {
 public:
  struct Options {
    std::string socket_path;        // mode 0660, group clio when that group exists
    uint32_t threads = 4;           // worker threads, one io_context each
    std::string tcp_address;        // with tcp_port 0: no TCP
    uint32_t tcp_port = 0;
    std::string token;              // what a TCP client's Hello must present
    // TLS on TCP (runtime.tls_cert_file, runtime.tls_key_file): both set, TCP speaks TLS only.
    // Without them, TCP serves only a loopback address.
    std::string tls_cert_file, tls_key_file;
    uint32_t shm_channel_bytes = kDefaultShmChannelBytes;  // the most a channel may have
    uint32_t reap_grace_s = 5;      // runtime.client_reap_grace_s
    // A task predicted to take this long or longer runs on the slow class, not inline on an
    // I/O worker (runtime.slow_task_us).
    uint32_t slow_task_us = 2000;
    // The monitor adds a thread to an I/O worker whose every thread has been inside one task
    // this long (runtime.stuck_task_ms).
    uint32_t stuck_task_ms = 100;
    // Payload bytes of the frames being read or run at once (runtime.max_inflight); a frame
    // that would pass it waits unread. At least the frame limit, kMaxPayload.
    uint64_t max_inflight_bytes = kDefaultMaxInflightBytes;
  };
  // Runs one request: (pool, method, payload) -> the response payload or an error.
  // The payload comes without the pool query, which travels apart (kRequestHasQuery).
  using Dispatcher = std::function<Result<std::string>(uint32_t pool, uint32_t method, std::string_view payload,
                                                       const PoolQuery& query)>;

  // Asynchronous tasks (Pool::IsAsync): whether the pool handles the method so, and starting
  // one, whose end calls `done` from any thread.
  struct AsyncDispatcher {
    std::function<bool(uint32_t pool, uint32_t method)> handles;
    std::function<void(uint32_t pool, uint32_t method, std::string payload, const PoolQuery& query,
                       std::function<void(Result<std::string>)> done)>
        start;
  };

  Server(Options options, Dispatcher dispatch, AsyncDispatcher async = {});
  ~Server();

  // Binds the Unix socket (a stale socket file is replaced; a live runtime on it is Busy) and
  // the TCP port when configured.
  Status Listen();
  // Serves until Stop(), SIGTERM/SIGINT or an admin Stop request; `on_ready` runs once the
  // sockets accept clients.
  void Run(const std::function<void()>& on_ready);
  // Asks Run() to return; safe from any thread.
  void Stop();

  struct Stats {
    int64_t connections = 0;      // open now: Unix and TCP
    int64_t shm_channels = 0;     // open now
    int64_t tcp_connections = 0;  // open now
    uint64_t malformed_frames = 0;
    uint64_t reaped_clients = 0;
    uint32_t tcp_port = 0;        // bound (0: none)
    uint32_t extra_workers = 0;   // threads the monitor added to stuck I/O workers, running now
    uint64_t workers_added = 0;   // ever
    uint32_t slow_threads = 0;    // threads of the slow class now
    uint64_t slow_tasks = 0;      // tasks that ran on the slow class
    uint64_t async_tasks = 0;     // tasks handled asynchronously (Pool::IsAsync)
    uint64_t inflight_bytes = 0;  // payload bytes admitted now (runtime.max_inflight)
    uint64_t budget_waits = 0;    // frames that waited for that budget, ever
    uint64_t refused_connections = 0;  // closed at accept for a connection limit, ever
    uint64_t tls_handshake_failures = 0;  // TCP connections whose TLS handshake failed, ever
  };
  Stats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clio
