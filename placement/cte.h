// The CTE core (Context Transfer Engine): tiers, the blob index and placement.
//
// A blob is (tag, blob id) -> bytes; the filesystem uses tag = inode, blob = chunk index.
// PutBlob places bytes on the highest-score healthy tier with room, falling through to lower
// tiers when one is full; a full volatile tier first evicts its least recently used clean
// copies (their persistent copy stays). Data on a volatile tier is dirty until the flusher
// (every flush_interval_ms, or at once when a tier reaches its dirty_limit) or FlushTag()
// copies it to a persistent tier (cte_writeback.cc).
//
// Write-back space (tier_space.h): a write that lands dirty on a volatile tier reserves room
// for its persistent copy, so NoSpace comes back from PutBlob, not from a later flush; and a
// volatile tier holds at most dirty_limit dirty bytes: a writer past it kicks the flusher and
// waits for it (at most dirty_wait_ms, then the write is placed on the next tier).
//
// Lifespan (SetLifespan, BdevStats.lifetime_days; 999999 = healthy): a tier predicted to die
// within kDyingLifespanDays takes no new persistent data (no direct writes, no flushed copies,
// no room counted for flush reservations); one under kDeadLifespanDays (0 when counted in whole
// days) takes nothing at all. Writes fall through to the next tier; NoSpace only when no tier
// can take the bytes.
//
// Index entries are written only after the bytes they name; the KV store's pre-commit hook syncs every persistent tier
// before a metadata commit, and extents an index change releases are freed only once that
// change is durable. At Open(), volatile copies are dropped from the index and each persistent
// tier's allocator is reconciled with the extents the index names.
//
// Thread safety: all public methods may be called concurrently. Changes to one blob are
// serialized by a striped lock; different blobs proceed in parallel. A read holds the lock only
// to look, not across the tier I/O (see GetBlob in cte.cc).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "placement/blob_index.h"
#include "placement/clean_lru.h"
#include "placement/tier_space.h"
#include "storage/bdev.h"
#include "storage/kv.h"

namespace clio {

// A persistent tier whose lifespan is under this many days takes no new persistent data.
inline constexpr double kDyingLifespanDays = 7;
// A tier whose lifespan is under this many days (0 in whole days) takes no new data at all.
inline constexpr double kDeadLifespanDays = 1;

// A volatile copy is kept as a clean read cache after its flush while its tier is below this
// fill fraction; above it the copy is dropped at once, leaving room for new writes without an
// eviction on their path. The reorganizer promotes into a volatile tier only below it too.
// Kept copies are evicted, least recently used first, when a write finds the tier full.
inline constexpr double kCacheKeepFill = 0.75;

struct TierConfig {
  BdevConfig bdev;
  // Placement rank in [0, 1], higher first. Unset: PerfScore() of the tier's perf_metrics.
  // Tiers of equal score are ranked by perf_metrics (RanksBefore).
  std::optional<double> score;
  // Volatile tiers only: the most dirty (not yet flushed) bytes the tier may hold.
  // 0: half the tier's capacity. At most the capacity.
  uint64_t dirty_limit = 0;
  // Set for a storage entry with existing_pool_id: the tier is that pool's device (a pool that
  // owns it and is stopped after the CTE), not a bdev of its own; `bdev` is a
  // copy of its config (name, type). The tier owns the device's allocations: nothing else may
  // allocate on it.
  Bdev* attached = nullptr;
  uint32_t attached_pool = 0;  // that pool's major id
  // Added at run time (AddRecordedTiers): a tier that cannot be opened at start is skipped with
  // a warning rather than refusing the start (the start still refuses if the index names it).
  bool recorded = false;
};

struct CteConfig {
  std::vector<TierConfig> tiers;
  uint32_t flush_interval_ms = 2000;
  // Blobs flushed at once (threads) by a flusher pass, FlushTag (fsync) and FlushAll (stop).
  // One thread writes one blob at a time to the persistent tier (a synchronous, often direct,
  // write), so a single flusher drains a RAM tier slower than writers fill it. 1..64.
  uint32_t flush_threads = 4;
  // The longest a writer waits for the flusher when its tier is at dirty_limit; after it the
  // write goes to the next tier.
  uint32_t dirty_wait_ms = 10000;

