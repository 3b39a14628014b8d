// KvStore over RocksDB with group commit (see kv.h and docs/metadata-kv.md).
//
// Layers, newest first: `active_` (batches applied since the last commit started), the
// committing overlay (the commit now in flight, if any), RocksDB. Each overlay maps a key to its
// new value or to a tombstone (nullopt). Readers look through the layers in order.
//
// Invariants:
//  - RocksDB only ever receives whole commits, as one WriteBatch written with sync = true, so a
//    crash at any point leaves it at the end of some commit (never inside one).
//  - A commit's overlay is immutable once published in committing_; it stays visible until its
//    write finished (then RocksDB holds the same data) or failed (then it is merged back under
//    active_, whose entries are newer and win). So the merged view never moves backwards.
//  - Data applied before a Sync() call is in active_ or in committing_ when the call starts; the
//    next commit to start either writes it, or fails and leaves it (merged back) for the one after.
//    Hence: once any commit numbered >= a caller's target succeeds, the caller's data is durable.
//
// Reads hold mu_ only for the overlays, never across RocksDB:
//  - Get looks in both overlays under mu_ and, on a miss, reads RocksDB after releasing it. That
//    read is linearizable: RocksDB's value for the key then is the merged view's at the lookup,
//    or a later commit's. A commit that writes the key started after the lookup (had it started
//    before, its overlay would have been in committing_ and held the key), and at its start the
//    merged view of the key was exactly what it writes.
//  - Scan copies the part of active_ inside its range, keeps a reference to the committing
//    overlay and takes a RocksDB snapshot, all under mu_; it merges them without the lock, so a
//    page is one consistent view.
//  - db_users_ counts readers using db_ without mu_; Close() waits for them before closing it.
//  Apply's conditions still read under mu_ (they must be atomic with the writes).
//
// Lock order: mu_ is the only lock. It is never held across a commit's write, its pre-commit
// hooks or its OnDurable callbacks.

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "common/log.h"
#include "common/thread_annotations.h"
#include "storage/kv.h"

namespace clio {
namespace {

// RocksDB memtable size. Metadata commits are small; 16 MiB keeps flushes rare without holding
// much memory.
constexpr size_t kWriteBufferBytes = 16u << 20;

Status FromRocks(const rocksdb::Status& s, std::string_view what, const std::string& path) {
  std::string msg = "rocksdb " + std::string(what) + " in " + path + ": " + s.ToString();
  if (s.IsNoSpace()) return NoSpace(std::move(msg));
  if (s.IsCorruption()) return Corruption(std::move(msg));
  if (s.IsIOError()) return IoError(std::move(msg));
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut()) return Status(Code::kBusy, std::move(msg));
  if (s.IsNotSupported()) return Status(Code::kNotSupported, std::move(msg));
  if (s.IsInvalidArgument()) return InvalidArgument(std::move(msg));
  return IoError(std::move(msg));
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

class RocksDbKv final : public KvStore {
 public:
  RocksDbKv(const KvOptions& options, std::unique_ptr<rocksdb::DB> db)
      : path_(options.path),
        interval_(std::chrono::milliseconds(options.commit_interval_ms)),
        db_(std::move(db)) {
    thread_ = std::thread([this] { CommitLoop(); });
    commit_thread_id_ = thread_.get_id();
  }

  ~RocksDbKv() override {
    Status s = Close();
    if (!s.ok()) CLIO_LOG_ERROR("closing metadata store {}: {}", path_, s.ToString());
  }

  Result<std::optional<std::string>> Get(std::string_view key) override EXCLUDES(mu_) {
    {
      MutexLock l(&mu_);
      if (closed_) return ClosedError();
      if (auto hit = OverlayLookupLocked(key)) return std::move(*hit);
      ++db_users_;
    }
    DbUse use(this);
    return DbGet(key);
  }

  Status Apply(KvBatch batch) override EXCLUDES(mu_);
  Result<KvPairs> Scan(std::string_view prefix, std::string_view start_after, size_t limit) override
      EXCLUDES(mu_);
  Status Sync() override EXCLUDES(mu_);
  Status Close() override EXCLUDES(mu_);

  void AddPreCommitHook(std::function<Status()> hook) override EXCLUDES(mu_) {
    MutexLock l(&mu_);
    hooks_.push_back(std::move(hook));
  }

