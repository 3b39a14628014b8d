// The GCS store: the JSON API (media uploads, alt=media downloads) with an OAuth2 bearer
// token, over keep-alive connections reused across calls (the seed's one connection per call
// is a limitation, not a rule). Uploads carry x-goog-hash md5 so the server checks the bytes.
#include "common/log.h"
#include "storage/objstore/object_store.h"
#include "storage/objstore/sigv4.h"
#include "storage/objstore/store_base.h"

namespace clio {
namespace {

class GcsStore final : public StoreBase {
 public:
  GcsStore(ObjectLocation location, http::Endpoint endpoint, GcsSettings settings,
           const ObjectStoreOptions& options)
      : StoreBase("gcs", std::move(location), std::move(endpoint), options),
        settings_(std::move(settings)) {}

  Status EnsureBucket(bool allow_create) override {
    const std::string bucket_path = "/storage/v1/b/" + Enc(location_.bucket);
    CLIO_ASSIGN_OR_RETURN(http::Response get, Call(Describe() + ": get bucket", [&] {
                            return Build("GET", bucket_path, "", {});
                          }));
    if (get.status == 200) return Status::Ok();
    if (get.status != 404) return HttpError("get bucket", "", get);
    if (!allow_create) {
      return NotFound("gcs bucket '" + location_.bucket +
                      "' does not exist (set GCS_ALLOW_BUCKET_CREATE=1 to create it)");
    }
    const std::string body = "{\"name\":\"" + location_.bucket + "\"}";
    CLIO_ASSIGN_OR_RETURN(
        http::Response post, Call(Describe() + ": create bucket", [&] {
          return Build("POST", "/storage/v1/b?project=" + Enc(settings_.project_id), body,
                       {{"Content-Type", "application/json"}});
        }));
    // 409 is also "the name is taken by someone else": only "you already own it" is success.
    if (post.status == 200 ||
        (post.status == 409 && post.body.find("already own") != std::string::npos)) {
      CLIO_LOG_INFO("gcs: bucket '{}' ready in project {}", location_.bucket, settings_.project_id);
      return Status::Ok();
    }
    return HttpError("create bucket", "", post);
  }

  Status Put(const std::string& key, std::string_view data) override {
    const std::string target = "/upload/storage/v1/b/" + Enc(location_.bucket) +
                               "/o?uploadType=media&name=" + Enc(key);
    const std::string md5 = "md5=" + sigv4::ContentMd5(data);
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("upload", key), [&] {
                            return Build("POST", target, data,
                                         {{"Content-Type", "application/octet-stream"},
                                          {"x-goog-hash", md5}});
                          }));
    if (r.status != 200) return HttpError("upload", key, r);
    CountBytesPut(data.size());
    return Status::Ok();
  }

  Status Get(const std::string& key, uint64_t offset, uint64_t len, char* out) override {
    if (len == 0) return Status::Ok();
    const std::string range = RangeValue(offset, len);
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("download", key), [&] {
                            return Build("GET", ObjectPath(key) + "?alt=media", "",
                                         {{"Range", range}});
                          }));
    return FinishRangedGet("download", key, What("download", key), r, offset, len, out);
  }

  Result<std::optional<std::string>> GetAll(const std::string& key) override {
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("download", key), [&] {
                            return Build("GET", ObjectPath(key) + "?alt=media", "", {});
                          }));
    if (r.status == 404) return std::optional<std::string>();
    if (r.status != 200) return HttpError("download", key, r);
    CountBytesGot(r.body.size());
    return std::optional<std::string>(std::move(r.body));
  }

  Status Delete(const std::string& key) override {
    CLIO_ASSIGN_OR_RETURN(http::Response r, Call(What("delete", key), [&] {
                            return Build("DELETE", ObjectPath(key), "", {});
                          }));
    if (r.status == 204 || r.status == 200 || r.status == 404) return Status::Ok();
    return HttpError("delete", key, r);
  }

 private:
  static std::string Enc(const std::string& s) { return sigv4::UriEncode(s, /*keep_slash=*/false); }
  std::string ObjectPath(const std::string& key) const {
    return "/storage/v1/b/" + Enc(location_.bucket) + "/o/" + Enc(key);
  }
  std::string What(std::string_view op, const std::string& key) const {
    return "gcs bucket '" + location_.bucket + "' key '" + key + "': " + std::string(op);
  }

  http::Request Build(const std::string& method, std::string target, std::string_view body,
                      http::Headers extra) const {
    http::Request req;
    req.method = method;
    req.target = std::move(target);
    req.headers = {{"Host", client_.endpoint().HostHeader()},
                   {"Authorization", "Bearer " + settings_.token}};
    for (auto& h : extra) req.headers.push_back(std::move(h));
    req.body = body;
    return req;
  }

  const GcsSettings settings_;
};

}  // namespace

Result<std::unique_ptr<ObjectStore>> OpenGcsStore(const ObjectLocation& location,
                                                  const GcsSettings& settings,
                                                  const ObjectStoreOptions& options) {
  if (settings.token.empty()) return PermissionDenied("gcs: no access token");
  auto e = http::ParseEndpoint(settings.endpoint);
  if (!e.ok()) return e.status().WithContext("GCS_ENDPOINT");
  return std::unique_ptr<ObjectStore>(new GcsStore(location, std::move(e).value(), settings, options));
}

}  // namespace clio
