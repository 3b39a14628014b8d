// The runtime's HTTP actions (docs/http-api.md): what changes the node, each behind the node's
// token (runtime.token_file), beside the open pages of runtime.cc (status, dashboard, metrics).
//   POST   /api/v1/pools                      body: a compose document -> the pools made
//   DELETE /api/v1/pools/NAME                 destroy a pool made at run time
//   POST   /api/v1/pools/POOL/call/METHOD     body: the method's payload (bytes) -> its answer
//   POST   /api/v1/stop                       a clean stop, as `clio_run stop`
#include <Poco/URI.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "daemon/http.h"
#include "daemon/runtime.h"

namespace clio {
namespace {

int HttpStatusOf(Code c) {
  switch (c) {
    case Code::kOk: return 200;
    case Code::kNotFound: case Code::kStale: return 404;
    case Code::kAlreadyExists: case Code::kBusy: return 409;
    case Code::kInvalidArgument: case Code::kConfigError: case Code::kCorruption: case Code::kOutOfRange:
    case Code::kNameTooLong: case Code::kRangeError: return 400;
    case Code::kPermissionDenied: case Code::kNotPermitted: return 403;
    case Code::kNotSupported: return 501;
    case Code::kNoSpace: return 507;
    case Code::kUnavailable: return 503;
    default: return 500;
  }
}

HttpServer::Answer Error(const Status& s) {
  return {HttpStatusOf(s.code()),
          nlohmann::json{{"error", std::string(CodeName(s.code()))}, {"message", s.message()}}.dump()};
}

nlohmann::json PoolsJson(const std::vector<PoolInfo>& pools) {
  nlohmann::json out = nlohmann::json::array();
  for (const PoolInfo& p : pools)
    out.push_back({{"id", p.id}, {"name", p.name}, {"module", p.module}, {"describe", p.describe}});
  return out;
}

std::string Decoded(const std::string& s) {
  std::string out;
  Poco::URI::decode(s, out);
  return out;
}

}  // namespace

// An HTTP action runs as a client with the node's token: the administrator, whose creations
// are confined like a socket client's (daemon/confine.h).
static ScopedRequest AsTokenClient() {
  static const Peer* const kTokenClient = [] {
    auto* p = new Peer();  // lives as long as the process
    p->granted = CallerClass::kAdmin;
    return p;
  }();
  return ScopedRequest(RequestContext{0, 0, false, kTokenClient});
}

void Runtime::RouteHttpActions(HttpServer& http, std::string token) {
  http.SetToken(std::move(token));
  http.RouteAction("POST", "/api/v1/pools", [this](const std::string& rest, const std::string& body) {
    ScopedRequest as = AsTokenClient();
    if (!rest.empty() && rest != "/") {
      // /api/v1/pools/POOL/call/METHOD
      const size_t at = rest.rfind("/call/");
      if (rest.front() != '/' || at == std::string::npos || at == 0)
        return Error(NotFound("no such action: POST /api/v1/pools" + rest));
      const std::string pool = Decoded(rest.substr(1, at - 1));
      char* end = nullptr;
      const std::string method_text = rest.substr(at + 6);
      const unsigned long method = std::strtoul(method_text.c_str(), &end, 10);
      if (method_text.empty() || *end != '\0' || method > 0xffffffffUL)
        return Error(InvalidArgument("method '" + method_text + "' is not a number"));
      uint32_t id = 0;
      if (Pool* p = FindByName(pool)) id = p->id();
      else if (auto parsed = ParsePoolId(pool); parsed.ok() && FindById(parsed->first)) id = parsed->first;
      else if (pool != "0") return Error(NotFound("no pool '" + pool + "' (a name or MAJOR.MINOR id; 0 is the admin pool)"));
      auto r = Dispatch(id, static_cast<uint32_t>(method), body);
      if (!r.ok()) return Error(r.status());
      return HttpServer::Answer{200, std::move(r).value(), "application/octet-stream"};
    }
    auto made = CreatePools(body, "HTTP POST /api/v1/pools");
    if (!made.ok()) return Error(made.status());
    return HttpServer::Answer{201, PoolsJson(*made).dump()};
  });
  http.RouteAction("DELETE", "/api/v1/pools/", [this](const std::string& rest, const std::string&) {
    ScopedRequest as = AsTokenClient();
    Status s = DestroyPool(Decoded(rest));
    if (!s.ok()) return Error(s);
    return HttpServer::Answer{200, nlohmann::json{{"destroyed", Decoded(rest)}}.dump()};
  });
  http.RouteAction("POST", "/api/v1/stop", [this](const std::string& rest, const std::string&) {
    if (!rest.empty()) return Error(NotFound("no such action: POST /api/v1/stop" + rest));
    HttpServer::Answer a{202, nlohmann::json{{"stopping", true}}.dump()};
    a.after = [this] { RequestStop(); };  // once the answer is out: the stop ends HTTP too
    return a;
  });
}

}  // namespace clio
