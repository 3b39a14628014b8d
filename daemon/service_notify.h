// Readiness and status for a service manager (systemd's sd_notify protocol). Each call is a
// no-op unless the process was started with $NOTIFY_SOCKET set (Type=notify units), so the
// daemons call them unconditionally. libsystemd stays inside service_notify.cc.
#pragma once

#include <string>

namespace clio {

// READY=1 with MAINPID (this process) and a STATUS line: the service is serving.
void NotifyReady(const std::string& status);
// STOPPING=1 with a STATUS line: a clean stop has begun (flushing may take a while).
void NotifyStopping(const std::string& status);
// A STATUS line alone.
void NotifyStatus(const std::string& status);

}  // namespace clio
