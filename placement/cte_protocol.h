// Messages of the CTE pool (module clio_cte_core), shared by the pool (cte_pool.cc) and its
// clients (clioctl's tier, stat and flush commands). Format documented in docs/ipc.md; the
// requests and replies are typed (common/message.h), their decoders bounds-checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/codec.h"
#include "common/message.h"
#include "common/status.h"
#include "daemon/caller.h"
#include "placement/cte.h"

namespace clio {

// Method ids 0-9 are reserved for the runtime's Create/Destroy/Monitor family.
enum class CteMethod : uint32_t {
  kListTiers = 10,      // -> tier list
  kSetLifespan = 11,    // u64 tier id, f64 days -> empty
  kDrain = 12,          // u64 tier id -> empty, once the tier is empty (blocks a worker)
  kDrainProgress = 13,  // u64 tier id -> drain progress
  kUndrain = 14,        // u64 tier id -> empty
  kReorganize = 15,     // empty -> reorganize stats (one pass now)
  kAddTier = 16,        // tier spec (EncodeTierSpec) -> tier list of the new tier
  kRemoveTier = 17,     // u64 tier id -> empty (a drained, empty tier)
  kWriteback = 18,      // empty -> write-back stats
  kFlushAll = 19,       // empty -> empty, once every blob dirty at the call is flushed and the
                        // metadata is durable (blocks a worker, like kDrain)
  kTierStates = 20,     // empty -> tier states
};

// Field codecs (common/message.h) of the reports the pool sends.
// A tier: string name, u64 id, f64 score, u8 medium, u8 persistence, u64 capacity, remaining,
// used, f64 lifetime_days, string backend, string health. A medium this build does not know
// is Corruption (a newer runtime?).
void WireEncode(Encoder& e, const TierInfo& t);
Status WireDecode(Decoder& d, TierInfo& t);
constexpr size_t WireMinSize(const TierInfo*) { return 4 + 8 + 8 + 1 + 1 + 3 * 8 + 8 + 4 + 4; }
// u64 tier id, u8 condition (TierCondition), u64 bytes_left, u8 from_config.
void WireEncode(Encoder& e, const TierState& s);
Status WireDecode(Decoder& d, TierState& s);
constexpr size_t WireMinSize(const TierState*) { return 8 + 1 + 8 + 1; }
// u8 draining, u64 bytes_left, u64 moved_bytes, u64 moved_copies.
void WireEncode(Encoder& e, const DrainProgress& p);
Status WireDecode(Decoder& d, DrainProgress& p);
// u64 candidates, promoted, demoted, moved_bytes, budget, over_budget, skipped.
void WireEncode(Encoder& e, const ReorganizeStats& s);
Status WireDecode(Decoder& d, ReorganizeStats& s);
// u32 n, per volatile tier (u64 tier id, limit, dirty, peak); then u64 reserved, dirty_blobs,
// dirty_waits, dirty_wait_timeouts, evictions, evicted_bytes, flush_failures, flush_passes,
// f64 oldest_dirty_s.
void WireEncode(Encoder& e, const WritebackStats& w);
Status WireDecode(Decoder& d, WritebackStats& w);

namespace cteproto {

using wire::Empty;

#define CLIO_CTE_REQUEST(Method, ReplyType, idempotent, caller) \
  CLIO_WIRE_REQUEST(CteMethod, Method, "clio_cte_core ", ReplyType, idempotent, CallerClass::caller)

struct TierListReply {
  static constexpr const char* kName = "tier list";
  std::vector<TierInfo> tiers;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.tiers); }
};
struct TierStatesReply {
  static constexpr const char* kName = "tier states";
  std::vector<TierState> states;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.states); }
};
struct DrainProgressReply {
  static constexpr const char* kName = "drain progress";
  DrainProgress progress;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.progress); }
};
struct ReorganizeReply {
  static constexpr const char* kName = "reorganize stats";
  ReorganizeStats stats;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.stats); }
};
struct WritebackReply {
  static constexpr const char* kName = "writeback stats";
  WritebackStats stats;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.stats); }
};

struct ListTiers {
  CLIO_CTE_REQUEST(ListTiers, TierListReply, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};
struct SetLifespan {
  CLIO_CTE_REQUEST(SetLifespan, Empty, true, kAdmin);
  uint64_t tier = 0;
  double days = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.tier); f(s.days); }
};
// Answers once the tier is empty, or fails naming why, leaving every blob intact.
struct Drain {
  CLIO_CTE_REQUEST(Drain, Empty, true, kAdmin);
  uint64_t tier = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.tier); }
};
struct GetDrainProgress {
  CLIO_CTE_REQUEST(DrainProgress, DrainProgressReply, true, kReader);
  uint64_t tier = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.tier); }
};
struct Undrain {
  CLIO_CTE_REQUEST(Undrain, Empty, true, kAdmin);
  uint64_t tier = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.tier); }
};
struct Reorganize {
  CLIO_CTE_REQUEST(Reorganize, ReorganizeReply, true, kAdmin);
  template <class S, class F> static void Fields(S&, F&&) {}
};
// `spec`: EncodeTierSpec's bytes, kept as they are in the metadata. Not resent after a
// broken connection: a second add would find the first one's tier.
struct AddTier {
  CLIO_CTE_REQUEST(AddTier, TierListReply, false, kAdmin);
  wire::Rest spec;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.spec); }
};
struct RemoveTier {
  CLIO_CTE_REQUEST(RemoveTier, Empty, false, kAdmin);
  uint64_t tier = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.tier); }
};
struct Writeback {
  CLIO_CTE_REQUEST(Writeback, WritebackReply, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};
// What fsync gives one file, for every file: flushed copies, then a durable index.
struct FlushAll {
  CLIO_CTE_REQUEST(FlushAll, Empty, true, kAdmin);
  template <class S, class F> static void Fields(S&, F&&) {}
};

// What placement does with each tier (Cte::TierStates), in placement order.
struct TierStates {
  CLIO_CTE_REQUEST(TierStates, TierStatesReply, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};

#undef CLIO_CTE_REQUEST

using AllRequests = std::tuple<ListTiers, SetLifespan, Drain, GetDrainProgress, Undrain, Reorganize, AddTier,
                               RemoveTier, Writeback, FlushAll, TierStates>;
static_assert(wire::CoversMethods<AllRequests>(CteMethod::kListTiers, CteMethod::kTierStates),
              "every CteMethod needs one request type in AllRequests");

}  // namespace cteproto

// Whole-reply decoders (tests, tools).
Result<std::vector<TierInfo>> DecodeTierList(std::string_view bytes);
Result<DrainProgress> DecodeDrainProgress(std::string_view bytes);
Result<ReorganizeStats> DecodeReorganizeStats(std::string_view bytes);
Result<WritebackStats> DecodeWritebackStats(std::string_view bytes);

}  // namespace clio
