#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/array_connection.h"
#include "cli/commands.h"
#include "common/codec.h"
#include "storage/safe/safe_protocol.h"

namespace clio {

int ArrayOp(const CommandContext& ctx, const std::string& op, const std::string& array,
            const std::vector<std::string>& args) {
  auto c = ArrayConnection::Open(ctx, array);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", c.status().message().c_str());
    return 1;
  }
  Encoder e;
  SafeBdevMethod method;
  if (op == "add") {  // add POOL
    method = SafeBdevMethod::kAddBdev;
    e.PutBytes(args.at(0));
  } else if (op == "verify") {  // verify: a scrub
    method = SafeBdevMethod::kVerify;
  } else if (op == "remove") {  // remove MEMBER [REASON]
    method = SafeBdevMethod::kRemoveBdev;
    e.PutBytes(args.at(0)).PutBytes(args.size() > 1 ? args[1] : "");
  } else {  // recover MEMBER POOL
    method = SafeBdevMethod::kRecoverBdev;
    e.PutBytes(args.at(0)).PutBytes(args.at(1));
  }
  auto r = c->client->Call(c->pool, static_cast<uint32_t>(method), e.buffer());
  if (!r.ok()) {
    std::fprintf(stderr, "clioctl: array %s failed: %s\n", op.c_str(), r.status().ToString().c_str());
    return r.status().code() == Code::kInvalidArgument || r.status().code() == Code::kNotFound ? 2 : 1;
  }
  if (op == "verify") {
    Decoder d(*r);
    uint64_t bad = 0;
    if (!d.Get(&bad)) {
      std::fprintf(stderr, "clioctl: array verify: bad reply from the runtime\n");
      return 1;
    }
    if (ctx.json) {
      std::printf("%s\n", nlohmann::json{{"array", array}, {"op", op}, {"bad_stripes", bad}}.dump().c_str());
    } else {
      std::printf("%s: %llu stripes did not verify%s\n", array.c_str(), static_cast<unsigned long long>(bad),
                  bad ? " (repaired where their chunks allowed; see the runtime log)" : "");
    }
    return 0;
  }
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"array", array}, {"op", op}, {"ok", true}}.dump().c_str());
  } else {
    std::printf("%s: %s %s done%s\n", array.c_str(), op.c_str(), args.empty() ? "" : args[0].c_str(),
                op == "remove" ? "" : "; see `clioctl array status` for the rebuild");
  }
  return 0;
}

}  // namespace clio
