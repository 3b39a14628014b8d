#include "fs/namespace/fs_pool.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <optional>
#include <cstdio>
#include <cstring>

#include "common/codec.h"
#include "daemon/ipc.h"
#include "fs/protocol/errno_map.h"
#include "fs/protocol/mount_lock.h"
#include "placement/cte_pool.h"
#include "storage/kv.h"

namespace clio {

ModuleFactory MakeFsModuleFactory(KvStore* kv, std::string mount_lock) {
  return [kv, mount_lock](const ComposeEntry& entry, const std::string& file,
              PoolRegistry& registry) -> Result<std::unique_ptr<Pool>> {
    ConfigReader r = ModuleKeys(entry, file);
    CLIO_ASSIGN_OR_RETURN(std::string cte_name, r.String("cte_pool", "clio_cte_core"));
    NamespaceOptions o;
    CLIO_ASSIGN_OR_RETURN(o.chunk_size, r.Size("chunk_size", o.chunk_size));
    CLIO_ASSIGN_OR_RETURN(uint64_t reclaim, r.UInt("orphan_reclaim_s", o.orphan_reclaim_s));
    CLIO_RETURN_IF_ERROR(r.Finish());
    if (o.chunk_size < 4096 || o.chunk_size > (64u << 20) || (o.chunk_size & (o.chunk_size - 1)))
      return r.Error("chunk_size", "must be a power of two between 4 KiB and 64 MiB");
    if (reclaim > 3600) return r.Error("orphan_reclaim_s", "must be 0 to 3600 seconds");
    o.orphan_reclaim_s = static_cast<uint32_t>(reclaim);
    auto* cte = registry.Find<CtePool>(cte_name);
    if (!cte) return r.Error("cte_pool", "no clio_cte_core pool named '" + cte_name + "' is composed before this one");
    CLIO_ASSIGN_OR_RETURN(auto ns, Namespace::Open(kv, cte->cte(), o));
    if (!mount_lock.empty()) MakeMountLock(mount_lock);
    return std::unique_ptr<Pool>(new FsPool(std::move(ns), kv));
  };
}

Status FsPool::Stop() { return kv_->Sync(); }

namespace {

constexpr const char* kOpsName = "clio_fs_operations_total";
constexpr const char* kOpsHelp = "Filesystem requests by op and outcome (ok or the errno returned)";

// FUSE asks for at most max_read (1 MiB) at a time; anything far larger is a broken client.
constexpr uint32_t kMaxReadSize = 4u << 20;

Result<fsproto::Empty> EmptyReply(Status s) {
  if (!s.ok()) return s;
  return fsproto::Empty{};
}

Result<fsproto::Raw> Bytes(Result<std::string> r) {
  if (!r.ok()) return r.status();
  return fsproto::Raw{std::move(r).value()};
}

}  // namespace

FsPool::FsPool(std::unique_ptr<Namespace> ns, KvStore* kv) : ns_(std::move(ns)), kv_(kv) {
  for (size_t i = 0; i < kOps; ++i) {
    ok_[i] = metrics::GetCounter(kOpsName, kOpsHelp, {{"op", kFsMethods[i].name}, {"outcome", "ok"}});
    latency_[i] = metrics::GetHistogram("clio_fs_operation_seconds",
                                        "Time the runtime spent on filesystem requests, in seconds",
                                        {{"op", kFsMethods[i].name}}, metrics::LatencyBuckets());
  }
  const char* bytes_help = "Bytes read and written through the filesystem";
  read_bytes_ = metrics::GetCounter("clio_fs_bytes_total", bytes_help, {{"op", "read"}});
  write_bytes_ = metrics::GetCounter("clio_fs_bytes_total", bytes_help, {{"op", "write"}});
  replayed_ = metrics::GetCounter("clio_fs_replayed_requests_total",
                                  "Resent requests that had run before their connection broke, answered from "
                                  "their request record instead of running again", {});
}

metrics::Counter FsPool::ErrorCounter(size_t op, int err) {
  MutexLock l(&mu_);
  auto it = errors_.find({op, err});
  if (it == errors_.end()) {
    const char* name = strerrorname_np(err);
    it = errors_.emplace(std::pair{op, err},
                         metrics::GetCounter(kOpsName, kOpsHelp,
                                             {{"op", kFsMethods[op].name},
                                              {"outcome", name ? name : std::to_string(err)}}))
             .first;
  }
  return it->second;
}

Result<std::string> FsPool::Handle(uint32_t method, std::string_view payload) {
  const auto start = std::chrono::steady_clock::now();
  const size_t op = method < kOps ? method : 0;  // unknown methods count as "unknown"
  Result<std::string> r = std::string();
  if (op == 0) {
    r = Status(Code::kNotSupported, "clio_fs: unknown method " + std::to_string(method));
  } else {
    // A mutating request from a client is recorded with its effect; a resend of one that ran
    // is answered from the namespace without running it again (docs/namespace.md).
    const RequestContext& rq = CurrentRequest();
    std::optional<Namespace::RequestRecord> record;
    bool replayed = false;
    if (rq.client != 0 && !kFsMethods[op].idempotent) {
      if (rq.resent) {
        auto ran = ns_->RequestRan(rq.client, rq.request_id);
        if (!ran.ok()) {
          r = ran.status();
          replayed = true;
        } else if (*ran) {
          replayed_.Add();
          r = Replay(static_cast<FsMethod>(method), payload);
          replayed = true;
        }
      }
      if (!replayed) record.emplace(rq.client, rq.request_id, method);
    }
    if (!replayed) r = Handlers::Find(method)(*this, payload);
  }
  latency_[op].Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (r.ok()) {
    ok_[op].Add();
    if (method == static_cast<uint32_t>(FsMethod::kRead)) read_bytes_.Add(static_cast<double>(r->size()));
  } else {
    ErrorCounter(op, ToErrno(r.status())).Add();
  }
  return r;
}

template <class Req>
Result<std::string> FsPool::ReplayEntry(std::string_view payload) {
  CLIO_ASSIGN_OR_RETURN(Req r, fsproto::Decode<Req>(payload));
  CLIO_ASSIGN_OR_RETURN(fsproto::AttrReply reply, AttrOf(ns_->Lookup(r.parent, r.name)));
  return fsproto::Encode(reply);
}

// The answer to a resend of a request that ran before the connection broke (its record says
// so): rebuilt from the namespace as it is now, in the shape the method answers.
Result<std::string> FsPool::Replay(FsMethod m, std::string_view payload) {
  switch (m) {
    case FsMethod::kCreate: {
      CLIO_ASSIGN_OR_RETURN(auto r, fsproto::Decode<fsproto::Create>(payload));
      CLIO_ASSIGN_OR_RETURN(InodeAttr a, ns_->Lookup(r.parent, r.name));
      CLIO_ASSIGN_OR_RETURN(InodeAttr dir, ns_->GetAttr(r.parent));
      return fsproto::Encode(fsproto::CreateReply{a, dir});
    }
    case FsMethod::kMkdir: return ReplayEntry<fsproto::Mkdir>(payload);
    case FsMethod::kSymlink: return ReplayEntry<fsproto::Symlink>(payload);
    case FsMethod::kMknod: return ReplayEntry<fsproto::Mknod>(payload);
    case FsMethod::kLink: {
      CLIO_ASSIGN_OR_RETURN(auto r, fsproto::Decode<fsproto::Link>(payload));
      CLIO_ASSIGN_OR_RETURN(auto reply, AttrOf(ns_->Lookup(r.new_parent, r.new_name)));
      return fsproto::Encode(reply);
    }
    case FsMethod::kUnlink: {
      CLIO_ASSIGN_OR_RETURN(auto r, fsproto::Decode<fsproto::Unlink>(payload));
      CLIO_ASSIGN_OR_RETURN(InodeAttr dir, ns_->GetAttr(r.parent));
      // Whether the inode went with it is not known any more.
      return fsproto::Encode(fsproto::UnlinkReply{0, dir});
    }
    case FsMethod::kRename:
      return fsproto::Encode(fsproto::RenameReply{});  // no directory attributes: the client asks again
    default:
      return std::string();  // rmdir, open, release, setxattr, removexattr: empty answers
  }
}

Result<fsproto::AttrReply> FsPool::AttrOf(Result<InodeAttr> a) {
  if (!a.ok()) return a.status();
  ns_->ForClient(&*a);
  return fsproto::AttrReply{*a};
}

Result<fsproto::AttrReply> FsPool::Run(const fsproto::Lookup& r) { return AttrOf(ns_->Lookup(r.parent, r.name)); }
Result<fsproto::AttrReply> FsPool::Run(const fsproto::GetAttr& r) { return AttrOf(ns_->GetAttr(r.ino)); }
Result<fsproto::AttrReply> FsPool::Run(const fsproto::SetAttr& r) { return AttrOf(ns_->SetAttr(r.ino, r.attr)); }

Result<fsproto::CreateReply> FsPool::Run(const fsproto::Create& r) {
  fsproto::CreateReply out;
  CLIO_ASSIGN_OR_RETURN(out.attr, ns_->Create(r.parent, r.name, r.mode, r.uid, r.gid, &out.dir));
  return out;
}
Result<fsproto::AttrReply> FsPool::Run(const fsproto::Mkdir& r) {
  return AttrOf(ns_->Mkdir(r.parent, r.name, r.mode, r.uid, r.gid));
}
Result<fsproto::AttrReply> FsPool::Run(const fsproto::Symlink& r) {
  return AttrOf(ns_->Symlink(r.parent, r.name, r.target, r.uid, r.gid));
}
Result<fsproto::Raw> FsPool::Run(const fsproto::Readlink& r) { return Bytes(ns_->Readlink(r.ino)); }

Result<fsproto::UnlinkReply> FsPool::Run(const fsproto::Unlink& r) {
  fsproto::UnlinkReply out;
  CLIO_RETURN_IF_ERROR(ns_->Unlink(r.parent, r.name, &out.gone, &out.dir));
  return out;
}
Result<fsproto::Empty> FsPool::Run(const fsproto::Rmdir& r) { return EmptyReply(ns_->Rmdir(r.parent, r.name)); }

Result<fsproto::RenameReply> FsPool::Run(const fsproto::Rename& r) {
  std::pair<InodeAttr, InodeAttr> dirs;
  fsproto::RenameReply out;
  CLIO_RETURN_IF_ERROR(ns_->Rename(r.parent, r.name, r.new_parent, r.new_name, r.flags, &dirs, &out.moved));
  if (dirs.first.ino != 0) {
    out.changed = 1;
    out.from = dirs.first;
    out.to = dirs.second;
    ns_->ForClient(&out.moved);
  }
  return out;
}

Result<fsproto::ReadDirReply> FsPool::Run(const fsproto::ReadDir& r) {
  fsproto::ReadDirReply out;
  CLIO_ASSIGN_OR_RETURN(out.entries, ns_->ReadDir(r.ino, r.after, r.count));
  for (DirEntry& e : out.entries) ns_->ForClient(&e.attr);
  return out;
}

Result<fsproto::Empty> FsPool::Run(const fsproto::Open& r) { return EmptyReply(ns_->Open(r.ino, (r.flags & O_TRUNC) != 0)); }
Result<fsproto::Empty> FsPool::Run(const fsproto::Release& r) { return EmptyReply(ns_->Release(r.ino)); }

Result<fsproto::Raw> FsPool::Run(const fsproto::Read& r) {
  if (r.len > kMaxReadSize)
    return InvalidArgument("read of " + std::to_string(r.len) + " bytes: at most 4 MiB per request");
  return Bytes(ns_->Read(r.ino, r.offset, r.len));
}

Result<fsproto::WriteReply> FsPool::Run(const fsproto::Write& r) {
  const uint8_t flags = r.flags.value;
  if (flags & ~kWriteKernelTimes) return InvalidArgument("write: unknown flags " + std::to_string(flags));
  CLIO_ASSIGN_OR_RETURN(uint64_t written, ns_->Write(r.ino, r.offset, r.data, !(flags & kWriteKernelTimes)));
  write_bytes_.Add(static_cast<double>(written));
  return fsproto::WriteReply{static_cast<uint32_t>(written)};
}

Result<fsproto::Empty> FsPool::Run(const fsproto::Fsync& r) { return EmptyReply(ns_->Fsync(r.ino)); }

Result<fsproto::FlushReply> FsPool::Run(const fsproto::Flush& r) {
  bool clean = false;
  CLIO_RETURN_IF_ERROR(ns_->Flush(r.ino, &clean));
  return fsproto::FlushReply{static_cast<uint8_t>(clean ? 1 : 0)};
}

Result<fsproto::StatfsReply> FsPool::Run(const fsproto::Statfs&) { return fsproto::StatfsReply{ns_->Statfs()}; }

Result<fsproto::AttrReply> FsPool::Run(const fsproto::Link& r) {
  return AttrOf(ns_->Link(r.ino, r.new_parent, r.new_name));
}
Result<fsproto::AttrReply> FsPool::Run(const fsproto::Mknod& r) {
  return AttrOf(ns_->Mknod(r.parent, r.name, r.mode, r.rdev, r.uid, r.gid));
}
Result<fsproto::Empty> FsPool::Run(const fsproto::SetXattr& r) {
  return EmptyReply(ns_->SetXattr(r.ino, r.name, r.value, r.flags));
}
Result<fsproto::Raw> FsPool::Run(const fsproto::GetXattr& r) { return Bytes(ns_->GetXattr(r.ino, r.name)); }
Result<fsproto::Raw> FsPool::Run(const fsproto::ListXattr& r) { return Bytes(ns_->ListXattr(r.ino)); }
Result<fsproto::Empty> FsPool::Run(const fsproto::RemoveXattr& r) { return EmptyReply(ns_->RemoveXattr(r.ino, r.name)); }
Result<fsproto::Empty> FsPool::Run(const fsproto::Fallocate& r) {
  return EmptyReply(ns_->Fallocate(r.ino, r.mode, r.offset, r.length));
}

namespace {

// Locate is a reader's method: a caller below the mount class learns where a file's chunks are
// only for a file it could read through the mount: every directory on its path searchable
// (x) and the file readable (r), by the owner, group or other bits, with the caller's groups.
bool PeerMay(const Peer& peer, const InodeAttr& a, uint32_t other_bit) {
  const uint32_t bit = peer.uid == a.uid ? other_bit << 6 : peer.InGroup(a.gid) ? other_bit << 3 : other_bit;
  return (a.mode & bit) != 0;
}

Status LocateRefused(const Peer& peer, const InodeAttr& a, const std::string& what) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", a.mode & 07777);
  return Status(Code::kPermissionDenied, "locate: " + what + " is not " +
                                             (S_ISDIR(a.mode) ? "searchable" : "readable") + " by " + peer.Describe() +
                                             " (mode " + mode + ", owner uid " + std::to_string(a.uid) + ")");
}

constexpr size_t kMaxLocatePath = 4096;

}  // namespace

