// FUSE over io_uring (fs/mount/fuse_uring.h). The kernel side is fs/fuse/dev_uring.c (Linux 6.14+,
// protocol 7.42); its structures are declared here because Debian 12's linux/fuse.h (7.38)
// predates them.
#include "fs/mount/fuse_uring.h"

#include <linux/fuse.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/thread_annotations.h"

namespace clio {
namespace {

constexpr uint64_t kOverIoUring = 1ULL << 41;  // FUSE_OVER_IO_URING, an INIT flag (flags2)
constexpr uint32_t kCmdRegister = 1;           // FUSE_IO_URING_CMD_REGISTER
constexpr uint32_t kCmdCommitAndFetch = 2;     // FUSE_IO_URING_CMD_COMMIT_AND_FETCH
constexpr size_t kOpInSize = 128;              // FUSE_URING_OP_IN_OUT_SZ

struct UringEntInOut {  // struct fuse_uring_ent_in_out
  uint64_t flags;
  uint64_t commit_id;
  uint32_t payload_sz;
  uint32_t padding;
  uint64_t reserved;
};
struct UringReqHeader {  // struct fuse_uring_req_header: iov[0] of a REGISTER
  char in_out[128];      // fuse_in_header from the kernel, fuse_out_header back
  char op_in[kOpInSize];  // the request's first argument (its per-opcode struct)
  UringEntInOut ring_ent_in_out;
};
struct UringCmdReq {  // struct fuse_uring_cmd_req, in the SQE's 80-byte command area
  uint64_t flags;
  uint64_t commit_id;
  uint16_t qid;
  uint8_t padding[6];
};
static_assert(sizeof(UringReqHeader) == 288);
static_assert(sizeof(UringCmdReq) == 24);

// The payload buffer starts this far into an entry's buffer: a request's header and first
// argument are copied in front of its payload, so libfuse gets it contiguous without moving
// the payload (a write's data).
constexpr size_t kPrefix = 256;
static_assert(kPrefix >= sizeof(fuse_in_header) + kOpInSize);

constexpr uint64_t kEntryTag = 1;
constexpr uint64_t kStopTag = 2;

// The entry whose request this thread is handing to libfuse: its reply goes there.
struct Current;
thread_local Current* t_current = nullptr;

struct Current {
  uint64_t unique = 0;
  bool replied = false;
  UringReqHeader* headers = nullptr;
  unsigned char* payload = nullptr;
  size_t payload_size = 0;
};

void PrepCmd(io_uring_sqe* sqe, int fd, uint32_t op, uint16_t qid, uint64_t commit_id) {
  std::memset(sqe, 0, 128);  // an SQE128 slot
  sqe->opcode = IORING_OP_URING_CMD;
  sqe->fd = fd;
  sqe->cmd_op = op;
  sqe->user_data = kEntryTag;
  UringCmdReq req{};
  req.commit_id = commit_id;
  req.qid = qid;
  std::memcpy(sqe->cmd, &req, sizeof req);
}

std::string ReadParam(const char* path) {
  std::ifstream in(path);
  std::string v;
  in >> v;
  return v;
}

// A CPU list as sysfs prints it ("0-3,6"); empty when unreadable or malformed.
std::vector<bool> ReadCpuList(const char* path) {
  std::vector<bool> cpus;
  std::string text = ReadParam(path);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string part = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    char* end = nullptr;
    const unsigned long lo = std::strtoul(part.c_str(), &end, 10);
    unsigned long hi = lo;
    if (*end == '-') hi = std::strtoul(end + 1, &end, 10);
    if (part.empty() || *end != '\0' || hi < lo || hi >= 65536) return {};
    if (cpus.size() <= hi) cpus.resize(hi + 1, false);
    for (unsigned long c = lo; c <= hi; ++c) cpus[c] = true;
  }
  return cpus;
}

// Whether an error of a ring command means the connection is gone (unmounted or aborted).
bool ConnectionEnded(int res) { return res == -ENOTCONN || res == -ECONNABORTED || res == -ECANCELED; }

// io_uring_submit, again while the kernel says "not now".
int SubmitRetrying(io_uring* ring) {
  int rc = 0;
  for (int tries = 0; tries < 1000; ++tries) {
    rc = io_uring_submit(ring);
    if (rc != -EAGAIN && rc != -EBUSY && rc != -EINTR) return rc;
    std::this_thread::yield();
  }
  return rc;
}

}  // namespace

