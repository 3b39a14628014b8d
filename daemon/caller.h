// Who may call a pool method. Each pool's handler table names one class per method, and the
// runtime decides with it whether a connection may run it (Runtime::Dispatch): a connection's
// peer is granted a class when it connects, from the kernel's word about it (SO_PEERCRED on
// the Unix socket) or the node's token (TCP). docs/security.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/message.h"

namespace clio {

enum class CallerClass : uint8_t {
  kReader,  // changes nothing and shows no file's bytes or attributes (statfs, locate)
  kMount,   // a filesystem mount: names, attributes and bytes of every file
  kAdmin,   // the runtime's administration: tiers, pools, flushes, lifespans
};

inline const char* CallerClassName(CallerClass c) {
  switch (c) {
    case CallerClass::kReader: return "reader";
    case CallerClass::kMount: return "mount";
    case CallerClass::kAdmin: return "admin";
  }
  return "?";
}

// A connection's peer, fixed when it connected: a connection is a capability, whoever holds
// its descriptor afterwards.
struct Peer {
  static constexpr uint32_t kNoUid = ~0u;  // TCP, HTTP: the token vouches, not a uid
  uint32_t uid = kNoUid;
  uint32_t gid = kNoUid;
  std::vector<uint32_t> groups;  // supplementary groups (SO_PEERGROUPS)
  uint32_t pid = 0;
  // The classes it may call: this one and those below it (reader < mount < admin).
  CallerClass granted = CallerClass::kReader;

  bool InGroup(uint32_t g) const {
    if (g == gid) return true;
    for (uint32_t x : groups)
      if (x == g) return true;
    return false;
  }
  bool May(CallerClass c) const { return static_cast<uint8_t>(c) <= static_cast<uint8_t>(granted); }
  // "uid 1000", or "a client with the node's token".
  std::string Describe() const {
    return uid == kNoUid ? std::string("a client with the node's token") : "uid " + std::to_string(uid);
  }
};

// The caller class the request type of `Requests` (a tuple of typed requests,
// common/message.h) with `method` declares (its `kCaller`); `unknown` for a method none has.
template <class Requests>
CallerClass DeclaredCaller(uint32_t method, CallerClass unknown = CallerClass::kAdmin) {
  CallerClass c = unknown;
  wire::VisitRequest<Requests>(method, [&](auto type) { c = decltype(type)::type::kCaller; });
  return c;
}

// The name of `method` in `Requests` (its kName), or "method N".
template <class Requests>
std::string DeclaredName(uint32_t method) {
  std::string name = "method " + std::to_string(method);
  wire::VisitRequest<Requests>(method, [&](auto type) { name = decltype(type)::type::kName; });
  return name;
}

}  // namespace clio
