#include "daemon/http.h"

#include <Poco/Net/HTTPRequestHandler.h>
#include <Poco/Net/HTTPRequestHandlerFactory.h>
#include <Poco/Net/HTTPServerConnection.h>
#include <Poco/Net/TCPServer.h>
#include <Poco/Net/TCPServerConnection.h>
#include <Poco/Net/TCPServerConnectionFactory.h>
#include <Poco/Net/HTTPServerParams.h>
#include <Poco/Net/HTTPServerRequest.h>
#include <Poco/Net/HTTPServerResponse.h>
#include <Poco/Net/NetException.h>
#include <Poco/Net/ServerSocket.h>
#include <Poco/ThreadPool.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "common/metrics.h"
#include "daemon/tcp_owner.h"
#include "daemon/token.h"

namespace clio {
namespace {

using Poco::Net::HTTPResponse;
using Poco::Net::HTTPServerRequest;
using Poco::Net::HTTPServerResponse;

void Reply(HTTPServerResponse& resp, HTTPResponse::HTTPStatus status, const std::string& type,
           const std::string& body) {
  resp.setStatusAndReason(status);
  resp.setContentType(type);
  resp.setContentLength(static_cast<std::streamsize>(body.size()));
  resp.send() << body;
}

struct Page {
  std::string content_type;
  std::function<std::string()> render;
};
using Pages = std::map<std::string, Page>;  // by path; fixed once the server starts

struct ActionRoute {
  std::string method, prefix;
  HttpServer::Action action;
};
struct Routes {
  Pages pages;
  std::vector<ActionRoute> actions;  // fixed once the server starts
  std::string token;
  std::string address;              // the bind address (Start)
  std::vector<std::string> names;   // the machine's names, lower case: short, as set, canonical
};

std::string Lower(std::string_view s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The names a client may call this machine by: its hostname, its short form and the canonical
// name the resolver gives it (once, at start: no lookup per request).
std::vector<std::string> MachineNames() {
  std::vector<std::string> names;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || !*name) return names;
  names.push_back(Lower(name));
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name, nullptr, &hints, &res) == 0) {
    if (res && res->ai_canonname) names.push_back(Lower(res->ai_canonname));
    ::freeaddrinfo(res);
  }
  for (size_t i = 0, n = names.size(); i < n; ++i) names.push_back(names[i].substr(0, names[i].find('.')));
  return names;
}

// DNS rebinding: a page of evil.example whose name the attacker points at 127.0.0.1 makes the
// victim's browser ask this server with `Host: evil.example`. A request is answered only when
// its Host names this server: an IP address literal, localhost, the machine's name or the
// bind address (a missing Host, HTTP/1.0, passes). Returns the host name, "" when allowed.
std::string ForeignHost(const HTTPServerRequest& req, const Routes& routes) {
  const std::string& address = routes.address;
  if (!req.has("Host")) return {};
  std::string host = req.get("Host");
  if (!host.empty() && host.front() == '[') {
    host = host.substr(1, host.find(']') == std::string::npos ? std::string::npos : host.find(']') - 1);
  } else if (const size_t colon = host.find(':'); colon != std::string::npos) {
    host.resize(colon);
  }
  const std::string lower = Lower(host);
  if (lower.empty() || lower == "localhost" || lower == Lower(address)) return {};
  unsigned char buf[sizeof(in6_addr)];
  if (::inet_pton(AF_INET, lower.c_str(), buf) == 1 || ::inet_pton(AF_INET6, lower.c_str(), buf) == 1) return {};
  for (const std::string& me : routes.names)
    if (lower == me) return {};
  return host;
}

constexpr size_t kMaxActionBody = 64u << 20;

