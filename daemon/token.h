// The node's token (runtime.token_file): what TCP clients present in their Hello and HTTP
// actions in their Authorization header. The runtime makes it (runtime.cc, EnsureToken).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

// The file's first line, without trailing blanks. PermissionDenied when it cannot be read
// (naming the file), InvalidArgument when it is empty or no path is given.
Result<std::string> ReadTokenFile(const std::string& path);

// Whether a presented token is the node's, in time that depends only on the longer of the two:
// a wrong guess teaches nothing, not even the length.
bool TokensMatch(std::string_view given, std::string_view token);

}  // namespace clio
