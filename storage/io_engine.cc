// The asynchronous engines (io_engine.h): io_uring, libaio and POSIX AIO, and the driver that
// keeps a call's chunks in flight on one of them.
#include "storage/io_engine.h"

#include <aio.h>
#include <libaio.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/log.h"

namespace clio::io_internal {
namespace {

// One chunk of a call; a chunk is one submitted operation. 1 MiB keeps several in flight for
// the large writes of a tier while staying far below the 2 GiB a single syscall can move.
constexpr uint64_t kIoChunk = 1ull << 20;

// --- io_uring ---------------------------------------------------------------------------

class UringEngine final : public Engine {
 public:
  static std::unique_ptr<UringEngine> Create(uint32_t depth, int* err) {
    auto e = std::unique_ptr<UringEngine>(new UringEngine(depth));
    int r = io_uring_queue_init(depth, &e->ring_, 0);
    if (r < 0) {
      *err = -r;
      return nullptr;
    }
    e->ok_ = true;
    return e;
  }
  ~UringEngine() override {
    if (ok_) io_uring_queue_exit(&ring_);
  }
  UringEngine(const UringEngine&) = delete;
  UringEngine& operator=(const UringEngine&) = delete;

  uint32_t depth() const override { return depth_; }

  int Submit(bool write, int fd, const IoSeg* segs, const uint32_t* slots, uint32_t n) override {
    uint32_t queued = 0;
    for (; queued < n; ++queued) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) break;  // cannot happen: at most depth() in flight
      const IoSeg& s = segs[queued];
      const auto len = static_cast<unsigned>(s.len);
      if (write) {
        io_uring_prep_write(sqe, fd, s.buf, len, s.off);
      } else {
        io_uring_prep_read(sqe, fd, s.buf, len, s.off);
      }
      io_uring_sqe_set_data64(sqe, slots[queued]);
    }
    if (queued == 0) return -EBUSY;
    // The SQEs are in the ring now. A submit that fails with EINTR, EAGAIN or EBUSY leaves them
    // there and Reap's submit_and_wait hands them over; any other error shows up there too.
    int r = io_uring_submit(&ring_);
    (void)r;
    return static_cast<int>(queued);
  }

  int Reap(IoCompletion* out, uint32_t max) override {
    int r;
    do {
      r = io_uring_submit_and_wait(&ring_, 1);
    } while (r == -EINTR);
    if (r < 0 && r != -EAGAIN && r != -EBUSY) return r;
    io_uring_cqe* cqe = nullptr;
    do {
      r = io_uring_wait_cqe(&ring_, &cqe);
    } while (r == -EINTR);
    if (r < 0) return r;
    uint32_t n = 0;
    while (n < max && io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      out[n].slot = static_cast<uint32_t>(io_uring_cqe_get_data64(cqe));
      out[n].res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      ++n;
    }
    return static_cast<int>(n);
  }

 private:
  explicit UringEngine(uint32_t depth) : depth_(depth) {}
  io_uring ring_{};
  const uint32_t depth_;
  bool ok_ = false;
};

// --- libaio -----------------------------------------------------------------------------
// For a buffered descriptor the kernel completes a libaio request inside io_submit (it is
// only truly asynchronous with O_DIRECT); the interface and the completion path are the same.

class LibaioEngine final : public Engine {
 public:
  static std::unique_ptr<LibaioEngine> Create(uint32_t depth, int* err) {
    auto e = std::unique_ptr<LibaioEngine>(new LibaioEngine(depth));
    int r = io_setup(static_cast<int>(depth), &e->ctx_);
    if (r < 0) {
      *err = -r;
      return nullptr;
    }
    e->ok_ = true;
    return e;
  }
  // io_destroy waits for anything still in flight, so no buffer is written after it returns.
  ~LibaioEngine() override {
    if (ok_) io_destroy(ctx_);
  }
  LibaioEngine(const LibaioEngine&) = delete;
  LibaioEngine& operator=(const LibaioEngine&) = delete;

  uint32_t depth() const override { return depth_; }

