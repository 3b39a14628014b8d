// The runtime's HTTP server (Poco, its own small thread pool): GET /metrics in the Prometheus
// text format (common/metrics.h). It listens on runtime.http_address:runtime.http_port,
// loopback by default. Poco stays inside http.cc.
//
// Thread safety: Start and Stop from one thread; requests are served on the server's threads.
#pragma once

#include <cstdint>
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
