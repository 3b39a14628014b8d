// Where a client may make the runtime create files. A pool or tier a client asks for at run
// time (pool create, compose start, tier add, the HTTP API) makes its files (a bdev's file, an
// alloc log, a journal) only beneath the runtime's state directory or a directory of
// runtime.allowed_paths, resolved by the kernel with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS) (where openat2 is missing or filtered, one component at a time with
// O_NOFOLLOW): a path that leaves the directory by `..` or through a symbolic link, at any
// component, is refused; so is a relative one, and one that names the runtime's own files. The
// operator's config, read at start, is not confined. docs/security.md.
//
// The runtime sets the directories once (SetConfinementRoots); the code that serves a client's
// creation opens a ScopedConfinement on its thread, and the I/O layer's opens and directory
// creations go through OpenBeneath and MakeDirsBeneath, which act plainly outside a scope.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace clio {

// The directories a client's creations may use (absolute; trailing slashes dropped), and the
// runtime's own files and directories beneath them that they may not touch (its metadata,
// token, pool log, pid file, socket and mount lock).
void SetConfinementRoots(std::vector<std::string> roots, std::vector<std::string> forbidden = {});
std::vector<std::string> ConfinementRoots();
// Adds to the forbidden paths (the CLI's pid file, which the kernel does not know).
void ForbidConfinedPath(std::string path);

// Confines the file creations of this thread while it lives (when `on`).
class ScopedConfinement {
 public:
  explicit ScopedConfinement(bool on);
  ~ScopedConfinement();
  ScopedConfinement(const ScopedConfinement&) = delete;
  ScopedConfinement& operator=(const ScopedConfinement&) = delete;

 private:
  bool saved_;
};
bool Confined();

// open(2) of `path`; within a confinement, beneath one of the roots or PermissionDenied naming
// the path and the roots. Returns the descriptor.
Result<int> OpenBeneath(const std::string& path, int flags, mode_t mode);
// The fallback of a confined open where openat2 is missing (Linux before 5.6) or filtered
// (seccomp): `rel` opened beneath `dirfd` one component at a time with O_NOFOLLOW, '..'
// refused (EXDEV), a link where a directory should be refused (ELOOP). -1 with errno set.
int OpenAtNoLinks(int dirfd, const std::string& rel, int flags, mode_t mode);
// mkdir -p of `dir` (mode 0700 whatever is made); within a confinement, beneath a root.
Status MakeDirsBeneath(const std::string& dir);

}  // namespace clio
