// File-transport cases that need more than the shared bdev suite: a swapped backing file, the
// O_DIRECT write path, and a full host filesystem (a small tmpfs; needs root).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "storage/bdev.h"
#include "storage/sys_util.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Pattern;
using clio::testing::SupportsDirect;
using clio::testing::FileConfig;
using clio::testing::FileSize;
using clio::testing::MustAllocate;
using clio::testing::MustOpen;
using clio::testing::TempDir;

namespace {

constexpr uint64_t kMiB = 1024 * 1024;

constexpr IoBackend kAsyncBackends[] = {IoBackend::kUring, IoBackend::kLibaio,
                                        IoBackend::kPosixAio};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}


// True when this process holds a descriptor of `path` opened with O_DIRECT.
bool HasDirectDescriptor(const std::string& path) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec) != path) continue;
    std::ifstream info("/proc/self/fdinfo/" + entry.path().filename().string());
    std::string key;
    while (info >> key) {
      if (key != "flags:") continue;
      std::string octal;
      info >> octal;
      if (std::stoul(octal, nullptr, 8) & O_DIRECT) return true;
    }
  }
  return false;
}

// Captures what is logged while it lives (the default spdlog logger, warn and above).
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1024)) {
    old_level_ = spdlog::default_logger()->level();
    if (old_level_ > spdlog::level::warn) spdlog::default_logger()->set_level(spdlog::level::warn);
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    spdlog::default_logger()->set_level(old_level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  // Lines logged so far that contain every one of `needles`.
  int Count(std::initializer_list<std::string_view> needles) const {
    int n = 0;
    for (const auto& line : sink_->last_formatted()) {
      bool all = true;
      for (auto needle : needles) all = all && line.find(needle) != std::string::npos;
      n += all ? 1 : 0;
    }
    return n;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  spdlog::level::level_enum old_level_;
};

}  // namespace

TEST_CASE("file bdev: a backing file swapped under the path fails Write, growth and Sync") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "swap.dat", 8 * kMiB, kMiB);
  auto b = MustOpen(c);
  ExtentList e = MustAllocate(b.get(), 8192);
  REQUIRE(b->Write(e, 0, "before").ok());
  REQUIRE(b->Sync().ok());

  const std::string impostor = dir.File("impostor");
  { std::ofstream(impostor, std::ios::binary) << std::string(8192, 'i'); }
  REQUIRE(::rename(impostor.c_str(), c.name.c_str()) == 0);

  Status w = b->Write(e, 0, "after");
  CHECK(w.code() == Code::kIoError);
  CHECK(w.message().find(c.name) != std::string::npos);
  CHECK(w.message().find("replaced") != std::string::npos);
  Status s = b->Sync();
  CHECK(s.code() == Code::kIoError);
  CHECK(s.message().find(c.name) != std::string::npos);
  // Growing would reserve blocks in a file nobody can reach any more.
  auto grown = b->Allocate(2 * kMiB);
  CHECK(grown.status().code() == Code::kIoError);
  CHECK(grown.status().message().find(c.name) != std::string::npos);
  // The impostor is left alone.
  CHECK(Slurp(c.name) == std::string(8192, 'i'));
}

TEST_CASE("file bdev: a tier file open in one bdev is refused to a second, and free once closed") {
  TempDir dir;
  BdevConfig c = FileConfig(dir, "shared.dat", 8 * kMiB, kMiB);
  auto first = MustOpen(c);
  ExtentList e = MustAllocate(first.get(), 8192);
  REQUIRE(first->Write(e, 0, "mine").ok());
  auto second = Bdev::Open(c);
  CHECK(second.status().code() == Code::kBusy);
  CHECK(second.status().message().find(c.name) != std::string::npos);
  CHECK(second.status().message().find("in use") != std::string::npos);
  // (Another process is refused the same way: a flock belongs to the open file, and any other
  // open of the file, in this process or another, conflicts with it. e2e_pool_ops shows it
  // through `pool create` on the CTE's own tier file.)
  first.reset();
  auto again = MustOpen(c);  // closed: the lock went with it
  std::string back(4, '\0');
  REQUIRE(again->Read(e, 0, 4, back.data()).ok());
  CHECK(back == "mine");
}

