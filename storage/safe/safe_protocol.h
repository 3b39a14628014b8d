// Method ids of a safe-bdev pool (module clio_safe_bdev) beyond the bdev task interface it
// also serves (storage/bdev_protocol.h). Format documented in docs/ipc.md. Kept apart from
// safe_pool.h so clients (clioctl) need no link to the module.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>

#include "common/message.h"
#include "daemon/caller.h"

namespace clio {

enum class SafeBdevMethod : uint32_t {
  kAddBdev = 20,      // string pool (id "301.0" or name) -> empty: a new spare
  kRemoveBdev = 21,   // string member, string reason -> empty: the member counts as failed
  kRecoverBdev = 22,  // string member, string replacement pool -> empty: rebuild starts
  kVerify = 23,       // -> u64 stripes that did not verify (and were repaired): a scrub
};

// The requests and replies (common/message.h); every one is the administrator's.
namespace safeproto {

#define CLIO_SAFE_REQUEST(Type, ReplyType, idempotent) \
  CLIO_WIRE_REQUEST(SafeBdevMethod, Type, "clio_safe_bdev ", ReplyType, idempotent, CallerClass::kAdmin)

// `pool`: an id ("301.0") or a name.
struct AddBdev {
  CLIO_SAFE_REQUEST(AddBdev, wire::Empty, false);
  std::string pool;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.pool); }
};
struct RemoveBdev {
  CLIO_SAFE_REQUEST(RemoveBdev, wire::Empty, false);
  std::string member, reason;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.member); f(s.reason); }
};
struct RecoverBdev {
  CLIO_SAFE_REQUEST(RecoverBdev, wire::Empty, false);
  std::string member, pool;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.member); f(s.pool); }
};
struct VerifyReply {
  static constexpr const char* kName = "clio_safe_bdev Verify reply";
  uint64_t bad_stripes = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.bad_stripes); }
};
struct Verify {
  CLIO_SAFE_REQUEST(Verify, VerifyReply, true);
  template <class S, class F> static void Fields(S&, F&&) {}
};

#undef CLIO_SAFE_REQUEST

using AllRequests = std::tuple<AddBdev, RemoveBdev, RecoverBdev, Verify>;
static_assert(wire::CoversMethods<AllRequests>(SafeBdevMethod::kAddBdev, SafeBdevMethod::kVerify),
              "every SafeBdevMethod needs one request type in AllRequests");

}  // namespace safeproto
}  // namespace clio
