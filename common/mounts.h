// The mount table of this process (/proc/self/mountinfo).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace clio {

struct MountEntry {
  dev_t dev = 0;           // field 3, major:minor
  std::string mountpoint;  // field 5, octal escapes (space, tab, newline, backslash) decoded
  std::string fstype;      // the first field after " - "
};

// Every mount, in the table's order (a later entry on the same mount point is mounted over
// the earlier ones). Read from the table, never by stat(2), which a FUSE mount whose daemon is
// not serving (yet, or any more) would answer late or not at all. IoError if it cannot be read.
Result<std::vector<MountEntry>> ReadMounts();

}  // namespace clio
