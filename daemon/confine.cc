#include "daemon/confine.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <mutex>
#include <system_error>

namespace clio {

namespace {

std::mutex g_mu;
std::vector<std::string>* g_roots = new std::vector<std::string>();      // never freed: read at exit
std::vector<std::string>* g_forbidden = new std::vector<std::string>();
thread_local bool t_confined = false;

std::string RootsText(const std::vector<std::string>& roots) {
  std::string s;
  for (const std::string& r : roots) s += (s.empty() ? "" : ", ") + r;
  return s.empty() ? "none" : s;
}

Status Outside(const std::string& path, const std::string& why) {
  return Status(Code::kPermissionDenied, "'" + path + "' " + why + ": a client may make the runtime create files only "
                                             "beneath its state directory or runtime.allowed_paths (" +
                                             RootsText(ConfinementRoots()) + ")");
}

bool Beneath(const std::string& path, const std::string& dir) {
  if (dir == "/") return path.size() > 1;
  return path.size() > dir.size() + 1 && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
}

std::string Normal(const std::string& path) {
  std::string n = std::filesystem::path(path).lexically_normal().string();
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  return n;
}

// The root `path` lies beneath and the rest of it, or an error. Symbolic links are refused as
// the path is opened, so its lexical form ('..' folded) is where it leads.
Result<std::pair<std::string, std::string>> Split(const std::string& path) {
  if (path.empty() || path.front() != '/') return Outside(path, "is not an absolute path");
  const std::string n = Normal(path);
  std::vector<std::string> forbidden;
  {
    std::lock_guard<std::mutex> l(g_mu);
    forbidden = *g_forbidden;
  }
  for (const std::string& f : forbidden)
    if (n == f || Beneath(n, f))
      return Status(Code::kPermissionDenied, "'" + path + "' is the runtime's own (" + f + "): a client may not make "
                                                 "the runtime create or open it");
  for (const std::string& root : ConfinementRoots())
    if (Beneath(n, root)) return std::make_pair(root, n.substr(root == "/" ? 1 : root.size() + 1));
  return Outside(path, "is outside them");
}

}  // namespace

int OpenAtNoLinks(int dirfd, const std::string& rel, int flags, mode_t mode) {
  int at = ::dup(dirfd);
  if (at < 0) return -1;
  size_t p = 0;
  while (true) {
    const size_t q = rel.find('/', p);
    const bool last = q == std::string::npos;
    const std::string part = rel.substr(p, last ? std::string::npos : q - p);
    if (part == "..") {
      ::close(at);
      errno = EXDEV;
      return -1;
    }
    int next;
    do {
      next = last ? ::openat(at, part.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)
                  : ::openat(at, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    } while (next < 0 && errno == EINTR);
    const int err = errno;
    ::close(at);
    if (next < 0) {
      errno = !last && err == ENOTDIR ? ELOOP : err;  // a link where a directory should be
      return -1;
    }
    if (last) return next;
    at = next;
    p = q + 1;
  }
}

namespace {

int OpenAt2(int dirfd, const std::string& rel, int flags, mode_t mode) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & O_CREAT) ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd;
  // EAGAIN: a rename raced the resolution (RESOLVE_BENEATH); try again.
  do {
    fd = ::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof how);
  } while (fd < 0 && (errno == EINTR || errno == EAGAIN));
  if (fd < 0 && (errno == ENOSYS || errno == EPERM)) return OpenAtNoLinks(dirfd, rel, flags, mode);
  return static_cast<int>(fd);
}

Status ResolveError(const std::string& path, int err) {
  if (err == EXDEV || err == ELOOP) return Outside(path, "leaves its directory (through '..' or a symbolic link)");
  return Status::FromErrno(err, "open " + path);
}

}  // namespace

void SetConfinementRoots(std::vector<std::string> roots, std::vector<std::string> forbidden) {
  for (std::string& r : roots) r = Normal(r);
  for (std::string& f : forbidden) f = Normal(f);
  std::lock_guard<std::mutex> l(g_mu);
  *g_roots = std::move(roots);
  *g_forbidden = std::move(forbidden);
}

void ForbidConfinedPath(std::string path) {
  path = Normal(path);
  std::lock_guard<std::mutex> l(g_mu);
  g_forbidden->push_back(std::move(path));
}

std::vector<std::string> ConfinementRoots() {
  std::lock_guard<std::mutex> l(g_mu);
  return *g_roots;
}

ScopedConfinement::ScopedConfinement(bool on) : saved_(t_confined) { t_confined = saved_ || on; }
ScopedConfinement::~ScopedConfinement() { t_confined = saved_; }
bool Confined() { return t_confined; }

Result<int> OpenBeneath(const std::string& path, int flags, mode_t mode) {
  if (!t_confined) {
    int fd;
    do {
      fd = ::open(path.c_str(), flags, mode);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0) return Status::FromErrno(errno, "open " + path);
    return fd;
  }
  CLIO_ASSIGN_OR_RETURN(auto split, Split(path));
  const int root = ::open(split.first.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return Status::FromErrno(errno, "open " + split.first);
  const int fd = OpenAt2(root, split.second, flags, mode);
  const int err = errno;
  ::close(root);
  if (fd < 0) return ResolveError(path, err);
  return fd;
}

Status MakeDirsBeneath(const std::string& dir) {
  if (!t_confined) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return Status::FromErrno(ec.value(), "creating directory " + dir);
    return Status::Ok();
  }
  const std::string d = Normal(dir);
  for (const std::string& root : ConfinementRoots())
    if (d == root) return Status::Ok();
  CLIO_ASSIGN_OR_RETURN(auto split, Split(d));
  int at = ::open(split.first.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (at < 0) return Status::FromErrno(errno, "open " + split.first);
  // One component at a time, each opened beneath the last: none may be a link or '..'.
  const std::string& rest = split.second;
  for (size_t p = 0; p < rest.size();) {
    size_t q = rest.find('/', p);
    if (q == std::string::npos) q = rest.size();
    const std::string part = rest.substr(p, q - p);
    p = q + 1;
    if (part.empty() || part == ".") continue;
    if (::mkdirat(at, part.c_str(), 0700) != 0 && errno != EEXIST && errno != EISDIR) {
      const int err = errno;
      ::close(at);
      return Status::FromErrno(err, "creating directory " + dir);
    }
    const int next = OpenAt2(at, part, O_PATH | O_DIRECTORY, 0);
    const int err = errno;
    ::close(at);
    if (next < 0) return ResolveError(dir, err);
    at = next;
  }
  ::close(at);
  return Status::Ok();
}

}  // namespace clio
