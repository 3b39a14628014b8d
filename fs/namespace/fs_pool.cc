#include "fs/namespace/fs_pool.h"

#include <fcntl.h>

#include <chrono>
#include <optional>
#include <cstring>

#include "common/codec.h"
#include "daemon/ipc.h"
#include "fs/protocol/errno_map.h"
#include "placement/cte_pool.h"
#include "storage/kv.h"

namespace clio {

ModuleFactory MakeFsModuleFactory(KvStore* kv) {
  return [kv](const ComposeEntry& entry, const std::string& file,
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
    return std::unique_ptr<Pool>(new FsPool(std::move(ns), kv));
  };
}

Status FsPool::Stop() { return kv_->Sync(); }

namespace {

// Metric label of each FsMethod, by value; [0] is any unknown method.
constexpr std::array<const char*, FsPool::kOps> kOpNames = {
    "unknown",  "lookup",   "getattr",  "setattr",  "create",    "mkdir",      "symlink",
    "readlink", "unlink",   "rmdir",    "rename",   "readdir",   "open",       "release",
    "read",     "write",    "fsync",    "flush",    "statfs",    "link",       "mknod",
    "setxattr", "getxattr", "listxattr", "removexattr", "fallocate", "locate", "attach",
    "reattach"};
static_assert(static_cast<size_t>(FsMethod::kReattach) == kOpNames.size() - 1,
              "kOpNames must name every FsMethod");

constexpr const char* kOpsName = "clio_fs_operations_total";
constexpr const char* kOpsHelp = "Filesystem requests by op and outcome (ok or the errno returned)";

// FUSE asks for at most max_read (1 MiB) at a time; anything far larger is a broken client.
constexpr uint32_t kMaxReadSize = 4u << 20;

// An attribute answer, as the client sees it (Namespace::ForClient).
Result<std::string> AttrReply(Namespace* ns, Result<InodeAttr> a) {
  if (!a.ok()) return a.status();
  ns->ForClient(&*a);
  Encoder e;
  EncodeAttr(&e, *a);
  return e.Take();
}

Result<std::string> Empty(Status s) {
  if (!s.ok()) return s;
  return std::string();
}

}  // namespace

FsPool::FsPool(std::unique_ptr<Namespace> ns, KvStore* kv) : ns_(std::move(ns)), kv_(kv) {
  for (size_t i = 0; i < kOps; ++i) {
    ok_[i] = metrics::GetCounter(kOpsName, kOpsHelp, {{"op", kOpNames[i]}, {"outcome", "ok"}});
    latency_[i] = metrics::GetHistogram("clio_fs_operation_seconds",
                                        "Time the runtime spent on filesystem requests, in seconds",
                                        {{"op", kOpNames[i]}}, metrics::LatencyBuckets());
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
                                             {{"op", kOpNames[op]},
                                              {"outcome", name ? name : std::to_string(err)}}))
             .first;
  }
  return it->second;
}

Result<std::string> FsPool::Handle(uint32_t method, std::string_view payload) {
  const auto start = std::chrono::steady_clock::now();
  Result<std::string> r = Serve(method, payload);
  const size_t op = method < kOps ? method : 0;  // unknown methods count as "unknown"
  latency_[op].Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (r.ok()) {
    ok_[op].Add();
    if (method == static_cast<uint32_t>(FsMethod::kRead)) read_bytes_.Add(static_cast<double>(r->size()));
  } else {
    ErrorCounter(op, ToErrno(r.status())).Add();
  }
  return r;
}