  int Submit(bool write, int fd, const IoSeg* segs, const uint32_t* slots, uint32_t n) override {
    for (uint32_t i = 0; i < n; ++i) {
      iocb* cb = &iocbs_[slots[i]];
      const IoSeg& s = segs[i];
      if (write) {
        io_prep_pwrite(cb, fd, s.buf, s.len, static_cast<long long>(s.off));
      } else {
        io_prep_pread(cb, fd, s.buf, s.len, static_cast<long long>(s.off));
      }
      cb->data = reinterpret_cast<void*>(static_cast<uintptr_t>(slots[i]));
      ptrs_[i] = cb;
    }
    int r;
    do {
      r = io_submit(ctx_, static_cast<long>(n), ptrs_.data());
    } while (r == -EINTR);
    return r;  // libaio returns -errno itself
  }

  int Reap(IoCompletion* out, uint32_t max) override {
    max = std::min<uint32_t>(max, depth_);
    int r;
    do {
      r = io_getevents(ctx_, 1, static_cast<long>(max), events_.data(), nullptr);
    } while (r == -EINTR);
    if (r < 0) return r;
    for (int i = 0; i < r; ++i) {
      out[i].slot = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(events_[i].data));
      out[i].res = static_cast<int64_t>(static_cast<long>(events_[i].res));
    }
    return r;
  }

 private:
  explicit LibaioEngine(uint32_t depth)
      : depth_(depth), iocbs_(depth), ptrs_(depth), events_(depth) {}
  io_context_t ctx_ = nullptr;
  const uint32_t depth_;
  bool ok_ = false;
  std::vector<iocb> iocbs_;
  std::vector<iocb*> ptrs_;
  std::vector<io_event> events_;
};

// --- POSIX AIO --------------------------------------------------------------------------
// glibc runs these on its own helper threads; aio_suspend waits for any of them.
//
// glibc's AIO is not fork-safe: a child inherits the count of idle helper threads but not the
// threads, so its first request waits forever. The first process to use POSIX AIO is recorded;
// in a process forked from it, the engine does each operation synchronously (pread/pwrite in
// Submit, the result handed back by Reap) instead.
std::atomic<pid_t> g_posix_aio_process{0};
std::atomic<bool> g_posix_aio_sync_warned{false};

bool PosixAioSafeHere() {
  const pid_t self = ::getpid();
  pid_t expected = 0;
  if (g_posix_aio_process.compare_exchange_strong(expected, self)) return true;
  return expected == self;
}

class PosixAioEngine final : public Engine {
 public:
  explicit PosixAioEngine(uint32_t depth)
      : depth_(depth),
        sync_(!PosixAioSafeHere()),
        cbs_(depth),
        active_(depth, false),
        waiting_(depth),
        sync_done_(depth, false),
        sync_res_(depth, 0) {
    if (sync_ && !g_posix_aio_sync_warned.exchange(true)) {
      CLIO_LOG_WARN("process {} was forked from one that used POSIX AIO, which glibc does not "
                    "support; its POSIX AIO requests run synchronously",
                    ::getpid());
    }
  }
  // Nothing is in flight between calls (RunAsyncIo drains), so there is nothing to cancel.
  ~PosixAioEngine() override = default;

  uint32_t depth() const override { return depth_; }

  int Submit(bool write, int fd, const IoSeg* segs, const uint32_t* slots, uint32_t n) override {
    if (sync_) {
      for (uint32_t i = 0; i < n; ++i) {
        const IoSeg& s = segs[i];
        ssize_t r = write ? ::pwrite(fd, s.buf, s.len, static_cast<off_t>(s.off))
                          : ::pread(fd, s.buf, s.len, static_cast<off_t>(s.off));
        sync_res_[slots[i]] = r < 0 ? -static_cast<int64_t>(errno) : r;
        sync_done_[slots[i]] = true;
      }
      return static_cast<int>(n);
    }
    for (uint32_t i = 0; i < n; ++i) {
      aiocb* cb = &cbs_[slots[i]];
      std::memset(cb, 0, sizeof(*cb));
      cb->aio_fildes = fd;
      cb->aio_buf = segs[i].buf;
      cb->aio_nbytes = segs[i].len;
      cb->aio_offset = static_cast<off_t>(segs[i].off);
      cb->aio_sigevent.sigev_notify = SIGEV_NONE;
      int r = write ? ::aio_write(cb) : ::aio_read(cb);
      if (r != 0) return i > 0 ? static_cast<int>(i) : -errno;
      active_[slots[i]] = true;
    }
    return static_cast<int>(n);
  }

