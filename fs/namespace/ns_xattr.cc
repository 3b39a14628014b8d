// Extended attributes: one metadata key per attribute, "a/" + be64(ino) + name.
#include <sys/xattr.h>

#include "fs/namespace/namespace.h"
#include "fs/namespace/ns_keys.h"
#include "storage/kv.h"

namespace clio {

using namespace ns;

namespace {

std::string XattrPrefix(uint64_t ino) {
  std::string k = "a/";
  AppendBigEndian64(&k, ino);
  return k;
}

Status ValidateXattrName(std::string_view name) {
  if (name.empty()) return InvalidArgument("empty attribute name");
  if (name.size() > kMaxXattrNameLen) return Status(Code::kRangeError, "attribute name longer than 255 bytes");
  if (name.find('\0') != std::string_view::npos) return InvalidArgument("attribute name contains NUL");
  // The namespaces Linux defines that CLIO stores; system.* (ACLs) is not supported yet.
  for (std::string_view ns : {"user.", "trusted.", "security."})
    if (name.substr(0, ns.size()) == ns && name.size() > ns.size()) return Status::Ok();
  return Status(Code::kNotSupported, "attribute namespace not supported: '" + std::string(name) + "'");
}

}  // namespace

Status Namespace::SetXattr(uint64_t ino, std::string_view name, std::string_view value, uint32_t flags) {
  CLIO_RETURN_IF_ERROR(ValidateXattrName(name));
  if (value.size() > kMaxXattrValueLen) return Status(Code::kNoSpace, "attribute value larger than 64 KiB");
  if (flags & ~static_cast<uint32_t>(XATTR_CREATE | XATTR_REPLACE)) return InvalidArgument("unknown setxattr flags");
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(auto iv, kv_->Get(InodeKey(ino)));
  if (!iv) return NoInode(ino);
  std::string target;
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*iv, &target));
  std::string key = XattrPrefix(ino) + std::string(name);
  CLIO_ASSIGN_OR_RETURN(auto existing, kv_->Get(key));
  if ((flags & XATTR_CREATE) && existing) return Status(Code::kAlreadyExists, "attribute exists");
  if ((flags & XATTR_REPLACE) && !existing) return Status(Code::kNoData, "no such attribute");
  a.ctime_ns = NowNs();
  KvBatch b;
  b.Put(key, std::string(value));
  b.Put(InodeKey(ino), EncodeInode(a, target));
  return Commit(std::move(b));
}

Result<std::string> Namespace::GetXattr(uint64_t ino, std::string_view name) {
  CLIO_RETURN_IF_ERROR(ValidateXattrName(name));
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  (void)a;
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(XattrPrefix(ino) + std::string(name)));
  if (!v) return Status(Code::kNoData, "no such attribute");
  return *v;
}

Result<std::string> Namespace::ListXattr(uint64_t ino) {
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, LoadInode(ino));
  (void)a;
  std::string prefix = XattrPrefix(ino);
  CLIO_ASSIGN_OR_RETURN(KvPairs all, kv_->Scan(prefix, "", 0));
  std::string out;
  for (auto& [k, _] : all) {
    out.append(k, prefix.size(), std::string::npos);
    out.push_back('\0');
  }
  return out;
}

Status Namespace::RemoveXattr(uint64_t ino, std::string_view name) {
  CLIO_RETURN_IF_ERROR(ValidateXattrName(name));
  MutexLock l(&mu_);
  CLIO_ASSIGN_OR_RETURN(auto iv, kv_->Get(InodeKey(ino)));
  if (!iv) return NoInode(ino);
  std::string target;
  CLIO_ASSIGN_OR_RETURN(InodeAttr a, DecodeInode(*iv, &target));
  std::string key = XattrPrefix(ino) + std::string(name);
  CLIO_ASSIGN_OR_RETURN(auto existing, kv_->Get(key));
  if (!existing) return Status(Code::kNoData, "no such attribute");
  a.ctime_ns = NowNs();
  KvBatch b;
  b.Delete(key);
  b.Put(InodeKey(ino), EncodeInode(a, target));
  return Commit(std::move(b));
}

Status Namespace::DeleteXattrs(uint64_t ino, KvBatch* batch) {
  CLIO_ASSIGN_OR_RETURN(KvPairs all, kv_->Scan(XattrPrefix(ino), "", 0));
  for (auto& [k, _] : all) batch->Delete(k);
  return Status::Ok();
}

}  // namespace clio
