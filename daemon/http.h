// The runtime's HTTP server (Poco, its own small thread pool): GET /metrics in the Prometheus
// text format (common/metrics.h), and the pages the runtime adds with Route (the dashboard, the
// JSON status). It listens on runtime.http_address:runtime.http_port, loopback by default.
// Poco stays inside http.cc.
//
// Thread safety: Route, Start and Stop from one thread; requests are served on the server's
// threads, so page functions must be thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace clio {

class HttpServer {
 public:
  HttpServer();
  ~HttpServer();  // stops
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Serves GET (and HEAD) of `path` with `page()`'s text as `content_type`. Before Start.
  // Pages are open to anyone who reaches the address (keep it on loopback).
  void Route(const std::string& path, std::string content_type, std::function<std::string()> page);

  // A request that changes something: `method` (POST, PUT, DELETE) of a path under `prefix`.
  // Served only with the header `Authorization: Bearer <token>` (SetToken): missing, 401;
  // wrong, 403 (compared in constant time). The action gets the rest of the path after
  // `prefix` and the body (at most 64 MiB), and returns the status and a JSON body.
  struct Answer {
    Answer() = default;
    Answer(int s, std::string body, std::string type = "application/json")
        : status(s), json(std::move(body)), content_type(std::move(type)) {}
    int status = 200;
    std::string json;
    std::string content_type = "application/json";
    std::function<void()> after;  // runs once the answer is sent (a stop)
  };
  using Action = std::function<Answer(const std::string& rest, const std::string& body)>;
  void RouteAction(const std::string& method, const std::string& prefix, Action action);
  // The token write routes need; without one they answer 503.
  void SetToken(std::string token);
  // Binds and starts serving. Busy when the port is taken, InvalidArgument for an address that
  // does not parse; both name the address.
  Status Start(const std::string& address, uint32_t port);
  // Stops accepting and waits for the requests in flight. Idempotent.
  void Stop();
  // The bound port (useful with port 0 in tests); 0 when not serving.
  uint32_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clio
