// Confinement of a client's file creations (daemon/confine.h): beneath the roots or refused,
// whatever '..' or symbolic links the path holds; plain outside a ScopedConfinement.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include "daemon/confine.h"

using namespace clio;

TEST_CASE("a confined open or mkdir stays beneath the roots: no '..', no symbolic link, no relative path") {
  char tmpl[] = "/tmp/clio_confine_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string root = dir + "/allowed", other = dir + "/other";
  std::filesystem::create_directories(root);
  std::filesystem::create_directories(other);
  std::filesystem::create_symlink(other, root + "/link");
  const auto saved = ConfinementRoots();
  SetConfinementRoots({root + "/"});
  auto open_ok = [](Result<int> fd) {
    if (fd.ok()) ::close(*fd);
    return fd.ok();
  };
  {
    ScopedConfinement confine(true);
    CHECK(Confined());
    CHECK(open_ok(OpenBeneath(root + "/a.dat", O_RDWR | O_CREAT, 0600)));
    CHECK(MakeDirsBeneath(root + "/d/e/f").ok());
    CHECK(std::filesystem::is_directory(root + "/d/e/f"));
    CHECK(open_ok(OpenBeneath(root + "/d/e/f/g.dat", O_RDWR | O_CREAT, 0600)));
    for (const std::string& bad : {other + "/b.dat", root + "/../other/c.dat", root + "/link/d.dat",
                                   std::string("relative.dat"), root + "x/e.dat", root}) {
      CAPTURE(bad);
      auto fd = OpenBeneath(bad, O_RDWR | O_CREAT, 0600);
      REQUIRE_FALSE(fd.ok());
      CHECK(fd.status().code() == Code::kPermissionDenied);
      CHECK(fd.status().message().find("'" + bad + "'") != std::string::npos);
    }
    CHECK(MakeDirsBeneath(root + "/link/sub").code() == Code::kPermissionDenied);
    CHECK(MakeDirsBeneath(root + "/d/../../other/sub").code() == Code::kPermissionDenied);
    CHECK(MakeDirsBeneath(other + "/sub").code() == Code::kPermissionDenied);
    CHECK_FALSE(std::filesystem::exists(other + "/b.dat"));
    CHECK_FALSE(std::filesystem::exists(other + "/c.dat"));
    CHECK_FALSE(std::filesystem::exists(other + "/d.dat"));
    CHECK_FALSE(std::filesystem::exists(other + "/sub"));
    auto why = OpenBeneath(other + "/b.dat", O_RDWR | O_CREAT, 0600);
    CHECK(why.status().message().find(root) != std::string::npos);  // names the allowed directory
  }
  // The runtime's own files beneath a root are refused, however the path spells them.
  SetConfinementRoots({root}, {root + "/metadata", root + "/token"});
  std::filesystem::create_directories(root + "/metadata");
  {
    ScopedConfinement confine(true);
    for (const std::string& own : {root + "/metadata/CURRENT", root + "/token", root + "/d/../metadata/x",
                                   root + "//token"}) {
      CAPTURE(own);
      auto fd = OpenBeneath(own, O_RDWR | O_CREAT, 0600);
      REQUIRE_FALSE(fd.ok());
      CHECK(fd.status().message().find("is the runtime's own") != std::string::npos);
    }
    CHECK_FALSE(std::filesystem::exists(root + "/metadata/CURRENT"));
    CHECK(open_ok(OpenBeneath(root + "/tokens.dat", O_RDWR | O_CREAT, 0600)));  // a prefix is not the file
  }
  // The fallback without openat2: the same refusals, one component at a time.
  {
    const int rootfd = ::open(root.c_str(), O_PATH | O_DIRECTORY);
    REQUIRE(rootfd >= 0);
    int fd = OpenAtNoLinks(rootfd, "d/e/f/h.dat", O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) ::close(fd);
    CHECK(OpenAtNoLinks(rootfd, "link/x.dat", O_RDWR | O_CREAT, 0600) < 0);
    CHECK(errno == ELOOP);
    CHECK(OpenAtNoLinks(rootfd, "d/../../other/y.dat", O_RDWR | O_CREAT, 0600) < 0);
    CHECK(errno == EXDEV);
    std::filesystem::create_symlink(other + "/z.dat", root + "/zlink");
    CHECK(OpenAtNoLinks(rootfd, "zlink", O_RDWR | O_CREAT, 0600) < 0);  // the last component a link
    ::close(rootfd);
    CHECK_FALSE(std::filesystem::exists(other + "/x.dat"));
    CHECK_FALSE(std::filesystem::exists(other + "/y.dat"));
    CHECK_FALSE(std::filesystem::exists(other + "/z.dat"));
  }
  // Outside a confinement (the operator's config at start), paths are the operator's.
  CHECK_FALSE(Confined());
  CHECK(open_ok(OpenBeneath(other + "/free.dat", O_RDWR | O_CREAT, 0600)));
  CHECK(MakeDirsBeneath(other + "/x/y").ok());
  SetConfinementRoots(saved);
  std::filesystem::remove_all(dir);
}
