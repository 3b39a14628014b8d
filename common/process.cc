#include "common/process.h"

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <utility>

namespace clio {
namespace {

// The state letter and the name of /proc/.../stat's line; state 0 when it cannot be read
// (the task is gone), '?' when it does not parse.
std::pair<char, std::string> StatOf(const std::string& path) {
  std::ifstream stat(path);
  std::string line;
  if (!std::getline(stat, line)) return {0, ""};
  const size_t open = line.find('('), close = line.rfind(')');  // the name may hold parentheses
  if (open == std::string::npos || close == std::string::npos || close < open || close + 2 >= line.size()) {
    return {'?', ""};
  }
  return {line[close + 2], line.substr(open + 1, close - open - 1)};
}

}  // namespace

bool ProcessExited(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const char state = StatOf("/proc/" + std::to_string(pid) + "/stat").first;
  if (state == 0) return true;  // gone between the two looks
  if (state != 'Z') return false;
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

std::string ThreadsInDiskSleep(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* tasks = ::opendir(dir.c_str());
  if (tasks == nullptr) return "";
  std::string out;
  while (const dirent* e = ::readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    auto [state, name] = StatOf(dir + "/" + e->d_name + "/stat");
    if (state != 'D') continue;
    if (!out.empty()) out += ", ";
    out += name + " (" + e->d_name + ")";
  }
  ::closedir(tasks);
  return out;
}

}  // namespace clio
