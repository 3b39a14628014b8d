#include "cli/clio_mount.h"

#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace clio {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string oct = s.substr(i + 1, 3);
      if (oct.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::stoi(oct, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace

Result<ClioPath> OnClioMount(const std::string& path) {
  ClioPath p;
  p.path = path;
  if (::lstat(path.c_str(), &p.st) != 0) {
    const int err = errno;
    const std::string why = "'" + path + "': " + std::strerror(err);
    return err == ENOENT ? NotFound(why) : IoError(why);
  }
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return IoError("cannot read /proc/self/mountinfo to find the mount of '" + path + "'");
  const std::string dev = std::to_string(major(p.st.st_dev)) + ":" + std::to_string(minor(p.st.st_dev));
  std::string line, mountpoint, fstype;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint options [optional fields...] - fstype source super
    std::istringstream f(line);
    std::vector<std::string> fields;
    for (std::string w; f >> w;) fields.push_back(w);
    if (fields.size() < 7 || fields[2] != dev) continue;
    size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (dash + 1 >= fields.size()) continue;
    mountpoint = Unescape(fields[4]);  // the last entry of a device wins (mounted over)
    fstype = fields[dash + 1];
  }
  if (mountpoint.empty()) return InvalidArgument("'" + path + "': no mount in /proc/self/mountinfo has its device " + dev);
  if (fstype != "fuse.clio")
    return InvalidArgument("'" + path + "' is not on a CLIO mount (it is on " + mountpoint + ", type " + fstype + ")");
  p.mountpoint = mountpoint;
  return p;
}

}  // namespace clio
