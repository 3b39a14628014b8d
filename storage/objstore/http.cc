#include "storage/objstore/http.h"

#include <Poco/Exception.h>
#include <Poco/Net/Context.h>
#include <Poco/Net/HTTPClientSession.h>
#include <Poco/Net/HTTPRequest.h>
#include <Poco/Net/HTTPResponse.h>
#include <Poco/Net/HTTPSClientSession.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/SSLManager.h>
#include <Poco/Timespan.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <istream>
#include <mutex>
#include <ostream>

#include "common/thread_annotations.h"

namespace clio::http {
namespace {

std::once_flag ssl_once;

Poco::Net::Context::Ptr ClientContext() {
  std::call_once(ssl_once, [] { Poco::Net::initializeSSL(); });
  static Poco::Net::Context::Ptr ctx = new Poco::Net::Context(
      Poco::Net::Context::TLS_CLIENT_USE, "", Poco::Net::Context::VERIFY_RELAXED, 9,
      /*loadDefaultCAs=*/true);
  return ctx;
}

bool MethodHasBody(std::string_view m) { return m == "PUT" || m == "POST" || m == "PATCH"; }

}  // namespace

std::string Endpoint::HostHeader() const {
  const uint16_t def = https ? 443 : 80;
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return port == def ? h : h + ":" + std::to_string(port);
}

std::string Endpoint::ToString() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return std::string(https ? "https://" : "http://") + h + ":" + std::to_string(port);
}

Result<Endpoint> ParseEndpoint(std::string_view url) {
  Endpoint e;
  std::string_view rest = url;
  if (rest.substr(0, 8) == "https://") {
    e.https = true;
    rest.remove_prefix(8);
  } else if (rest.substr(0, 7) == "http://") {
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    return InvalidArgument("endpoint '" + std::string(url) + "': scheme must be http or https");
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) {
    return InvalidArgument("endpoint '" + std::string(url) + "': a path is not allowed");
  }
  e.port = e.https ? 443 : 80;
  std::string_view port_part;
  if (!rest.empty() && rest.front() == '[') {  // [v6 address]:port
    const size_t close = rest.find(']');
    if (close == std::string_view::npos || close == 1) {
      return InvalidArgument("endpoint '" + std::string(url) + "': bad IPv6 address");
    }
    std::string_view after = rest.substr(close + 1);
    if (!after.empty() && after.front() != ':') {
      return InvalidArgument("endpoint '" + std::string(url) + "': junk after the IPv6 address");
    }
    if (!after.empty()) port_part = after.substr(1);
    rest = rest.substr(1, close - 1);
    if (port_part.empty() && !after.empty()) {
      return InvalidArgument("endpoint '" + std::string(url) + "': bad port ''");
    }
  } else if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    if (rest.find(':') != colon) {
      return InvalidArgument("endpoint '" + std::string(url) + "': put an IPv6 address in []");
    }
    port_part = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (port_part.empty()) return InvalidArgument("endpoint '" + std::string(url) + "': bad port ''");
  }
  if (!port_part.empty()) {
    unsigned v = 0;
    auto [ptr, ec] = std::from_chars(port_part.data(), port_part.data() + port_part.size(), v);
    if (ec != std::errc() || ptr != port_part.data() + port_part.size() || v == 0 || v > 65535) {
      return InvalidArgument("endpoint '" + std::string(url) + "': bad port '" +
                             std::string(port_part) + "'");
    }
    e.port = static_cast<uint16_t>(v);
  }
  if (rest.empty()) return InvalidArgument("endpoint '" + std::string(url) + "': no host");
  e.host = std::string(rest);
  return e;
}

std::string Response::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n.size() == name.size() && ::strncasecmp(n.data(), name.data(), n.size()) == 0) return v;
  }
  return {};
}

struct Client::Impl {
  Endpoint endpoint;
  ClientOptions options;
  Mutex mu;
  std::vector<std::unique_ptr<Poco::Net::HTTPClientSession>> idle GUARDED_BY(mu);
  std::atomic<uint64_t> opened{0};

  std::unique_ptr<Poco::Net::HTTPClientSession> Take() {
    {
      MutexLock l(&mu);
      if (!idle.empty()) {
        auto s = std::move(idle.back());
        idle.pop_back();
        return s;
      }
    }
    std::unique_ptr<Poco::Net::HTTPClientSession> s;
    if (endpoint.https) {
      s = std::make_unique<Poco::Net::HTTPSClientSession>(endpoint.host, endpoint.port,
                                                          ClientContext());
    } else {
      s = std::make_unique<Poco::Net::HTTPClientSession>(endpoint.host, endpoint.port);
    }
    s->setKeepAlive(true);
    opened.fetch_add(1);
    return s;
  }

  void Give(std::unique_ptr<Poco::Net::HTTPClientSession> s) {
    MutexLock l(&mu);
    if (idle.size() < options.max_idle_sessions) idle.push_back(std::move(s));
  }
};