  // The reorganizer (cte_reorganize.cc). Each pass decays every blob's access count by
  // score_decay and adds the reads and writes since the last pass: heat = heat * decay + n;
  // a blob's score is heat / (heat + 1) (0 for a blob not accessed lately). A blob whose score
  // passes its tier's score by more than reorganize_threshold moves up to the tier whose score
  // is nearest its own; one below its tier's by more than that moves down. A pass moves at
  // most reorganize_bandwidth * reorganize_interval_ms / 1000 bytes.
  bool reorganize = true;                         // run passes in a background thread
  uint32_t reorganize_interval_ms = 10000;        // 1000..3600000
  uint64_t reorganize_bandwidth = 64ull << 20;    // bytes/s, at least 1 MiB
  double reorganize_threshold = 0.3;              // score difference, (0, 1]
  double score_decay = 0.5;                       // per pass, (0, 1)
};

// The score of a tier configured without one: log10 of the slower of its read and write
// bandwidths in MB/s, over 5, clamped to [0, 1] (100 MB/s -> 0.4, 1 GB/s -> 0.6, 10 GB/s -> 0.8),
// so the type defaults of storage/bdev.h rank hbm > ram > pinned > file > s3 and gcs.
double PerfScore(const PerfMetrics& p);

// Placement order of two tiers: the higher score first; at equal scores, by perf_metrics: the
// higher write bandwidth, then the lower write latency, then the higher read bandwidth; then by
// name, so the order is deterministic.
bool RanksBefore(double score_a, const PerfMetrics& a, std::string_view name_a, double score_b,
                 const PerfMetrics& b, std::string_view name_b);

// The first movement key of `c` that is out of range, and what is wrong with it; nullopt when
// all are valid. Used by Cte::Open and the config parser (which names file and line).
std::optional<std::pair<std::string, std::string>> MovementConfigError(const CteConfig& c);

// What one reorganizer pass did.
struct ReorganizeStats {
  uint64_t candidates = 0;      // blobs whose score called for a move
  uint64_t promoted = 0;        // copied to a higher-score tier
  uint64_t demoted = 0;         // copied to a lower-score tier, or a cache copy dropped
  uint64_t moved_bytes = 0;     // bytes copied (never more than the pass's budget)
  uint64_t budget = 0;          // the pass's byte budget
  uint64_t over_budget = 0;     // candidates left for a later pass: the budget was spent
  uint64_t skipped = 0;         // candidates that changed meanwhile or found no room
};

// Write-back counters (`clioctl stat`, /metrics, tests).
struct WritebackStats {
  std::vector<DirtyLedger::TierCounters> dirty;  // one per volatile tier
  uint64_t reserved = 0;             // bytes reserved on the persistent tiers for flushes
  uint64_t dirty_blobs = 0;          // blobs waiting for the flusher
  uint64_t dirty_waits = 0;          // writers that waited for a tier's dirty_limit
  uint64_t dirty_wait_timeouts = 0;  // ... and were placed elsewhere after dirty_wait_ms
  uint64_t evictions = 0;            // clean volatile copies dropped to make room
  uint64_t evicted_bytes = 0;
  uint64_t flush_failures = 0;       // background flushes that failed (and will retry)
  uint64_t flush_passes = 0;         // background flusher passes completed (each flushes every
                                     // blob that was dirty when it began)
  double oldest_dirty_s = 0;         // age of the oldest dirty blob (the flush lag now); 0: none
};

// One copy of a blob, as LocateBlob reports it.
struct CopyLocation {
  uint64_t tier_id = 0;
  bool dirty = false;
  uint64_t bytes = 0;  // written bytes of this copy
  ExtentList extents;  // where the copy lies on its tier's device
  bool operator==(const CopyLocation&) const = default;
};

// One tag of the blob index as Open() found it, after dropping the copies on volatile tiers.
struct StartTag {
  uint64_t tag = 0;
  uint64_t stored = 0;     // bytes that hold data, over all its blobs (BlobEntry::stored)
  bool has_data = false;   // some blob holds written bytes; then:
  uint64_t last_blob = 0;  //   the highest such blob
  uint64_t last_end = 0;   //   and where its written bytes end (BlobEntry::size)
  // A dropped copy held bytes no remaining copy holds: data never flushed, lost in a crash.
  bool lost = false;
};

// What Drain() has done to a tier so far (GetDrainProgress).
struct DrainProgress {
  bool draining = false;      // marked: nothing new is placed on the tier
  uint64_t bytes_left = 0;    // bytes still allocated on the tier (BdevStats.used)
  uint64_t moved_bytes = 0;   // bytes copied off it by drains
  uint64_t moved_copies = 0;  // copies moved, flushed or dropped off it by drains
};

struct TierInfo {
  std::string name;
  uint64_t tier_id = 0;
  double score = 0;
  BdevStats stats;
};

// What placement does with a tier now, decided here, where the policy lives (Accepts), so that
// clients report it rather than derive it. In order of precedence:
enum class TierCondition : uint8_t {
  kDrained,   // marked for drain and empty: `tier rm` may remove it
  kDraining,  // marked for drain: nothing new is placed on it, its copies move off
  kDead,      // lifespan under kDeadLifespanDays: takes no data
  kDying,     // persistent, lifespan under kDyingLifespanDays: takes no new persistent data
  kDegraded,  // its device reports itself degraded (BdevStats.health), still takes data
  kActive,
};
// "drained", "draining", "dead", "dying", "degraded", "active".
std::string_view TierConditionName(TierCondition c);

struct TierState {
  uint64_t tier_id = 0;
  TierCondition condition = TierCondition::kActive;
  uint64_t bytes_left = 0;   // allocated on it now (what a drain still has to move)
  bool from_config = true;   // opened from the config's storage entries at start, not added later
};

class Cte {
 public:
  // Opens every tier, checks tier ids against the metadata (refusing a mismatch, a missing
  // persistent tier file, or a tier the index still uses that the config no longer lists),
  // drops volatile copies, reconciles allocators, and starts the flusher.
  static Result<std::unique_ptr<Cte>> Open(const CteConfig& config, KvStore* kv);
  ~Cte();

