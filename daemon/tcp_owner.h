// Which local user opened a TCP connection: a loopback client is a process of this machine,
// and the kernel names the uid that owns its end (one NETLINK_SOCK_DIAG lookup of the exact
// connection; the table in /proc/net/tcp, tcp6 where netlink is not allowed). The TCP transport and the HTTP server cap connections per owner with it
// (docs/security.md, "Limits").
#pragma once

#include <sys/socket.h>

#include <cstdint>

namespace clio {

inline constexpr uint32_t kUnknownOwner = ~0u;

// The uid owning the socket at `peer` connected to our `local` end (both AF_INET or AF_INET6),
// or kUnknownOwner when the table has no such socket (gone already, or not on this machine).
uint32_t LocalTcpOwner(const sockaddr* peer, const sockaddr* local);

}  // namespace clio