class Handler : public Poco::Net::HTTPRequestHandler {
 public:
  explicit Handler(const Routes* routes) : routes_(routes), pages_(&routes->pages) {}
  void handleRequest(HTTPServerRequest& req, HTTPServerResponse& resp) override {
    const std::string& uri = req.getURI();
    const std::string path = uri.substr(0, uri.find('?'));
    if (const std::string host = ForeignHost(req, *routes_); !host.empty()) {
      CLIO_LOG_WARN("HTTP {} {}: refused Host '{}' (not this runtime's name or address)", req.getMethod(), path, host);
      return Reply(resp, HTTPResponse::HTTP_FORBIDDEN, "text/plain",
                   "Host '" + host + "' is not this runtime's (ask by its address, localhost or the machine's name)\n");
    }
    if (req.getMethod() != "GET" && req.getMethod() != "HEAD") return HandleAction(req, resp, path);
    auto it = pages_->find(path);
    if (it == pages_->end()) {
      std::string served;
      for (const auto& [p, _] : *pages_) served += (served.empty() ? "" : ", ") + p;
      return Reply(resp, HTTPResponse::HTTP_NOT_FOUND, "text/plain",
                   "no such page: " + path + " (this runtime serves " + served + ")\n");
    }
    std::string body;
    try {
      body = it->second.render();
    } catch (const std::exception& e) {  // a page's bug must not take the server thread down
      CLIO_LOG_ERROR("HTTP page {}: {}", path, e.what());
      return Reply(resp, HTTPResponse::HTTP_INTERNAL_SERVER_ERROR, "text/plain",
                   path + " failed: " + e.what() + "\n");
    }
    Reply(resp, HTTPResponse::HTTP_OK, it->second.content_type, body);
  }

 private:
  void HandleAction(HTTPServerRequest& req, HTTPServerResponse& resp, const std::string& path) {
    const ActionRoute* route = nullptr;
    for (const ActionRoute& a : routes_->actions)
      if (a.method == req.getMethod() && path.compare(0, a.prefix.size(), a.prefix) == 0 &&
          (!route || a.prefix.size() > route->prefix.size()))
        route = &a;
    if (!route) {
      if (pages_->count(path)) {
        resp.set("Allow", "GET, HEAD");
        return Reply(resp, HTTPResponse::HTTP_METHOD_NOT_ALLOWED, "text/plain", path + " answers GET only\n");
      }
      return Reply(resp, HTTPResponse::HTTP_NOT_FOUND, "text/plain", req.getMethod() + " " + path + ": no such action\n");
    }
    if (routes_->token.empty())
      return Reply(resp, HTTPResponse::HTTP_SERVICE_UNAVAILABLE, "text/plain", "no token is set: actions are off\n");
    const std::string auth = req.get("Authorization", "");
    if (auth.rfind("Bearer ", 0) != 0) {
      resp.set("WWW-Authenticate", "Bearer");
      return Reply(resp, HTTPResponse::HTTP_UNAUTHORIZED, "text/plain",
                   "send Authorization: Bearer <the token of runtime.token_file>\n");
    }
    if (!TokensMatch(auth.substr(7), routes_->token)) {
      CLIO_LOG_WARN("HTTP {} {}: wrong token", req.getMethod(), path);
      return Reply(resp, HTTPResponse::HTTP_FORBIDDEN, "text/plain", "wrong token\n");
    }
    std::string body;
    if (req.hasContentLength() && static_cast<size_t>(req.getContentLength64()) > kMaxActionBody)
      return Reply(resp, HTTPResponse::HTTP_REQUEST_ENTITY_TOO_LARGE, "text/plain", "body over 64 MiB\n");
    std::istream& in = req.stream();
    char buf[65536];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
      body.append(buf, static_cast<size_t>(in.gcount()));
      if (body.size() > kMaxActionBody)
        return Reply(resp, HTTPResponse::HTTP_REQUEST_ENTITY_TOO_LARGE, "text/plain", "body over 64 MiB\n");
    }
    HttpServer::Answer a;
    try {
      a = route->action(path.substr(route->prefix.size()), body);
    } catch (const std::exception& e) {  // an action's bug must not take the server thread down
      CLIO_LOG_ERROR("HTTP {} {}: {}", req.getMethod(), path, e.what());
      return Reply(resp, HTTPResponse::HTTP_INTERNAL_SERVER_ERROR, "text/plain", std::string(e.what()) + "\n");
    }
    Reply(resp, static_cast<HTTPResponse::HTTPStatus>(a.status), a.content_type, a.json);
    if (a.after) a.after();
  }

  const Routes* const routes_;
  const Pages* const pages_;
};