  // `stored_delta` (optional) receives the change in the blob's stored bytes (the union of its
  // copies' written ranges), which the filesystem sums into st_blocks.
  //
  // Writes `data` at `offset` of the blob. NoSpace when no tier has room, or when the write
  // would land on a volatile tier and the persistent tiers cannot hold its flushed copy. May
  // wait (at most dirty_wait_ms) for the flusher when the volatile tier is at dirty_limit.
  Status PutBlob(uint64_t tag, uint64_t blob, uint64_t offset, std::string_view data,
                 int64_t* stored_delta = nullptr);
  // Reads [offset, offset+len) into out; bytes never written read as zeros.
  Status GetBlob(uint64_t tag, uint64_t blob, uint64_t offset, uint64_t len, char* out);
  // Removes the blob; its extents are freed once the removal is durable.
  Status DelBlob(uint64_t tag, uint64_t blob, int64_t* stored_delta = nullptr);
  // Forgets bytes at and beyond `size` (they read as zeros if the blob grows again).
  Status TruncateBlob(uint64_t tag, uint64_t blob, uint64_t size, int64_t* stored_delta = nullptr);
  // Forgets [offset, offset+len) of the blob: it reads as zeros and costs nothing once no
  // copy holds data (a punched hole).
  Status PunchBlob(uint64_t tag, uint64_t blob, uint64_t offset, uint64_t len,
                   int64_t* stored_delta = nullptr);
  // Byte ranges of the blob that hold written data, over all its copies.
  Result<RangeSet> BlobRanges(uint64_t tag, uint64_t blob);
  // The blob's copies, newest first (which tiers hold it, and whether each is dirty).
  Result<std::vector<CopyLocation>> LocateBlob(uint64_t tag, uint64_t blob);
  // Blob ids of a tag, ascending.
  Result<std::vector<uint64_t>> ListBlobs(uint64_t tag);
  // Removes every blob of the tag.
  Status DelTag(uint64_t tag);
  // What the blob index held for each tag at Open() (after volatile copies were dropped),
  // ascending by tag, once (later calls get none): the filesystem checks that each names a
  // file that exists and that the file's size agrees with its bytes.
  std::vector<StartTag> TakeStartTags() EXCLUDES(start_tags_mu_);
  // Keeps room on the persistent tiers for a `size`-byte copy of the blob whatever it holds
  // (fallocate), until set to 0 (the caller lets it go: removing the blob does not): its own
  // writes, flushes and moves then never meet NoSpace for room others took, however often it
  // is overwritten. A flush writes the new copy before it frees the old, so that is room for
  // two copies (FlushReservations::KeepRoom). In memory: the caller keeps it again after a
  // restart. NoSpace, changing nothing, when it does not fit.
  Status KeepRoom(uint64_t tag, uint64_t blob, uint64_t size);
  // Bytes kept for all blobs (two copies' worth each), and the part of their copies' halves no
  // copy fills yet (what statfs counts as used beyond the tiers' own figures).
  uint64_t KeptRoom() const;
  uint64_t KeptUnfilled() const;
  // Copies every dirty blob of the tag to a persistent tier. The caller then makes the index
  // durable with KvStore::Sync(). Returns (and clears) an earlier background flush failure of
  // this tag, so fsync reports it.
  Status FlushTag(uint64_t tag);
  // Flushes every dirty blob (clean stop).
  Status FlushAll();
  // A pending background flush error of this tag, cleared by the call (for close()). When
  // `dirty` is given it is set to whether the tag still has blobs not yet flushed.
  Status TakeFlushError(uint64_t tag, bool* dirty = nullptr);

  // Sets the tier's predicted lifetime in days (finite, >= 0; 999999 = healthy), as the
  // bdev's SetLifespan task does, and records it in the metadata (durable on return), so a
  // restart keeps it. InvalidArgument for a bad value, NotFound for an unknown tier id. Data already on the tier
  // stays; Drain() moves it off.
  Status SetLifespan(uint64_t tier_id, double days);

