// Clang thread-safety annotations and an annotated mutex (libstdc++'s std::mutex carries none).
// Build with clang -Wthread-safety to have the compiler check GUARDED_BY and lock order.
#pragma once

#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define CLIO_TSA(x) __attribute__((x))
#else
#define CLIO_TSA(x)
#endif

#define CAPABILITY(x) CLIO_TSA(capability(x))
#define SCOPED_CAPABILITY CLIO_TSA(scoped_lockable)
#define GUARDED_BY(x) CLIO_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) CLIO_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) CLIO_TSA(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) CLIO_TSA(acquired_after(__VA_ARGS__))
#define REQUIRES(...) CLIO_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) CLIO_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) CLIO_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) CLIO_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) CLIO_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) CLIO_TSA(release_shared_capability(__VA_ARGS__))
#define EXCLUDES(...) CLIO_TSA(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) CLIO_TSA(assert_capability(x))
#define NO_THREAD_SAFETY_ANALYSIS CLIO_TSA(no_thread_safety_analysis)

namespace clio {

// No lock across device I/O (issue 25): a mutex constructed with kNoIo must not be held by a
// thread that starts I/O (a read, write, sync or allocation of the I/O layer, an object-store
// request). Debug builds count the kNoIo mutexes each thread holds, and the I/O layer calls
// CheckNoLockAcrossIo, which aborts naming the lock. Mutexes that exist to serialize one
// device's own I/O (an allocator log, a safe-bdev stripe) stay plain.
struct NoIo {};
inline constexpr NoIo kNoIo{};
namespace lock_io {
inline constexpr int kNamed = 8;
inline thread_local int held = 0;                // kNoIo mutexes this thread holds
inline thread_local const char* names[kNamed];   // the names of the first kNamed of them
inline thread_local const char* allowed = nullptr;  // the lock an open IoUnderLock exempts
}  // namespace lock_io

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(NoIo, const char* name) : no_io_(name) {}
  void Lock() ACQUIRE() {
    mu_.lock();
    Note(1);
  }
  void Unlock() RELEASE() {
    Note(-1);
    mu_.unlock();
  }
  // For std::condition_variable_any and std::unique_lock interop.
  void lock() ACQUIRE() { Lock(); }
  void unlock() RELEASE() { Unlock(); }
  // Tells the analysis that the caller holds the mutex (it cannot see it through a callback).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  void Note(int delta) {
#ifndef NDEBUG
    if (no_io_ == nullptr) return;
    if (delta > 0) {
      if (lock_io::held < lock_io::kNamed) lock_io::names[lock_io::held] = no_io_;
      ++lock_io::held;
      return;
    }
    // Unlocks need not come in reverse order: drop the newest entry of this name.
    const int n = lock_io::held < lock_io::kNamed ? lock_io::held : lock_io::kNamed;
    for (int i = n - 1; i >= 0; --i) {
      if (lock_io::names[i] != no_io_) continue;
      for (int j = i; j + 1 < n; ++j) lock_io::names[j] = lock_io::names[j + 1];
      break;
    }
    --lock_io::held;
#else
    (void)delta;
#endif
  }
  std::mutex mu_;
  const char* no_io_ = nullptr;  // kNoIo: its name
};

// The I/O layer's check before it starts a request `what` (debug builds): aborts when this
// thread holds a kNoIo mutex other than the one an open IoUnderLock exempts.
void CheckNoLockAcrossIo(const char* what);

// A known place that still does I/O under the kNoIo lock named `lock`, said in `why` (grep
// IoUnderLock for the list): the check lets that lock through, and no other.
class IoUnderLock {
 public:
  IoUnderLock(const char* lock, const char* why) : outer_(lock_io::allowed) {
    (void)why;
    lock_io::allowed = lock;
  }
  ~IoUnderLock() { lock_io::allowed = outer_; }
  IoUnderLock(const IoUnderLock&) = delete;
  IoUnderLock& operator=(const IoUnderLock&) = delete;

 private:
  const char* outer_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// Reader/writer mutex: many holders in shared mode, or one in exclusive mode.
class CAPABILITY("mutex") SharedMutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() RELEASE() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* mu_;
};

class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_->LockShared(); }
  ~ReaderLock() RELEASE() { mu_->UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* mu_;
};

// Condition variable usable with clio::Mutex. Wait() must be called with the mutex held.
class CondVar {
 public:
  void Wait(Mutex* mu) REQUIRES(mu) { cv_.wait(*mu); }
  template <typename Rep, typename Period>
  void WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> d) REQUIRES(mu) {
    cv_.wait_for(*mu, d);
  }
  void NotifyAll() { cv_.notify_all(); }
  void NotifyOne() { cv_.notify_one(); }

 private:
  std::condition_variable_any cv_;
};

}  // namespace clio