Result<FuseUringMode> ParseFuseUringMode(const std::string& text) {
  if (text == "auto") return FuseUringMode::kAuto;
  if (text == "on") return FuseUringMode::kOn;
  if (text == "off") return FuseUringMode::kOff;
  return InvalidArgument("bad value in -o io_uring=" + text + " (auto, on or off)");
}

Status FuseUringAvailable() {
  const char* param = "/sys/module/fuse/parameters/enable_uring";
  if (::access(param, F_OK) != 0) {
    // The parameters appear once fuse.ko is loaded, which the first open of /dev/fuse does.
    const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  }
  if (::access(param, F_OK) != 0)
    return Status(Code::kNotSupported,
                  "this kernel has no FUSE over io_uring (it needs Linux 6.14 or later built with "
                  "CONFIG_FUSE_IO_URING; no " + std::string(param) + ")");
  const std::string v = ReadParam(param);
  if (v != "Y" && v != "1")
    return Status(Code::kNotSupported,
                  "FUSE over io_uring is off in the kernel: enable it with "
                  "`echo 1 > " + std::string(param) + "` (or fuse.enable_uring=1 on the kernel command line)");
  return Status::Ok();
}

struct FuseUring::Entry {
  UringReqHeader headers{};
  std::unique_ptr<unsigned char[]> buf;  // kPrefix, then the payload
  size_t payload_size = 0;
  iovec iov[2]{};
};

struct FuseUring::Ring {
  io_uring ring{};
  bool initialized = false;
  uint16_t qid = 0;
  Entry entry;
  std::thread thread;
  Mutex sq_mu;  // the ring's submission queue: the thread's commits, Stop's wake-up
};

FuseUring::FuseUring(int dev_fd, FuseUringMode mode, int threads_per_queue, Process process)
    : dev_fd_(dev_fd), mode_(mode), threads_per_queue_(std::max(1, threads_per_queue)), process_(std::move(process)) {}

FuseUring::~FuseUring() { Stop(); }

ssize_t FuseUring::Read(int fd, void* buf, size_t len) {
  const ssize_t n = ::read(fd, buf, len);
  if (n >= static_cast<ssize_t>(sizeof(fuse_in_header))) {
    dev_requests_.fetch_add(1, std::memory_order_relaxed);
    fuse_in_header in;
    std::memcpy(&in, buf, sizeof in);
    if (in.opcode == FUSE_INIT && static_cast<size_t>(n) >= sizeof in + 20) {
      uint32_t flags = 0, flags2 = 0;
      std::memcpy(&flags, static_cast<char*>(buf) + sizeof in + 12, 4);
      std::memcpy(&flags2, static_cast<char*>(buf) + sizeof in + 16, 4);
      kernel_offers_ = (flags & FUSE_INIT_EXT) != 0 && (flags2 & (kOverIoUring >> 32)) != 0;
      init_unique_ = in.unique;
    }
  }
  return n;
}

