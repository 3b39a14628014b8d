#include "common/process.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace clio {

bool ProcessExited(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // gone between the two looks
  const size_t close = line.rfind(')');       // the name may hold spaces and parentheses
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

}  // namespace clio
