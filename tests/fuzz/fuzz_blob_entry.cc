// libFuzzer target: blob index values come from disk; a corrupt one must decode to an error,
// and anything that decodes must re-encode to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "placement/blob_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  auto e = clio::DecodeBlobEntry(in);
  if (e.ok() && clio::EncodeBlobEntry(*e) != in) std::abort();
  return 0;
}