ssize_t FuseUring::Writev(int fd, struct iovec* iov, int count) {
  if (count < 1 || iov[0].iov_len < sizeof(fuse_out_header)) return ::writev(fd, iov, count);
  fuse_out_header out;
  std::memcpy(&out, iov[0].iov_base, sizeof out);
  Current* c = t_current;
  if (c != nullptr && out.unique == c->unique) {
    // The reply to a ring request: its header into the entry's header, the rest into its
    // payload buffer; the ring thread commits it.
    size_t total = iov[0].iov_len, body = 0;
    for (int i = 1; i < count; ++i) body += iov[i].iov_len;
    if (body > c->payload_size) {
      out.error = -EIO;  // cannot happen: the kernel sized the buffer for max_write and max_pages
      body = 0;
    } else {
      size_t at = 0;
      for (int i = 1; i < count; ++i) {
        std::memcpy(c->payload + at, iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
      }
    }
    std::memcpy(c->headers->in_out, &out, sizeof out);
    c->headers->ring_ent_in_out.payload_sz = static_cast<uint32_t>(body);
    c->replied = true;
    return static_cast<ssize_t>(total + body);
  }
  if (init_unique_ == 0 || out.unique != init_unique_) return ::writev(fd, iov, count);

  // The INIT reply: ask for the ring when the kernel offers it and the rings can be made.
  init_unique_ = 0;
  constexpr size_t kFlags = offsetof(fuse_init_out, flags), kFlags2 = offsetof(fuse_init_out, flags2);
  const bool whole = count >= 2 && out.error == 0 && iov[1].iov_len >= kFlags2 + 4;
  bool ask = false;
  if (mode_ == FuseUringMode::kOff) {
    // Not asked for (the session makes no FuseUring then; kept for any other caller).
  } else if (!kernel_offers_) {
    if (mode_ == FuseUringMode::kOn)
      CLIO_LOG_ERROR("-o io_uring=on, but the kernel does not offer it (fuse.enable_uring is off, or Linux is "
                     "older than 6.14); serving through /dev/fuse");
  } else if (whole) {
    fuse_init_out init{};
    std::memcpy(&init, iov[1].iov_base, sizeof init <= iov[1].iov_len ? sizeof init : iov[1].iov_len);
    // What the kernel will need room for: fs/fuse/dev_uring.c sizes it as the largest of
    // FUSE_MIN_READ_BUFFER, max_write and max_pages pages (32 pages when not negotiated).
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t pages = (init.flags & FUSE_MAX_PAGES) ? std::max<size_t>(init.max_pages, 1) : 32;
    const size_t payload = std::max({size_t{8192}, size_t{init.max_write}, pages * page});
    ask = PrepareRings(payload);
    if (ask) {
      uint32_t flags = 0, flags2 = 0;
      std::memcpy(&flags, static_cast<char*>(iov[1].iov_base) + kFlags, 4);
      std::memcpy(&flags2, static_cast<char*>(iov[1].iov_base) + kFlags2, 4);
      flags |= FUSE_INIT_EXT;
      flags2 |= static_cast<uint32_t>(kOverIoUring >> 32);
      std::memcpy(static_cast<char*>(iov[1].iov_base) + kFlags, &flags, 4);
      std::memcpy(static_cast<char*>(iov[1].iov_base) + kFlags2, &flags2, 4);
    }
  }
  const ssize_t n = ::writev(fd, iov, count);
  const int saved = errno;
  // The kernel applied the INIT reply within the write: registrations are accepted now.
  if (ask && n >= 0) LaunchRings();
  errno = saved;
  return n;
}

bool FuseUring::PrepareRings(size_t payload_size) {
  // The kernel has a queue per possible CPU and uses none until every one has an entry: a
  // queue missed would stall the mount, so without the list there is no ring. A CPU that is
  // possible but offline (hot-pluggable) gets one thread, an online one threads_per_queue_.
  const std::vector<bool> possible = ReadCpuList("/sys/devices/system/cpu/possible");
  const std::vector<bool> online = ReadCpuList("/sys/devices/system/cpu/online");
  if (possible.empty()) {
    CLIO_LOG_WARN("FUSE over io_uring: the CPU list (/sys/devices/system/cpu/possible) could not be read; "
                  "serving through /dev/fuse");
    return false;
  }
  std::vector<uint16_t> qids;
  for (size_t c = 0; c < possible.size(); ++c) {
    if (!possible[c]) continue;
    const bool up = online.empty() || (c < online.size() && online[c]);
    for (int t = 0; t < (up ? threads_per_queue_ : 1); ++t) qids.push_back(static_cast<uint16_t>(c));
  }
  num_rings_ = qids.size();
  rings_ = std::make_unique<Ring[]>(num_rings_);
  for (size_t i = 0; i < num_rings_; ++i) {
    Ring& r = rings_[i];
    r.qid = qids[i];
    io_uring_params p{};
    p.flags = IORING_SETUP_SQE128 | IORING_SETUP_COOP_TASKRUN;
    int rc = io_uring_queue_init_params(4, &r.ring, &p);
    if (rc < 0) {
      CLIO_LOG_WARN("FUSE over io_uring: cannot make a ring ({}); serving through /dev/fuse", std::strerror(-rc));
      for (size_t j = 0; j < i; ++j) io_uring_queue_exit(&rings_[j].ring);
      rings_.reset();
      num_rings_ = 0;
      return false;
    }
    r.initialized = true;
    r.entry.payload_size = payload_size;
    r.entry.buf.reset(new unsigned char[kPrefix + payload_size]);
    r.entry.iov[0] = {&r.entry.headers, sizeof r.entry.headers};
    r.entry.iov[1] = {r.entry.buf.get() + kPrefix, payload_size};
  }
  return true;
}

void FuseUring::LaunchRings() {
  for (size_t i = 0; i < num_rings_; ++i) {
    Ring* r = &rings_[i];
    try {
      r->thread = std::thread([this, r] { RingLoop(r); });
    } catch (const std::system_error& e) {
      // Without this queue's entry the kernel would wait for it forever: a registration it
      // refuses (a queue that does not exist) makes it fall back to /dev/fuse.
      CLIO_LOG_WARN("FUSE over io_uring: no thread for queue {} ({}); serving through /dev/fuse", r->qid, e.what());
      MutexLock l(&r->sq_mu);
      io_uring_sqe* sqe = io_uring_get_sqe(&r->ring);
      if (sqe != nullptr) {
        PrepCmd(sqe, dev_fd_, kCmdRegister, UINT16_MAX, 0);
        sqe->addr = reinterpret_cast<uint64_t>(r->entry.iov);
        sqe->len = 2;
        (void)io_uring_submit(&r->ring);
      }
      failed_ = true;
    }
  }
}

void FuseUring::RingLoop(Ring* r) {
  // Not pinned to its queue's CPU. Pinned, it shares that CPU with the process it serves:
  // the reply's wake-up of that process preempts the thread in the middle of its commit, and
  // 1-job random reads fell to under half, although creates and renames gained (bench/README).
  // The thread's name tells its state (ps -L, /proc/PID/task/*/comm): clio-uring-reg until
  // its first request, then clio-uringQ for CPU queue Q; clio-uring-no when refused.
  (void)pthread_setname_np(pthread_self(), "clio-uring-reg");
  // Signals go to the session's own threads (clio-fuse's SIGTERM handler ends its loop).
  sigset_t all;
  sigfillset(&all);
  (void)pthread_sigmask(SIG_BLOCK, &all, nullptr);
  Entry& e = r->entry;
  auto submit = [&](uint32_t op, uint64_t commit_id) {
    MutexLock l(&r->sq_mu);
    io_uring_sqe* sqe = io_uring_get_sqe(&r->ring);
    if (sqe == nullptr) return false;  // the ring holds 4 and this thread has one in flight
    PrepCmd(sqe, dev_fd_, op, r->qid, commit_id);
    if (op == kCmdRegister) {
      sqe->addr = reinterpret_cast<uint64_t>(e.iov);
      sqe->len = 2;
    }
    return SubmitRetrying(&r->ring) >= 0;
  };
  bool fetched = false;
  if (!submit(kCmdRegister, 0)) {
    // The kernel waits for an entry on every queue before it uses any, so this CPU's requests
    // would wait until the mount ends. Not seen outside memory exhaustion.
    failed_ = true;
    CLIO_LOG_ERROR("FUSE over io_uring: queue {} could not submit its registration; the mount may stall "
                   "(remount with -o io_uring=off)", r->qid);
  }
  while (true) {
    io_uring_cqe* cqe = nullptr;
    const int rc = io_uring_wait_cqe(&r->ring, &cqe);
    if (rc == -EINTR) continue;
    if (rc < 0) {
      CLIO_LOG_WARN("FUSE over io_uring: queue {} stopped waiting ({})", r->qid, std::strerror(-rc));
      break;
    }
    const uint64_t tag = cqe->user_data;
    const int res = cqe->res;
    io_uring_cqe_seen(&r->ring, cqe);
    if (tag == kStopTag) break;
    if (res < 0) {
      if (ConnectionEnded(res)) continue;  // unmounted or aborted: wait for Stop()
      if (!fetched) {
        // The kernel refused the registration and went back to /dev/fuse for the whole
        // connection.
        (void)pthread_setname_np(pthread_self(), "clio-uring-no");
        if (!failed_.exchange(true)) {
          CLIO_LOG_WARN("FUSE over io_uring: the kernel refused queue {}'s registration ({}); serving through /dev/fuse",
                        r->qid, std::strerror(-res));
        }
        continue;
      }
      // A commit refused on a live connection leaves the entry stuck in the kernel: register
      // the buffers again as a fresh entry, so the queue keeps one.
      CLIO_LOG_WARN("FUSE over io_uring: queue {} had a reply refused ({}); registering its entry again", r->qid,
                    std::strerror(-res));
      if (!submit(kCmdRegister, 0)) CLIO_LOG_ERROR("FUSE over io_uring: queue {} lost an entry", r->qid);
      continue;
    }
    if (!fetched) {
      fetched = true;
      (void)pthread_setname_np(pthread_self(), ("clio-uring" + std::to_string(r->qid)).c_str());
      if (!active_.exchange(true)) CLIO_LOG_INFO("FUSE over io_uring: {} ring threads serve the CPU queues", num_rings_);
    }
    // Rebuild the request as /dev/fuse would deliver it: header, first argument, payload.
    fuse_in_header in;
    std::memcpy(&in, e.headers.in_out, sizeof in);
    const size_t payload = e.headers.ring_ent_in_out.payload_sz;
    const uint64_t commit_id = e.headers.ring_ent_in_out.commit_id;  // the reply's key
    Current cur;
    cur.unique = in.unique;
    cur.headers = &e.headers;
    cur.payload = e.buf.get() + kPrefix;
    cur.payload_size = e.payload_size;
    if (in.len >= sizeof in + payload && in.len - sizeof in - payload <= kOpInSize && payload <= e.payload_size) {
      const size_t op = in.len - sizeof in - payload;
      unsigned char* start = e.buf.get() + kPrefix - op - sizeof in;
      std::memcpy(start, &in, sizeof in);
      std::memcpy(start + sizeof in, e.headers.op_in, op);
      t_current = &cur;
      process_(start, in.len);
      t_current = nullptr;
    }
    if (!cur.replied) {
      // libfuse answers every request it gets from a ring; an unreadable one gets EIO.
      fuse_out_header out{sizeof(fuse_out_header), -EIO, in.unique};
      std::memcpy(e.headers.in_out, &out, sizeof out);
      e.headers.ring_ent_in_out.payload_sz = 0;
    }
    ring_requests_.fetch_add(1, std::memory_order_relaxed);
    if (!submit(kCmdCommitAndFetch, commit_id)) {
      // Its caller waits until the connection ends (an unmount or an abort); the thread
      // stays for Stop().
      CLIO_LOG_ERROR("FUSE over io_uring: queue {} cannot commit a reply; remount with -o io_uring=off", r->qid);
    }
  }
}

void FuseUring::Stop() {
  for (size_t i = 0; i < num_rings_; ++i) {
    Ring& r = rings_[i];
    if (r.thread.joinable()) {
      {
        MutexLock l(&r.sq_mu);
        io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);
        if (sqe != nullptr) {
          std::memset(sqe, 0, 128);
          io_uring_prep_nop(sqe);
          sqe->user_data = kStopTag;
          (void)io_uring_submit(&r.ring);
        }
      }
      r.thread.join();
    }
    // Closing the ring cancels its pending command: the kernel lets go of the entry.
    if (r.initialized) io_uring_queue_exit(&r.ring);
    r.initialized = false;
  }
}

}  // namespace clio