Status FsPool::MayLocate(const Peer& peer, const fsproto::Locate& r) {
  if (peer.May(CallerClass::kMount)) return Status::Ok();
  const std::string& path = r.path.value;
  if (path.empty())
    return Status(Code::kPermissionDenied, "locate: " + peer.Describe() +
                                               " must name the file's path from the mount's root (the runtime "
                                               "checks it as the kernel would)");
  if (path.size() > kMaxLocatePath) return Status(Code::kNameTooLong, "locate: a path over 4096 bytes");
  CLIO_ASSIGN_OR_RETURN(InodeAttr at, ns_->GetAttr(kRootIno));
  std::string walked;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t slash = std::min(path.find('/', pos), path.size());
    const std::string_view name = std::string_view(path).substr(pos, slash - pos);
    pos = slash + 1;
    if (name.empty() || name == ".") continue;
    if (name == "..")
      return InvalidArgument("locate: the path '" + path + "' has '..': send it resolved (realpath)");
    if (!S_ISDIR(at.mode)) return Status(Code::kNotDirectory, "locate: '" + walked + "' is not a directory");
    if (!PeerMay(peer, at, 01)) return LocateRefused(peer, at, walked.empty() ? "the mount's root" : "'" + walked + "'");
    CLIO_ASSIGN_OR_RETURN(at, ns_->Lookup(at.ino, name));
    walked += (walked.empty() ? "" : "/") + std::string(name);
  }
  if (at.ino != r.ino)
    return Status(Code::kPermissionDenied, "locate: '" + path + "' is inode " + std::to_string(at.ino) + ", not " +
                                               std::to_string(r.ino) + " (" + peer.Describe() +
                                               " locates a file by its own path)");
  if (!PeerMay(peer, at, 04)) return LocateRefused(peer, at, "'" + walked + "'");
  return Status::Ok();
}