  int Reap(IoCompletion* out, uint32_t max) override {
    if (sync_) {
      uint32_t n = 0;
      for (uint32_t s = 0; s < depth_ && n < max; ++s) {
        if (!sync_done_[s]) continue;
        sync_done_[s] = false;
        out[n++] = {s, sync_res_[s]};
      }
      return n > 0 ? static_cast<int>(n) : -EINVAL;
    }
    for (;;) {
      int waiting = 0;
      for (uint32_t s = 0; s < depth_; ++s) {
        if (active_[s]) waiting_[waiting++] = &cbs_[s];
      }
      if (waiting == 0) return -EINVAL;  // precondition broken: nothing in flight
      if (::aio_suspend(waiting_.data(), waiting, nullptr) != 0 && errno != EINTR &&
          errno != EAGAIN) {
        return -errno;
      }
      uint32_t n = 0;
      for (uint32_t s = 0; s < depth_ && n < max; ++s) {
        if (!active_[s]) continue;
        int e = ::aio_error(&cbs_[s]);
        if (e == EINPROGRESS) continue;
        ssize_t res = ::aio_return(&cbs_[s]);
        active_[s] = false;
        out[n].slot = s;
        out[n].res = res < 0 ? -static_cast<int64_t>(e) : static_cast<int64_t>(res);
        ++n;
      }
      if (n > 0) return static_cast<int>(n);
    }
  }

 private:
  const uint32_t depth_;
  const bool sync_;  // forked from a process that used glibc AIO: see above
  std::vector<aiocb> cbs_;
  std::vector<bool> active_;
  std::vector<const aiocb*> waiting_;
  std::vector<bool> sync_done_;
  std::vector<int64_t> sync_res_;
};

// --- per-thread engines -----------------------------------------------------------------

// One engine per backend per thread. A forked child inherits the parent's ring memory and
// context ids; using them would corrupt the parent's I/O, and tearing them down would too, so
// the child abandons them (a small leak in the child) and makes its own.
class ThreadEngines {
 public:
  ThreadEngines() = default;
  ThreadEngines(const ThreadEngines&) = delete;
  ThreadEngines& operator=(const ThreadEngines&) = delete;
  ~ThreadEngines() {
    if (owner_ != 0 && owner_ != ::getpid()) AbandonAll();
  }

  Engine* Get(IoBackend backend, uint32_t depth, int* err) {
    const pid_t pid = ::getpid();
    if (owner_ != pid) {
      if (owner_ != 0) AbandonAll();
      owner_ = pid;
    }
    Slot& slot = SlotOf(backend);
    if (slot.engine != nullptr && slot.engine->depth() >= depth) return slot.engine.get();
    int e = 0;
    std::unique_ptr<Engine> made = Make(backend, depth, &e);
    if (made != nullptr) {
      slot.engine = std::move(made);
    } else if (slot.engine == nullptr) {
      *err = e;
      return nullptr;
    }
    return slot.engine.get();
  }

  void Reset(IoBackend backend) { SlotOf(backend).engine.reset(); }

 private:
  struct Slot {
    std::unique_ptr<Engine> engine;
  };

  static std::unique_ptr<Engine> Make(IoBackend backend, uint32_t depth, int* err) {
    switch (backend) {
      case IoBackend::kUring: return UringEngine::Create(depth, err);
      case IoBackend::kLibaio: return LibaioEngine::Create(depth, err);
      case IoBackend::kPosixAio: return std::make_unique<PosixAioEngine>(depth);
      case IoBackend::kAuto:
      case IoBackend::kPosix: break;
    }
    *err = EINVAL;
    return nullptr;
  }

  Slot& SlotOf(IoBackend backend) {
    switch (backend) {
      case IoBackend::kUring: return uring_;
      case IoBackend::kLibaio: return libaio_;
      default: return posix_aio_;
    }
  }

  void AbandonAll() {
    (void)uring_.engine.release();
    (void)libaio_.engine.release();
    posix_aio_.engine.reset();  // user-space state only
  }

  pid_t owner_ = 0;
  Slot uring_, libaio_, posix_aio_;
};

thread_local ThreadEngines t_engines;

}  // namespace