TEST_CASE("file bdev: large aligned writes use the O_DIRECT descriptor where there is one") {
  TempDir dir;
  if (!SupportsDirect(dir.path())) {
    MESSAGE("O_DIRECT is not supported under " << dir.path() << "; skipping");
    return;
  }
  for (IoBackend backend : kAsyncBackends) {
    for (bool fault : {false, true}) {
      CAPTURE(IoBackendName(backend));
      CAPTURE(fault);
      BdevConfig c = FileConfig(
          dir, "direct-" + std::string(IoBackendName(backend)) + (fault ? "-f" : "") + ".dat",
          16 * kMiB, 4 * kMiB);
      c.io.backend = backend;
      c.io.fault_injection = fault;
      auto b = MustOpen(c);
      // Fault mode keeps writes in memory until Sync(): no direct path there.
      CHECK(HasDirectDescriptor(c.name) == !fault);
      CHECK_FALSE(HasDirectDescriptor(c.name + ".alloc_log"));
      ExtentList e = MustAllocate(b.get(), 2 * kMiB);
      // Unaligned small writes first, so the page cache holds bytes the direct write replaces.
      REQUIRE(b->Write(e, 100, std::string(10000, 'c')).ok());
      const std::string data = Pattern(2 * kMiB, 8);
      REQUIRE(b->Write(e, 0, data).ok());
      std::string back(data.size(), '\0');
      REQUIRE(b->Read(e, 0, back.size(), back.data()).ok());
      CHECK(back == data);
      REQUIRE(b->Sync().ok());
      b.reset();
      CHECK(Slurp(c.name).substr(4096 + e[0].offset, data.size()) == data);
    }
  }
}

TEST_CASE("file bdev: a full host filesystem fails at Allocate, not at Write") {
  TempDir dir;
  TempDir logs;
  const std::string mnt = dir.File("fs");
  REQUIRE(::mkdir(mnt.c_str(), 0700) == 0);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=24m") != 0) {
    const int err = errno;
    if (err == EPERM && ::geteuid() != 0) {
      MESSAGE("mounting a tmpfs needs root; skipping the full-disk test");
      return;
    }
    FAIL("mount -t tmpfs -o size=24m tmpfs " << mnt << ": " << std::strerror(err));
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};

  constexpr uint64_t kUnit = 4 * kMiB;
  BdevConfig c;
  c.name = mnt + "/tier.dat";
  c.capacity = 0;  // as far as the host allows
  c.growth_unit = kUnit;
  c.alloc_log = logs.File("tier.alloc_log");  // the log must not compete for the small disk
  auto b = MustOpen(c);
  const uint64_t host_free = *FilesystemFreeBytes(mnt);
  CHECK(host_free <= 24 * kMiB);
  BdevStats st = b->GetStats();
  CHECK(st.remaining <= host_free);
  CHECK(st.remaining > 0);

  LogCapture log;
  std::vector<ExtentList> written;
  std::vector<uint64_t> sizes = {FileSize(c.name)};
  Status full;
  for (int i = 0; i < 64; ++i) {
    auto r = b->Allocate(kMiB);
    if (!r.ok()) {
      full = r.status();
      break;
    }
    // Every allocation handed out is backed: its write never meets a full disk.
    Status w = b->Write(*r, 0, Pattern(kMiB, static_cast<unsigned>(i)));
    REQUIRE_MESSAGE(w.ok(), w.ToString());
    written.push_back(*r);
    if (FileSize(c.name) != sizes.back()) sizes.push_back(FileSize(c.name));
  }
  CHECK(full.code() == Code::kNoSpace);
  CHECK(full.message().find(c.name) != std::string::npos);
  CHECK(written.size() >= 16);
  // The file grew in whole growth units while they fit, then by what each request needed.
  REQUIRE(sizes.size() >= 5);
  for (size_t i = 1; i < sizes.size(); ++i) {
    CAPTURE(i);
    const uint64_t step = sizes[i] - sizes[i - 1];
    if (i <= 4) {
      CHECK(step == kUnit);
    } else {
      CHECK(step <= kUnit);
    }
  }
  CHECK(sizes.back() <= 24 * kMiB);

  // Earlier data stays readable.
  for (size_t i = 0; i < written.size(); ++i) {
    std::string back(kMiB, '\0');
    REQUIRE(b->Read(written[i], 0, kMiB, back.data()).ok());
    CHECK(back == Pattern(kMiB, static_cast<unsigned>(i)));
  }

  // The failed growth is remembered: a second attempt within 2 s fails without trying again.
  const int attempts = log.Count({c.name, "cannot grow"});
  CHECK(attempts >= 1);
  const uint64_t size_before = FileSize(c.name);
  auto again = b->Allocate(kMiB);
  CHECK(again.status().code() == Code::kNoSpace);
  CHECK(log.Count({c.name, "cannot grow"}) == attempts);
  CHECK(FileSize(c.name) == size_before);
  REQUIRE(b->Sync().ok());
  b.reset();
}
