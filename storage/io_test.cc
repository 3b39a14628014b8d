#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "storage/io.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Pattern;
using clio::testing::SupportsDirect;
using clio::testing::TempDir;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::unique_ptr<IoFile> MustOpen(const std::string& path, IoOptions opts) {
  auto r = OpenIoFile(path, opts);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

std::string ReadAll(IoFile* f, uint64_t off, uint64_t len) {
  std::string s(len, '\x55');
  Status st = f->Read(off, len, s.data());
  REQUIRE_MESSAGE(st.ok(), st.ToString());
  return s;
}

// Every backend a file can be forced onto; the asynchronous ones first.
constexpr IoBackend kAllBackends[] = {IoBackend::kUring, IoBackend::kLibaio,
                                      IoBackend::kPosixAio, IoBackend::kPosix};
constexpr IoBackend kAsyncBackends[] = {IoBackend::kUring, IoBackend::kLibaio,
                                        IoBackend::kPosixAio};

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
};

}  // namespace

TEST_CASE("the I/O layer refuses to start under a lock marked kNoIo (debug builds)") {
#ifdef NDEBUG
  MESSAGE("a release build: the check is compiled out");
#else
  TempDir dir;
  const std::string path = dir.File("f");
  static Mutex no_io{kNoIo, "io_test lock"};
  for (int op = 0; op < 3; ++op) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto f = OpenIoFile(path, IoOptions{});
      if (!f.ok()) ::_exit(2);
      MutexLock l(&no_io);
      char b[8] = {};
      if (op == 0) (void)(*f)->Write(0, "x");
      if (op == 1) (void)(*f)->Read(0, 1, b);
      if (op == 2) (void)(*f)->Sync();
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK_MESSAGE((WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT), "op " << op);
  }
#endif
}

TEST_CASE("IoFile round trip on every backend, with and without fault injection") {
  TempDir dir;
  for (IoBackend backend : kAllBackends) {
    for (bool fault : {false, true}) {
      CAPTURE(IoBackendName(backend));
      CAPTURE(fault);
      IoOptions opts;
      opts.backend = backend;
      opts.fault_injection = fault;
      std::string path = dir.File("rt-" + std::string(IoBackendName(backend)) +
                                  (fault ? "-fault" : ""));
      auto f = MustOpen(path, opts);
      std::string expect_name(IoBackendName(backend));
      if (fault) expect_name += "+fault";
      CHECK(f->backend_name() == expect_name);
      CHECK(f->path() == path);

      // Unaligned writes across page boundaries, and a large one.
      std::string a = Pattern(10000, 1), b = Pattern(3 << 20, 2);
      REQUIRE(f->Write(123, a).ok());
      REQUIRE(f->Write(20000, b).ok());
      CHECK(ReadAll(f.get(), 123, a.size()) == a);
      CHECK(ReadAll(f.get(), 20000, b.size()) == b);
      CHECK(*f->Size() == 20000 + b.size());
      // The hole between reads as zeros; so do bytes past the end.
      CHECK(ReadAll(f.get(), 10123, 9877) == std::string(9877, '\0'));
      std::string tail = ReadAll(f.get(), 20000 + b.size() - 10, 100);
      CHECK(tail.substr(0, 10) == b.substr(b.size() - 10));
      CHECK(tail.substr(10) == std::string(90, '\0'));

      REQUIRE(f->Sync().ok());
      CHECK(ReadAll(f.get(), 20000, b.size()) == b);

      REQUIRE(f->Truncate(5000).ok());
      CHECK(*f->Size() == 5000);
      CHECK(ReadAll(f.get(), 4990, 20) == a.substr(4990 - 123, 10) + std::string(10, '\0'));
      REQUIRE(f->Allocate(0, 1 << 20).ok());
      CHECK(*f->Size() == 1 << 20);
      CHECK(ReadAll(f.get(), 5000, 100) == std::string(100, '\0'));
      REQUIRE(f->Sync().ok());
      f.reset();
      struct stat st;
      REQUIRE(::stat(path.c_str(), &st) == 0);
      CHECK(st.st_size == 1 << 20);
      std::string on_disk = Slurp(path);
      CHECK(on_disk.substr(123, 4877) == a.substr(0, 4877));
      CHECK(on_disk.substr(5000, 1000) == std::string(1000, '\0'));
    }
  }
}

