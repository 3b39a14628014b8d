// Helpers shared by the placement tests (cte_test, writeback_test, movement_test).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>

#include "placement/cte.h"

namespace clio::testing {

// `n` pseudo-random bytes of stream `seed`.
inline std::string Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

// Bytes [off, off+len) of a blob; the test fails if the read does.
inline std::string GetBytes(Cte* cte, uint64_t tag, uint64_t blob, uint64_t off, uint64_t len) {
  std::string out(len, '?');
  REQUIRE(cte->GetBlob(tag, blob, off, len, out.data()).ok());
  return out;
}

}  // namespace clio::testing
