// The filesystem's mount lock: one mount per runtime. Each mount's kernel caches (pages kept
// across opens, entries, absent xattrs, files known clean) stay right only while it is the
// namespace's only writer, so a mount holds this file locked (flock) while it serves
// (fs/mount/fuse_session.cc, TakeMountLock). It lies beside the runtime's socket, where a
// client that may connect may also lock it.
#pragma once

#include <string>

namespace clio {

inline std::string MountLockPath(const std::string& socket_path) { return socket_path + ".mount"; }

// Made by the namespace pool when the runtime composes it, and left in place (a mount holds
// its lock across a runtime restart); shared like the socket (group clio, 0660), so that a
// mount by any client that may connect can lock it and record its mount point there. A file
// that cannot be made is a warning: mounts by users other than root may then fail.
void MakeMountLock(const std::string& path);

}  // namespace clio