// 4 threads write then read back their own blocks of `f`, all at once.
static void ManyThreads(IoFile* f, uint64_t block, int blocks) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < blocks; ++i) {
        uint64_t off = static_cast<uint64_t>(i * kThreads + t) * block;
        std::string data = Pattern(block, static_cast<unsigned>(i * kThreads + t));
        if (!f->Write(off, data).ok()) ++failures[t];
        std::string back(block, '\0');
        if (!f->Read(off, block, back.data()).ok() || back != data) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
}

TEST_CASE("every async backend serves many threads at once, each with its own context") {
  TempDir dir;
  for (IoBackend backend : kAsyncBackends) {
    for (bool fault : {false, true}) {
      CAPTURE(IoBackendName(backend));
      CAPTURE(fault);
      IoOptions opts;
      opts.backend = backend;
      opts.fault_injection = fault;
      opts.io_depth = 2;  // fewer slots than chunks: completions must free slots for the rest
      auto f = MustOpen(
          dir.File("mt-" + std::string(IoBackendName(backend)) + (fault ? "-f" : "")), opts);
      if (fault) {
        ManyThreads(f.get(), 8192, 64);
      } else {
        ManyThreads(f.get(), 8192, 32);
        // Unaligned blocks of several 1 MiB chunks each.
        ManyThreads(f.get(), (3 << 20) + 4000, 4);
      }
    }
  }
}

TEST_CASE("io_depth: any depth moves the same bytes; out of range is refused") {
  TempDir dir;
  const std::string data = Pattern((5 << 20) + 123, 6);
  for (IoBackend backend : kAsyncBackends) {
    for (uint32_t depth : {1u, 3u, 64u}) {
      CAPTURE(IoBackendName(backend));
      CAPTURE(depth);
      IoOptions opts;
      opts.backend = backend;
      opts.io_depth = depth;
      auto f = MustOpen(dir.File("depth-" + std::string(IoBackendName(backend)) + "-" +
                                 std::to_string(depth)),
                        opts);
      REQUIRE(f->Write(777, data).ok());
      CHECK(ReadAll(f.get(), 777, data.size()) == data);
      // A read that runs past the end fills with zeros, chunk by chunk.
      std::string tail = ReadAll(f.get(), 777 + data.size() - 5, (2 << 20) + 5);
      CHECK(tail.substr(0, 5) == data.substr(data.size() - 5));
      CHECK(tail.substr(5) == std::string(2 << 20, '\0'));
    }
  }
  for (uint32_t bad : {0u, 65537u}) {
    IoOptions opts;
    opts.io_depth = bad;
    auto r = OpenIoFile(dir.File("bad-depth"), opts);
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find(dir.File("bad-depth")) != std::string::npos);
  }
}

TEST_CASE("every async backend keeps working in a forked child and in the parent after it") {
  TempDir dir;
  for (IoBackend backend : kAsyncBackends) {
    CAPTURE(IoBackendName(backend));
    IoOptions opts;
    opts.backend = backend;
    auto f = MustOpen(dir.File("fork-" + std::string(IoBackendName(backend))), opts);
    const std::string before = Pattern(2 << 20, 1), child = Pattern(2 << 20, 2);
    REQUIRE(f->Write(0, before).ok());  // this thread's ring/context exists now
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The child must make its own ring/context; no doctest macros here.
      std::string back(before.size(), '\0');
      bool ok = f->Read(0, back.size(), back.data()).ok() && back == before &&
                f->Write(before.size(), child).ok();
      ::_exit(ok ? 0 : 1);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(ReadAll(f.get(), before.size(), child.size()) == child);
    REQUIRE(f->Write(0, child).ok());
    CHECK(ReadAll(f.get(), 0, child.size()) == child);
  }
}