class Factory : public Poco::Net::HTTPRequestHandlerFactory {
 public:
  explicit Factory(const Routes* routes) : routes_(routes) {}
  Poco::Net::HTTPRequestHandler* createRequestHandler(const HTTPServerRequest&) override {
    return new Handler(routes_);
  }
  // What HTTPServer::stopAll(true) does: every connection aborts its current request.
  void AbortAll(const void* server) { serverStopped(server, true); }

 private:
  const Routes* const routes_;
};

// The server's threads are few, and a client that sends its request a byte at a time holds
// one for as long as it likes (Poco's timeouts are per read). So one client (the local uid
// that owns the connecting socket, or its address when it is not on this machine) holds at
// most kMaxPerClient of them at once; its next connection is closed unanswered.
constexpr int kHttpThreads = 16;
constexpr int kMaxPerClient = 6;  // what a browser opens to one host at most

class Admission {
 public:
  bool Enter(const std::string& who) {
    std::lock_guard<std::mutex> l(mu_);
    int& n = held_[who];
    if (n >= kMaxPerClient) return false;
    ++n;
    return true;
  }
  uint64_t Refused() { return ++refused_; }
  void Leave(const std::string& who) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = held_.find(who);
    if (it != held_.end() && --it->second <= 0) held_.erase(it);
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> held_;
  std::atomic<uint64_t> refused_{0};
};

std::string ClientOf(const Poco::Net::StreamSocket& s) {
  const Poco::Net::SocketAddress peer = s.peerAddress(), local = s.address();
  const uint32_t uid = LocalTcpOwner(peer.addr(), local.addr());
  return uid == kUnknownOwner ? "address " + peer.host().toString() : "uid " + std::to_string(uid);
}

// An HTTP connection that first checks its client's share of the threads. Built as the
// HTTPServerConnection itself (not a wrapper that makes one later), so that it hears a stop
// (AbortAll) from the moment it exists.
class Connection : public Poco::Net::HTTPServerConnection {
 public:
  Connection(const Poco::Net::StreamSocket& s, Poco::Net::HTTPServerParams::Ptr params,
             Poco::Net::HTTPRequestHandlerFactory::Ptr handlers, Admission* admission)
      : HTTPServerConnection(s, std::move(params), std::move(handlers)), admission_(admission) {}
  void run() override {
    std::string who;
    try {
      who = ClientOf(socket());
    } catch (const Poco::Exception&) {
      return;  // gone already
    }
    if (!admission_->Enter(who)) {
      if (const uint64_t n = admission_->Refused(); LogThisOne(n))
        CLIO_LOG_WARN("HTTP: {} holds {} connections already; one more closed ({} so far)", who, kMaxPerClient, n);
      return;
    }
    struct Left {
      Admission* a;
      const std::string& w;
      ~Left() { a->Leave(w); }
    } left{admission_, who};
    HTTPServerConnection::run();
  }

 private:
  Admission* admission_;
};

class ConnectionFactory : public Poco::Net::TCPServerConnectionFactory {
 public:
  ConnectionFactory(Poco::Net::HTTPServerParams::Ptr params, Poco::Net::HTTPRequestHandlerFactory::Ptr handlers,
                    Admission* admission)
      : params_(std::move(params)), handlers_(handlers), admission_(admission) {}
  Poco::Net::TCPServerConnection* createConnection(const Poco::Net::StreamSocket& s) override {
    return new Connection(s, params_, handlers_, admission_);
  }

