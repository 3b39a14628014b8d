// What the s3 and gcs stores share (internal to storage/objstore): the HTTP client, the retry
// loop with backoff and jitter, counters, and error messages that name the bucket, the key
// and the HTTP status.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "storage/objstore/http.h"
#include "storage/objstore/object_store.h"

namespace clio {

class StoreBase : public ObjectStore {
 public:
  std::string Describe() const override { return scheme_ + "://" + location_.bucket +
                                                  (location_.prefix.empty() ? "" : "/" + location_.prefix); }
  ObjectStoreStats Stats() const override;

 protected:
  StoreBase(std::string scheme, ObjectLocation location, http::Endpoint endpoint,
            const ObjectStoreOptions& options);

  // Builds a request for attempt n (re-signed each time) and sends it, retrying transport
  // failures and retryable statuses within the retry budget. Returns the final response (any
  // status) or, when the budget ran out, IoError naming `what`, the attempts and the last
  // failure.
  Result<http::Response> Call(const std::string& what,
                              const std::function<http::Request()>& build);

  // "<scheme> bucket 'B' key 'K': <op>: HTTP <status> <code>: <message>" from an error
  // response; `key` may be empty for bucket calls. The code and message come from the S3 XML
  // or GCS JSON error body when there is one, else the first bytes of the body.
  std::string Failure(std::string_view op, const std::string& key, const http::Response& r) const;
  // The Status for an unexpected HTTP status: PermissionDenied for 401/403, NotFound for 404,
  // InvalidArgument for other 4xx, IoError otherwise.
  Status HttpError(std::string_view op, const std::string& key, const http::Response& r) const;

  // "bytes=<offset>-<offset+len-1>" (len > 0).
  static std::string RangeValue(uint64_t offset, uint64_t len);
  // The answer to a ranged GET of `key` (operation `op`, described by `what`): 404 ->
  // NotFound, 416 -> IoError (the object is shorter than the block), another status ->
  // HttpError, else the bytes copied into `out` (CopyRangedBody) and counted.
  Status FinishRangedGet(std::string_view op, const std::string& key, const std::string& what,
                         const http::Response& r, uint64_t offset, uint64_t len, char* out);

  void CountBytesPut(uint64_t n) { bytes_put_.fetch_add(n); }
  void CountBytesGot(uint64_t n) { bytes_got_.fetch_add(n); }

  const std::string scheme_;
  const ObjectLocation location_;
  const ObjectStoreOptions options_;
  http::Client client_;

 private:
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> retries_{0};
  std::atomic<uint64_t> bytes_put_{0};
  std::atomic<uint64_t> bytes_got_{0};
};

// Copies the answer to a ranged GET of [offset, offset+len) into `out`: a 206 whose
// Content-Range and length match, or a 200 with the whole object (a server that ignores Range).
// IoError naming `what` otherwise.
Status CopyRangedBody(const std::string& what, const http::Response& r, uint64_t offset,
                      uint64_t len, char* out);

std::string GetEnv(const char* name);
// A secret: the file `name` in lower case in $CREDENTIALS_DIRECTORY (systemd's LoadCredential=),
// its first line; else the environment variable `name`.
std::string GetSecret(const char* name);

}  // namespace clio
