#include "common/mounts.h"

#include <sys/sysmacros.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace clio {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

Result<std::vector<MountEntry>> ReadMounts() {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return IoError("cannot read /proc/self/mountinfo");
  std::vector<MountEntry> out;
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mountpoint options [optional fields...] - fstype source super
    std::istringstream f(line);
    std::vector<std::string> fields;
    for (std::string w; f >> w;) fields.push_back(w);
    size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    unsigned maj = 0, mnr = 0;
    if (dash + 1 >= fields.size() || std::sscanf(fields[2].c_str(), "%u:%u", &maj, &mnr) != 2) continue;
    out.push_back({makedev(maj, mnr), Unescape(fields[4]), fields[dash + 1]});
  }
  return out;
}

}  // namespace clio
