// Size strings as users write them in configs and on command lines.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

// Parses "2GB", "512MiB", "0g", "4k", "1048576", "1.5G" (case-insensitive). K, M, G, T, P with
// or without "B" or "iB" are powers of 1024. Rejects empty, negative, unknown suffixes and
// values that overflow 64 bits, with a message quoting the input.
Result<uint64_t> ParseSize(std::string_view text);

// 1536 -> "1.5 KiB"; exact multiples print without decimals ("4 MiB").
std::string FormatSize(uint64_t bytes);

}  // namespace clio
