#include "fs/protocol/mount_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/log.h"
#include "daemon/config.h"

namespace clio {

void MakeMountLock(const std::string& path) {
  // The pool is composed before the server listens: the socket's folder may not exist yet.
  MakeClientDir(std::filesystem::path(path).parent_path().string());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    CLIO_LOG_WARN("cannot make the mount lock {}: {} (mounts by users other than root may fail)", path,
                  std::strerror(errno));
    return;
  }
  if (::fchmod(fd, 0600) != 0) CLIO_LOG_WARN("mount lock {}: chmod 0600: {}", path, std::strerror(errno));
  ::close(fd);
}

}  // namespace clio
