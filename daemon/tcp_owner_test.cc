// LocalTcpOwner against real loopback connections: the uid it names is the one that owns the
// connecting socket, over IPv4, IPv6 and a dual-stack listener (v4-mapped addresses).
#include "daemon/tcp_owner.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace clio {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Listens on `family`'s loopback (or, with `any6`, on [::] dual-stack), connects to it over
// `connect_family`'s loopback, and asks LocalTcpOwner about the accepted connection.
uint32_t OwnerOfLoopbackConnection(int family, bool any6, int connect_family) {
  Fd listener{::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  REQUIRE(listener.fd >= 0);
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *in;
  } else {
    const int v6only = 0;
    ::setsockopt(listener.fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = any6 ? in6addr_any : in6addr_loopback;
    len = sizeof *in6;
  }
  REQUIRE(::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(::listen(listener.fd, 4) == 0);
  REQUIRE(::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const uint16_t port = family == AF_INET ? reinterpret_cast<sockaddr_in*>(&addr)->sin_port
                                          : reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port;

  Fd client{::socket(connect_family, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  REQUIRE(client.fd >= 0);
  sockaddr_storage to{};
  socklen_t to_len = 0;
  if (connect_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&to);
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    in->sin_port = port;
    to_len = sizeof *in;
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&to);
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    in6->sin6_port = port;
    to_len = sizeof *in6;
  }
  REQUIRE(::connect(client.fd, reinterpret_cast<sockaddr*>(&to), to_len) == 0);
  sockaddr_storage peer{}, local{};
  socklen_t plen = sizeof peer, llen = sizeof local;
  Fd conn{::accept4(listener.fd, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC)};
  REQUIRE(conn.fd >= 0);
  REQUIRE(::getsockname(conn.fd, reinterpret_cast<sockaddr*>(&local), &llen) == 0);
  return LocalTcpOwner(reinterpret_cast<sockaddr*>(&peer), reinterpret_cast<sockaddr*>(&local));
}

bool HaveIpv6Loopback() {
  Fd s{::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  return ::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
}

}  // namespace

TEST_CASE("LocalTcpOwner names the uid of a loopback client") {
  CHECK(OwnerOfLoopbackConnection(AF_INET, false, AF_INET) == ::geteuid());
  if (HaveIpv6Loopback()) {
    CHECK(OwnerOfLoopbackConnection(AF_INET6, false, AF_INET6) == ::geteuid());
    // A dual-stack listener sees an IPv4 client as ::ffff:127.0.0.1.
    CHECK(OwnerOfLoopbackConnection(AF_INET6, true, AF_INET) == ::geteuid());
  } else {
    MESSAGE("no IPv6 loopback here: the IPv6 and dual-stack cases are not run");
  }
}

TEST_CASE("LocalTcpOwner names another user's client, and no one for a socket that is gone") {
  if (::geteuid() != 0) {
    MESSAGE("not root: the other-user case needs setuid (run as root, as CI does)");
    return;
  }
  int to_child[2], from_child[2];
  REQUIRE(::pipe(to_child) == 0);
  REQUIRE(::pipe(from_child) == 0);
  Fd listener{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  REQUIRE(::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) == 0);
  REQUIRE(::listen(listener.fd, 4) == 0);
  REQUIRE(::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // uid 65534 connects, says so, and holds the connection until told to go.
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(1);
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(2);
    char b = 'c';
    if (::write(from_child[1], &b, 1) != 1) ::_exit(3);
    if (::read(to_child[0], &b, 1) < 0) ::_exit(4);
    ::_exit(0);
  }
  char b = 0;
  REQUIRE(::read(from_child[0], &b, 1) == 1);
  sockaddr_storage peer{}, local{};
  socklen_t plen = sizeof peer, llen = sizeof local;
  Fd conn{::accept4(listener.fd, reinterpret_cast<sockaddr*>(&peer), &plen, SOCK_CLOEXEC)};
  REQUIRE(conn.fd >= 0);
  REQUIRE(::getsockname(conn.fd, reinterpret_cast<sockaddr*>(&local), &llen) == 0);
  CHECK(LocalTcpOwner(reinterpret_cast<sockaddr*>(&peer), reinterpret_cast<sockaddr*>(&local)) == 65534u);
  REQUIRE(::write(to_child[1], "g", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // A peer address no socket has: no owner.
  reinterpret_cast<sockaddr_in*>(&peer)->sin_port = 0;
  CHECK(LocalTcpOwner(reinterpret_cast<sockaddr*>(&peer), reinterpret_cast<sockaddr*>(&local)) == kUnknownOwner);
  for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) ::close(fd);
}

}  // namespace clio
