#include "fs/protocol/errno_map.h"

#include <cerrno>

namespace clio {

int ToErrno(const Status& s) {
  switch (s.code()) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kNotFound: return ENOENT;
    case Code::kAlreadyExists: return EEXIST;
    case Code::kNoSpace: return ENOSPC;
    case Code::kIoError: return EIO;
    case Code::kCorruption: return EIO;
    case Code::kNotDirectory: return ENOTDIR;
    case Code::kIsDirectory: return EISDIR;
    case Code::kNotEmpty: return ENOTEMPTY;
    case Code::kPermissionDenied: return EACCES;
    case Code::kUnavailable: return ENOTCONN;
    case Code::kBusy: return EBUSY;
    case Code::kNotSupported: return EOPNOTSUPP;
    case Code::kOutOfRange: return EFBIG;
    case Code::kConfigError: return EINVAL;
    case Code::kNameTooLong: return ENAMETOOLONG;
    case Code::kNoData: return ENODATA;
    case Code::kNotPermitted: return EPERM;
    case Code::kNoSuchOffset: return ENXIO;
    case Code::kRangeError: return ERANGE;
    case Code::kInternal: return EIO;
    case Code::kStale: return ESTALE;
    case Code::kCount: break;
  }
  return EIO;
}

}  // namespace clio
