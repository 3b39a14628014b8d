#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "common/codec.h"
#include "common/log.h"
#include "common/size.h"
#include "common/status.h"
#include "common/mounts.h"
#include "common/process.h"
#include "common/thread_annotations.h"

using namespace clio;

TEST_CASE("ParseSize accepts the spellings users write") {
  CHECK(*ParseSize("0") == 0);
  CHECK(*ParseSize("0g") == 0);
  CHECK(*ParseSize("4k") == 4096);
  CHECK(*ParseSize("4K") == 4096);
  CHECK(*ParseSize("512MiB") == 512ull << 20);
  CHECK(*ParseSize("2GB") == 2ull << 30);
  CHECK(*ParseSize("1.5G") == 3ull << 29);
  CHECK(*ParseSize("1 TiB") == 1ull << 40);
  CHECK(*ParseSize("100b") == 100);
  CHECK(*ParseSize("1048576") == 1048576);
}

TEST_CASE("ParseSize rejects bad input with the input quoted") {
  for (const char* bad : {"", "GB", "-1", "12XB", "1kk", "10 gigs", "99999999999P"}) {
    auto r = ParseSize(bad);
    CHECK_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find(std::string("'") + bad + "'") != std::string::npos);
  }
}

TEST_CASE("LogThisOne logs the 1st, 10th, 100th... event") {
  std::vector<uint64_t> logged;
  for (uint64_t n = 1; n <= 2000; ++n)
    if (LogThisOne(n)) logged.push_back(n);
  CHECK(logged == std::vector<uint64_t>{1, 10, 100, 1000});
  CHECK_FALSE(LogThisOne(0));
}

TEST_CASE("FormatSize") {
  CHECK(FormatSize(0) == "0 B");
  CHECK(FormatSize(4096) == "4 KiB");
  CHECK(FormatSize(1536) == "1.5 KiB");
  CHECK(FormatSize(3ull << 30) == "3 GiB");
}

TEST_CASE("Status from errno keeps context and maps codes") {
  Status s = Status::FromErrno(ENOSPC, "writing /x");
  CHECK(s.code() == Code::kNoSpace);
  CHECK(s.ToString().find("writing /x") != std::string::npos);
  CHECK(Status::FromErrno(ENOENT, "a").code() == Code::kNotFound);
  CHECK(Status::FromErrno(EIO, "a").code() == Code::kIoError);
  CHECK(CodeName(Code::kNoSpace) == "NoSpace");
  CHECK(s.WithContext("tier t").message().rfind("tier t: ", 0) == 0);
}

TEST_CASE("every status code has a name in the one table") {
  for (int i = 0; i < static_cast<int>(Code::kCount); ++i) {
    CAPTURE(i);
    CHECK_FALSE(CodeName(static_cast<Code>(i)).empty());
    CHECK(CodeName(static_cast<Code>(i)) != "Unknown");
  }
  CHECK(CodeName(Code::kInternal) == "Internal");
  CHECK(Status::FromErrno(EPERM, "x").code() == Code::kNotPermitted);
  CHECK(Status::FromErrno(ENODATA, "x").code() == Code::kNoData);
}

TEST_CASE("Codec round trip and truncation") {
  Encoder e;
  e.Put<uint32_t>(7).Put<uint64_t>(1ull << 40).PutBytes("hello").Put<double>(0.5);
  std::string buf = e.Take();
  Decoder d(buf);
  uint32_t a; uint64_t b; std::string s; double f;
  CHECK(d.Get(&a));
  CHECK(d.Get(&b));
  CHECK(d.GetString(&s));
  CHECK(d.Get(&f));
  CHECK(d.Finish("t").ok());
  CHECK(a == 7); CHECK(b == (1ull << 40)); CHECK(s == "hello"); CHECK(f == 0.5);

  for (size_t cut = 0; cut < buf.size(); ++cut) {
    Decoder t(std::string_view(buf).substr(0, cut));
    t.Get(&a); t.Get(&b); t.GetString(&s); t.Get(&f);
    CHECK_FALSE(t.Finish("t").ok());
  }
  // A length prefix larger than the input must fail, not allocate.
  Encoder huge;
  huge.Put<uint32_t>(0xffffffffu);
  Decoder h(huge.buffer());
  CHECK_FALSE(h.GetString(&s));
}