  // Moves every blob copy off the tier, so that it holds nothing (BdevStats.used == 0) and can
  // be removed. The tier is marked draining first (recorded in the metadata, so a restart
  // keeps the mark) and stays marked after the call, successful or not (Undrain() lifts the
  // mark): nothing new is placed on it. Files stay readable and
  // writable meanwhile: each copy is read and written to its new tier without the blob's lock,
  // and swapped in under the lock only if the blob's index entry is unchanged (else retried).
  // Dirty copies are flushed first (to a healthy persistent tier); clean copies on a volatile
  // tier are dropped (their persistent copy holds the bytes); persistent copies move to the
  // highest-score persistent tier that takes data and has room. Blocks until done; progress in
  // GetDrainProgress(). Errors: NotFound (tier id), NoSpace when no other tier can take a
  // blob (every blob stays intact and readable, the ones moved so far stay moved), Busy when
  // a blob kept changing or bytes stay allocated that no index entry names, errors of the
  // tiers and the metadata store. One drain or reorganizer pass runs at a time.
  // A drain cut short by a stop or a crash resumes by itself: Open() starts one in the
  // background for every tier whose mark it finds with bytes still on the tier. Stop() ends a
  // running drain between two blobs (Unavailable); the mark stays, so the next start resumes it.
  Status Drain(uint64_t tier_id);
  // Waits for the drains Open() resumed; their first error, Ok when there were none.
  Status WaitResumedDrains();
  Result<DrainProgress> GetDrainProgress(uint64_t tier_id);
  // Lifts a drain mark: placement may use the tier again (its lifespan permitting).
  Status Undrain(uint64_t tier_id);

  // One reorganizer pass, unpaced (the background thread runs a paced one every
  // reorganize_interval_ms when `reorganize` is set): folds the access counts into scores, then promotes hot blobs
  // (hottest first) and demotes cold ones (coldest first) while the pass's byte budget lasts.
  // Blobs with dirty copies are left to the flusher. Hot blobs are looked up by key; cold
  // ones are found by a scan of at most 64 Ki index entries per pass, resumed by the next. Moves use the same copy-and-swap as
  // Drain(): readers and writers of a moving blob are never blocked for the copy. Returns
  // what it did; errors of the metadata store only (a blob that cannot move is skipped).
  Result<ReorganizeStats> ReorganizeOnce() { return ReorganizePass(false); }
  // The blob's current score in [0, 1) (from its decayed access count as of the last pass,
  // plus accesses since), for tests and `clioctl`.
  double BlobScore(uint64_t tag, uint64_t blob);

  // Adds a tier to the running CTE (`clioctl tier add`): opens its bdev (under the id the
  // metadata recorded for its name, if any), frees whatever its allocator still held (no index
  // entry can name a tier that is not configured), and records the tier with `spec` in the
  // metadata, durable on return. `spec` is opaque here: the runtime glue keeps the tier's keys
  // in it and gets it back from AddedTierSpecs() at the next start, so the tier comes back.
  // A lifespan or drain mark recorded for the name earlier is dropped: an added tier is healthy.
  // Placement uses the tier from the moment the call returns. Errors: AlreadyExists (a tier
  // of that name or id is in use), InvalidArgument (bad dirty_limit), the bdev's own errors.
  Result<TierInfo> AddTier(const TierConfig& config, std::string_view spec);
  // Removes a drained tier (`clioctl tier rm`): placement forgets it, its records (id, lifespan,
  // drain mark, added spec) leave the metadata (durable on return), and its bdev closes once no
  // operation in flight still holds it (an attached pool's device stays with its pool). Its
  // file or segment stays where it is. Waits for a running drain or reorganizer pass (move_mu_),
  // then takes every stripe lock once before it checks the tier is empty. Errors: NotFound;
  // Busy when it is not marked draining or still holds bytes (drain it first), or is the last
  // tier, or the last persistent tier while a volatile one remains (fsync could not be durable).
  Status RemoveTier(uint64_t tier_id);
  // The (name, spec) pairs AddTier recorded, in name order; for the runtime glue at start.
  static Result<std::vector<std::pair<std::string, std::string>>> AddedTierSpecs(KvStore* kv);
  // Drops the recorded spec of `name` (the config lists that tier itself now).
  static Status ForgetAddedTier(KvStore* kv, const std::string& name);
  // Whether the metadata has an id record for a tier of this name.
  static Result<bool> HasTierRecord(KvStore* kv, const std::string& name);

  // Tiers in placement order (RanksBefore).
  std::vector<TierInfo> ListTiers();
  // Each tier's condition, in the same order.
  std::vector<TierState> TierStates();
  // Capacity and remaining bytes of the persistent tiers (what statfs reports).
  std::pair<uint64_t, uint64_t> PersistentSpace();
  WritebackStats GetWritebackStats();

  // Stops the flusher after flushing everything.
  Status Stop();