Client::Client(Endpoint endpoint, ClientOptions options)
    : endpoint_(std::move(endpoint)), impl_(std::make_unique<Impl>()) {
  impl_->endpoint = endpoint_;
  impl_->options = options;
}

Client::~Client() = default;

uint64_t Client::connections_opened() const { return impl_->opened.load(); }

Result<Response> Client::Send(const Request& request,
                              std::optional<std::chrono::steady_clock::time_point> deadline) {
  CheckNoLockAcrossIo("an object-store request");
  const std::string what = request.method + " " + endpoint_.ToString() + request.target;
  using Clock = std::chrono::steady_clock;
  // The wait of one socket operation: the configured timeout, or less when the deadline is
  // nearer.
  auto op_timeout = [&]() -> std::chrono::milliseconds {
    auto t = impl_->options.timeout;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      t = std::max(std::chrono::milliseconds(1), std::min(t, left));
    }
    return t;
  };
  auto past_deadline = [&] { return deadline && Clock::now() >= *deadline; };
  std::unique_ptr<Poco::Net::HTTPClientSession> session;
  try {
    session = impl_->Take();
    session->setTimeout(Poco::Timespan(static_cast<Poco::Timespan::TimeDiff>(op_timeout().count()) * 1000));
    Poco::Net::HTTPRequest req(request.method, request.target, Poco::Net::HTTPMessage::HTTP_1_1);
    for (const auto& [name, value] : request.headers) req.set(name, value);
    if (MethodHasBody(request.method) || !request.body.empty()) {
      req.setContentLength64(static_cast<Poco::Int64>(request.body.size()));
    }
    std::ostream& os = session->sendRequest(req);
    // The body follows the headers in a second write; without TCP_NODELAY, Nagle's algorithm
    // holds a small body until the server's delayed ACK (tens of milliseconds per request).
    session->socket().setNoDelay(true);
    if (!request.body.empty()) os.write(request.body.data(), static_cast<std::streamsize>(request.body.size()));
    os.flush();
    if (!os.good()) return Unavailable(what + ": sending the request body failed");

    Poco::Net::HTTPResponse resp;
    session->setTimeout(Poco::Timespan(static_cast<Poco::Timespan::TimeDiff>(op_timeout().count()) * 1000));
    std::istream& is = session->receiveResponse(resp);
    Response out;
    out.status = static_cast<int>(resp.getStatus());
    for (const auto& [n, v] : resp) out.headers.emplace_back(n, v);
    const std::string status = " (HTTP " + std::to_string(out.status) + ")";
    const bool no_body = request.method == "HEAD" || out.status == 204 || out.status == 304 ||
                         out.status < 200;
    if (!no_body) {
      const bool sized = resp.hasContentLength();
      const Poco::Int64 len = sized ? resp.getContentLength64() : -1;
      if (sized && (len < 0 || static_cast<uint64_t>(len) > impl_->options.max_body)) {
        return Unavailable(what + ": response Content-Length " + std::to_string(len) +
                           " is out of bounds" + status);
      }
      if (sized) out.body.reserve(static_cast<size_t>(len));
      // In pieces, so the deadline is checked while a slow server trickles the body.
      char buf[65536];
      for (;;) {
        size_t want = sizeof(buf);
        if (sized) want = std::min<uint64_t>(want, static_cast<uint64_t>(len) - out.body.size());
        if (want == 0) break;
        if (past_deadline()) {
          return Unavailable(what + ": gave up reading the body at the deadline after " +
                             std::to_string(out.body.size()) + " bytes" + status);
        }
        session->setTimeout(Poco::Timespan(static_cast<Poco::Timespan::TimeDiff>(op_timeout().count()) * 1000));
        // peek() receives once (at most one socket wait); readsome() takes what arrived.
        if (is.peek() == std::char_traits<char>::eof()) break;
        const std::streamsize got = is.readsome(buf, static_cast<std::streamsize>(want));
        if (got <= 0) break;
        out.body.append(buf, static_cast<size_t>(got));
        if (!sized && out.body.size() > impl_->options.max_body) {
          return Unavailable(what + ": response body longer than " +
                             std::to_string(impl_->options.max_body) + " bytes" + status);
        }
      }
      if (sized && out.body.size() != static_cast<uint64_t>(len)) {
        return Unavailable(what + ": truncated response: " + std::to_string(out.body.size()) +
                           " of " + std::to_string(len) + " body bytes" + status);
      }
      if (!sized && is.bad()) return Unavailable(what + ": reading the response body failed" + status);
    }
    if (resp.getKeepAlive()) impl_->Give(std::move(session));
    return out;
  } catch (const Poco::TimeoutException& e) {
    return Unavailable(what + ": timed out after " + std::to_string(op_timeout().count()) + " ms");
  } catch (const Poco::Exception& e) {
    return Unavailable(what + ": " + e.displayText());
  } catch (const std::exception& e) {
    return Unavailable(what + ": " + e.what());
  }
}

}  // namespace clio::http