 private:
  // Key -> new value, or nullopt for a delete (a tombstone that hides older layers).
  using Overlay = std::map<std::string, std::optional<std::string>, std::less<>>;
  using Callbacks = std::vector<std::function<void()>>;

  Status ClosedError() const { return Unavailable("metadata store " + path_ + " is closed"); }

  // A key's entry in the overlays (active_, then the committing one): its value or a tombstone;
  // nullopt when neither holds it.
  std::optional<std::optional<std::string>> OverlayLookupLocked(std::string_view key) REQUIRES(mu_);
  // The merged view of one key: the overlays, then RocksDB (read under mu_).
  Result<std::optional<std::string>> LookupLocked(std::string_view key) REQUIRES(mu_);
  // RocksDB's value of a key. Call holding mu_ or a db_users_ count (db_ stays open for both).
  Result<std::optional<std::string>> DbGet(std::string_view key);

  // Ends a use of db_ counted in db_users_ (taken under mu_ while the store was open).
  class DbUse {
   public:
    explicit DbUse(RocksDbKv* kv) : kv_(kv) {}
    ~DbUse() {
      MutexLock l(&kv_->mu_);
      if (--kv_->db_users_ == 0 && kv_->closed_) kv_->done_cv_.NotifyAll();
    }
    DbUse(const DbUse&) = delete;
    DbUse& operator=(const DbUse&) = delete;

   private:
    RocksDbKv* kv_;
  };

  void CommitLoop() EXCLUDES(mu_);
  // Runs one commit numbered `seq`; drops mu_ around hooks, the write and the callbacks.
  void CommitLocked(uint64_t seq) REQUIRES(mu_);
  Status RunHooks(const std::vector<std::function<Status()>>& hooks);
  Status WriteOverlay(const Overlay& overlay);
  // Status of the commits numbered >= target, all finished (see the invariants above).
  Status ResultSinceLocked(uint64_t target) const REQUIRES(mu_) {
    return last_ok_seq_ >= target ? Status::Ok() : last_error_;
  }

  // Constant after construction.
  const std::string path_;
  const std::chrono::milliseconds interval_;
  std::thread thread_;
  std::thread::id commit_thread_id_;  // kept apart from thread_, which join() clears
  // Not guarded: the commit thread writes through it and readers counted in db_users_ read it,
  // without mu_. It is closed only by Close(), after closed_ stops new readers, the commit thread
  // has been joined and db_users_ fell to 0.
  std::unique_ptr<rocksdb::DB> db_;

