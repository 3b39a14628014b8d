#include "common/status.h"

#include <array>
#include <cerrno>
#include <cstring>

namespace clio {
namespace {

// The one table of codes. Order must match enum Code.
constexpr std::array<std::string_view, static_cast<size_t>(Code::kCount)> kStatusCodeTable = {
    "Ok",           "InvalidArgument",  "NotFound",    "AlreadyExists", "NoSpace",
    "IoError",      "Corruption",       "NotDirectory", "IsDirectory",  "NotEmpty",
    "PermissionDenied", "Unavailable",  "Busy",        "NotSupported",  "OutOfRange",
    "ConfigError",  "NameTooLong",      "NoData",      "NotPermitted",  "NoSuchOffset",
    "RangeError",   "Internal",         "Stale",
};

Code CodeFromErrno(int err) {
  switch (err) {
    case 0: return Code::kOk;
    case ENOENT: return Code::kNotFound;
    case EEXIST: return Code::kAlreadyExists;
    case ENOSPC: case EDQUOT: case EFBIG: return Code::kNoSpace;
    case ENOTDIR: return Code::kNotDirectory;
    case EISDIR: return Code::kIsDirectory;
    case ENOTEMPTY: return Code::kNotEmpty;
    case EACCES: case EROFS: return Code::kPermissionDenied;
    case EPERM: return Code::kNotPermitted;
    case ENODATA: return Code::kNoData;
    case ENXIO: return Code::kNoSuchOffset;
    case ERANGE: return Code::kRangeError;
    case EINVAL: return Code::kInvalidArgument;
    case EBUSY: return Code::kBusy;
    case ENOSYS: case EOPNOTSUPP: return Code::kNotSupported;
    case ECONNREFUSED: case ECONNRESET: case EPIPE: case ENOTCONN: return Code::kUnavailable;
    case ENAMETOOLONG: return Code::kNameTooLong;
    case ESTALE: return Code::kStale;
    default: return Code::kIoError;
  }
}

}  // namespace

std::string_view CodeName(Code code) {
  auto i = static_cast<size_t>(code);
  return i < kStatusCodeTable.size() ? kStatusCodeTable[i] : "Unknown";
}

Status Status::FromErrno(int err, std::string_view context) {
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(err);
  return Status(CodeFromErrno(err), std::move(msg));
}

std::string Status::ToString() const {
  if (ok()) return "Ok";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace clio
