// Who may call a pool method. Each pool's handler table names one class per method, so
// that the runtime has one place to decide whether a connection may run it.
//
// Not enforced yet: every client that passed the socket's checks (its file mode, or the TCP
// token) may call every method of every pool.
#pragma once

#include <cstdint>

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

// The caller class the request type of `Requests` (a tuple of typed requests,
// common/message.h) with `method` declares (its `kCaller`); `unknown` for a method none has.
template <class Requests>
CallerClass DeclaredCaller(uint32_t method, CallerClass unknown = CallerClass::kAdmin) {
  CallerClass c = unknown;
  wire::VisitRequest<Requests>(method, [&](auto type) { c = decltype(type)::type::kCaller; });
  return c;
}

}  // namespace clio
