// External modules: a shared library the runtime loads to add a module (a `mod_name` its
// compose entries can use) without being rebuilt. docs/write-a-module.md walks through one.
//
// A module library defines, with CLIO_DEFINE_MODULE below, one C entry point,
// `clio_module_descriptor`, returning a ModuleDescriptor. Loading the library runs its static
// constructors (that is why only root-owned files load); then the runtime checks, before it
// calls anything else in the library:
//   - abi_version == kModuleAbiVersion (this header's; bumped whenever Pool, PoolRegistry,
//     ComposeEntry, ConfigReader or Status change in a way a built module would notice),
//   - the layout fingerprint (sizes of the types the factory exchanges with the runtime), so a
//     module built against other headers or another standard library is refused by name
//     rather than crashing,
//   - that `name` is the mod_name the runtime looked for.
// The factory and the pools it makes are C++ and use the runtime's own symbols (clio_run
// exports them): a module must be built with the same compiler and CLIO headers as the runtime.
//
// Where modules come from: `runtime.module_dir` (default /usr/lib/clio/modules), file
// `lib<mod_name>.so`. The directory and the file must be owned by root and writable by nobody
// else, not be symbolic links, and every directory above must be root's and not let another
// user swap an entry (world-writable only with the sticky bit) (DESIGN.md: external modules
// load only from a root-owned directory); anything else is refused with the reason named. The
// file checked is the file loaded (by descriptor).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "daemon/pool.h"

namespace clio {

// 2: Pool::IsAsync/HandleAsync, PoolRegistry::Submit.
// 3: Pool::MethodName; RequestContext::peer (the caller's credentials, daemon/caller.h).
inline constexpr uint32_t kModuleAbiVersion = 3;

// What the runtime and a module must agree on, byte for byte.
struct ModuleLayout {
  uint32_t string_size = sizeof(std::string);
  uint32_t status_size = sizeof(Status);
  uint32_t compose_entry_size = sizeof(ComposeEntry);
  uint32_t pool_size = sizeof(Pool);
  uint32_t factory_size = sizeof(ModuleFactory);
  bool operator==(const ModuleLayout&) const = default;
};

struct ModuleDescriptor {
  uint32_t abi_version;
  ModuleLayout layout;
  const char* name;         // the mod_name the module serves
  const char* description;  // one line, for logs and `clio_run status`
  // Makes the module's factory (called once, when the library is loaded).
  ModuleFactory (*make_factory)();
};

// The entry point's name, for dlsym.
inline constexpr const char* kModuleEntryPoint = "clio_module_descriptor";

// Finds, checks and loads the library of `mod_name` from `dir`, returning its factory. The
// library stays loaded for the life of the process. Errors: NotFound (no such file: the
// caller names the built-in modules), PermissionDenied (ownership or mode of the directory or
// file), InvalidArgument (not a CLIO module: no entry point, another ABI version or layout,
// another name), and dlopen's own error text.
Result<ModuleFactory> LoadModule(const std::string& dir, const std::string& mod_name);

}  // namespace clio

// Defines the entry point of a module library: CLIO_DEFINE_MODULE("clio_stats_bdev",
// "counts a bdev's requests", MakeStatsFactory) where MakeStatsFactory returns a ModuleFactory.
#define CLIO_DEFINE_MODULE(NAME, DESCRIPTION, MAKE_FACTORY)                                     \
  extern "C" __attribute__((visibility("default"))) const ::clio::ModuleDescriptor*            \
  clio_module_descriptor() {                                                                    \
    static const ::clio::ModuleDescriptor d{::clio::kModuleAbiVersion, ::clio::ModuleLayout{}, \
                                            NAME, DESCRIPTION, &MAKE_FACTORY};                  \
    return &d;                                                                                  \
  }
