// The S3 store: path-style requests to S3_ENDPOINT (MinIO, s3rver, the test stand-in) or
// virtual-hosted https requests to AWS, signed with SigV4 (sigv4.h) and checked with
// Content-MD5 and a signed payload hash.
#include <ctime>

#include "common/log.h"
#include "storage/objstore/object_store.h"
#include "storage/objstore/sigv4.h"
#include "storage/objstore/store_base.h"

namespace clio {
namespace {

const std::string kEmptySha256 = sigv4::Sha256Hex("");

class S3Store final : public StoreBase {
 public:
  S3Store(ObjectLocation location, http::Endpoint endpoint, bool path_style, S3Settings settings,
          const ObjectStoreOptions& options)
      : StoreBase("s3", std::move(location), std::move(endpoint), options),
        path_style_(path_style),
        settings_(std::move(settings)) {}

  Status EnsureBucket(bool allow_create) override {
    CLIO_ASSIGN_OR_RETURN(http::Response head, Call(Describe() + ": HEAD bucket", [&] {
                            return Build("HEAD", "", "", "", {});
                          }));
    if (head.status == 200) return Status::Ok();
    if (head.status != 404) return HttpError("HEAD bucket", "", head);
    if (!allow_create) {
      return NotFound("s3 bucket '" + location_.bucket +
                      "' does not exist (set S3_ALLOW_BUCKET_CREATE=1 to create it)");
    }
    std::string body;
    if (settings_.region != "us-east-1") {
      body = "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
             "<LocationConstraint>" + settings_.region + "</LocationConstraint>"
             "</CreateBucketConfiguration>";
    }
    CLIO_ASSIGN_OR_RETURN(http::Response put, Call(Describe() + ": create bucket", [&] {
                            return Build("PUT", "", "", body, {});
                          }));
    // 409 BucketAlreadyOwnedByYou: another node of ours created it first.
    if (put.status == 200 ||
        (put.status == 409 && put.body.find("BucketAlreadyOwnedByYou") != std::string::npos)) {
      CLIO_LOG_INFO("s3: created bucket '{}' in {}", location_.bucket, settings_.region);
      return Status::Ok();
    }
    return HttpError("create bucket", "", put);
  }

  Status Put(const std::string& key, std::string_view data) override {
    const std::string md5 = sigv4::ContentMd5(data);
    const std::string sha = sigv4::Sha256Hex(data);
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("PUT", key), [&] {
                            return Build("PUT", key, "", data, {{"content-md5", md5}}, sha);
                          }));
    if (r.status != 200) return HttpError("PUT", key, r);
    CountBytesPut(data.size());
    return Status::Ok();
  }

  Status Get(const std::string& key, uint64_t offset, uint64_t len, char* out) override {
    if (len == 0) return Status::Ok();
    const std::string range = RangeValue(offset, len);
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("GET", key), [&] {
                            return Build("GET", key, "", "", {{"range", range}});
                          }));
    return FinishRangedGet("GET", key, What("GET", key), r, offset, len, out);
  }

  Result<std::optional<std::string>> GetAll(const std::string& key) override {
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("GET", key), [&] {
                            return Build("GET", key, "", "", {});
                          }));
    if (r.status == 404) return std::optional<std::string>();
    if (r.status != 200) return HttpError("GET", key, r);
    CountBytesGot(r.body.size());
    return std::optional<std::string>(std::move(r.body));
  }

  Status Delete(const std::string& key) override {
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("DELETE", key), [&] {
                            return Build("DELETE", key, "", "", {});
                          }));
    if (r.status == 204 || r.status == 200 || r.status == 404) return Status::Ok();
    return HttpError("DELETE", key, r);
  }

 private:
  std::string What(std::string_view op, const std::string& key) const {
    return "s3 bucket '" + location_.bucket + "' key '" + key + "': " + std::string(op);
  }

  // A signed request for `key` (empty: the bucket itself).
  http::Request Build(const std::string& method, const std::string& key, const std::string& query,
                      std::string_view body, sigv4::Headers extra,
                      const std::string& payload_sha = "") const {
    std::string path = path_style_ ? "/" + location_.bucket : "";
    if (!key.empty()) path += "/" + sigv4::UriEncode(key, /*keep_slash=*/true);
    if (path.empty()) path = "/";
    sigv4::Request sr;
    sr.method = method;
    sr.path = path;
    sr.query = query;
    sr.payload_sha256 = payload_sha.empty() ? (body.empty() ? kEmptySha256 : sigv4::Sha256Hex(body))
                                            : payload_sha;
    const std::string amz_date = sigv4::AmzDate(static_cast<int64_t>(std::time(nullptr)));
    sr.headers = {{"host", client_.endpoint().HostHeader()},
                  {"x-amz-date", amz_date},
                  {"x-amz-content-sha256", sr.payload_sha256}};
    if (!settings_.session_token.empty()) {
      sr.headers.emplace_back("x-amz-security-token", settings_.session_token);
    }
    for (auto& h : extra) sr.headers.push_back(std::move(h));
    const sigv4::Signed s =
        sigv4::Sign(sr, {settings_.access_key, settings_.secret_key, settings_.session_token},
                    settings_.region, "s3", amz_date);
    http::Request req;
    req.method = method;
    req.target = query.empty() ? path : path + "?" + query;
    req.headers = std::move(sr.headers);
    req.headers.emplace_back("Authorization", s.authorization);
    req.body = body;
    return req;
  }

  const bool path_style_;
  const S3Settings settings_;
};

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenS3Store(const ObjectLocation& location,
                                                 const S3Settings& settings,
                                                 const ObjectStoreOptions& options) {
  if (settings.access_key.empty() || settings.secret_key.empty()) {
    return PermissionDenied("s3: no access key or secret key");
  }
  http::Endpoint endpoint;
  bool path_style = false;
  if (!settings.endpoint.empty()) {
    auto e = http::ParseEndpoint(settings.endpoint);
    if (!e.ok()) return e.status().WithContext("S3_ENDPOINT");
    endpoint = std::move(e).value();
    path_style = true;
  } else {
    if (location.bucket.find('.') != std::string::npos) {
      // A dotted bucket does not match the wildcard certificate of virtual-hosted names.
      endpoint = {true, "s3." + settings.region + ".amazonaws.com", 443};
      path_style = true;
    } else {
      endpoint = {true, location.bucket + ".s3." + settings.region + ".amazonaws.com", 443};
    }
  }
  return std::unique_ptr<ObjectStore>(
      new S3Store(location, std::move(endpoint), path_style, settings, options));
}

}  // namespace clio
