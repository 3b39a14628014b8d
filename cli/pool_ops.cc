// `clioctl pool create|destroy` and `compose start|stop FILE` (also `clio_run compose`): pools
// made and destroyed on the running node. The runtime parses and checks everything (the keys are
// those of a compose entry, read by the module's own parser); this side only builds the request.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "daemon/ipc.h"

namespace clio {
namespace {

Result<std::unique_ptr<RuntimeClient>> Connect(const CommandContext& ctx) {
  RuntimeClient::Options o = ctx.rpc;
  return RuntimeClient::Connect(o);
}

int Fail(const char* what, const Status& s) {
  std::fprintf(stderr, "clioctl: %s: %s\n", what, s.ToString().c_str());
  return s.code() == Code::kConfigError ? 2 : 1;
}

// Sends a compose document; prints the pools the runtime reports back.
// Not resent after a broken connection: a second create would find the first one's pools.
int SendDocument(const CommandContext& ctx, const char* what, bool create, const std::string& source,
                 const std::string& yaml, const char* verb) {
  auto c = Connect(ctx);
  if (!c.ok()) return Fail(what, c.status());
  auto r = create ? (*c)->Call(0, adminproto::CreatePools{.source = source, .yaml = yaml})
                  : (*c)->Call(0, adminproto::ComposeStop{.source = source, .yaml = yaml});
  if (!r.ok()) return Fail(what, r.status());
  const std::vector<PoolInfo>* pools = &r->pools;
  if (ctx.json) {
    PrintPools(ctx, *pools);
  } else if (pools->empty()) {
    std::printf("no pool of %s is running; nothing %s\n", source.c_str(), verb);
  } else {
    for (const PoolInfo& p : *pools)
      std::printf("%s %s (%s, id %u)%s%s\n", verb, p.name.c_str(), p.module.c_str(), p.id,
                  p.describe.empty() ? "" : ": ", p.describe.c_str());
  }
  return 0;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::FromErrno(errno, "reading " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The smallest free major id from 1000 up: ids below are the config's by convention.
Result<uint32_t> FreePoolId(RuntimeClient& c) {
  CLIO_ASSIGN_OR_RETURN(adminproto::PoolListReply r, c.Call(0, adminproto::ListPools{}));
  const std::vector<PoolInfo>& pools = r.pools;
  for (uint32_t id = 1000;; ++id)
    if (std::none_of(pools.begin(), pools.end(), [id](const PoolInfo& p) { return p.id == id; })) return id;
}

}  // namespace

int PoolCreate(const CommandContext& ctx, const std::string& module, const std::string& name,
               const std::string& id, bool restart, const std::vector<std::string>& keys) {
  nlohmann::ordered_json entry = {{"mod_name", module}, {"pool_name", name}};
  std::string pool_id = id;
  if (pool_id.empty()) {
    auto c = Connect(ctx);
    if (!c.ok()) return Fail("pool create", c.status());
    auto free_id = FreePoolId(**c);
    if (!free_id.ok()) return Fail("pool create", free_id.status());
    pool_id = std::to_string(*free_id) + ".0";
  }
  entry["pool_id"] = pool_id;
  if (restart) entry["restart"] = "true";
  for (const std::string& kv : keys) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "clioctl: pool create: '%s' is not KEY=VALUE (e.g. capacity=1GB)\n", kv.c_str());
      return 2;
    }
    const std::string key = kv.substr(0, eq);
    if (entry.contains(key) || key == "restart") {
      std::fprintf(stderr, "clioctl: pool create: %s is given by the arguments (MODULE NAME, --id, --restart)\n",
                   key.c_str());
      return 2;
    }
    // "a.b=v" is key b of the map a, as in the YAML of a compose entry.
    nlohmann::ordered_json* node = &entry;
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1) {
      const std::string part = key.substr(start, dot - start);
      if (part.empty() || (node->contains(part) && !(*node)[part].is_object())) {
        std::fprintf(stderr, "clioctl: pool create: '%s' is not a key name\n", key.c_str());
        return 2;
      }
      node = &(*node)[part];
    }
    const std::string last = key.substr(start);
    if (last.empty() || node->contains(last)) {
      std::fprintf(stderr, "clioctl: pool create: '%s' is %s\n", key.c_str(), last.empty() ? "not a key name" : "given twice");
      return 2;
    }
    (*node)[last] = kv.substr(eq + 1);
  }
  // JSON is YAML: the runtime reads it with the config's parser.
  return SendDocument(ctx, "pool create", true, "clioctl pool create " + name, entry.dump(),
                      "created");
}

int PoolDestroy(const CommandContext& ctx, const std::string& name) {
  auto c = Connect(ctx);
  if (!c.ok()) return Fail("pool destroy", c.status());
  auto r = (*c)->Call(0, adminproto::DestroyPool{name});
  if (!r.ok()) return Fail("pool destroy", r.status());
  if (ctx.json)
    std::printf("%s\n", nlohmann::json{{"destroyed", name}}.dump().c_str());
  else
    std::printf("destroyed %s\n", name.c_str());
  return 0;
}

int Compose(const CommandContext& ctx, bool start, const std::string& file) {
  const char* what = start ? "compose start" : "compose stop";
  auto yaml = ReadFile(file);
  if (!yaml.ok()) {
    std::fprintf(stderr, "clioctl: %s: %s\n", what, yaml.status().message().c_str());
    return 2;
  }
  return SendDocument(ctx, what, start, file, *yaml, start ? "created" : "destroyed");
}

}  // namespace clio
