// Messages of a bdev pool (module clio_bdev), shared by the pool (bdev_pool.cc) and its client
// (bdev_client.cc). Format documented in docs/ipc.md. Decoders are bounds-checked
// (common/codec.h): a malformed payload is InvalidArgument/Corruption, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

#include "common/codec.h"
#include "common/message.h"
#include "common/status.h"
#include "daemon/caller.h"
#include "storage/bdev.h"

namespace clio {

// Method ids 0-9 are reserved for the runtime's Create/Destroy/Monitor family; Monitor is 9.
enum class BdevMethod : uint32_t {
  kMonitor = 9,          // [string query: "" or "stats"] -> JSON text
  kAllocateBlocks = 10,  // u64 bytes -> extents
  kWrite = 11,           // extents, u64 offset, bytes data -> u64 bytes written
  kRead = 12,            // extents, u64 offset, u64 len -> bytes
  kFreeBlocks = 13,      // extents -> empty
  kGetStats = 14,        // -> stats
  kSync = 15,            // -> empty
  kSetLifespan = 16,     // f64 days -> empty
  kFlushAllocLog = 17,   // -> empty
  kUpdate = 18,          // -> GPU memory info (pinned, hbm); NotSupported for other types
};

// Largest Read or Write a single request may carry; BdevClient splits bigger ones.
inline constexpr uint64_t kMaxBdevIoBytes = 32ull << 20;

// Extents as a message field: u32 n, then n x (u64 offset, u64 size, u8 size_class), where
// size_class = log2(size) (the block's size class: 9 = 512 B ... 20 = 1 MiB). Decoding checks
// the count against the input, and that every size is a power of two matching its class and
// every range fits in 64 bits (InvalidArgument naming the extent).
struct WireExtents {
  ExtentList list;
};
void WireEncode(Encoder& e, const WireExtents& x);
Status WireDecode(Decoder& d, WireExtents& x);
// A device's figures; a medium this build does not know is Corruption (a newer runtime?).
void WireEncode(Encoder& e, const BdevStats& s);
Status WireDecode(Decoder& d, BdevStats& s);
void WireEncode(Encoder& e, const GpuMemoryInfo& g);
Status WireDecode(Decoder& d, GpuMemoryInfo& g);

// The requests and replies (common/message.h). `kIdempotent`: a client may send it again
// after a lost reply.
namespace bdevproto {

using wire::Empty;
using wire::Raw;

#define CLIO_BDEV_REQUEST(Type, ReplyType, idempotent, caller) \
  CLIO_WIRE_REQUEST(BdevMethod, Type, "clio_bdev ", ReplyType, idempotent, CallerClass::caller)

struct ExtentsReply {
  static constexpr const char* kName = "clio_bdev extents reply";
  WireExtents extents;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.extents); }
};
struct WriteReply {
  static constexpr const char* kName = "clio_bdev Write reply";
  uint64_t written = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.written); }
};
struct StatsReply {
  static constexpr const char* kName = "bdev stats";
  BdevStats stats;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.stats); }
};
struct GpuMemoryReply {
  static constexpr const char* kName = "gpu memory info";
  GpuMemoryInfo info;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.info); }
};

// `query`: "" or "stats". Reply: JSON text.
struct Monitor {
  CLIO_BDEV_REQUEST(Monitor, Raw, true, kReader);
  wire::Trailing<std::string> query;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.query); }
};
// Not idempotent: a resend after a lost reply would leak the first allocation.
struct AllocateBlocks {
  CLIO_BDEV_REQUEST(AllocateBlocks, ExtentsReply, false, kAdmin);
  uint64_t bytes = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.bytes); }
};
struct Write {
  CLIO_BDEV_REQUEST(Write, WriteReply, true, kAdmin);
  WireExtents extents;
  uint64_t offset = 0;
  std::string_view data;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.extents); f(s.offset); f(s.data); }
};
// Reply: the `len` bytes.
struct Read {
  CLIO_BDEV_REQUEST(Read, Raw, true, kAdmin);
  WireExtents extents;
  uint64_t offset = 0, len = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.extents); f(s.offset); f(s.len); }
};
// Not idempotent: the blocks may be allocated again in between.
struct FreeBlocks {
  CLIO_BDEV_REQUEST(FreeBlocks, Empty, false, kAdmin);
  WireExtents extents;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.extents); }
};
struct GetStats {
  CLIO_BDEV_REQUEST(GetStats, StatsReply, true, kReader);
  template <class S, class F> static void Fields(S&, F&&) {}
};
struct Sync {
  CLIO_BDEV_REQUEST(Sync, Empty, true, kAdmin);
  template <class S, class F> static void Fields(S&, F&&) {}
};
struct SetLifespan {
  CLIO_BDEV_REQUEST(SetLifespan, Empty, true, kAdmin);
  double days = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.days); }
};
struct FlushAllocLog {
  CLIO_BDEV_REQUEST(FlushAllocLog, Empty, true, kAdmin);
  template <class S, class F> static void Fields(S&, F&&) {}
};
// pinned and hbm: where the device's bytes live; NotSupported for other media.
struct Update {
  CLIO_BDEV_REQUEST(Update, GpuMemoryReply, true, kAdmin);
  template <class S, class F> static void Fields(S&, F&&) {}
};

#undef CLIO_BDEV_REQUEST

using AllRequests = std::tuple<Monitor, AllocateBlocks, Write, Read, FreeBlocks, GetStats, Sync, SetLifespan,
                               FlushAllocLog, Update>;
static_assert(wire::CoversMethods<AllRequests>(BdevMethod::kMonitor, BdevMethod::kUpdate),
              "every BdevMethod needs one request type in AllRequests");

}  // namespace bdevproto

// Whole-message forms of the field codecs above.
void EncodeExtents(Encoder& e, const ExtentList& extents);
Status DecodeExtents(Decoder& d, ExtentList* out);
std::string EncodeBdevStats(const BdevStats& s);
Result<BdevStats> DecodeBdevStats(std::string_view bytes);
std::string EncodeGpuMemoryInfo(const GpuMemoryInfo& g);
Result<GpuMemoryInfo> DecodeGpuMemoryInfo(std::string_view bytes);

}  // namespace clio
