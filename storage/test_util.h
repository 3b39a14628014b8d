// Helpers shared by the storage tests: a temporary directory, device set-up and extent checks.
#pragma once

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "storage/bdev.h"

namespace clio::testing {

// mkdtemp under /tmp, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/clio-storage-test.XXXXXX";
    char* p = ::mkdtemp(tmpl);
    path_ = p != nullptr ? p : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A file device config in `dir`.
inline BdevConfig FileConfig(const TempDir& dir, const std::string& name, uint64_t capacity,
                             uint64_t growth_unit = 1024 * 1024) {
  BdevConfig c;
  c.name = dir.File(name);
  c.type = BdevType::kFile;
  c.capacity = capacity;
  c.growth_unit = growth_unit;
  return c;
}

inline std::unique_ptr<Bdev> MustOpen(const BdevConfig& c) {
  auto r = Bdev::Open(c);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

inline ExtentList MustAllocate(Bdev* b, uint64_t bytes) {
  auto r = b->Allocate(bytes);
  REQUIRE_MESSAGE(r.ok(), r.status().ToString());
  return std::move(r).value();
}

inline uint64_t FileSize(const std::string& path) {
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

// True when no two extents of `all` overlap.
inline bool Disjoint(std::vector<Extent> all) {
  std::sort(all.begin(), all.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < all.size(); ++i) {
    if (all[i - 1].offset + all[i - 1].size > all[i].offset) return false;
  }
  return true;
}

// A recognizable byte pattern: byte i of stream `seed`.
inline std::string Pattern(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7919 + (i >> 9)) & 0xff);
  return s;
}

// Pseudo-random bytes of stream `seed` (an LCG): no period a misplaced range could hide in.
inline std::string RandomBytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (auto& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  return s;
}

// True when files in `dir` can be opened with O_DIRECT.
inline bool SupportsDirect(const std::string& dir) {
  const std::string probe = dir + "/.direct-probe";
  int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

}  // namespace clio::testing
