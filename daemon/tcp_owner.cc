#include "daemon/tcp_owner.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace clio {
namespace {

// An address as the table prints it: the 32-bit words of its network-order bytes in hex, then
// the port. Empty for a family it does not hold.
std::string TableAddress(const sockaddr* sa) {
  std::string out;
  char buf[16];
  const unsigned char* bytes = nullptr;
  size_t n = 0;
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    bytes = reinterpret_cast<const unsigned char*>(&in->sin_addr);
    n = 4;
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    bytes = reinterpret_cast<const unsigned char*>(&in6->sin6_addr);
    n = 16;
    port = ntohs(in6->sin6_port);
  } else {
    return out;
  }
  for (size_t i = 0; i < n; i += 4) {
    uint32_t w;
    std::memcpy(&w, bytes + i, 4);
    std::snprintf(buf, sizeof buf, "%08X", w);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, ":%04X", port);
  return out + buf;
}


// An IPv4 address a dual-stack (AF_INET6) socket shows as ::ffff:a.b.c.d, as AF_INET: the
// client's own socket is most likely an IPv4 one, and the kernel files it under that family.
sockaddr_storage Unmapped(const sockaddr* sa) {
  sockaddr_storage out{};
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      auto* in = reinterpret_cast<sockaddr_in*>(&out);
      in->sin_family = AF_INET;
      in->sin_port = in6->sin6_port;
      std::memcpy(&in->sin_addr, in6->sin6_addr.s6_addr + 12, 4);
      return out;
    }
    std::memcpy(&out, sa, sizeof(sockaddr_in6));
  } else if (sa->sa_family == AF_INET) {
    std::memcpy(&out, sa, sizeof(sockaddr_in));
  }
  return out;
}

// The kernel's answer for exactly the client socket at `peer` connected to `local` (one
// NETLINK_SOCK_DIAG request: no walk over every socket, which a local user could make long).
// nullopt when that interface is unavailable (a sandbox without AF_NETLINK).
std::optional<uint32_t> DiagOwner(const sockaddr* peer, const sockaddr* local) {
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } msg{};
  msg.nlh.nlmsg_len = sizeof msg;
  msg.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  msg.nlh.nlmsg_flags = NLM_F_REQUEST;
  msg.req.sdiag_family = static_cast<uint8_t>(peer->sa_family);
  msg.req.sdiag_protocol = IPPROTO_TCP;
  msg.req.idiag_states = ~0u;
  msg.req.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
  msg.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (peer->sa_family == AF_INET) {
    const auto* p = reinterpret_cast<const sockaddr_in*>(peer);
    const auto* l = reinterpret_cast<const sockaddr_in*>(local);
    msg.req.id.idiag_sport = p->sin_port;
    msg.req.id.idiag_dport = l->sin_port;
    std::memcpy(msg.req.id.idiag_src, &p->sin_addr, 4);
    std::memcpy(msg.req.id.idiag_dst, &l->sin_addr, 4);
  } else {
    const auto* p = reinterpret_cast<const sockaddr_in6*>(peer);
    const auto* l = reinterpret_cast<const sockaddr_in6*>(local);
    msg.req.id.idiag_sport = p->sin6_port;
    msg.req.id.idiag_dport = l->sin6_port;
    std::memcpy(msg.req.id.idiag_src, &p->sin6_addr, 16);
    std::memcpy(msg.req.id.idiag_dst, &l->sin6_addr, 16);
  }
  const int fd = ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return std::nullopt;
  const timeval wait{1, 0};
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  alignas(nlmsghdr) char buf[4096];
  ssize_t n = -1;
  if (::sendto(fd, &msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
      static_cast<ssize_t>(sizeof msg)) {
    do {
      n = ::recv(fd, buf, sizeof buf, 0);
    } while (n < 0 && errno == EINTR);
  }
  ::close(fd);
  if (n < 0) return std::nullopt;
  const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
  if (!NLMSG_OK(h, static_cast<uint32_t>(n))) return std::nullopt;
  if (h->nlmsg_type == NLMSG_ERROR) {
    const auto* err = static_cast<const nlmsgerr*>(NLMSG_DATA(h));
    return err->error == -ENOENT ? std::optional<uint32_t>(kUnknownOwner) : std::nullopt;
  }
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(inet_diag_msg))) return std::nullopt;
  return static_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_uid;
}

// The same from the text table (/proc/net/tcp, tcp6), line by line.
uint32_t TableOwner(const sockaddr* peer, const sockaddr* local) {
  const std::string want_local = TableAddress(peer), want_remote = TableAddress(local);
  if (want_local.empty() || want_remote.empty() || peer->sa_family != local->sa_family) return kUnknownOwner;
  std::ifstream table(peer->sa_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
    std::istringstream f(line);
    std::string slot, loc, rem, st, queues, timer, retr;
    uint32_t uid = kUnknownOwner;
    if (!(f >> slot >> loc >> rem >> st >> queues >> timer >> retr >> uid)) continue;
    if (loc == want_local && rem == want_remote) return uid;
  }
  return kUnknownOwner;
}

uint32_t OwnerOf(const sockaddr* peer, const sockaddr* local) {
  if (std::optional<uint32_t> uid = DiagOwner(peer, local)) return *uid;
  return TableOwner(peer, local);
}

}  // namespace

uint32_t LocalTcpOwner(const sockaddr* peer, const sockaddr* local) {
  if (peer->sa_family != local->sa_family || (peer->sa_family != AF_INET && peer->sa_family != AF_INET6))
    return kUnknownOwner;
  // Both ends as the kernel files the client's socket: IPv4 when the addresses are v4-mapped,
  // then, failing that, as they came (a client of a dual-stack socket of its own).
  const sockaddr_storage p = Unmapped(peer), l = Unmapped(local);
  const auto* ps = reinterpret_cast<const sockaddr*>(&p);
  const auto* ls = reinterpret_cast<const sockaddr*>(&l);
  const uint32_t uid = OwnerOf(ps, ls);
  if (uid != kUnknownOwner || ps->sa_family == peer->sa_family) return uid;
  return OwnerOf(peer, local);
}

}  // namespace clio
