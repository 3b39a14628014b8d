// Helpers shared by the storage tests: a temporary directory and extent checks.
#pragma once

#include <fcntl.h>
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

// True when files in `dir` can be opened with O_DIRECT.
inline bool SupportsDirect(const std::string& dir) {
  const std::string probe = dir + "/.direct-probe";
  int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

}  // namespace clio::testing
