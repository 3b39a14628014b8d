// Status and Result<T>: the one error vocabulary of CLIO.
//
// Every fallible call returns a [[nodiscard]] Status or Result<T>. Codes live in one table
// (kStatusCodeTable in status.cc). errno is converted in exactly two places: FromErrno() at the
// syscall wrapper, and fs/protocol/errno_map.cc (Status -> errno) for FUSE replies.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace clio {

enum class Code : uint16_t {
  kOk = 0,
  kInvalidArgument,   // caller passed something malformed (bad size, bad key, bad frame)
  kNotFound,          // no such file, key, pool, tier
  kAlreadyExists,     // create of an existing name
  kNoSpace,           // a tier or the host filesystem is full
  kIoError,           // a device or file failed (EIO)
  kCorruption,        // on-disk or on-wire data failed a checksum or format check
  kNotDirectory,      // path component is not a directory
  kIsDirectory,       // file operation on a directory
  kNotEmpty,          // rmdir of a non-empty directory
  kPermissionDenied,  // EACCES / EPERM
  kUnavailable,       // runtime not running, connection lost (retryable)
  kBusy,              // mount point busy, resource in use
  kNotSupported,      // operation or flag not implemented
  kOutOfRange,        // offset or size past a bound
  kConfigError,       // bad configuration (exit status 2)
  kNameTooLong,       // ENAMETOOLONG
  kNoData,            // no such extended attribute (ENODATA)
  kNotPermitted,      // the operation is not allowed on this object (EPERM)
  kNoSuchOffset,      // SEEK_DATA/SEEK_HOLE past the data (ENXIO)
  kRangeError,        // a caller's buffer is too small (ERANGE)
  kInternal,          // a bug: an invariant did not hold
  kStale,             // a node id the server no longer knows: removed, or lost in a crash (ESTALE)
  kCount
};

// Name of a code, e.g. "NoSpace". Stable: used in logs and JSON.
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  // Converts a syscall errno into a Status; `context` names what failed (file, tier, call).
  static Status FromErrno(int err, std::string_view context);

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NoSpace: tier 'file0': host filesystem full"
  std::string ToString() const;

  // Prepends context: "opening config: " + message.
  Status WithContext(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

// Error constructors that read well at call sites.
inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status NoSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
inline Status IoError(std::string m) { return {Code::kIoError, std::move(m)}; }
inline Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
inline Status ConfigError(std::string m) { return {Code::kConfigError, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }

}  // namespace clio

// Propagates a non-ok Status from an expression returning Status.
#define CLIO_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::clio::Status clio_status__ = (expr);      \
    if (!clio_status__.ok()) return clio_status__; \
  } while (0)

#define CLIO_CONCAT_INNER_(a, b) a##b
#define CLIO_CONCAT_(a, b) CLIO_CONCAT_INNER_(a, b)
// `CLIO_ASSIGN_OR_RETURN(auto x, Foo());` declares x from a Result or returns its Status.
#define CLIO_ASSIGN_OR_RETURN(decl, expr)                              \
  auto CLIO_CONCAT_(clio_result__, __LINE__) = (expr);                 \
  if (!CLIO_CONCAT_(clio_result__, __LINE__).ok())                     \
    return CLIO_CONCAT_(clio_result__, __LINE__).status();             \
  decl = std::move(CLIO_CONCAT_(clio_result__, __LINE__)).value()
