#include "daemon/tcp_owner.h"

#include <netinet/in.h>

#include <cstdio>
#include <cstring>
#include <fstream>
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

}  // namespace

uint32_t LocalTcpOwner(const sockaddr* peer, const sockaddr* local) {
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

}  // namespace clio
