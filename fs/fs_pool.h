// Runtime glue of the namespace: module "clio_fs" as a pool serving clio-fuse's requests.
#pragma once

#include <memory>

#include "daemon/pool.h"
#include "fs/namespace.h"

namespace clio {

class KvStore;

class FsPool : public Pool {
 public:
  FsPool(std::unique_ptr<Namespace> ns, KvStore* kv) : ns_(std::move(ns)), kv_(kv) {}
  Result<std::string> Handle(uint32_t method, std::string_view payload) override;
  Status Stop() override;
  Namespace* ns() { return ns_.get(); }

 private:
  std::unique_ptr<Namespace> ns_;
  KvStore* kv_;
};

// Factory for compose entries with mod_name clio_fs. Keys: cte_pool (name of a clio_cte_core
// pool composed earlier), chunk_size.
ModuleFactory MakeFsModuleFactory(KvStore* kv);

}  // namespace clio