 private:
  // A tier, shared by the tier list and by every operation that took a snapshot of it
  // (Tiers()): a removed tier's bdev closes when the last snapshot naming it is gone.
  struct Tier {
    std::string name;
    double score = 0;
    PerfMetrics perf;            // the configured figures (or the type's), for ranking
    std::shared_ptr<Bdev> bdev;  // owned, or an attached pool's (a no-op deleter)
    bool is_volatile = false;
    bool from_config = true;   // false: added at run time (AddTier, or its record at start)
    uint64_t dirty_limit = 0;  // volatile tiers: bytes
    // Movement state, read lock-free.
    std::atomic<bool> draining{false};  // set by Drain(): nothing new is placed here
    std::atomic<uint64_t> drained_bytes{0};
    std::atomic<uint64_t> drained_copies{0};
    // Series labelled with this tier (placement/cte_metrics.cc), exported while it lives.
    metrics::LabelHold hold;
    metrics::Counter placements, placed_bytes;      // writes that landed here
    metrics::Counter passed_full, passed_refused;   // writes that fell through to a later tier
    metrics::Counter passed_dirty_limit;
  };
  // The tiers in placement order. Never changed once published: AddTier and RemoveTier
  // publish a new list.
  using TierList = std::vector<std::shared_ptr<Tier>>;
  using TierSnapshot = std::shared_ptr<const TierList>;
  // What one placement attempt under the stripe lock asks PutBlob to do next.
  enum class PutStep { kDone, kWaitDirty, kEvict };
  struct PutAttempt {
    PutStep step = PutStep::kDone;
    Status status;
    size_t tier = 0;     // kWaitDirty, kEvict: index into the TierList PutOnce was given
    uint64_t bytes = 0;  // kWaitDirty: dirty bytes the write adds; kEvict: bytes to free
  };
  // A blob's decayed access count (see CteConfig): kept beside its stripe lock, which every
  // read and write already holds, so counting costs no extra lock.
  struct AccessCount {
    double heat = 0;      // decayed count as of the last reorganizer pass
    uint32_t recent = 0;  // reads and writes since
  };
  static constexpr char kStripeLockName[] = "cte blob stripe";
  struct Stripe {
    Mutex mu{kNoIo, kStripeLockName};
    // Counts the holds of `mu` that may have changed a blob of this stripe (every StripeLock).
    // A read that found it unchanged around its unlocked tier I/O read bytes no change touched.
    uint64_t changes GUARDED_BY(mu) = 0;
    std::map<std::pair<uint64_t, uint64_t>, AccessCount> access GUARDED_BY(mu);
  };
  // Holds a stripe's lock to change its blobs: counts a change, so optimistic readers of the
  // stripe retry. A hold that only looks (an entry load, the locked read) takes `mu` plainly.
  class SCOPED_CAPABILITY StripeLock {
   public:
    explicit StripeLock(Stripe& s) ACQUIRE(s.mu) : mu_(&s.mu) {
      mu_->Lock();
      ++s.changes;
    }
    ~StripeLock() RELEASE() { mu_->Unlock(); }
    StripeLock(const StripeLock&) = delete;
    StripeLock& operator=(const StripeLock&) = delete;

   private:
    Mutex* mu_;
  };
  // Frees a copy nobody saw (a move's or a flush's, dropped) when it goes out of scope: declared
  // before a StripeLock, that is after the lock is released, since freeing persistent extents
  // writes the tier's allocator log.
  struct FreeAfterUnlock {
    Bdev* bdev = nullptr;
    ExtentList extents;
    void Set(Bdev* b, ExtentList e) {
      bdev = b;
      extents = std::move(e);
    }
    ~FreeAfterUnlock() {
      if (bdev) (void)bdev->Free(extents);
    }
  };
  // Unlocked tries of a read before it reads under the stripe lock (which always finishes).
  static constexpr int kOptimisticReads = 3;
  static constexpr size_t kStripes = 256;

