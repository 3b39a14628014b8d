// `clioctl locate PATH`: each chunk of a file on a CLIO mount, the tiers and extents holding
// its copies, and whether each copy is dirty (not yet on a persistent tier) or clean.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/clio_mount.h"
#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "cli/progress.h"
#include "common/size.h"
#include "daemon/ipc.h"
#include "fs/protocol/fs_messages.h"
#include "fs/protocol/fs_protocol.h"

namespace clio {
namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "clioctl: locate: %s\n", what.c_str());
  return 1;
}

// The clio_fs pool called `name`, or the only one when `name` is empty.
Result<uint32_t> FindFsPool(RuntimeClient& client, const std::string& name) {
  CLIO_ASSIGN_OR_RETURN(adminproto::PoolListReply list, client.Call(0, adminproto::ListPools{}));
  const std::vector<PoolInfo>& pools = list.pools;
  std::vector<const PoolInfo*> fs;
  std::string names;
  for (const PoolInfo& p : pools) {
    if (p.module != "clio_fs") continue;
    if (!name.empty() && p.name == name) return p.id;
    fs.push_back(&p);
    names += (names.empty() ? "" : ", ") + p.name;
  }
  if (!name.empty()) return NotFound("no clio_fs pool named '" + name + "' (clio_fs pools: " + (names.empty() ? "none" : names) + ")");
  if (fs.empty()) return NotFound("the runtime has no clio_fs pool");
  if (fs.size() > 1) return InvalidArgument("the runtime has several clio_fs pools (" + names + "): name the mount's with --pool");
  return fs.front()->id;
}

}  // namespace

int Locate(const CommandContext& ctx, const std::string& path, const std::string& fs_pool) {
  auto where = OnClioMount(path);
  if (!where.ok()) return Fail(where.status().message());
  if (S_ISDIR(where->st.st_mode)) return Fail("'" + path + "' is a directory: locate takes a file");
  if (!S_ISREG(where->st.st_mode)) return Fail("'" + path + "' is not a regular file: only files have data chunks");
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) return Fail(c.status().message());
  auto pool = FindFsPool(*c->client, fs_pool);
  if (!pool.ok()) return Fail(pool.status().message());
  // The path from the mount's root, resolved: a caller who is not root or the runtime's user
  // is answered only for a file it could reach and read through the mount, which the runtime
  // checks along this path.
  char* real = ::realpath(path.c_str(), nullptr);
  char* root = ::realpath(where->mountpoint.c_str(), nullptr);
  std::string inside;
  if (real && root) {
    const std::string r(real), m(root);
    if (r.compare(0, m.size(), m) == 0 && (r.size() == m.size() || m == "/" || r[m.size()] == '/'))
      inside = r.substr(m == "/" ? 1 : std::min(r.size(), m.size() + 1));
  }
  std::free(real);
  std::free(root);
  const fsproto::Locate req{.ino = static_cast<uint64_t>(where->st.st_ino), .path = {inside}};
  auto raw = c->client->Call(*pool, static_cast<uint32_t>(fsproto::Locate::kMethod), fsproto::Encode(req));
  if (!raw.ok()) return Fail("'" + path + "' (inode " + std::to_string(where->st.st_ino) + "): " + raw.status().ToString());
  auto loc = DecodeFileLocation(*raw);
  if (!loc.ok()) return Fail("bad reply from the runtime: " + loc.status().message());
  auto tiers = c->ListTiers();
  if (!tiers.ok()) return Fail(tiers.status().ToString());
  std::map<uint64_t, std::string> names;
  for (const TierInfo& t : *tiers) names[t.tier_id] = t.name;
  auto tier_name = [&](uint64_t id) {
    auto it = names.find(id);
    return it != names.end() ? it->second : "tier " + std::to_string(id) + " (removed)";
  };
  if (ctx.json) {
    nlohmann::json chunks = nlohmann::json::array();
    for (const ChunkLocation& ch : loc->chunks) {
      nlohmann::json copies = nlohmann::json::array();
      for (const ChunkCopy& k : ch.copies) {
        nlohmann::json ext = nlohmann::json::array();
        for (const auto& [off, size] : k.extents) ext.push_back({{"offset", off}, {"size", size}});
        copies.push_back({{"tier", tier_name(k.tier_id)}, {"tier_id", k.tier_id}, {"dirty", k.dirty},
                          {"bytes", k.bytes}, {"extents", ext}});
      }
      chunks.push_back({{"index", ch.index}, {"offset", ch.index * loc->chunk_size}, {"copies", copies}});
    }
    nlohmann::json out = {{"path", path},          {"mount", where->mountpoint}, {"ino", loc->ino},
                          {"size", loc->size},     {"chunk_size", loc->chunk_size}, {"chunks", chunks}};
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("%s: %s in %s of %s (inode %llu)\n", path.c_str(), FormatSize(loc->size).c_str(),
              Count(loc->chunks.size(), "chunk", "chunks").c_str(), FormatSize(loc->chunk_size).c_str(),
              static_cast<unsigned long long>(loc->ino));
  if (loc->chunks.empty()) return 0;
  int width = 4;  // the TIER column: as wide as the longest tier name shown
  for (const ChunkLocation& ch : loc->chunks)
    for (const ChunkCopy& k : ch.copies) width = std::max(width, static_cast<int>(tier_name(k.tier_id).size()));
  std::printf("%-7s %-14s %-*s %-6s %10s  %s\n", "CHUNK", "FILE OFFSET", width, "TIER", "STATE", "BYTES",
              "EXTENTS (OFFSET+SIZE ON THE DEVICE)");
  for (const ChunkLocation& ch : loc->chunks) {
    bool first = true;
    for (const ChunkCopy& k : ch.copies) {
      std::string ext;
      for (const auto& [off, size] : k.extents)
        ext += (ext.empty() ? "" : ", ") + std::to_string(off) + "+" + std::to_string(size);
      std::printf("%-7s %-14s %-*s %-6s %10s  %s\n", first ? std::to_string(ch.index).c_str() : "",
                  first ? std::to_string(ch.index * loc->chunk_size).c_str() : "", width, tier_name(k.tier_id).c_str(),
                  k.dirty ? "dirty" : "clean", FormatSize(k.bytes).c_str(), ext.c_str());
      first = false;
    }
  }
  return 0;
}

}  // namespace clio
