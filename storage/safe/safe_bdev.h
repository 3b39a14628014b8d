// safe-bdev: an erasure-coded block device over several member bdevs (seeds/bdev-module.txt,
// docs/safe-bdev.md). It is a Bdev like any other tier device, so a CTE storage entry attaches
// to it with existing_pool_id + existing_pool_module: clio_safe_bdev.
//
// The array stripes its data area over k data and m parity members (Reed-Solomon, ISA-L) in
// chunks of chunk_size, parity rotating across members. Every chunk carries a trailer with its
// CRC32C (parity trailers also hold the CRCs of the stripe's data chunks), checked on every
// read: a bad chunk is served by reconstruction and rewritten. Each stripe update is journaled
// (storage/safe/journal.h) before it is written in place, so a crash never leaves parity that
// disagrees with data. With up to m members failed the array reads by reconstruction and keeps
// writing; a failed member is rebuilt onto a spare (or a replacement) in the background,
// bandwidth-bounded and resumable after a restart; a member whose lifespan drops under
// replace_below_days is copied onto a spare before it fails.
//
// Members are Bdevs owned by pools composed before the array; they must outlive it.
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "storage/bdev.h"

namespace clio {

struct SafeBdevConfig {
  std::string name;                      // the pool name, e.g. "safe::array0"
  uint32_t max_failures = 1;             // m: members the array survives losing
  uint64_t chunk_size = 64ull << 10;     // bytes per member per stripe; a multiple of the alignment
  // Local file of the array's allocator log (required for persistent members); the superblock
  // is "<alloc_log>.sb" and the stripe journal "<alloc_log>.journal".
  std::string alloc_log;
  uint64_t journal_size = 128ull << 20;  // bytes; at least 4 full-stripe records
  uint64_t rebuild_bandwidth = 256ull << 20;  // bytes/s written onto a rebuilding member; 0 = unbounded
  double replace_below_days = 7;         // lifespan under which a member is replaced by a spare
  uint32_t health_interval_ms = 1000;    // how often lifespans are checked
  std::optional<PerfMetrics> perf;       // default: derived from the members'
  IoOptions io;                          // for the allocator log and journal
};

// A member or spare: a bdev pool composed earlier.
struct SafeMember {
  std::string name;  // the pool name (for messages and the superblock)
  Bdev* bdev = nullptr;
};

struct SafeMemberStatus {
  std::string name;
  std::string state;   // "ok", "failed", "rebuilding", "replacing" (copy onto a spare before failure)
  std::string reason;  // why it failed
  std::string target;  // the device being rebuilt for this slot
  uint64_t rebuilt_stripes = 0;
  double lifetime_days = 999999;
};

struct SafeArrayStatus {
  uint32_t k = 0, m = 0;
  uint64_t chunk_size = 0, stripes = 0;
  std::vector<SafeMemberStatus> members;  // in slot order
  std::vector<std::string> spares;
  uint32_t failed = 0;   // slots without a readable device
  bool degraded = false;
  bool rebuilding = false;
  // Counters since open.
  uint64_t checksum_errors = 0;       // chunks whose checksum did not match
  uint64_t repaired_chunks = 0;       // chunks rewritten after a reconstruction
  uint64_t reconstructed_reads = 0;   // chunks served by reconstruction
  uint64_t journal_replayed = 0;      // records replayed at open
  uint64_t rebuilds_done = 0;
  uint64_t rebuild_stripes_written = 0;  // stripes rebuilds wrote (a resumed one: only the rest)
  uint64_t lost_stripes = 0;          // stripes a rebuild found with more than m chunks lost
};

class SafeArray {
 public:
  virtual ~SafeArray() = default;
  // AddBdev: a new spare (same capacity and alignment as the members). A failed slot without
  // a rebuild starts rebuilding onto it.
  virtual Status AddSpare(const SafeMember& spare) = 0;
  // RemoveBdev: takes member `name` out of service (it counts as failed); a spare, if any,
  // starts rebuilding its data. FailedPrecondition-like InvalidArgument for an unknown name.
  virtual Status RemoveMember(const std::string& name, const std::string& reason) = 0;
  // RecoverBdev: rebuilds failed member `name` onto `replacement` (a spare's name, a new pool,
  // or the same pool once it works again).
  virtual Status Recover(const std::string& name, const SafeMember& replacement) = 0;
  // One health pass now: lifespans under replace_below_days start a copy onto a spare.
  virtual Status CheckHealth() = 0;
  // Waits until no rebuild is running or queued; returns the last rebuild's error, if any.
  virtual Status WaitRebuilds() = 0;
  // Scrub: reads every written stripe, checks every chunk against its checksum and the parity
  // against the data, and repairs what does not verify (a chunk that fails its checks is
  // rebuilt from the others; parity that is not the code of sound data is recomputed).
  // Returns the number of stripes that did not verify.
  virtual Result<uint64_t> Verify() = 0;
  virtual SafeArrayStatus ArrayStatus() = 0;
};

struct OpenedSafeBdev {
  std::unique_ptr<Bdev> bdev;
  SafeArray* array = nullptr;  // the same object as bdev
};

// Creates the array over `members` (k = members - max_failures) or opens the one recorded in
// the superblock. Errors name the member and the key: k or m of 0, k + m over 255, members of
// unequal capacity or alignment, a member listed twice, a member that already holds data.
Result<OpenedSafeBdev> OpenSafeBdev(const SafeBdevConfig& config, const std::vector<SafeMember>& members,
                                    const std::vector<SafeMember>& spares);

}  // namespace clio
