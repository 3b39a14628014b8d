#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/array_connection.h"
#include "cli/commands.h"
#include "common/size.h"

namespace clio {

int ArrayStatus(const CommandContext& ctx, const std::string& array) {
  auto c = ArrayConnection::Open(ctx, array);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: %s\n", c.status().message().c_str());
    return 1;
  }
  auto text = c->Monitor();
  if (!text.ok()) {
    std::fprintf(stderr, "clioctl: array status failed: %s\n", text.status().ToString().c_str());
    return 1;
  }
  if (ctx.json) {
    std::printf("%s\n", text->c_str());
    return 0;
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.contains("members")) {
    std::fprintf(stderr, "clioctl: array status: the runtime answered something that is not an array's status\n");
    return 1;
  }
  std::printf("%s: %d+%d, chunk %s, %s used of %s, %s\n", j.value("pool", "").c_str(), j.value("k", 0),
              j.value("m", 0), FormatSize(j.value("chunk_size", 0ull)).c_str(),
              FormatSize(j.value("used", 0ull)).c_str(), FormatSize(j.value("capacity", 0ull)).c_str(),
              j.value("health", "").c_str());
  std::printf("%-4s %-48s %-10s %s\n", "SLOT", "MEMBER", "STATE", "DETAIL");
  const uint64_t stripes = j.value("stripes", 1ull);
  int slot = 0;
  for (const auto& m : j["members"]) {
    std::string detail = m.value("reason", "");
    if (!m.value("target", "").empty())
      detail += (detail.empty() ? "" : "; ") + std::string("rebuilding onto ") + m.value("target", "") + " " +
                std::to_string(m.value("rebuilt_stripes", 0ull) * 100 / (stripes ? stripes : 1)) + "%";
    if (m.value("lifetime_days", 999999.0) < 999999)
      detail += (detail.empty() ? "" : "; ") + std::string("lifespan ") + std::to_string(m.value("lifetime_days", 0.0)) + " days";
    std::printf("%-4d %-48s %-10s %s\n", slot++, m.value("name", "").c_str(), m.value("state", "").c_str(),
                detail.c_str());
  }
  for (const auto& s : j["spares"]) std::printf("%-4s %-48s %-10s\n", "-", s.get<std::string>().c_str(), "spare");
  std::printf("checksum errors %llu, repaired chunks %llu, reconstructed reads %llu, rebuilds done %llu\n",
              static_cast<unsigned long long>(j.value("checksum_errors", 0ull)),
              static_cast<unsigned long long>(j.value("repaired_chunks", 0ull)),
              static_cast<unsigned long long>(j.value("reconstructed_reads", 0ull)),
              static_cast<unsigned long long>(j.value("rebuilds_done", 0ull)));
  return 0;
}

}  // namespace clio
