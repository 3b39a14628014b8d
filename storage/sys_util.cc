#include "storage/sys_util.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace clio {

uint64_t RandomTierId() {
  for (;;) {
    uint64_t id = 0;
    ssize_t n = ::getrandom(&id, sizeof(id), 0);
    if (n == static_cast<ssize_t>(sizeof(id))) {
      if (id != 0) return id;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // getrandom cannot fail on a supported kernel; fall back to the clock rather than abort.
    id = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         (static_cast<uint64_t>(::getpid()) << 32);
    if (id != 0) return id;
  }
}

Result<uint64_t> FilesystemFreeBytes(const std::string& path) {
  struct statvfs vfs;
  if (::statvfs(path.c_str(), &vfs) != 0) return Status::FromErrno(errno, "statvfs " + path);
  return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
}

Status SyncParentDir(const std::string& path) {
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, "open directory " + dir);
  int r = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (r != 0) return Status::FromErrno(err, "fsync directory " + dir);
  return Status::Ok();
}

}  // namespace clio
