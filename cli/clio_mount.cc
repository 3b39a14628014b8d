#include "cli/clio_mount.h"

#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>

#include "common/mounts.h"

namespace clio {

Result<ClioPath> OnClioMount(const std::string& path) {
  ClioPath p;
  p.path = path;
  if (::lstat(path.c_str(), &p.st) != 0) {
    const int err = errno;
    const std::string why = "'" + path + "': " + std::strerror(err);
    return err == ENOENT ? NotFound(why) : IoError(why);
  }
  auto mounts = ReadMounts();
  if (!mounts.ok()) return IoError(mounts.status().message() + " to find the mount of '" + path + "'");
  const std::string dev = std::to_string(major(p.st.st_dev)) + ":" + std::to_string(minor(p.st.st_dev));
  std::string mountpoint, fstype;
  for (const MountEntry& m : *mounts) {
    if (m.dev != p.st.st_dev) continue;
    mountpoint = m.mountpoint;  // the last entry of a device wins (mounted over)
    fstype = m.fstype;
  }
  if (mountpoint.empty()) return InvalidArgument("'" + path + "': no mount in /proc/self/mountinfo has its device " + dev);
  if (fstype != "fuse.clio")
    return InvalidArgument("'" + path + "' is not on a CLIO mount (it is on " + mountpoint + ", type " + fstype + ")");
  p.mountpoint = mountpoint;
  return p;
}

}  // namespace clio
