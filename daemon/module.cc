#include "daemon/module.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace clio {
namespace {

// Root owns it and nobody else may write it (for a directory also: nobody else may add or
// rename a file in it).
Status CheckRootOwned(const std::string& path, bool directory) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + " does not exist");
    return Status::FromErrno(errno, "stat " + path);
  }
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

}  // namespace

Result<ModuleFactory> LoadModule(const std::string& dir, const std::string& mod_name) {
  if (dir.empty()) return NotFound("no runtime.module_dir");
  for (char c : mod_name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
      return InvalidArgument("module name '" + mod_name + "' (letters, digits, _ and - only)");
  const std::string path = dir + "/lib" + mod_name + ".so";
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return NotFound("no module library " + path);
  CLIO_RETURN_IF_ERROR(CheckRootOwned(dir, true));
  CLIO_RETURN_IF_ERROR(CheckRootOwned(path, false));
  // RTLD_LOCAL: one module's symbols never satisfy another's; RTLD_NOW: a missing symbol is
  // an error here, not a crash later. Never unloaded (its pools and factory live on).
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return InvalidArgument("loading module " + path + ": " + ::dlerror());
  auto entry = reinterpret_cast<const ModuleDescriptor* (*)()>(::dlsym(lib, kModuleEntryPoint));
  if (!entry) {
    ::dlclose(lib);
    return InvalidArgument(path + " is not a CLIO module: it has no " + std::string(kModuleEntryPoint) +
                           " (define it with CLIO_DEFINE_MODULE)");
  }
  const ModuleDescriptor* d = entry();
  auto refuse = [&](const std::string& why) {
    ::dlclose(lib);
    return InvalidArgument("module " + path + ": " + why);
  };
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
