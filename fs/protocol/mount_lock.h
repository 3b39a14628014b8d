// The filesystem's mount lock: one mount per runtime. Each mount's kernel caches (pages kept
// across opens, entries, absent xattrs, files known clean) stay right only while it is the
// namespace's only writer, so a mount holds this file locked (flock) while it serves
// (fs/mount/fuse_session.cc, TakeMountLock). It lies beside the runtime's socket; only the
// runtime's user and root may open it, the callers that may mount (docs/security.md): a member
// of the socket's group who could lock it would block every mount.
#pragma once

#include <string>

namespace clio {

inline std::string MountLockPath(const std::string& socket_path) { return socket_path + ".mount"; }

// Made by the namespace pool when the runtime composes it (mode 0600; an older one is set to
// 0600), and left in place (a mount holds its lock across a runtime restart). A file that
// cannot be made is a warning: mounts by the runtime's user other than root may then fail.
void MakeMountLock(const std::string& path);

}  // namespace clio