  Cte(KvStore* kv, const CteConfig& c)
      : kv_(kv),
        flush_interval_ms_(c.flush_interval_ms),
        flush_threads_(c.flush_threads),
        dirty_wait_ms_(c.dirty_wait_ms),
        reorganize_interval_ms_(c.reorganize_interval_ms),
        reorganize_budget_(c.reorganize_bandwidth * c.reorganize_interval_ms / 1000),
        reorganize_bandwidth_(c.reorganize_bandwidth),
        reorganize_threshold_(c.reorganize_threshold),
        score_decay_(c.score_decay) {
    InitMetrics();
  }
  void InitMetrics();
  // Counts a read or write of the blob for its score. A stripe tracks at most
  // kMaxTrackedPerStripe blobs between two reorganizer passes (which forget cold ones); an
  // untracked blob scores 0, like a cold one.
  static constexpr size_t kMaxTrackedPerStripe = 1024;
  static void NoteAccess(Stripe& s, uint64_t tag, uint64_t blob) REQUIRES(s.mu) {
    auto it = s.access.find({tag, blob});
    if (it == s.access.end()) {
      if (s.access.size() >= kMaxTrackedPerStripe) return;
      it = s.access.emplace(std::make_pair(tag, blob), AccessCount{}).first;
    }
    ++it->second.recent;
  }
  void ReorganizerLoop();
  // One reorganizer pass. `paced` (the background thread): after each move, waits until the
  // pass's bytes so far have taken at least bytes / reorganize_bandwidth seconds, so the
  // budget is spread over the interval rather than spent in one burst; Stop() cuts the wait.
  Result<ReorganizeStats> ReorganizePass(bool paced);
  // A pass's steps. The decayed score of each blob still tracked, after folding each stripe's
  // accesses since the last pass into its count:
  using BlobScores = std::map<std::pair<uint64_t, uint64_t>, double>;
  BlobScores FoldAccessCounts();
  struct MoveCandidate {
    uint64_t tag, blob, bytes;
    double score;
    Tier* from;
    Tier* to;
  };
  struct MovePlan {
    std::vector<MoveCandidate> up, down;  // promotions hottest first, demotions coldest first
  };
  Result<MovePlan> PlanMoves(const TierList& tiers, const BlobScores& scores, ReorganizeStats* st)
      REQUIRES(move_mu_);
  // Moves (or drops) one candidate, counting it in *st. `paced_from`: the pass's start, to wait
  // after the move until its bytes so far took reorganize_bandwidth; false when Stop() cut it.
  bool MoveOne(const MoveCandidate& c, bool promote, const std::chrono::steady_clock::time_point* paced_from,
               ReorganizeStats* st) REQUIRES(move_mu_);
  // Waits until `until` or Stop(); false when stopping.
  bool ReorganizerWait(std::chrono::steady_clock::time_point until);
  Status Recover();
  // Every tier the metadata has a record of (configured now or before), by id.
  struct KnownTier {
    std::string name;
    Persistence persistence = Persistence::kTemporary;
  };
  Result<std::map<uint64_t, KnownTier>> KnownTiers();
  Stripe& StripeFor(uint64_t tag, uint64_t blob);
  // What a read tells the clean LRU and the blob's score (caller holds the stripe lock).
  void NoteRead(Stripe& s, uint64_t tag, uint64_t blob, const BlobEntry& e, const TierList& tiers)
      REQUIRES(s.mu);
  // Takes and releases every stripe lock once: every operation that held one when this began
  // (a placement that saw a tier open, say) has finished when it returns.
  void StripeBarrier() {
    for (size_t i = 0; i < kStripes; ++i) StripeLock barrier(stripes_[i]);
  }
  // Waits until every flush running when it is called has ended (a flush allocates its copy
  // without the stripe lock): with StripeBarrier, what a tier drain or removal waits for.
  void FlushBarrier() EXCLUDES(dirty_mu_);
  // The tier list now. Operations take one snapshot and use it throughout; a tier added
  // meanwhile is used by the next operation, a removed one stays valid while held.
  TierSnapshot Tiers() const EXCLUDES(tiers_mu_);
  // Publishes `next` (sorted here into placement order) as the tier list.
  void PublishTiers(TierList next) EXCLUDES(tiers_mu_);
  static Tier* TierIn(const TierList& tiers, uint64_t id);
  std::shared_ptr<Tier> TierById(uint64_t id);
  // Opens one configured tier: its bdev under the id recorded for its name, its lifespan and
  // drain mark as recorded. Adds its id record to `records`.
  // `restore_motion` false (AddTier): a lifespan or drain mark left from an earlier life of the
  // name is dropped, not applied.
  Result<std::shared_ptr<Tier>> OpenTier(const TierConfig& tc, KvBatch* records, bool restore_motion = true);
  // Makes the tier's room and syncs count: flush reservations and the pre-commit sync for a
  // persistent tier, the dirty ledger for a volatile one. RetireTier undoes it.
  void EnlistTier(Tier& t);
  void RetireTier(Tier& t);
  // Whether the tier takes a new copy now: not draining, and a lifespan that allows it
  // (volatile copies: kDeadLifespanDays; persistent: kDyingLifespanDays). Lock-free.
  static bool Accepts(const Tier& t);
  static bool AcceptsAt(const Tier& t, double lifetime_days);  // with stats already read
  static bool AcceptsPersistent(const Tier& t) { return !t.is_volatile && Accepts(t); }
  // A flush's new copy list in *next: the front volatile copy of `e` stays as a clean read cache
  // while its tier has room, then the new persistent copy `p`; the other copies go to
  // *released. Returns the tier id of the kept cache, 0 when none.
  static uint64_t SplitForFlush(BlobEntry e, BlobCopy p, const TierList& tiers, BlobEntry* next,
                                std::vector<BlobCopy>* released);
  // Bytes the blob's copies on persistent tiers that take data occupy (the part of the room it
  // keeps that they fill).
  uint64_t PersistentFill(const BlobEntry& e);
  // After the blob's copies changed (caller holds its stripe lock): tells the reservations
  // what its persistent copies fill now, when it keeps room (fallocate).
  void NoteFill(uint64_t tag, uint64_t blob, const BlobEntry& e);
  // Records the tier's lifespan and drain mark in the metadata and syncs it.
  Status SaveMotion(const Tier& t);
  // Why Accepts() is false, for error messages.
  static std::string Refusal(const Tier& t);
  Result<BlobEntry> LoadEntry(uint64_t tag, uint64_t blob);
  // One try at placing a write, under the blob's stripe lock. `skip`: tiers not to use
  // (dirty wait timed out); `evicted`: tiers whose clean copies were already evicted for it.
  PutAttempt PutOnce(uint64_t tag, uint64_t blob, uint64_t offset, std::string_view data,
                     int64_t* stored_delta, const TierList& tiers, const std::vector<bool>& skip,
                     const std::vector<bool>& evicted);
  // Drops least recently used clean copies of the volatile tier until `bytes` are freed or
  // none is left. Takes each victim's stripe lock: call without holding one.
  void EvictClean(Tier& t, uint64_t bytes);
  // Drops the blob's clean copies on volatile tier `t` when the other copies hold every
  // byte they hold (Internal otherwise: nothing dropped). Returns the bytes freed (0: no clean
  // copy there). Takes the stripe lock: call without holding one.
  Result<uint64_t> DropCleanCopies(Tier& t, uint64_t tag, uint64_t blob);
  // Copies the merged bytes of a blob whose copies are all clean to one new clean copy on
  // `target`, reading and writing without the stripe lock, then swaps it in under the
  // lock if the index entry is unchanged (*changed = true otherwise, or when the blob has a
  // dirty copy: nothing done). A
  // persistent target replaces every persistent copy (volatile caches stay unless on
  // `off_tier`); a volatile target adds a cache copy in front. Returns the bytes copied.
  // NoSpace when the target has no room (or its room is reserved for flushes), or no longer
  // takes data (draining, dying).
  Result<uint64_t> CopyBlobTo(uint64_t tag, uint64_t blob, Tier& target, uint64_t off_tier, bool* changed);
  // Moves every copy of the blob off tier `t` (Drain). Adds the bytes copied to *moved.
  Status DrainBlob(uint64_t tag, uint64_t blob, Tier& t, uint64_t* moved);
  // Wakes the flusher now (a tier reached its dirty limit).
  void KickFlusher();
  // Reads the merged view of a blob; requires the blob's stripe lock, or a check after the
  // read that the entry did not change (CopyBlobTo).
  Status ReadMerged(const BlobEntry& e, const TierList& tiers, uint64_t offset, uint64_t len, char* out);
  // Copies a dirty blob to a persistent tier, without the stripe lock across the copy's write
  // (see cte_writeback.cc).
  Status FlushOne(uint64_t tag, uint64_t blob);
  // The whole flush under the stripe lock (held by the caller).
  Status FlushBlobLocked(uint64_t tag, uint64_t blob);
  // After a flush (under the blob's stripe lock): done, the blob leaves the dirty set; failed,
  // it stays (or comes back) for the next try.
  void SettleDirty(uint64_t tag, uint64_t blob, const Status& flushed) EXCLUDES(dirty_mu_);
  // A flush's steps. What it copies, loaded under the stripe lock: nullopt when nothing is left
  // to copy (not dirty, or truncated to nothing: settled here).
  struct FlushSource {
    BlobEntry entry;
    TierSnapshot tiers;  // taken after the entry: it has every tier the entry names
    RangeSet written;
    std::string bytes;
  };
  Result<std::optional<FlushSource>> PrepareFlush(uint64_t tag, uint64_t blob);
  // Reads the bytes of src->entry into src->bytes (no lock needed: the swap checks the entry).
  Status ReadFlushSource(FlushSource* src);
  // The new persistent copy, allocated (spending the blob's reservation) and written.
  struct FlushCopy {
    BlobCopy copy;
    Tier* tier = nullptr;
    uint64_t spent = 0;  // the reservation the allocation spent
  };
  // On a failed write after the allocation, *spent_back is the reservation to give back (the
  // caller does, under the stripe lock).
  Result<FlushCopy> WriteFlushCopy(uint64_t tag, uint64_t blob, const FlushSource& src, uint64_t* spent_back);
  // Records the copy in place of the ones it replaces (stripe lock held, src.entry current); on
  // failure gives the copy back.
  Status SwapFlushed(uint64_t tag, uint64_t blob, FlushSource src, FlushCopy f, FreeAfterUnlock* drop);
  // FlushOne for every blob of `blobs`, up to flush_threads_ at once (fewer when no thread can
  // be started); the status of each, in order. `background`: failures are counted and kept
  // for the tag's next fsync or close as they happen (NoteFlushFailure). Call with no lock.
  std::vector<Status> FlushMany(const std::vector<std::pair<uint64_t, uint64_t>>& blobs,
                                bool background = false);
  void NoteFlushFailure(uint64_t tag, uint64_t blob, const Status& s) EXCLUDES(dirty_mu_);
  // Deletes the blob's entry and releases its copies; requires the stripe lock.
  Status RemoveLocked(uint64_t tag, uint64_t blob, BlobEntry e, int64_t* stored_delta = nullptr);
  // Adds OnDurable frees for the copies' extents.
  // The frees keep their tier alive (a removed tier's bdev closes after them).
  void ReleaseCopies(std::vector<BlobCopy> copies, const TierList& tiers, KvBatch* batch);
  void MarkDirty(uint64_t tag, uint64_t blob);
  void FlusherLoop();

