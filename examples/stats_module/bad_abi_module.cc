// A module library built for another module ABI: the runtime must refuse it by name, before
// calling anything in it (stats_module_test).
#include "daemon/module.h"

extern "C" __attribute__((visibility("default"))) const clio::ModuleDescriptor* clio_module_descriptor() {
  static const clio::ModuleDescriptor d{clio::kModuleAbiVersion + 98, clio::ModuleLayout{}, "clio_bad_abi",
                                        "built for another ABI", nullptr};
  return &d;
}
