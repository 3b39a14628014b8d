// Runtime glue of the namespace: module "clio_fs" as a pool serving clio-fuse's requests.
#pragma once

#include <array>
#include <map>
#include <memory>

#include "common/metrics.h"
#include "common/thread_annotations.h"
#include "daemon/pool.h"
#include "fs/namespace/namespace.h"

namespace clio {

class KvStore;

// Every request is counted (clio_fs_operations_total{op, outcome}: outcome "ok" or the errno
// name the client gets, "ENOENT"), timed (clio_fs_operation_seconds{op}) and, for read and
// write, measured in bytes (clio_fs_bytes_total{op}); resends answered from their request
// record count in clio_fs_replayed_requests_total.
class FsPool : public Pool {
 public:
  FsPool(std::unique_ptr<Namespace> ns, KvStore* kv);
  Result<std::string> Handle(uint32_t method, std::string_view payload) override;
  Status Stop() override;
  Namespace* ns() { return ns_.get(); }
  static constexpr size_t kOps = 29;  // FsMethod values 1..28; 0 counts unknown methods

 private:
  Result<std::string> Serve(uint32_t method, std::string_view payload);
  Result<std::string> Replay(FsMethod m, std::string_view payload);
  metrics::Counter ErrorCounter(size_t op, int err) EXCLUDES(mu_);

  std::unique_ptr<Namespace> ns_;
  KvStore* kv_;
  std::array<metrics::Counter, kOps> ok_;
  std::array<metrics::Histogram, kOps> latency_;
  metrics::Counter read_bytes_, write_bytes_;
  metrics::Counter replayed_;  // resent requests answered from their record
  Mutex mu_;
  std::map<std::pair<size_t, int>, metrics::Counter> errors_ GUARDED_BY(mu_);
};

// Factory for compose entries with mod_name clio_fs. Keys: cte_pool (name of a clio_cte_core
// pool composed earlier), chunk_size, orphan_reclaim_s (NamespaceOptions).
ModuleFactory MakeFsModuleFactory(KvStore* kv);

}  // namespace clio