  KvStore* const kv_;
  const uint32_t flush_interval_ms_;
  const uint32_t flush_threads_;
  const uint32_t dirty_wait_ms_;
  const uint32_t reorganize_interval_ms_;
  const uint64_t reorganize_budget_;  // bytes per pass
  const uint64_t reorganize_bandwidth_;  // bytes per second
  const double reorganize_threshold_;
  const double score_decay_;
  // AddTier and RemoveTier one at a time, and against Undrain (so a tier being removed stays
  // drained). Taken before move_mu_ and any stripe lock; Drain holds it only while it marks.
  Mutex tier_change_mu_;
  mutable Mutex tiers_mu_;  // a leaf: held only to copy or replace the pointer
  TierSnapshot tiers_ GUARDED_BY(tiers_mu_);
  std::unique_ptr<Stripe[]> stripes_ = std::make_unique<Stripe[]>(kStripes);
  std::atomic<uint64_t> generation_{1};
  std::unique_ptr<FlushReservations> reservations_;  // set in Open(), once the tiers are known
  DirtyLedger dirty_bytes_;
  CleanCopyLru clean_lru_;
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> evicted_bytes_{0};
  std::atomic<uint64_t> flush_failures_{0};
  std::atomic<uint64_t> flush_passes_{0};

  // One mover at a time (Drain, ReorganizeOnce); held across a whole drain or pass. Taken
  // before any stripe lock.
  Mutex move_mu_;
  // The last blob index key the reorganizer's scan for cold blobs read ("" = from the start).
  std::string reorg_after_ GUARDED_BY(move_mu_);

