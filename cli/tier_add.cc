// `clioctl tier add PATH [KEY=VALUE ...]`: a tier added to the running node, with the keys of a
// `storage:` entry (checked by the runtime with the config's own parser). Without PATH, the
// keys must attach a pool (existing_pool_id=301.0 existing_pool_module=clio_bdev).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "common/size.h"
#include "placement/cte_pool.h"
#include "storage/media.h"

namespace clio {
namespace {

// Whether PATH is a local file (resolved here, as the runtime runs from another directory).
bool IsFileTier(const std::vector<std::pair<std::string, std::string>>& keys) {
  for (const auto& [k, v] : keys) {
    if (k != "bdev_type") continue;
    const Medium* m = FindMedium(v);
    return m != nullptr && m->kind == MediumKind::kFile;
  }
  return IsFileMedium(BdevConfig{}.type);  // the default type
}

}  // namespace

int TierAdd(const CommandContext& ctx, const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& s = args[i];
    const size_t eq = s.find('=');
    if (i == 0 && eq == std::string::npos) {
      keys.emplace_back("path", s);
      continue;
    }
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "clioctl: tier add: '%s' is not KEY=VALUE (e.g. capacity_limit=100GB)\n", s.c_str());
      return 2;
    }
    if (s.substr(0, eq) == "path") {
      std::fprintf(stderr, "clioctl: tier add: the path is the first argument, not a key\n");
      return 2;
    }
    keys.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  // The runtime runs from another directory: file paths are resolved here.
  for (auto& [k, v] : keys) {
    const bool file_path = (k == "path" && IsFileTier(keys)) || k == "alloc_log";
    if (file_path && !v.empty() && v[0] != '/') v = std::filesystem::absolute(v).lexically_normal().string();
  }
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: tier add: %s\n", c.status().ToString().c_str());
    return 1;
  }
  const std::string spec = EncodeTierSpec(keys);
  auto r = c->client->Call(c->pool, cteproto::AddTier{.spec = {spec}});
  if (!r.ok()) {
    std::fprintf(stderr, "clioctl: tier add %s: %s\n", args.front().c_str(), r.status().ToString().c_str());
    return r.status().code() == Code::kConfigError ? 2 : 1;
  }
  if (r->tiers.size() != 1) {
    std::fprintf(stderr, "clioctl: tier add: unexpected reply from the runtime\n");
    return 1;
  }
  const TierInfo& t = r->tiers.front();
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"name", t.name},
                                       {"id", t.tier_id},
                                       {"type", BdevTypeName(t.stats.type)},
                                       {"capacity", t.stats.capacity},
                                       {"remaining", t.stats.remaining},
                                       {"score", t.score},
                                       {"persistence", PersistenceName(t.stats.persistence)}}
                            .dump()
                            .c_str());
  } else {
    std::printf("%s added: %s, %s, score %.2f, %s free; it is kept across restarts until `clioctl tier rm`\n",
                t.name.c_str(), std::string(BdevTypeName(t.stats.type)).c_str(),
                std::string(PersistenceName(t.stats.persistence)).c_str(), t.score,
                FormatSize(t.stats.remaining).c_str());
  }
  return 0;
}

}  // namespace clio