TEST_CASE("CLIO_IO_BACKEND picks the backend of kAuto; an unknown value is an error") {
  TempDir dir;
  for (IoBackend backend : kAllBackends) {
    CAPTURE(IoBackendName(backend));
    CHECK(*ParseIoBackend(IoBackendName(backend)) == backend);
    ScopedEnv env(kIoBackendEnv, std::string(IoBackendName(backend)).c_str());
    auto f = MustOpen(dir.File("env-" + std::string(IoBackendName(backend))), {});
    CHECK(f->backend_name() == IoBackendName(backend));
  }
  {
    // A backend forced in the options wins over the environment.
    ScopedEnv env(kIoBackendEnv, "posix_aio");
    IoOptions opts;
    opts.backend = IoBackend::kLibaio;
    CHECK(MustOpen(dir.File("forced"), opts)->backend_name() == "libaio");
    ScopedEnv env2(kIoBackendEnv, "auto");
    CHECK(MustOpen(dir.File("auto"), {})->backend_name() == "io_uring");
  }
  ScopedEnv env(kIoBackendEnv, "spdk");
  auto r = OpenIoFile(dir.File("unknown"), {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kConfigError);
  CHECK(r.status().message().find("spdk") != std::string::npos);
  CHECK(r.status().message().find(kIoBackendEnv) != std::string::npos);
  CHECK(ParseIoBackend("spdk").status().code() == Code::kInvalidArgument);
}

TEST_CASE("direct writes: large aligned writes go through O_DIRECT on every backend") {
  TempDir dir;
  if (!SupportsDirect(dir.path())) {
    MESSAGE("O_DIRECT is not supported under " << dir.path() << "; skipping");
    return;
  }
  for (IoBackend backend : kAllBackends) {
    for (bool fault : {false, true}) {
      CAPTURE(IoBackendName(backend));
      CAPTURE(fault);
      IoOptions opts;
      opts.backend = backend;
      opts.direct_writes = true;
      opts.fault_injection = fault;
      const std::string path =
          dir.File("direct-" + std::string(IoBackendName(backend)) + (fault ? "-f" : ""));
      auto f = MustOpen(path, opts);
      // Buffered first, so the page cache holds the old bytes the direct write must replace.
      REQUIRE(f->Write(0, std::string(6 << 20, 'o')).ok());
      CHECK(ReadAll(f.get(), 4096, 10) == std::string(10, 'o'));
      const uint64_t after_first = f->direct_bytes_written();

      // The source buffer of a std::string is not 4 KiB-aligned: it is bounced.
      const std::string big = Pattern((5 << 20) + 8192, 3);  // > the 4 MiB bounce buffer
      REQUIRE(f->Write(8192, big).ok());
      const std::string small = Pattern(64 << 10, 4);  // exactly the threshold
      REQUIRE(f->Write(0, small).ok());
      const uint64_t direct = f->direct_bytes_written() - after_first;
      // Not eligible: too small, unaligned offset, unaligned length.
      REQUIRE(f->Write(60 << 10, std::string(4096, 's')).ok());
      REQUIRE(f->Write(100, std::string(128 << 10, 'u')).ok());
      REQUIRE(f->Write(1 << 20, std::string((128 << 10) + 1, 'l')).ok());
      CHECK(f->direct_bytes_written() - after_first == direct);
      if (fault) {
        CHECK(f->direct_bytes_written() == 0);  // fault mode never opens the direct descriptor
      } else {
        CHECK(direct == big.size() + small.size());
      }

      std::string expect(6 << 20, 'o');
      expect.resize(std::max<size_t>(expect.size(), 8192 + big.size()), '\0');
      expect.replace(8192, big.size(), big);
      expect.replace(0, small.size(), small);
      expect.replace(60 << 10, 4096, std::string(4096, 's'));
      expect.replace(100, 128 << 10, std::string(128 << 10, 'u'));
      expect.replace(1 << 20, (128 << 10) + 1, std::string((128 << 10) + 1, 'l'));
      CHECK(ReadAll(f.get(), 0, expect.size()) == expect);
      REQUIRE(f->Sync().ok());
      f.reset();
      CHECK(Slurp(path) == expect);
    }
  }
}

TEST_CASE("IoFile identity is the descriptor's, even after the path is replaced") {
  TempDir dir;
  const std::string path = dir.File("ident");
  auto f = MustOpen(path, {});
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  FileIdentity id = *f->Identity();
  CHECK(id.dev == static_cast<uint64_t>(st.st_dev));
  CHECK(id.ino == static_cast<uint64_t>(st.st_ino));
  { std::ofstream(dir.File("other")) << "x"; }
  REQUIRE(::rename(dir.File("other").c_str(), path.c_str()) == 0);
  CHECK(*f->Identity() == id);
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(static_cast<uint64_t>(st.st_ino) != id.ino);
}

TEST_CASE("fault injection: unsynced writes are lost at a simulated crash, synced ones kept") {
  TempDir dir;
  const std::string path = dir.File("crash");
  std::string old_bytes = Pattern(12000, 3), new_bytes = Pattern(12000, 4);
  {
    auto f = MustOpen(path, {});
    REQUIRE(f->Write(0, old_bytes).ok());
    REQUIRE(f->Sync().ok());
  }
  IoOptions fault;
  fault.fault_injection = true;
  {
    auto f = MustOpen(path, fault);
    REQUIRE(f->Write(100, new_bytes.substr(0, 5000)).ok());  // partial pages at both ends
    REQUIRE(f->Write(12000, new_bytes).ok());                // growth
    REQUIRE(f->Truncate(50).ok());
    CHECK(*f->Size() == 50);
    // The file on disk is untouched until Sync().
    CHECK(Slurp(path) == old_bytes);
  }  // destroyed without Sync(): the power cut
  CHECK(Slurp(path) == old_bytes);
  {
    auto f = MustOpen(path, fault);
    CHECK(ReadAll(f.get(), 0, 12000) == old_bytes);
    REQUIRE(f->Write(100, new_bytes.substr(0, 5000)).ok());
    REQUIRE(f->Sync().ok());
    REQUIRE(f->Write(0, std::string(10, 'x')).ok());  // after the sync: lost
  }
  std::string expect = old_bytes;
  expect.replace(100, 5000, new_bytes.substr(0, 5000));
  CHECK(Slurp(path) == expect);

  // A truncate is applied at Sync(), and stale bytes past it never come back.
  {
    auto f = MustOpen(path, fault);
    REQUIRE(f->Truncate(4000).ok());
    REQUIRE(f->Truncate(9000).ok());
    CHECK(ReadAll(f.get(), 3990, 20) == expect.substr(3990, 10) + std::string(10, '\0'));
    REQUIRE(f->Sync().ok());
  }
  std::string after = Slurp(path);
  REQUIRE(after.size() == 9000);
  CHECK(after.substr(0, 4000) == expect.substr(0, 4000));
  CHECK(after.substr(4000) == std::string(5000, '\0'));
}

TEST_CASE("fault injection from the environment") {
  TempDir dir;
  ::setenv("CLIO_IO_FAULT_INJECTION", "1", 1);
  CHECK(FaultInjectionFromEnv());
  {
    auto f = MustOpen(dir.File("env"), {});
    CHECK(f->backend_name().find("+fault") != std::string_view::npos);
  }
  ::unsetenv("CLIO_IO_FAULT_INJECTION");
  CHECK_FALSE(FaultInjectionFromEnv());
}

TEST_CASE("IoFile errors name the file") {
  TempDir dir;
  const std::string missing = dir.File("no/such/dir/file");
  auto r = OpenIoFile(missing, {});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(r.status().message().find(missing) != std::string::npos);

  IoOptions excl;
  excl.exclusive = true;
  auto first = OpenIoFile(dir.File("x"), excl);
  REQUIRE(first.ok());
  auto second = OpenIoFile(dir.File("x"), excl);
  CHECK(second.status().code() == Code::kAlreadyExists);

  IoOptions nocreate;
  nocreate.create = false;
  CHECK(OpenIoFile(dir.File("y"), nocreate).status().code() == Code::kNotFound);
}