// The answer to a resend of a request that ran before the connection broke (its record says
// so): rebuilt from the namespace as it is now, in the shape the method answers.
Result<std::string> FsPool::Replay(FsMethod m, std::string_view payload) {
  Decoder d(payload);
  uint64_t parent = 0, ino = 0;
  std::string_view name;
  switch (m) {
    case FsMethod::kCreate: {
      d.Get(&parent);
      d.GetBytes(&name);
      CLIO_ASSIGN_OR_RETURN(InodeAttr a, ns_->Lookup(parent, name));
      CLIO_ASSIGN_OR_RETURN(InodeAttr dir, ns_->GetAttr(parent));
      Encoder e;
      EncodeAttr(&e, a);
      EncodeAttr(&e, dir);
      return e.Take();
    }
    case FsMethod::kMkdir:
    case FsMethod::kSymlink:
    case FsMethod::kMknod:
      d.Get(&parent);
      d.GetBytes(&name);
      return AttrReply(ns_.get(), ns_->Lookup(parent, name));
    case FsMethod::kLink:
      d.Get(&ino);
      d.Get(&parent);
      d.GetBytes(&name);
      return AttrReply(ns_.get(), ns_->Lookup(parent, name));
    case FsMethod::kUnlink: {
      d.Get(&parent);
      CLIO_ASSIGN_OR_RETURN(InodeAttr dir, ns_->GetAttr(parent));
      Encoder e;
      e.Put<uint64_t>(0);  // whether the inode went with it is not known any more
      EncodeAttr(&e, dir);
      return e.Take();
    }
    case FsMethod::kRename: {
      Encoder e;
      e.Put<uint8_t>(0);  // no directory attributes: the client asks again
      return e.Take();
    }
    default:
      return std::string();  // rmdir, open, release, setxattr, removexattr: empty answers
  }
}

