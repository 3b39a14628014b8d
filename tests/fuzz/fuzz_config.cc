// libFuzzer target: the YAML config parser must turn any input into a config or a ConfigError,
// never a crash; so must the compose-document parser (compose start, pool create: text from
// clients), and a document it accepts must read back the same from its pool-log JSON.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "daemon/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = clio::ParseRuntimeConfig(text, "fuzz.yaml");
  if (r.ok()) {
    for (const auto& e : r->compose) {
      clio::ConfigReader reader(e.node, "fuzz.yaml");
      (void)reader.Size("capacity_limit", 0);
      (void)reader.Double("score", 0);
      (void)reader.Finish();
    }
  }
  auto doc = clio::ParseComposeDocument(text, "fuzz.yaml", "/state");
  if (doc.ok()) {
    std::vector<const clio::ConfigValue*> nodes;
    for (const auto& e : doc->entries) nodes.push_back(e.node);
    auto again = clio::ParseComposeDocument(clio::ComposeDocumentJson(nodes), "pools.json", "/state");
    if (!again.ok() || again->entries.size() != doc->entries.size()) __builtin_trap();
    for (size_t i = 0; i < nodes.size(); ++i)
      if (again->entries[i].pool_name != doc->entries[i].pool_name ||
          again->entries[i].pool_major != doc->entries[i].pool_major ||
          again->entries[i].restart != doc->entries[i].restart)
        __builtin_trap();
  }
  return 0;
}
