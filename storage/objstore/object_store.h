// ObjectStore: the few object calls the s3 and gcs bdev transports make (put, ranged get,
// delete, bucket check/creation), with retries. One implementation per service (s3_store.cc,
// gcs_store.cc), both over http.h. Errors name the service, bucket, key and HTTP status.
//
// Retries: transport failures (refused, reset, timeout, truncated body) and HTTP 408, 429,
// 500, 502, 503, 504 are retried with exponential backoff and full jitter, until the call's
// retry budget is spent; then IoError. Every call the transports make is idempotent (a PUT
// replaces the whole object, a DELETE of a missing object succeeds), so a retry after a lost
// response is safe.
//
// Thread safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace clio {

// Where a tier's objects live: the pool name "bucket", "bucket/prefix",
// "s3://bucket/prefix" or "gcs://bucket/prefix".
struct ObjectLocation {
  std::string bucket;
  std::string prefix;  // without a trailing '/'; may be empty
  // "<prefix>/<name>", or "<name>" without a prefix.
  std::string Key(std::string_view name) const;
};
// `scheme` is "s3" or "gcs"; the other scheme's URL is refused. Bucket names are checked
// against the rules S3 and GCS share (3-63 characters of a-z 0-9 . -, starting and ending
// with a letter or digit, no "..", not an IP address); a prefix may not contain "//", "./"
// segments or control characters.
Result<ObjectLocation> ParseObjectLocation(std::string_view name, std::string_view scheme);

struct RetryOptions {
  std::chrono::milliseconds budget{60000};  // total time one call may spend retrying
  std::chrono::milliseconds base{50};       // first backoff ceiling, doubled per attempt
  std::chrono::milliseconds max{5000};      // backoff ceiling
};

struct ObjectStoreOptions {
  std::chrono::milliseconds request_timeout{30000};
  RetryOptions retry;
};

struct ObjectStoreStats {
  uint64_t requests = 0;      // HTTP requests sent, retries included
  uint64_t retries = 0;
  uint64_t connections = 0;   // TCP connections opened
  uint64_t bytes_put = 0;
  uint64_t bytes_got = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Checks the bucket exists; creates it when missing and `allow_create`, else NotFound with a
  // message naming the setting that would allow it.
  virtual Status EnsureBucket(bool allow_create) = 0;
  // Stores `data` as object `key` (whole object), with an integrity checksum the server checks.
  virtual Status Put(const std::string& key, std::string_view data) = 0;
  // Reads `len` bytes at `offset` of object `key` into `out`. NotFound when the object does not
  // exist; IoError when it is shorter than asked.
  virtual Status Get(const std::string& key, uint64_t offset, uint64_t len, char* out) = 0;
  // The whole object; nullopt when it does not exist.
  virtual Result<std::optional<std::string>> GetAll(const std::string& key) = 0;
  // Removes object `key`; a missing object is not an error.
  virtual Status Delete(const std::string& key) = 0;

  // "s3://bucket/prefix" / "gcs://bucket/prefix".
  virtual std::string Describe() const = 0;
  virtual ObjectStoreStats Stats() const = 0;
};

// S3 settings from the environment of the process (seeds/bdev-module.txt):
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (required), AWS_SESSION_TOKEN,
// AWS_DEFAULT_REGION (us-east-1), S3_ENDPOINT (path-style when set; unset: AWS
// virtual-hosted https), S3_ALLOW_BUCKET_CREATE=1.
struct S3Settings {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string region = "us-east-1";
  std::string endpoint;  // empty: https://<bucket>.s3.<region>.amazonaws.com
  bool allow_bucket_create = false;
};
Result<S3Settings> S3SettingsFromEnv();

// GCS settings: GCS_ACCESS_TOKEN (required), GCS_ENDPOINT
// (https://storage.googleapis.com), GCS_PROJECT_ID (clio-prototype; bucket creation only),
// GCS_ALLOW_BUCKET_CREATE=1.
struct GcsSettings {
  std::string token;
  std::string endpoint = "https://storage.googleapis.com";
  std::string project_id = "clio-prototype";
  bool allow_bucket_create = false;
};
Result<GcsSettings> GcsSettingsFromEnv();

Result<std::unique_ptr<ObjectStore>> OpenS3Store(const ObjectLocation& location,
                                                 const S3Settings& settings,
                                                 const ObjectStoreOptions& options);
Result<std::unique_ptr<ObjectStore>> OpenGcsStore(const ObjectLocation& location,
                                                  const GcsSettings& settings,
                                                  const ObjectStoreOptions& options);

}  // namespace clio
