// Files replaced whole, durably: what the runtime's small state files (the token, the pool
// log) need.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

// Writes `bytes` to `path` so that a crash leaves the old file or the new one, never a mix. The
// file is made afresh (a stale temporary, or a link planted in its place, is removed first:
// O_EXCL | O_NOFOLLOW), mode 0600, synced, renamed over `path` (which replaces a link, never
// follows it), and the directory synced.
Status ReplaceFileDurably(const std::string& path, std::string_view bytes);

}  // namespace clio
