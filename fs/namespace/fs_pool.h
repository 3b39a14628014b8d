// Runtime glue of the namespace: module "clio_fs" as a pool serving clio-fuse's requests.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <utility>

#include "common/metrics.h"
#include "common/thread_annotations.h"
#include "daemon/pool.h"
#include "fs/namespace/namespace.h"
#include "fs/protocol/fs_messages.h"

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
  static constexpr size_t kOps = kFsMethodCount;  // FsMethod values; 0 counts unknown methods
  // Who may call a method (kFsMethods); unknown methods are the administrator's.
  CallerClass CallerOf(uint32_t method) const override { return MethodInfo(method).caller; }
  std::string MethodName(uint32_t method) const override { return std::string("clio_fs ") + MethodInfo(method).name; }

 private:
  // The handler table, built from fsproto::AllRequests: one Run per request type.
  using Handlers = wire::Handlers<FsPool, fsproto::AllRequests>;
  friend Handlers;
  Result<std::string> Replay(FsMethod m, std::string_view payload);
  // The entry a request of type Req (parent, name) made, as its answer.
  template <class Req>
  Result<std::string> ReplayEntry(std::string_view payload);
  metrics::Counter ErrorCounter(size_t op, int err) EXCLUDES(mu_);
  // An attribute reply, as the client sees it (Namespace::ForClient).
  Result<fsproto::AttrReply> AttrOf(Result<InodeAttr> a);

  // One per request type.
  Result<fsproto::AttrReply> Run(const fsproto::Lookup& r);
  Result<fsproto::AttrReply> Run(const fsproto::GetAttr& r);
  Result<fsproto::AttrReply> Run(const fsproto::SetAttr& r);
  Result<fsproto::CreateReply> Run(const fsproto::Create& r);
  Result<fsproto::AttrReply> Run(const fsproto::Mkdir& r);
  Result<fsproto::AttrReply> Run(const fsproto::Symlink& r);
  Result<fsproto::Raw> Run(const fsproto::Readlink& r);
  Result<fsproto::UnlinkReply> Run(const fsproto::Unlink& r);
  Result<fsproto::Empty> Run(const fsproto::Rmdir& r);
  Result<fsproto::RenameReply> Run(const fsproto::Rename& r);
  Result<fsproto::ReadDirReply> Run(const fsproto::ReadDir& r);
  Result<fsproto::Empty> Run(const fsproto::Open& r);
  Result<fsproto::Empty> Run(const fsproto::Release& r);
  Result<fsproto::Raw> Run(const fsproto::Read& r);
  Result<fsproto::WriteReply> Run(const fsproto::Write& r);
  Result<fsproto::Empty> Run(const fsproto::Fsync& r);
  Result<fsproto::FlushReply> Run(const fsproto::Flush& r);
  Result<fsproto::StatfsReply> Run(const fsproto::Statfs& r);
  Result<fsproto::AttrReply> Run(const fsproto::Link& r);
  Result<fsproto::AttrReply> Run(const fsproto::Mknod& r);
  Result<fsproto::Empty> Run(const fsproto::SetXattr& r);
  Result<fsproto::Raw> Run(const fsproto::GetXattr& r);
  Result<fsproto::Raw> Run(const fsproto::ListXattr& r);
  Result<fsproto::Empty> Run(const fsproto::RemoveXattr& r);
  Result<fsproto::Empty> Run(const fsproto::Fallocate& r);
  Result<fsproto::Raw> Run(const fsproto::Locate& r);
  // Whether `peer` may locate the file: as it could read it through the mount.
  Status MayLocate(const Peer& peer, const fsproto::Locate& r);
  Result<fsproto::AttachReply> Run(const fsproto::Attach& r);
  Result<fsproto::ReattachReply> Run(const fsproto::Reattach& r);

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
// pool composed earlier), chunk_size, orphan_reclaim_s (NamespaceOptions). `mount_lock`: the
// runtime's mount lock (MountLockPath), made when the pool is; empty: none.
ModuleFactory MakeFsModuleFactory(KvStore* kv, std::string mount_lock = {});

}  // namespace clio
