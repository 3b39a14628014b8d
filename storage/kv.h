// The metadata key-value store: ordered keys, atomic conditional batches, prefix scans.
//
// Group commit (DESIGN.md "Metadata"): Apply() is atomic and visible at once; it becomes durable
// at the next commit, which runs every `commit_interval_ms`, on Sync(), and on Close(). Until a
// commit, batches live in an in-memory overlay above the backend; the backend only ever receives
// whole commits, written synchronously. Before writing a commit, the store runs its pre-commit
// hooks (the CTE syncs tier data and allocator logs there), so an index entry never becomes
// durable before the bytes and allocations it names. A hook that fails fails the commit; the
// overlay is kept and retried at the next commit.
//
// Backends: RocksDB (embedded default). PostgreSQL will sit behind the same interface.
// Thread safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace clio {

class KvBatch {
 public:
  void Put(std::string key, std::string value) {
    ops_.push_back({OpKind::kPut, std::move(key), std::move(value)});
  }
  void Delete(std::string key) { ops_.push_back({OpKind::kDelete, std::move(key), {}}); }
  // Conditions, checked atomically with the writes. A failed ExpectAbsent returns
  // AlreadyExists; a failed ExpectValue returns Busy. Either way nothing is written.
  void ExpectAbsent(std::string key) {
    conds_.push_back({CondKind::kAbsent, std::move(key), {}});
  }
  void ExpectValue(std::string key, std::string value) {
    conds_.push_back({CondKind::kValue, std::move(key), std::move(value)});
  }
  // Runs once this batch is durable (after the commit that contains it), on the commit thread.
  // The CTE frees extents an index change released here, never earlier.
  void OnDurable(std::function<void()> fn) { on_durable_.push_back(std::move(fn)); }

  bool empty() const { return ops_.empty() && on_durable_.empty(); }

  enum class OpKind : uint8_t { kPut, kDelete };
  enum class CondKind : uint8_t { kAbsent, kValue };
  struct Op {
    OpKind kind;
    std::string key;
    std::string value;
  };
  struct Cond {
    CondKind kind;
    std::string key;
    std::string value;
  };
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<Cond>& conds() const { return conds_; }
  std::vector<std::function<void()>>& on_durable() { return on_durable_; }

 private:
  std::vector<Op> ops_;
  std::vector<Cond> conds_;
  std::vector<std::function<void()>> on_durable_;
};

using KvPairs = std::vector<std::pair<std::string, std::string>>;

class KvStore {
 public:
  virtual ~KvStore() = default;

  virtual Result<std::optional<std::string>> Get(std::string_view key) = 0;
  // Atomic: all ops and conditions, or none.
  virtual Status Apply(KvBatch batch) = 0;
  // Up to `limit` pairs whose key starts with `prefix` and is greater than `start_after`
  // (empty: from the first), in key order. limit 0 means no limit.
  virtual Result<KvPairs> Scan(std::string_view prefix, std::string_view start_after,
                               size_t limit) = 0;
  // Commits everything applied so far and waits until it is durable. Concurrent callers share
  // one commit.
  virtual Status Sync() = 0;
  // Hooks run, in order, before each commit's data is written. Add them before concurrent use.
  virtual void AddPreCommitHook(std::function<Status()> hook) = 0;
  // Final commit, then stops the commit thread. Further calls return Unavailable.
  virtual Status Close() = 0;
};

struct KvOptions {
  std::string path;                 // RocksDB directory; created if missing
  uint32_t commit_interval_ms = 2000;
  // How long Open waits for the store's lock while a process that is exiting holds it: a
  // runtime killed a moment ago holds it until its last thread has exited (one finishing a
  // slow device call, say). A holder that runs is refused at once (Busy, naming it).
  uint32_t lock_wait_ms = 30000;
};

Result<std::unique_ptr<KvStore>> OpenRocksDbKv(const KvOptions& options);

}  // namespace clio