  Mutex mu_{kNoIo, "metadata store"};
  CondVar work_cv_;  // wakes the commit thread: a Sync() request or Close()
  CondVar done_cv_;  // a commit finished, or Close() finished
  Overlay active_ GUARDED_BY(mu_);
  Callbacks active_callbacks_ GUARDED_BY(mu_);
  // The overlay of the commit in flight; null when none. Immutable once published, so the commit
  // thread reads it without mu_ through its own reference.
  std::shared_ptr<const Overlay> committing_ GUARDED_BY(mu_);
  std::vector<std::function<Status()>> hooks_ GUARDED_BY(mu_);
  uint64_t requested_seq_ GUARDED_BY(mu_) = 0;  // highest commit number a caller waits for
  uint64_t started_seq_ GUARDED_BY(mu_) = 0;    // number of the last commit started
  uint64_t finished_seq_ GUARDED_BY(mu_) = 0;   // number of the last commit finished
  uint64_t last_ok_seq_ GUARDED_BY(mu_) = 0;    // number of the last commit that succeeded
  Status last_error_ GUARDED_BY(mu_);           // status of the last commit that failed
  bool closed_ GUARDED_BY(mu_) = false;         // Close() began: refuse new calls
  bool stopping_ GUARDED_BY(mu_) = false;       // commit thread: exit after the final commit
  bool close_done_ GUARDED_BY(mu_) = false;
  uint32_t db_users_ GUARDED_BY(mu_) = 0;       // readers using db_ without mu_
  Status close_status_ GUARDED_BY(mu_);
};

std::optional<std::optional<std::string>> RocksDbKv::OverlayLookupLocked(std::string_view key) {
  if (auto it = active_.find(key); it != active_.end()) return it->second;
  if (committing_) {
    if (auto it = committing_->find(key); it != committing_->end()) return it->second;
  }
  return std::nullopt;
}

Result<std::optional<std::string>> RocksDbKv::LookupLocked(std::string_view key) {
  if (auto hit = OverlayLookupLocked(key)) return std::move(*hit);
  return DbGet(key);
}

Result<std::optional<std::string>> RocksDbKv::DbGet(std::string_view key) {
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return FromRocks(s, "get", path_);
  return std::optional<std::string>(std::move(value));
}

Status RocksDbKv::Apply(KvBatch batch) {
  MutexLock l(&mu_);
  if (closed_) return ClosedError();
  for (const KvBatch::Cond& cond : batch.conds()) {
    CLIO_ASSIGN_OR_RETURN(std::optional<std::string> cur, LookupLocked(cond.key));
    if (cond.kind == KvBatch::CondKind::kAbsent && cur.has_value()) {
      return Status(Code::kAlreadyExists, "metadata key exists: " + cond.key);
    }
    if (cond.kind == KvBatch::CondKind::kValue && (!cur.has_value() || *cur != cond.value)) {
      return Status(Code::kBusy, "metadata key changed: " + cond.key);
    }
  }
  for (const KvBatch::Op& op : batch.ops()) {
    if (op.kind == KvBatch::OpKind::kPut) {
      active_.insert_or_assign(op.key, op.value);
    } else {
      active_.insert_or_assign(op.key, std::nullopt);
    }
  }
  for (auto& fn : batch.on_durable()) active_callbacks_.push_back(std::move(fn));
  return Status::Ok();
}

Result<KvPairs> RocksDbKv::Scan(std::string_view prefix, std::string_view start_after,
                                size_t limit) {
  // Every source is positioned at its first key that is >= prefix and > start_after.
  const bool after = start_after >= prefix;  // otherwise start_after bounds nothing
  auto in_range = [&](std::string_view k) { return StartsWith(k, prefix); };
  auto first = [&](const Overlay& o) {
    return after ? o.upper_bound(start_after) : o.lower_bound(prefix);
  };
  // The view, taken under mu_: active_'s part of the range (copied), the committing overlay
  // (immutable: a reference is enough) and a RocksDB snapshot of the same instant.
  std::vector<std::pair<std::string, std::optional<std::string>>> active;
  std::shared_ptr<const Overlay> committing_ref;
  const rocksdb::Snapshot* snapshot = nullptr;
  {
    MutexLock l(&mu_);
    if (closed_) return ClosedError();
    // Up to its limit-th live key: the page ends there or before, whatever the other layers hold.
    size_t live = 0;
    for (auto it = first(active_); it != active_.end() && in_range(it->first); ++it) {
      active.emplace_back(*it);
      if (it->second.has_value() && limit != 0 && ++live == limit) break;
    }
    committing_ref = committing_;
    snapshot = db_->GetSnapshot();
    ++db_users_;
  }
  DbUse use(this);
  struct SnapshotRelease {
    rocksdb::DB* db;
    const rocksdb::Snapshot* snapshot;
    ~SnapshotRelease() { db->ReleaseSnapshot(snapshot); }
  } release{db_.get(), snapshot};

  static const Overlay kEmpty;
  const Overlay& committing = committing_ref ? *committing_ref : kEmpty;
  auto a = active.begin();
  auto c = first(committing);

  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  // The end of the prefix range as an upper bound: without it, a Seek whose range holds no
  // live key walks every tombstone up to the next live key beyond the range (after N unlinks,
  // each unlink's scans cost O(N)).
  std::string limit_key(prefix);
  while (!limit_key.empty() && static_cast<unsigned char>(limit_key.back()) == 0xff) limit_key.pop_back();
  rocksdb::Slice upper;
  if (!limit_key.empty()) {
    limit_key.back() = static_cast<char>(static_cast<unsigned char>(limit_key.back()) + 1);
    upper = rocksdb::Slice(limit_key);
    ro.iterate_upper_bound = &upper;
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  const std::string_view seek = after ? start_after : prefix;
  it->Seek(rocksdb::Slice(seek.data(), seek.size()));
  if (after && it->Valid() && it->key().ToStringView() == start_after) it->Next();

  // A source is exhausted at its end or at its first key past the prefix range (the range is
  // contiguous in key order and every source starts inside or past it).
  KvPairs out;
  while (limit == 0 || out.size() < limit) {
    const bool a_ok = a != active.end();  // holds only keys in the range
    const bool c_ok = c != committing.end() && in_range(c->first);
    const bool d_ok = it->Valid() && in_range(it->key().ToStringView());
    if (!a_ok && !c_ok && !d_ok) break;
    std::string_view key;
    if (a_ok) key = a->first;
    if (c_ok && (key.data() == nullptr || std::string_view(c->first) < key)) key = c->first;
    std::string_view dkey = d_ok ? it->key().ToStringView() : std::string_view();
    if (d_ok && (key.data() == nullptr || dkey < key)) key = dkey;

    // The newest layer holding `key` decides; every layer at `key` advances.
    std::optional<std::string> value;
    bool decided = false;
    std::string key_copy(key);  // `key` may point into a source that advances below
    if (a_ok && a->first == key_copy) {
      value = std::move(a->second);
      decided = true;
      ++a;
    }
    if (c_ok && c->first == key_copy) {
      if (!decided) value = c->second;
      decided = true;
      ++c;
    }
    if (d_ok && dkey == key_copy) {
      if (!decided) value = it->value().ToString();
      it->Next();
    }
    if (value.has_value()) out.emplace_back(std::move(key_copy), std::move(*value));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "scan", path_);
  return out;
}

Status RocksDbKv::Sync() {
  if (std::this_thread::get_id() == commit_thread_id_) {
    return Internal("KvStore::Sync called from a pre-commit hook or OnDurable callback");
  }
  MutexLock l(&mu_);
  if (closed_) return ClosedError();
  // A commit that starts after this point includes everything applied before it.
  const uint64_t target = started_seq_ + 1;
  if (requested_seq_ < target) {
    requested_seq_ = target;
    work_cv_.NotifyAll();
  }
  while (finished_seq_ < target) done_cv_.Wait(&mu_);
  return ResultSinceLocked(target);
}

Status RocksDbKv::Close() {
  if (std::this_thread::get_id() == commit_thread_id_) {
    return Internal("KvStore::Close called from a pre-commit hook or OnDurable callback");
  }
  uint64_t target = 0;
  {
    MutexLock l(&mu_);
    if (closed_) {
      // Idempotent: a second Close() waits for the first and reports its result.
      while (!close_done_) done_cv_.Wait(&mu_);
      return close_status_;
    }
    closed_ = true;
    stopping_ = true;
    target = started_seq_ + 1;
    requested_seq_ = std::max(requested_seq_, target);
    work_cv_.NotifyAll();
  }
  thread_.join();
  Status s;
  {
    MutexLock l(&mu_);
    while (db_users_ > 0) done_cv_.Wait(&mu_);  // readers still using db_ without mu_
    s = ResultSinceLocked(target);
    if (!s.ok()) {
      CLIO_LOG_ERROR("metadata store {}: final commit failed, {} keys not durable: {}", path_,
                     active_.size(), s.ToString());
    }
  }
  rocksdb::Status cs = db_->Close();
  if (!cs.ok() && s.ok()) s = FromRocks(cs, "close", path_);
  db_.reset();
  MutexLock l(&mu_);
  close_status_ = s;
  close_done_ = true;
  done_cv_.NotifyAll();
  return s;
}

void RocksDbKv::CommitLoop() {
  MutexLock l(&mu_);
  auto deadline = std::chrono::steady_clock::now() + interval_;
  for (;;) {
    while (!stopping_ && requested_seq_ <= started_seq_) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      work_cv_.WaitFor(&mu_, deadline - now);
    }
    CommitLocked(++started_seq_);
    deadline = std::chrono::steady_clock::now() + interval_;
    if (stopping_ && finished_seq_ >= requested_seq_) return;
  }
}

void RocksDbKv::CommitLocked(uint64_t seq) {
  Callbacks callbacks;
  callbacks.swap(active_callbacks_);
  Status s;
  if (!active_.empty()) {
    auto overlay = std::make_shared<const Overlay>(std::move(active_));
    active_.clear();
    committing_ = overlay;
    const auto hooks = hooks_;
    mu_.Unlock();
    s = RunHooks(hooks);
    if (s.ok()) s = WriteOverlay(*overlay);
    mu_.Lock();
    committing_.reset();
    if (!s.ok()) {
      CLIO_LOG_WARN("metadata store {}: commit of {} keys failed, retrying at the next commit: {}",
                    path_, overlay->size(), s.ToString());
      // Back under the newer active_: its entries win, so the view does not move backwards.
      for (const auto& [key, value] : *overlay) active_.emplace(key, value);
      callbacks.insert(callbacks.end(), std::make_move_iterator(active_callbacks_.begin()),
                       std::make_move_iterator(active_callbacks_.end()));
      active_callbacks_.swap(callbacks);
      last_error_ = s;
      finished_seq_ = seq;
      done_cv_.NotifyAll();
      return;
    }
  }
  // Callbacks run before Sync() returns, so a caller of Sync() sees their effects.
  if (!callbacks.empty()) {
    mu_.Unlock();
    for (auto& fn : callbacks) {
      try {
        fn();
      } catch (const std::exception& e) {
        CLIO_LOG_ERROR("metadata store {}: OnDurable callback threw: {}", path_, e.what());
      } catch (...) {
        CLIO_LOG_ERROR("metadata store {}: OnDurable callback threw", path_);
      }
    }
    mu_.Lock();
  }
  last_ok_seq_ = seq;
  finished_seq_ = seq;
  done_cv_.NotifyAll();
}

Status RocksDbKv::RunHooks(const std::vector<std::function<Status()>>& hooks) {
  for (size_t i = 0; i < hooks.size(); ++i) {
    Status s;
    try {
      s = hooks[i]();
    } catch (const std::exception& e) {
      s = Internal(std::string("threw: ") + e.what());
    } catch (...) {
      s = Internal("threw a non-std exception");
    }
    if (!s.ok()) return s.WithContext("pre-commit hook " + std::to_string(i) + " of " + path_);
  }
  return Status::Ok();
}

Status RocksDbKv::WriteOverlay(const Overlay& overlay) {
  rocksdb::WriteBatch wb;
  for (const auto& [key, value] : overlay) {
    rocksdb::Status s = value.has_value() ? wb.Put(key, *value) : wb.Delete(key);
    if (!s.ok()) return FromRocks(s, "batch", path_);
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, &wb);
  if (!s.ok()) return FromRocks(s, "write", path_);
  return Status::Ok();
}

}  // namespace

namespace {

// The process holding the store's LOCK file (RocksDB takes a POSIX record lock on it), 0 when
// none. Only called once RocksDB said another process holds it: this process holds no lock on
// the file whose fd it closes (closing any fd of a file drops the process's own record locks).
pid_t LockHolder(const std::string& dir) {
  const int fd = ::open((dir + "/LOCK").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  pid_t holder = 0;
  if (::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) holder = fl.l_pid;
  ::close(fd);
  return holder;
}

// Whether `pid` runs (a zombie leader whose last threads are still exiting does not).
bool Running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' && line[close + 2] != 'X';
}

std::string Comm(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
  std::string c;
  std::getline(f, c);
  return c.empty() ? "?" : c;
}

}  // namespace

Result<std::unique_ptr<KvStore>> OpenRocksDbKv(const KvOptions& options) {
  if (options.path.empty()) return InvalidArgument("metadata store: empty path");
  if (options.commit_interval_ms == 0) {
    return InvalidArgument("metadata store " + options.path + ": commit_interval_ms must be > 0");
  }
  rocksdb::Options ro;
  ro.create_if_missing = true;
  ro.write_buffer_size = kWriteBufferBytes;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(ro, options.path, &raw);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.lock_wait_ms);
  bool said = false;
  // Another process holds the lock (EAGAIN): a runtime on the same state directory, refused at
  // once, or a killed one whose last threads are still exiting, waited for.
  while (!s.ok() && s.IsIOError() && s.ToString().find("Resource temporarily unavailable") != std::string::npos) {
    const pid_t holder = LockHolder(options.path);
    if (holder > 0 && Running(holder)) {
      return Status(Code::kBusy, "metadata store " + options.path + " is in use by process " + std::to_string(holder) +
                                     " (" + Comm(holder) + "): another runtime on this state directory? stop it first");
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    if (!said) {
      CLIO_LOG_WARN("metadata store {} is still locked by process {}, which is exiting; waiting up to {} ms",
                    options.path, holder, options.lock_wait_ms);
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = rocksdb::DB::Open(ro, options.path, &raw);
  }
  if (!s.ok()) return FromRocks(s, "open", options.path);
  return std::unique_ptr<KvStore>(
      std::make_unique<RocksDbKv>(options, std::unique_ptr<rocksdb::DB>(raw)));
}

}  // namespace clio
