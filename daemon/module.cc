#include "daemon/module.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace clio {
namespace {

// Root owns it and nobody else may write it (for a directory: nobody else may add, remove or
// rename an entry in it, unless the sticky bit keeps others to their own entries).
Status CheckRootOwned(const struct stat& st, const std::string& path, bool directory) {
  const char* what = directory ? "module directory" : "module";
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return Status(Code::kPermissionDenied, std::string(what) + " " + path + " is not a " +
                                               (directory ? "directory" : "regular file") + " (links are not followed)");
  if (st.st_uid != 0)
    return Status(Code::kPermissionDenied, std::string(what) + " " + path + " is owned by uid " +
                                               std::to_string(st.st_uid) +
                                               ", not root; external modules load only from root-owned files");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return Status(Code::kPermissionDenied, std::string(what) + " " + path +
                                               " is writable by its group or others; make it 0755 (chmod go-w)");
  return Status::Ok();
}

// Every directory above the module directory: root's, and none lets another user swap an
// entry on the way (a world-writable one must be sticky, as /tmp is).
Status CheckAncestors(const std::string& dir) {
  std::string path = dir;
  while (true) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return Status::Ok();
    path = slash == 0 ? "/" : path.substr(0, slash);
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, "stat " + path);
    if (st.st_uid != 0)
      return Status(Code::kPermissionDenied, "directory " + path + " above the module directory is owned by uid " +
                                                 std::to_string(st.st_uid) + ", not root");
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      return Status(Code::kPermissionDenied, "directory " + path +
                                                 " above the module directory is writable by others without the "
                                                 "sticky bit: an entry on the way could be swapped");
    if (path == "/") return Status::Ok();
  }
}

}  // namespace

Result<ModuleFactory> LoadModule(const std::string& dir, const std::string& mod_name) {
  if (dir.empty()) return NotFound("no runtime.module_dir");
  for (char c : mod_name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      return InvalidArgument("module name '" + mod_name + "' (letters, digits, _ and - only)");
  const std::string file = "lib" + mod_name + ".so";
  const std::string path = dir + "/" + file;
  // Checked and opened through descriptors, never by name twice: what is checked is what is
  // loaded (dlopen of /proc/self/fd/N), whatever happens to the names meanwhile.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0) {
    if (errno == ENOENT) return NotFound("no module directory " + dir);
    return Status(Code::kPermissionDenied, "module directory " + dir + ": " + std::strerror(errno) +
                                               " (it must be a directory, not a link)");
  }
  struct stat st{};
  const int fd = ::openat(dfd, file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  const int open_errno = errno;
  Status checked = ::fstat(dfd, &st) == 0 ? CheckRootOwned(st, dir, true) : Status::FromErrno(errno, "stat " + dir);
  ::close(dfd);
  if (fd < 0) {
    if (open_errno == ENOENT) return NotFound("no module library " + path);
    return Status(Code::kPermissionDenied, "module " + path + ": " + std::strerror(open_errno) +
                                               " (it must be a regular file, not a link)");
  }
  if (checked.ok()) checked = CheckAncestors(dir);
  if (checked.ok()) checked = ::fstat(fd, &st) == 0 ? CheckRootOwned(st, path, false) : Status::FromErrno(errno, "stat " + path);
  if (!checked.ok()) {
    ::close(fd);
    return checked;
  }
  // RTLD_LOCAL: one module's symbols never satisfy another's; RTLD_NOW: a missing symbol is
  // an error here, not a crash later. Never unloaded (its pools and factory live on). The
  // library's static constructors run here, before the checks below: loading runs the code of
  // a root-owned file, which is why only those load.
  // The descriptor stays open while the library is loaded: the loader knows a library by the
  // name it was opened with, and a reused /proc/self/fd/N would be taken for the earlier one.
  const std::string by_fd = "/proc/self/fd/" + std::to_string(fd);
  void* lib = ::dlopen(by_fd.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const std::string why = ::dlerror();
    ::close(fd);
    return InvalidArgument("loading module " + path + ": " + why);
  }
  auto refuse = [&](const std::string& why) {
    ::dlclose(lib);
    ::close(fd);
    return InvalidArgument("module " + path + ": " + why);
  };
  auto entry = reinterpret_cast<const ModuleDescriptor* (*)()>(::dlsym(lib, kModuleEntryPoint));
  if (!entry)
    return refuse("not a CLIO module: it has no " + std::string(kModuleEntryPoint) + " (define it with CLIO_DEFINE_MODULE)");
  const ModuleDescriptor* d = entry();
  if (!d) return refuse("its descriptor is null");
  if (d->abi_version != kModuleAbiVersion)
    return refuse("built for module ABI " + std::to_string(d->abi_version) + ", this runtime loads ABI " +
                  std::to_string(kModuleAbiVersion) + "; rebuild it against this CLIO's headers");
  if (!(d->layout == ModuleLayout{}))
    return refuse("built with other type layouts (another compiler, standard library or CLIO headers); rebuild it "
                  "with the runtime's");
  if (!d->name || mod_name != d->name)
    return refuse("it serves '" + std::string(d->name ? d->name : "") + "', not '" + mod_name + "'");
  if (!d->make_factory) return refuse("it has no factory");
  CLIO_LOG_INFO("loaded module {} from {}: {}", mod_name, path, d->description ? d->description : "");
  return d->make_factory();
}

}  // namespace clio