std::string OpContext(std::string_view op, const std::string& path, uint64_t off) {
  std::string s(op);
  s += ' ';
  s += path;
  s += " at ";
  s += std::to_string(off);
  return s;
}

Engine* ThreadEngine(IoBackend backend, uint32_t depth, int* err) {
  return t_engines.Get(backend, depth, err);
}

void ResetThreadEngine(IoBackend backend) { t_engines.Reset(backend); }

Status RunAsyncIo(Engine* engine, IoBackend backend, uint32_t depth, bool write, int fd,
                  char* buf, uint64_t len, uint64_t off, const std::string& path) {
  depth = std::max<uint32_t>(1, std::min(depth, engine->depth()));
  const std::string_view op = write ? "write" : "read";
  // Chunks still to submit, taken from the back (order does not matter: they are disjoint).
  std::vector<IoSeg> todo;
  todo.reserve(std::min<uint64_t>(len / kIoChunk + 1, 4096));
  for (uint64_t done = len; done > 0;) {
    const uint64_t n = std::min(done, kIoChunk);
    done -= n;
    todo.push_back({buf + done, n, off + done});
  }
  std::vector<IoSeg> in_slot(depth);
  std::vector<uint32_t> free_slots(depth);
  for (uint32_t s = 0; s < depth; ++s) free_slots[s] = depth - 1 - s;
  std::vector<IoSeg> batch(depth);
  std::vector<uint32_t> batch_slots(depth);
  std::vector<IoCompletion> done(depth);
  uint32_t in_flight = 0;
  Status first_error;

  while ((first_error.ok() && !todo.empty()) || in_flight > 0) {
    if (first_error.ok() && !todo.empty() && !free_slots.empty()) {
      uint32_t n = 0;
      while (!todo.empty() && n < free_slots.size()) {
        batch[n] = todo.back();
        batch_slots[n] = free_slots[free_slots.size() - 1 - n];
        todo.pop_back();
        ++n;
      }
      int r = engine->Submit(write, fd, batch.data(), batch_slots.data(), n);
      const uint32_t started = r > 0 ? static_cast<uint32_t>(r) : 0;
      for (uint32_t i = 0; i < started; ++i) in_slot[batch_slots[i]] = batch[i];
      free_slots.resize(free_slots.size() - started);
      in_flight += started;
      for (uint32_t i = n; i > started; --i) todo.push_back(batch[i - 1]);  // not started
      if (r < 0 && !((r == -EAGAIN || r == -EINTR) && in_flight > 0)) {
        first_error = Status::FromErrno(-r, OpContext(op, path, batch[0].off));
      } else if (r == 0 && in_flight == 0) {
        // Nothing started and nothing to wait for: looping would spin forever.
        first_error = IoError(OpContext(op, path, batch[0].off) + ": the kernel took no request");
      }
    }
    if (in_flight == 0) continue;
    int r = engine->Reap(done.data(), depth);
    if (r < 0) {
      // The engine is unusable. Dropping it waits for or cancels what it still has in flight
      // (io_destroy, closing the ring), so no buffer of this call is touched after we return.
      Status s = Status::FromErrno(-r, OpContext(op, path, off) + " (waiting for completions)");
      ResetThreadEngine(backend);
      return s;
    }
    for (int i = 0; i < r; ++i) {
      const uint32_t slot = done[i].slot;
      const int64_t res = done[i].res;
      IoSeg seg = in_slot[slot];
      free_slots.push_back(slot);
      --in_flight;
      if (res == -EINTR || res == -EAGAIN) {
        todo.push_back(seg);
      } else if (res < 0) {
        if (first_error.ok()) {
          first_error = Status::FromErrno(static_cast<int>(-res), OpContext(op, path, seg.off));
        }
      } else if (res == 0) {
        if (write) {
          if (first_error.ok()) first_error = IoError(OpContext(op, path, seg.off) + ": wrote nothing");
        } else {
          std::memset(seg.buf, 0, seg.len);  // end of file: the rest reads as zeros
        }
      } else if (static_cast<uint64_t>(res) < seg.len) {
        const auto n = static_cast<uint64_t>(res);
        todo.push_back({seg.buf + n, seg.len - n, seg.off + n});
      }
    }
  }
  return first_error;
}

}  // namespace clio::io_internal