  // Lock order: tier_change_mu_ -> move_mu_ -> one stripe's mu (never two at once) -> dirty_mu_
  // -> the internal mutexes of reservations_, dirty_bytes_ and clean_lru_ -> tiers_mu_ (a leaf;
  // the reservations' lifespan check reads the tier list). tier_change_mu_ -> lifetime_->mu.
  // No lock is held while waiting for the dirty limit.
  Mutex dirty_mu_;
  // Dirty blobs, each with the time it became dirty (for the flush lag).
  std::map<std::pair<uint64_t, uint64_t>, std::chrono::steady_clock::time_point> dirty_ GUARDED_BY(dirty_mu_);
  std::vector<std::pair<uint64_t, Status>> flush_errors_ GUARDED_BY(dirty_mu_);
  bool stopping_ GUARDED_BY(dirty_mu_) = false;
  bool kicked_ GUARDED_BY(dirty_mu_) = false;  // a writer wants a flush before the interval
  CondVar flusher_cv_;
  // Blobs a FlushOne is flushing now: a second flush of one (an fsync beside the flusher) waits
  // for the first, then finds it clean, rather than spend room on a copy that will be dropped.
  std::set<std::pair<uint64_t, uint64_t>> flushing_ GUARDED_BY(dirty_mu_);
  CondVar flushing_cv_;
  std::thread flusher_;
  // The reorganizer thread's wait (a leaf: nothing else is taken while holding it).
  Mutex reorg_mu_;
  bool reorg_stop_ GUARDED_BY(reorg_mu_) = false;
  CondVar reorg_cv_;
  std::thread reorganizer_;
  // Drains resumed at start (Open) run on their own thread; Stop() makes every mover give up
  // between two blobs.
  std::atomic<bool> movers_stop_{false};
  Mutex resume_mu_;
  std::thread drain_resumer_ GUARDED_BY(resume_mu_);
  // Written by drain_resumer_ only; read after joining it (the join orders the write first).
  Status resumed_drains_;
  // Adds one blob of the tag, as Recover() kept it, to its StartTag; `dropped` is what the
  // copies it dropped had written.
  static void NoteStartBlob(StartTag* st, uint64_t blob, const BlobEntry& kept, const RangeSet& dropped);
  Mutex start_tags_mu_;
  std::vector<StartTag> start_tags_ GUARDED_BY(start_tags_mu_);  // filled by Recover()
  // What the KV store's commit thread may touch of this CTE: the pre-commit hook and deferred
  // frees outlive the Cte object (the store closes after the pools), so they go through this
  // shared state and do nothing once the tiers are closed.
  struct TierLifetime {
    Mutex mu;
    bool open GUARDED_BY(mu) = true;
    std::vector<Bdev*> persistent GUARDED_BY(mu);
  };
  std::shared_ptr<TierLifetime> lifetime_;  // set first thing in Open()

  // Metrics (placement/cte_metrics.cc): placements, fall-throughs, moves, flushes and the flush
  // lag, plus the write-back state sampled at each scrape. The sampler is registered last in
  // Open() and removed first in ~Cte().
  static void LabelTier(Tier& t);
  std::vector<metrics::Sample> SampleMetrics();
  // The dirty blobs of `*tag`, or all of them when tag is null.
  std::vector<std::pair<uint64_t, uint64_t>> DirtyKeys(const uint64_t* tag) REQUIRES(dirty_mu_);
  metrics::Counter flushes_, flushed_bytes_, promotions_, demotions_, moved_bytes_;
  metrics::Counter optimistic_retries_, flush_retries_;
  metrics::Histogram flush_lag_;
  metrics::SamplerRegistration sampler_;
};

}  // namespace clio