Result<std::string> FsPool::Serve(uint32_t method, std::string_view payload) {
  // A mutating request from a client is recorded with its effect; a resend of one that ran is
  // answered from the namespace without running it again (docs/namespace.md).
  const RequestContext& rq = CurrentRequest();
  std::optional<Namespace::RequestRecord> record;
  if (rq.client != 0 && !IsIdempotent(static_cast<FsMethod>(method))) {
    if (rq.resent) {
      CLIO_ASSIGN_OR_RETURN(bool ran, ns_->RequestRan(rq.client, rq.request_id));
      if (ran) {
        replayed_.Add();
        return Replay(static_cast<FsMethod>(method), payload);
      }
    }
    record.emplace(rq.client, rq.request_id, method);
  }
  Decoder d(payload);
  uint64_t ino = 0, parent = 0, new_parent = 0, offset = 0;
  uint32_t mode = 0, uid = 0, gid = 0, flags = 0, len = 0;
  std::string_view name, new_name, data;
  auto done = [&](std::string_view what) { return d.Finish(what); };
  switch (static_cast<FsMethod>(method)) {
    case FsMethod::kLookup:
      d.Get(&parent); d.GetBytes(&name);
      CLIO_RETURN_IF_ERROR(done("lookup"));
      return AttrReply(ns_.get(), ns_->Lookup(parent, name));
    case FsMethod::kGetAttr:
      d.Get(&ino);
      CLIO_RETURN_IF_ERROR(done("getattr"));
      return AttrReply(ns_.get(), ns_->GetAttr(ino));
    case FsMethod::kSetAttr: {
      SetAttrRequest req;
      d.Get(&ino);
      DecodeSetAttr(&d, &req);
      CLIO_RETURN_IF_ERROR(done("setattr"));
      return AttrReply(ns_.get(), ns_->SetAttr(ino, req));
    }
    case FsMethod::kCreate:
    case FsMethod::kMkdir:
      d.Get(&parent); d.GetBytes(&name); d.Get(&mode); d.Get(&uid); d.Get(&gid);
      CLIO_RETURN_IF_ERROR(done("create"));
      if (static_cast<FsMethod>(method) == FsMethod::kMkdir) {
        return AttrReply(ns_.get(), ns_->Mkdir(parent, name, mode, uid, gid));
      }
      {
        // The new file's attributes, then the directory's as the create left them.
        InodeAttr dir;
        CLIO_ASSIGN_OR_RETURN(InodeAttr a, ns_->Create(parent, name, mode, uid, gid, &dir));
        Encoder e;
        EncodeAttr(&e, a);
        EncodeAttr(&e, dir);
        return e.Take();
      }
    case FsMethod::kSymlink:
      d.Get(&parent); d.GetBytes(&name); d.GetBytes(&data); d.Get(&uid); d.Get(&gid);
      CLIO_RETURN_IF_ERROR(done("symlink"));
      return AttrReply(ns_.get(), ns_->Symlink(parent, name, data, uid, gid));
    case FsMethod::kReadlink:
      d.Get(&ino);
      CLIO_RETURN_IF_ERROR(done("readlink"));
      return ns_->Readlink(ino);
    case FsMethod::kUnlink:
    case FsMethod::kRmdir:
      d.Get(&parent); d.GetBytes(&name);
      CLIO_RETURN_IF_ERROR(done("unlink"));
      if (static_cast<FsMethod>(method) == FsMethod::kRmdir) return Empty(ns_->Rmdir(parent, name));
      {
        uint64_t deleted = 0;
        InodeAttr dir;
        CLIO_RETURN_IF_ERROR(ns_->Unlink(parent, name, &deleted, &dir));
        Encoder e;
        e.Put<uint64_t>(deleted);
        EncodeAttr(&e, dir);
        return e.Take();
      }
    case FsMethod::kRename:
      d.Get(&parent); d.GetBytes(&name); d.Get(&new_parent); d.GetBytes(&new_name); d.Get(&flags);
      CLIO_RETURN_IF_ERROR(done("rename"));
      {
        // u8 1, the source and target directories' attributes and the moved inode's when the
        // rename changed them (u8 0 alone: it changed nothing, or swapped two names).
        std::pair<InodeAttr, InodeAttr> dirs;
        InodeAttr moved;
        CLIO_RETURN_IF_ERROR(ns_->Rename(parent, name, new_parent, new_name, flags, &dirs, &moved));
        Encoder e;
        e.Put<uint8_t>(dirs.first.ino != 0 ? 1 : 0);
        if (dirs.first.ino != 0) {
          EncodeAttr(&e, dirs.first);
          EncodeAttr(&e, dirs.second);
          ns_->ForClient(&moved);
          EncodeAttr(&e, moved);
        }
        return e.Take();
      }
    case FsMethod::kReadDir: {
      d.Get(&ino); d.GetBytes(&name); d.Get(&len);
      CLIO_RETURN_IF_ERROR(done("readdir"));
      CLIO_ASSIGN_OR_RETURN(auto entries, ns_->ReadDir(ino, name, len));
      Encoder e;
      e.Put<uint32_t>(static_cast<uint32_t>(entries.size()));
      for (auto& ent : entries) {
        e.PutBytes(ent.name);
        ns_->ForClient(&ent.attr);
        EncodeAttr(&e, ent.attr);
      }
      return e.Take();
    }
    case FsMethod::kOpen:
      d.Get(&ino); d.Get(&flags);
      CLIO_RETURN_IF_ERROR(done("open"));
      return Empty(ns_->Open(ino, (flags & O_TRUNC) != 0));
    case FsMethod::kRelease:
    case FsMethod::kFlush:
    case FsMethod::kFsync:
      d.Get(&ino);
      CLIO_RETURN_IF_ERROR(done("release/flush/fsync"));
      switch (static_cast<FsMethod>(method)) {
        case FsMethod::kRelease: return Empty(ns_->Release(ino));
        case FsMethod::kFlush: {
          bool clean = false;
          CLIO_RETURN_IF_ERROR(ns_->Flush(ino, &clean));
          Encoder e;
          e.Put<uint8_t>(clean ? 1 : 0);
          return e.Take();
        }
        default: return Empty(ns_->Fsync(ino));
      }
    case FsMethod::kRead:
      d.Get(&ino); d.Get(&offset); d.Get(&len);
      CLIO_RETURN_IF_ERROR(done("read"));
      if (len > kMaxReadSize) return InvalidArgument("read of " + std::to_string(len) + " bytes: at most 4 MiB per request");
      return ns_->Read(ino, offset, len);
    case FsMethod::kWrite: {
      uint8_t flags = 0;
      d.Get(&ino); d.Get(&offset); d.GetBytes(&data);
      if (d.remaining() > 0) d.Get(&flags);  // absent from clients older than the flags
      CLIO_RETURN_IF_ERROR(done("write"));
      if (flags & ~kWriteKernelTimes) return InvalidArgument("write: unknown flags " + std::to_string(flags));
      CLIO_ASSIGN_OR_RETURN(uint64_t written, ns_->Write(ino, offset, data, !(flags & kWriteKernelTimes)));
      write_bytes_.Add(static_cast<double>(written));
      Encoder e;
      e.Put<uint32_t>(static_cast<uint32_t>(written));
      return e.Take();
    }
    case FsMethod::kLink:
      d.Get(&ino); d.Get(&new_parent); d.GetBytes(&new_name);
      CLIO_RETURN_IF_ERROR(done("link"));
      return AttrReply(ns_.get(), ns_->Link(ino, new_parent, new_name));
    case FsMethod::kMknod: {
      uint64_t rdev = 0;
      d.Get(&parent); d.GetBytes(&name); d.Get(&mode); d.Get(&rdev); d.Get(&uid); d.Get(&gid);
      CLIO_RETURN_IF_ERROR(done("mknod"));
      return AttrReply(ns_.get(), ns_->Mknod(parent, name, mode, rdev, uid, gid));
    }
    case FsMethod::kSetXattr:
      d.Get(&ino); d.GetBytes(&name); d.GetBytes(&data); d.Get(&flags);
      CLIO_RETURN_IF_ERROR(done("setxattr"));
      return Empty(ns_->SetXattr(ino, name, data, flags));
    case FsMethod::kGetXattr:
      d.Get(&ino); d.GetBytes(&name);
      CLIO_RETURN_IF_ERROR(done("getxattr"));
      return ns_->GetXattr(ino, name);
    case FsMethod::kListXattr:
      d.Get(&ino);
      CLIO_RETURN_IF_ERROR(done("listxattr"));
      return ns_->ListXattr(ino);
    case FsMethod::kRemoveXattr:
      d.Get(&ino); d.GetBytes(&name);
      CLIO_RETURN_IF_ERROR(done("removexattr"));
      return Empty(ns_->RemoveXattr(ino, name));
    case FsMethod::kFallocate: {
      uint64_t length = 0;
      d.Get(&ino); d.Get(&mode); d.Get(&offset); d.Get(&length);
      CLIO_RETURN_IF_ERROR(done("fallocate"));
      return Empty(ns_->Fallocate(ino, mode, offset, length));
    }
    case FsMethod::kLocate: {
      d.Get(&ino);
      CLIO_RETURN_IF_ERROR(done("locate"));
      CLIO_ASSIGN_OR_RETURN(FileLocation f, ns_->Locate(ino));
      return EncodeFileLocation(f);
    }
    case FsMethod::kStatfs: {
      CLIO_RETURN_IF_ERROR(done("statfs"));
      Encoder e;
      EncodeStatfs(&e, ns_->Statfs());
      return e.Take();
    }
    case FsMethod::kAttach: {
      CLIO_RETURN_IF_ERROR(done("attach"));
      Encoder e;
      e.Put<uint64_t>(ns_->incarnation());
      return e.Take();
    }
    case FsMethod::kReattach: {
      uint32_t n = 0;
      d.Get(&n);
      if (n > kMaxReattachNodes)
        return InvalidArgument("reattach of " + std::to_string(n) + " nodes: at most " +
                               std::to_string(kMaxReattachNodes) + " per request");
      std::vector<NodeClaim> claims(d.failed() ? 0 : n);
      for (NodeClaim& c : claims) d.Get(&c.ino) && d.Get(&c.opens);
      uint8_t flags = 0;
      d.Get(&flags);
      CLIO_RETURN_IF_ERROR(done("reattach"));
      if (flags & ~(kReattachComplete | kReattachBegin))
        return InvalidArgument("reattach: unknown flags " + std::to_string(flags));
      CLIO_ASSIGN_OR_RETURN(std::vector<bool> exists, ns_->Reattach(claims, (flags & kReattachBegin) != 0,
                                                                   (flags & kReattachComplete) != 0));
      Encoder e;
      e.Put<uint32_t>(n);
      for (bool x : exists) e.Put<uint8_t>(x ? 1 : 0);
      return e.Take();
    }
  }
  return Status(Code::kNotSupported, "clio_fs: unknown method " + std::to_string(method));
}

}  // namespace clio
