#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/array_connection.h"
#include "cli/commands.h"
#include "storage/safe/safe_protocol.h"

namespace clio {

int ArrayOp(const CommandContext& ctx, const std::string& op, const std::string& array,
            const std::vector<std::string>& args) {
  auto c = ArrayConnection::Open(ctx, array);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", c.status().message().c_str());
    return 1;
  }
  // The refusal's code: usage (2) for a bad argument or an unknown member or pool.
  auto failed = [&](const Status& s) {
    std::fprintf(stderr, "clioctl: array %s failed: %s\n", op.c_str(), s.ToString().c_str());
    return s.code() == Code::kInvalidArgument || s.code() == Code::kNotFound ? 2 : 1;
  };
  if (op == "verify") {  // verify: a scrub
    auto r = c->client->Call(c->pool, safeproto::Verify{});
    if (!r.ok()) return failed(r.status());
    const uint64_t bad = r->bad_stripes;
    if (ctx.json) {
      std::printf("%s\n", nlohmann::json{{"array", array}, {"op", op}, {"bad_stripes", bad}}.dump().c_str());
    } else {
      std::printf("%s: %llu stripes did not verify%s\n", array.c_str(), static_cast<unsigned long long>(bad),
                  bad ? " (repaired where their chunks allowed; see the runtime log)" : "");
    }
    return 0;
  }
  Result<wire::Empty> r = wire::Empty{};
  if (op == "add") {  // add POOL
    r = c->client->Call(c->pool, safeproto::AddBdev{.pool = args.at(0)});
  } else if (op == "remove") {  // remove MEMBER [REASON]
    r = c->client->Call(c->pool, safeproto::RemoveBdev{.member = args.at(0), .reason = args.size() > 1 ? args[1] : ""});
  } else {  // recover MEMBER POOL
    r = c->client->Call(c->pool, safeproto::RecoverBdev{.member = args.at(0), .pool = args.at(1)});
  }
  if (!r.ok()) return failed(r.status());
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"array", array}, {"op", op}, {"ok", true}}.dump().c_str());
  } else {
    std::printf("%s: %s %s done%s\n", array.c_str(), op.c_str(), args.empty() ? "" : args[0].c_str(),
                op == "remove" ? "" : "; see `clioctl array status` for the rebuild");
  }
  return 0;
}

}  // namespace clio
