// Paths on a CLIO mount, for the clioctl commands that take one (locate, flush PATH).
#pragma once

#include <sys/stat.h>

#include <string>

#include "common/status.h"

namespace clio {

struct ClioPath {
  std::string path;        // as given
  std::string mountpoint;  // the CLIO mount that holds it
  struct stat st {};       // lstat of the path
};

// Checks `path` exists and lies on a CLIO mount: the mount whose device (major:minor in
// /proc/self/mountinfo) is the path's st_dev has type fuse.clio. NotFound for a missing path;
// InvalidArgument naming the mount and type a path elsewhere is on.
Result<ClioPath> OnClioMount(const std::string& path);

}  // namespace clio
