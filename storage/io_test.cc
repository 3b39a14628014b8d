#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "storage/io.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Pattern;
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

}  // namespace

TEST_CASE("IoFile round trip on every backend, with and without fault injection") {
  TempDir dir;
  for (IoBackend backend : {IoBackend::kPosix, IoBackend::kUring}) {
    for (bool fault : {false, true}) {
      CAPTURE(static_cast<int>(backend));
      CAPTURE(fault);
      IoOptions opts;
      opts.backend = backend;
      opts.fault_injection = fault;
      std::string path = dir.File("rt-" + std::to_string(static_cast<int>(backend)) +
                                  (fault ? "-fault" : ""));
      auto f = MustOpen(path, opts);
      std::string expect_name = backend == IoBackend::kUring ? "io_uring" : "posix";
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

TEST_CASE("io_uring serves many threads at once, each with its own ring") {
  TempDir dir;
  IoOptions opts;
  opts.backend = IoBackend::kUring;
  auto f = MustOpen(dir.File("mt"), opts);
  constexpr int kThreads = 4, kBlocks = 64, kBlock = 8192;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kBlocks; ++i) {
        uint64_t off = static_cast<uint64_t>(i * kThreads + t) * kBlock;
        std::string data = Pattern(kBlock, static_cast<unsigned>(i * kThreads + t));
        if (!f->Write(off, data).ok()) ++failures[t];
        std::string back(kBlock, '\0');
        if (!f->Read(off, kBlock, back.data()).ok() || back != data) ++failures[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
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