Result<fsproto::Raw> FsPool::Run(const fsproto::Locate& r) {
  if (const Peer* peer = CurrentRequest().peer) CLIO_RETURN_IF_ERROR(MayLocate(*peer, r));
  CLIO_ASSIGN_OR_RETURN(FileLocation f, ns_->Locate(r.ino));
  return fsproto::Raw{EncodeFileLocation(f)};
}

Result<fsproto::AttachReply> FsPool::Run(const fsproto::Attach&) { return fsproto::AttachReply{ns_->incarnation()}; }

Result<fsproto::ReattachReply> FsPool::Run(const fsproto::Reattach& r) {
  if (r.claims.size() > kMaxReattachNodes)
    return InvalidArgument("reattach of " + std::to_string(r.claims.size()) + " nodes: at most " +
                           std::to_string(kMaxReattachNodes) + " per request");
  if (r.flags & ~(kReattachComplete | kReattachBegin))
    return InvalidArgument("reattach: unknown flags " + std::to_string(r.flags));
  CLIO_ASSIGN_OR_RETURN(std::vector<bool> exists, ns_->Reattach(r.claims, (r.flags & kReattachBegin) != 0,
                                                               (r.flags & kReattachComplete) != 0));
  fsproto::ReattachReply out;
  for (bool x : exists) out.exists.push_back(x ? 1 : 0);
  return out;
}

}  // namespace clio