 private:
  Poco::Net::HTTPServerParams::Ptr params_;
  Poco::Net::HTTPRequestHandlerFactory::Ptr handlers_;
  Admission* admission_;
};

}  // namespace

struct HttpServer::Impl {
  Routes routes{{{"/metrics", {"text/plain; version=0.0.4; charset=utf-8", [] { return metrics::Scrape(); }}}}, {}, {}, {}, {}};
  Poco::ThreadPool threads{1, kHttpThreads};
  Admission admission;
  Poco::Net::HTTPRequestHandlerFactory::Ptr handlers;  // a Factory
  std::unique_ptr<Poco::Net::TCPServer> server;
  uint32_t port = 0;
};

HttpServer::HttpServer() : impl_(std::make_unique<Impl>()) {}
HttpServer::~HttpServer() { Stop(); }

void HttpServer::Route(const std::string& path, std::string content_type, std::function<std::string()> page) {
  impl_->routes.pages[path] = Page{std::move(content_type), std::move(page)};
}

void HttpServer::RouteAction(const std::string& method, const std::string& prefix, Action action) {
  impl_->routes.actions.push_back({method, prefix, std::move(action)});
}

void HttpServer::SetToken(std::string token) { impl_->routes.token = std::move(token); }

Status HttpServer::Start(const std::string& address, uint32_t port) {
  const std::string where = address + ":" + std::to_string(port);
  try {
    Poco::Net::SocketAddress sa(address, static_cast<Poco::UInt16>(port));
    Poco::Net::ServerSocket socket;
    // SO_REUSEADDR for a quick restart, never SO_REUSEPORT: a second runtime must not share it.
    socket.bind(sa, /*reuseAddress=*/true, /*reusePort=*/false);
    socket.listen(64);
    impl_->routes.address = address;
    impl_->routes.names = MachineNames();
    auto* params = new Poco::Net::HTTPServerParams();
    params->setMaxThreads(kHttpThreads);
    params->setMaxQueued(64);
    params->setKeepAlive(true);
    // A client that sends nothing holds a server thread only this long (Poco's default: 60 s;
    // an idle keep-alive connection, 10 s).
    params->setTimeout(Poco::Timespan(5, 0));
    params->setKeepAliveTimeout(Poco::Timespan(2, 0));
    impl_->handlers = new Factory(&impl_->routes);
    Poco::Net::HTTPServerParams::Ptr p(params);
    impl_->server = std::make_unique<Poco::Net::TCPServer>(
        new ConnectionFactory(p, impl_->handlers, &impl_->admission), impl_->threads,
        socket, p);
    impl_->server->start();
    impl_->port = socket.address().port();
  } catch (const Poco::Net::InvalidAddressException& e) {
    return InvalidArgument("HTTP address " + where + " is not an address: " + e.displayText());
  } catch (const Poco::Net::HostNotFoundException& e) {
    return InvalidArgument("HTTP address " + where + ": " + e.displayText());
  } catch (const Poco::IOException& e) {
    if (e.code() == EADDRINUSE)
      return Status(Code::kBusy, "HTTP port " + where + " is in use (set runtime.http_port)");
    return Status(Code::kIoError, "HTTP server on " + where + ": " + e.displayText());
  } catch (const Poco::Exception& e) {
    return Status(Code::kIoError, "HTTP server on " + where + ": " + e.displayText());
  }
  return Status::Ok();
}

void HttpServer::Stop() {
  if (!impl_->server) return;
  // Aborts open connections too: a scraper's idle keep-alive connection would otherwise hold a
  // server thread, and so the runtime's stop, for up to the keep-alive timeout.
  impl_->server->stop();
  static_cast<Factory*>(impl_->handlers.get())->AbortAll(impl_->server.get());
  impl_->threads.joinAll();
  impl_->server.reset();
  impl_->port = 0;
}

uint32_t HttpServer::port() const { return impl_->port; }

}  // namespace clio
