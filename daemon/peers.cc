#include "daemon/peers.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace clio {

std::shared_ptr<const Peer> UnixPeer(int fd) {
  auto p = std::make_shared<Peer>();
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return p;  // granted: reader
  p->uid = cred.uid;
  p->gid = cred.gid;
  p->pid = static_cast<uint32_t>(cred.pid);
  std::vector<gid_t> groups(16);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  int rc = ::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen);
  if (rc != 0 && errno == ERANGE) {
    groups.resize(glen / sizeof(gid_t));
    rc = ::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen);
  }
  if (rc == 0)
    for (size_t i = 0; i < glen / sizeof(gid_t); ++i) p->groups.push_back(groups[i]);
  p->granted = cred.uid == 0 || cred.uid == ::geteuid() ? CallerClass::kAdmin : CallerClass::kReader;
  return p;
}

std::shared_ptr<const Peer> TokenPeer() {
  auto p = std::make_shared<Peer>();
  p->granted = CallerClass::kAdmin;
  return p;
}

}  // namespace clio
