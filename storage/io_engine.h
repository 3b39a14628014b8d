// Asynchronous I/O engines behind IoFile (internal to storage/; keeps liburing and libaio
// headers out of every other file).
//
// An engine is one thread's submission/completion context of one backend: an io_uring ring, a
// libaio io_context_t, or a table of POSIX aiocbs. Engines are created lazily per thread
// (ThreadEngine) and never shared between threads, so they need no locks. RunAsyncIo drives one
// read or write through an engine: it splits the range into chunks, keeps up to `depth` of them
// in flight, resubmits the rest of short transfers, and returns only when nothing it submitted
// is still in flight (the buffers belong to the caller).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "storage/io.h"

namespace clio::io_internal {

// One chunk of a read or write.
struct IoSeg {
  char* buf = nullptr;
  uint64_t len = 0;
  uint64_t off = 0;
};

// A finished operation: the slot it was submitted with and its result (bytes, or -errno).
struct IoCompletion {
  uint32_t slot = 0;
  int64_t res = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  // Operations this engine can have in flight at once.
  virtual uint32_t depth() const = 0;
  // Starts `n` operations on `fd`; op i uses slot slots[i] (< depth(), not in flight). Returns
  // how many were started (a prefix), or -errno when none was.
  virtual int Submit(bool write, int fd, const IoSeg* segs, const uint32_t* slots, uint32_t n) = 0;
  // Waits until at least one started operation finished; writes up to `max` completions.
  // Returns their number, or -errno. Precondition: something is in flight.
  virtual int Reap(IoCompletion* out, uint32_t max) = 0;
};

// The calling thread's engine for `backend` (kUring, kLibaio or kPosixAio) with at least
// `depth` slots where that can be had (an existing smaller engine is kept when a larger one
// cannot be created). nullptr when this thread cannot have one; *err is then the errno why.
// In a forked child, engines inherited from the parent are abandoned and made anew.
Engine* ThreadEngine(IoBackend backend, uint32_t depth, int* err);

// Drops the calling thread's engine for `backend` after a fatal error (the next call makes a
// new one).
void ResetThreadEngine(IoBackend backend);

// Reads or writes all of [off, off+len) of `fd` through `engine`, at most `depth` chunks in
// flight. Reads past end of file fill with zeros. Errors name `path` and the offset.
Status RunAsyncIo(Engine* engine, IoBackend backend, uint32_t depth, bool write, int fd,
                  char* buf, uint64_t len, uint64_t off, const std::string& path);

// "write /path at 123"
std::string OpContext(std::string_view op, const std::string& path, uint64_t off);

}  // namespace clio::io_internal
