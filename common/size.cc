#include "common/size.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>

namespace clio {

Result<uint64_t> ParseSize(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("bad size '" + std::string(text) + "': " + std::string(why) +
                           " (expected e.g. 4k, 512MiB, 2GB)");
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  bool seen_dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) ||
                             (text[i] == '.' && !seen_dot))) {
    seen_dot |= text[i] == '.';
    ++i;
  }
  if (i == start) return bad("no number");
  std::string number(text.substr(start, i - start));
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string suffix;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) continue;
    suffix.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))));
  }
  int shift = 0;
  if (!suffix.empty()) {
    static constexpr std::string_view kUnits = "kmgtp";
    size_t u = kUnits.find(suffix[0]);
    std::string_view rest;
    if (u != std::string_view::npos) {
      shift = 10 * static_cast<int>(u + 1);
      rest = std::string_view(suffix).substr(1);
      if (!(rest.empty() || rest == "b" || rest == "ib")) return bad("unknown unit");
    } else if (suffix != "b") {
      return bad("unknown unit");
    }
  }
  long double value = std::strtold(number.c_str(), nullptr);
  long double bytes = std::ldexp(value, shift);
  if (!std::isfinite(bytes) || bytes > static_cast<long double>(std::numeric_limits<uint64_t>::max()))
    return bad("too large");
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace clio
