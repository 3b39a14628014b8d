// Processes, by pid.
#pragma once

#include <sys/types.h>

#include <string>

namespace clio {

// Whether the process has exited: gone, or a zombie its parent has not reaped yet (init reaps
// a daemon's; some inits only every few tens of seconds) with none of its threads left, so its
// files and the locks on them are released.
bool ProcessExited(pid_t pid);

// The process's threads in uninterruptible sleep (state D: waiting on a device, a network
// file system, a FUSE request), as "name (tid), ..."; empty when none or the process is gone.
std::string ThreadsInDiskSleep(pid_t pid);

}  // namespace clio
