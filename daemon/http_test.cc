// The HTTP server: /metrics in the text format, clear errors for other pages and methods, a
// taken port or a bad address refused with the address named, and the runtime serving it.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/log.h"
#include "common/metrics.h"
#include "daemon/http.h"
#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/test_serving.h"

using namespace clio;
using testing::ConnectLoopback;
using testing::FreePort;

namespace {

// One HTTP/1.0 exchange with 127.0.0.1:port; the whole response, headers included.
std::string Fetch(uint32_t port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string Get(uint32_t port, const std::string& path) {
  return Fetch(port, "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n");
}


}  // namespace

TEST_CASE("GET /metrics answers the scrape; other pages and methods are refused clearly") {
  metrics::GetCounter("http_test_hits_total", "Hits", {{"page", "x"}}).Add(4);
  HttpServer http;
  REQUIRE(http.Start("127.0.0.1", 0).ok());
  const uint32_t port = http.port();
  REQUIRE(port != 0);
  std::string r = Get(port, "/metrics");
  CHECK(r.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
  CHECK(r.find("Content-Type: text/plain; version=0.0.4") != std::string::npos);
  CHECK(r.find("\r\n\r\n# HELP ") != std::string::npos);
  CHECK(r.find("http_test_hits_total{page=\"x\"} 4\n") != std::string::npos);
  CHECK(Get(port, "/metrics?x=1").find("http_test_hits_total") != std::string::npos);

  r = Get(port, "/nothing");
  CHECK(r.rfind("HTTP/1.0 404 Not Found\r\n", 0) == 0);
  CHECK(r.find("no such page: /nothing") != std::string::npos);
  r = Fetch(port, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
  CHECK(r.rfind("HTTP/1.0 405 Method Not Allowed\r\n", 0) == 0);
  CHECK(r.find("Allow: GET, HEAD") != std::string::npos);
  // DNS rebinding: a Host that names another site is refused; addresses and localhost pass.
  r = Fetch(port, "GET /metrics HTTP/1.1\r\nHost: evil.example:" + std::to_string(port) + "\r\nConnection: close\r\n\r\n");
  CHECK(r.rfind("HTTP/1.1 403 Forbidden\r\n", 0) == 0);
  CHECK(r.find("Host 'evil.example' is not this runtime's") != std::string::npos);
  CHECK(r.find("http_test_hits_total") == std::string::npos);
  char me[256] = {};
  REQUIRE(::gethostname(me, sizeof me - 1) == 0);
  for (std::string host : {"127.0.0.1:" + std::to_string(port), std::string("LOCALHOST"), std::string("[::1]:80"),
                           std::string(me) + ":" + std::to_string(port)})
    CHECK_MESSAGE(Fetch(port, "GET /metrics HTTP/1.0\r\nHost: " + host + "\r\n\r\n").rfind("HTTP/1.0 200 OK", 0) == 0, host);
  // Garbage is answered (400) or dropped; the server keeps serving.
  (void)Fetch(port, "\x01\x02 nonsense\r\n\r\n");
  CHECK(Get(port, "/metrics").rfind("HTTP/1.0 200 OK", 0) == 0);

  HttpServer second;
  Status taken = second.Start("127.0.0.1", port);
  CHECK(taken.code() == Code::kBusy);
  CHECK(taken.message().find("HTTP port 127.0.0.1:" + std::to_string(port) + " is in use") != std::string::npos);
  Status bad = second.Start("not-an-address", 8);
  CHECK(bad.code() == Code::kInvalidArgument);
  CHECK(bad.message().find("not-an-address:8") != std::string::npos);

  http.Stop();
  CHECK(http.port() == 0);
  http.Stop();  // idempotent
}

TEST_CASE("routed pages answer GET; other methods, missing pages and failing pages are clear") {
  HttpServer http;
  int calls = 0;
  http.Route("/hello", "text/plain", [&] { return "hello " + std::to_string(++calls); });
  http.Route("/broken", "text/plain", []() -> std::string { throw std::runtime_error("page bug"); });
  REQUIRE(http.Start("127.0.0.1", 0).ok());
  std::string r = Get(http.port(), "/hello?x");
  CHECK(r.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
  CHECK(r.find("\r\n\r\nhello 1") != std::string::npos);
  CHECK(Get(http.port(), "/hello").find("hello 2") != std::string::npos);  // rendered per request
  r = Fetch(http.port(), "DELETE /hello HTTP/1.0\r\n\r\n");
  CHECK(r.rfind("HTTP/1.0 405 Method Not Allowed\r\n", 0) == 0);
  CHECK(r.find("/hello answers GET only") != std::string::npos);
  r = Get(http.port(), "/broken");
  CHECK(r.rfind("HTTP/1.0 500 Internal Server Error\r\n", 0) == 0);
  CHECK(r.find("/broken failed: page bug") != std::string::npos);
  r = Get(http.port(), "/missing");
  CHECK(r.rfind("HTTP/1.0 404 Not Found\r\n", 0) == 0);
  CHECK(r.find("this runtime serves /broken, /hello, /metrics") != std::string::npos);
  CHECK(Get(http.port(), "/metrics").rfind("HTTP/1.0 200 OK", 0) == 0);  // still served
}

TEST_CASE("the runtime serves /metrics on runtime.http_port, with its own series") {
  char tmpl[] = "/tmp/clio_http_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const uint32_t port = FreePort();
  auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "\n  http_port: " + std::to_string(port) + "\n", "t");
  REQUIRE(cfg.ok());
  Runtime rt(std::move(cfg).value());
  REQUIRE(rt.Compose().ok());
  testing::ServingThread serve(&rt);
  CHECK(rt.http_port() == port);
  {
    RuntimeClient::Options o;
    o.socket_path = rt.config().socket_path;
    auto c = RuntimeClient::Connect(o);
    REQUIRE(c.ok());
    auto st = (*c)->Call(0, static_cast<uint32_t>(AdminMethod::kStatus), "");
    REQUIRE(st.ok());
    CHECK(st->find("http http://127.0.0.1:" + std::to_string(port) + "/metrics (the dashboard at") != std::string::npos);
    const std::string text = Get(port, "/metrics");
    CHECK(text.find("\nclio_runtime_pools 0\n") != std::string::npos);
    CHECK(text.find("\nclio_runtime_worker_threads 4\n") != std::string::npos);
    CHECK(text.find("\nclio_runtime_client_connections 1\n") != std::string::npos);
    CHECK(text.find("\n# TYPE clio_runtime_uptime_seconds gauge\n") != std::string::npos);
    // The JSON status and the dashboard page that reads it.
    InitLogging("http_test");  // the recent-problems ring lives in the process's logger
    CLIO_LOG_WARN("http_test: a warning for the recent errors");
    const std::string status = Get(port, "/api/v1/status");
    CHECK(status.rfind("HTTP/1.0 200 OK\r\n", 0) == 0);
    CHECK(status.find("Content-Type: application/json") != std::string::npos);
    const auto body = nlohmann::json::parse(status.substr(status.find("\r\n\r\n") + 4));
    CHECK(body["runtime"]["pid"] == static_cast<uint64_t>(getpid()));
    CHECK(body["runtime"]["worker_threads"] == 4);
    CHECK(body["runtime"]["client_connections"] == 1);
    CHECK(body["runtime"]["socket"] == rt.config().socket_path);
    CHECK(body["pools"].is_array());
    CHECK(body["pools"].empty());
    bool warned = false;
    for (const auto& e : body["errors"]) warned |= e.get<std::string>().find("http_test: a warning") != std::string::npos;
    CHECK(warned);
    const std::string page = Get(port, "/");
    CHECK(page.find("Content-Type: text/html") != std::string::npos);
    CHECK(page.find("<table id=\"tiers\">") != std::string::npos);
    CHECK(page.find("fetch(\"/api/v1/status\"") != std::string::npos);
  }
  serve.Stop();
  (void)rt.StopPools();
  CHECK(rt.http_port() == 0);
  // The port is free again after the runtime stopped.
  HttpServer again;
  CHECK(again.Start("127.0.0.1", port).ok());
  std::filesystem::remove_all(dir);
}

namespace {

class EchoPool : public Pool {
 public:
  Result<std::string> Handle(uint32_t, std::string_view payload) override { return std::string(payload); }
};

// One HTTP action: `method path` with the token (or `auth` as the whole Authorization value;
// "" for none) and a body. Returns (status code, body).
std::pair<int, std::string> Act(uint32_t port, const std::string& method, const std::string& path,
                                const std::string& auth, const std::string& body = "") {
  std::string req = method + " " + path + " HTTP/1.0\r\nHost: localhost\r\n";
  if (!auth.empty()) req += "Authorization: " + auth + "\r\n";
  req += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  const std::string r = Fetch(port, req);
  const size_t sp = r.find(' ');
  REQUIRE(sp != std::string::npos);
  const size_t head = r.find("\r\n\r\n");
  return {std::atoi(r.c_str() + sp + 1), head == std::string::npos ? "" : r.substr(head + 4)};
}

}  // namespace

TEST_CASE("HTTP actions need the token; with it they make, call and destroy pools and stop the runtime") {
  char tmpl[] = "/tmp/clio_http_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const uint32_t port = FreePort();
  auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "\n  http_port: " + std::to_string(port) +
                                    "\ncompose:\n  - mod_name: echo\n    pool_name: base\n    pool_id: \"7.0\"\n",
                                "t");
  REQUIRE(cfg.ok());
  Runtime rt(std::move(cfg).value());
  rt.RegisterModule("echo", testing::Makes<EchoPool>());
  REQUIRE(rt.Compose().ok());
  testing::ServingThread serve(&rt);
  std::string token;
  {
    std::ifstream in(rt.config().token_file);
    std::getline(in, token);
  }
  REQUIRE(token.size() == 64);
  const std::string bearer = "Bearer " + token;
  const std::string doc = "compose:\n  - mod_name: echo\n    pool_name: made\n    pool_id: \"1000.0\"\n";

  auto [code, body] = Act(port, "POST", "/api/v1/pools", "", doc);
  CHECK(code == 401);
  std::tie(code, body) = Act(port, "POST", "/api/v1/pools", "Bearer wrong-token", doc);
  CHECK(code == 403);
  std::tie(code, body) = Act(port, "POST", "/api/v1/pools", "Basic " + token, doc);
  CHECK(code == 401);
  CHECK(rt.FindByName("made") == nullptr);  // nothing happened

  std::tie(code, body) = Act(port, "POST", "/api/v1/pools", bearer, doc);
  REQUIRE(code == 201);
  CHECK(nlohmann::json::parse(body)[0]["name"] == "made");
  CHECK(rt.FindByName("made") != nullptr);
  std::tie(code, body) = Act(port, "POST", "/api/v1/pools", bearer, doc);
  CHECK(code == 409);  // AlreadyExists, said as JSON
  CHECK(nlohmann::json::parse(body)["error"] == "AlreadyExists");

  std::tie(code, body) = Act(port, "POST", "/api/v1/pools/made/call/1", bearer, std::string("a\0b", 3));
  CHECK(code == 200);
  CHECK(body == std::string("a\0b", 3));
  std::tie(code, body) = Act(port, "POST", "/api/v1/pools/1000.0/call/3", bearer, "by id");
  CHECK(code == 200);
  CHECK(body == "by id");
  std::tie(code, body) = Act(port, "POST", "/api/v1/pools/nope/call/1", bearer, "x");
  CHECK(code == 404);
  std::tie(code, body) = Act(port, "POST", "/api/v1/pools/made/call/x1", bearer, "x");
  CHECK(code == 400);

  std::tie(code, body) = Act(port, "DELETE", "/api/v1/pools/base", bearer);
  CHECK(code == 403);  // a pool of the config
  std::tie(code, body) = Act(port, "DELETE", "/api/v1/pools/made", bearer);
  CHECK(code == 200);
  CHECK(rt.FindByName("made") == nullptr);
  std::tie(code, body) = Act(port, "DELETE", "/api/v1/pools/made", bearer);
  CHECK(code == 404);
  std::tie(code, body) = Act(port, "PUT", "/api/v1/nothing", bearer);
  CHECK(code == 404);
  // The pages stay open to read.
  CHECK(Get(port, "/api/v1/status").rfind("HTTP/1.0 200 OK", 0) == 0);

  std::tie(code, body) = Act(port, "POST", "/api/v1/stop", bearer);
  CHECK(code == 202);
  serve.Stop();  // returns: the runtime had stopped serving
  (void)rt.StopPools();
  std::filesystem::remove_all(dir);
}
