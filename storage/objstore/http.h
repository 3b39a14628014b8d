// A small HTTP/1.1 client over Poco Net for the object-store transports: a pool of keep-alive
// sessions to one endpoint (one per concurrent caller, reused), whole-body requests and
// responses, timeouts, and a response reader that refuses short bodies. Poco stays out of this
// header.
//
// Thread safety: Send() may be called concurrently; each call uses its own session.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace clio::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Endpoint {
  bool https = false;
  std::string host;
  uint16_t port = 0;
  // "host" or "host:port" when the port is not the scheme's default: the Host header.
  std::string HostHeader() const;
  std::string ToString() const;  // "http://host:port"
};
// "http://127.0.0.1:9000", "https://s3.eu-west-1.amazonaws.com", "host:port" (http).
Result<Endpoint> ParseEndpoint(std::string_view url);

struct Request {
  std::string method;
  std::string target;  // path and query, already encoded
  Headers headers;     // sent as given (Host included); Content-Length is added
  std::string_view body;
};

struct Response {
  int status = 0;
  Headers headers;
  std::string body;
  // Case-insensitive lookup; empty when absent.
  std::string Header(std::string_view name) const;
};

struct ClientOptions {
  std::chrono::milliseconds timeout{30000};  // connect, send and receive, each
  uint64_t max_body = 64ull << 20;           // longer responses are an error
  size_t max_idle_sessions = 64;
};

class Client {
 public:
  Client(Endpoint endpoint, ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Sends one request and reads the whole response. Transport failures (refused, reset,
  // timeout, a body shorter than its Content-Length, a malformed response) are Unavailable:
  // the caller may retry. An HTTP error status is a successful Send().
  // Sends `request` and reads the whole answer. Every connect, send and receive waits at most
  // options.timeout, and the call as a whole gives up at `deadline` (when given), so a server
  // that trickles its answer cannot hold the caller past it.
  Result<Response> Send(const Request& request,
                        std::optional<std::chrono::steady_clock::time_point> deadline = {});

  const Endpoint& endpoint() const { return endpoint_; }
  // Sessions opened so far (a new TCP connection each).
  uint64_t connections_opened() const;

 private:
  struct Impl;
  const Endpoint endpoint_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clio::http
