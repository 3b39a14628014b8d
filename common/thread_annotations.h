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

class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // For std::condition_variable_any and std::unique_lock interop.
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds the mutex (it cannot see it through a callback).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
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
