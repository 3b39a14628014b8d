// libFuzzer target: the YAML config parser must turn any input into a config or a ConfigError,
// never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

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
  return 0;
}
