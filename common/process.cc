#include "common/process.h"

#include <dirent.h>
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
  if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z') return false;
  // The leader is a zombie as soon as it has exited, while its other threads may still be
  // on their way out holding the process's files (and so its locks): exited once it is the
  // last thread listed.
  DIR* tasks = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (tasks == nullptr) return true;
  int threads = 0;
  while (const dirent* e = ::readdir(tasks)) threads += e->d_name[0] != '.';
  ::closedir(tasks);
  return threads <= 1;
}

}  // namespace clio
