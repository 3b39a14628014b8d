#include "daemon/service_notify.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

namespace clio {
namespace {

// A status line is one line: newlines would start new assignments.
std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
}

}  // namespace

void NotifyReady(const std::string& status) {
  (void)sd_notifyf(0, "READY=1\nMAINPID=%lu\nSTATUS=%s", static_cast<unsigned long>(::getpid()),
                   OneLine(status).c_str());
}

void NotifyStopping(const std::string& status) {
  (void)sd_notifyf(0, "STOPPING=1\nSTATUS=%s", OneLine(status).c_str());
}

void NotifyStatus(const std::string& status) { (void)sd_notifyf(0, "STATUS=%s", OneLine(status).c_str()); }

}  // namespace clio