TEST_CASE("Big-endian keys sort numerically") {
  std::string a, b;
  AppendBigEndian64(&a, 255);
  AppendBigEndian64(&b, 256);
  CHECK(a < b);
  CHECK(ReadBigEndian64(b) == 256);
}

TEST_CASE("ReadMounts lists this process's mounts with their devices and types") {
  auto mounts = ReadMounts();
  REQUIRE(mounts.ok());
  bool root = false, proc = false;
  for (const MountEntry& m : *mounts) {
    if (m.mountpoint == "/") root = true;
    if (m.mountpoint == "/proc" && m.fstype == "proc") {
      proc = true;
      struct stat st {};
      REQUIRE(::stat("/proc", &st) == 0);
      CHECK(m.dev == st.st_dev);
    }
  }
  CHECK(root);
  CHECK(proc);
}

TEST_CASE("ProcessExited: a running child is not, an unreaped zombie is") {
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    char c;
    (void)!::read(ready[0], &c, 1);  // until the parent has looked at it running
    ::_exit(0);
  }
  CHECK_FALSE(ProcessExited(child));
  CHECK(ThreadsInDiskSleep(child).empty());  // blocked in a pipe read: interruptible (S)
  REQUIRE(::write(ready[1], "x", 1) == 1);
  siginfo_t info{};
  // Waits for the exit without reaping, so the child stays a zombie for ProcessExited to see.
  REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) == 0);
  CHECK(ProcessExited(child));
  CHECK(ThreadsInDiskSleep(child).empty());
  REQUIRE(::waitpid(child, nullptr, 0) == child);
  CHECK(ProcessExited(child));
  ::close(ready[0]);
  ::close(ready[1]);
}

namespace {
// Runs `f` in a child process; true when the child was killed by SIGABRT.
template <typename F>
bool Aborts(F f) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    f();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}
}  // namespace

TEST_CASE("debug builds abort when I/O starts under a lock marked kNoIo, unless the place is named") {
#ifdef NDEBUG
  MESSAGE("a release build: the check is compiled out");
#else
  static clio::Mutex no_io{clio::kNoIo, "test lock"};
  static clio::Mutex plain;
  CHECK(Aborts([] {
    clio::MutexLock l(&no_io);
    clio::CheckNoLockAcrossIo("a test request");
  }));
  CHECK_FALSE(Aborts([] {
    clio::MutexLock l(&plain);  // a lock that serializes a device's own I/O
    clio::CheckNoLockAcrossIo("a test request");
  }));
  CHECK_FALSE(Aborts([] {
    clio::MutexLock l(&no_io);
    clio::IoUnderLock known("test lock", "a test of a known place");
    clio::CheckNoLockAcrossIo("a test request");
  }));
  // The scope exempts the lock it names, and no other held beside it.
  static clio::Mutex other{clio::kNoIo, "other lock"};
  CHECK(Aborts([] {
    clio::MutexLock o(&other);
    clio::MutexLock l(&no_io);
    clio::IoUnderLock known("test lock", "a test of a known place");
    clio::CheckNoLockAcrossIo("a test request");
  }));
  CHECK_FALSE(Aborts([] {
    { clio::MutexLock l(&no_io); }
    clio::CheckNoLockAcrossIo("a test request after the unlock");
  }));
  // A condition variable's wait gives the lock back and takes it again: the count follows.
  CHECK(Aborts([] {
    clio::CondVar cv;
    clio::MutexLock l(&no_io);
    cv.WaitFor(&no_io, std::chrono::milliseconds(1));
    clio::CheckNoLockAcrossIo("a test request after a wait");
  }));
#endif
}
