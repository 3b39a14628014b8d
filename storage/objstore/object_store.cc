#include "storage/objstore/object_store.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "common/log.h"
#include "storage/objstore/store_base.h"

namespace clio {
namespace {

bool IsRetryableStatus(int s) {
  return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

// The text between <Tag> and </Tag>, or empty.
std::string XmlField(const std::string& body, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  size_t a = body.find(open);
  if (a == std::string::npos) return {};
  a += open.size();
  size_t b = body.find(close, a);
  if (b == std::string::npos) return {};
  return body.substr(a, std::min<size_t>(b - a, 200));
}

// "message" of a GCS JSON error, or empty.
std::string JsonMessage(const std::string& body) {
  size_t a = body.find("\"message\"");
  if (a == std::string::npos) return {};
  a = body.find('"', body.find(':', a) + 1);
  if (a == std::string::npos) return {};
  size_t b = body.find('"', a + 1);
  if (b == std::string::npos) return {};
  return body.substr(a + 1, std::min<size_t>(b - a - 1, 200));
}

// Printable first bytes of a body that is neither XML nor JSON.
std::string Snippet(const std::string& body) {
  std::string out;
  for (char c : body.substr(0, 80)) out += (c >= 32 && c < 127) ? c : '?';
  return out;
}

bool IsIpAddress(std::string_view s) {
  int dots = 0;
  for (char c : s) {
    if (c == '.') ++dots;
    else if (c < '0' || c > '9') return false;
  }
  return dots == 3;
}

}  // namespace

std::string GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

std::string GetSecret(const char* name) {
  // systemd's LoadCredential=: a file named after the variable, in lower case, in
  // $CREDENTIALS_DIRECTORY (readable by the service alone, never in `systemctl show`).
  if (const std::string dir = GetEnv("CREDENTIALS_DIRECTORY"); !dir.empty()) {
    std::string file = name;
    for (char& c : file) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::ifstream in(dir + "/" + file);
    std::string value;
    if (in && std::getline(in, value)) {
      while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
      if (!value.empty()) return value;
    }
  }
  return GetEnv(name);
}

std::string ObjectLocation::Key(std::string_view name) const {
  return prefix.empty() ? std::string(name) : prefix + "/" + std::string(name);
}

Result<ObjectLocation> ParseObjectLocation(std::string_view name, std::string_view scheme) {
  const std::string where = std::string(scheme) + " pool name '" + std::string(name) + "'";
  std::string_view rest = name;
  const std::string own = std::string(scheme) + "://";
  if (rest.substr(0, own.size()) == own) {
    rest.remove_prefix(own.size());
  } else if (rest.find("://") != std::string_view::npos) {
    return InvalidArgument(where + ": expected BUCKET, BUCKET/PREFIX or " + own + "BUCKET/PREFIX");
  }
  ObjectLocation loc;
  const size_t slash = rest.find('/');
  loc.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) loc.prefix = std::string(rest.substr(slash + 1));
  while (!loc.prefix.empty() && loc.prefix.back() == '/') loc.prefix.pop_back();

  const std::string& b = loc.bucket;
  auto bad_bucket = [&](const std::string& why) {
    return InvalidArgument(where + ": bucket name '" + b + "' " + why);
  };
  if (b.size() < 3 || b.size() > 63) return bad_bucket("must be 3 to 63 characters long");
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) {
      return bad_bucket("may hold only lower-case letters, digits, '.' and '-'");
    }
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(b.front()) || !alnum(b.back())) return bad_bucket("must start and end with a letter or digit");
  if (b.find("..") != std::string::npos) return bad_bucket("may not contain '..'");
  if (IsIpAddress(b)) return bad_bucket("may not be an IP address");

  const std::string& p = loc.prefix;
  if (p.size() > 512) return InvalidArgument(where + ": prefix longer than 512 bytes");
  if (!p.empty() && p.front() == '/') return InvalidArgument(where + ": prefix starts with '/'");
  if (p.find("//") != std::string::npos) return InvalidArgument(where + ": prefix contains '//'");
  for (unsigned char c : p) {
    if (c < 32 || c == 127) return InvalidArgument(where + ": prefix contains a control character");
  }
  const std::string padded = "/" + p + "/";
  if (padded.find("/./") != std::string::npos || padded.find("/../") != std::string::npos) {
    return InvalidArgument(where + ": prefix contains a '.' or '..' segment");
  }
  return loc;
}

Result<S3Settings> S3SettingsFromEnv() {
  S3Settings s;
  s.access_key = GetSecret("AWS_ACCESS_KEY_ID");
  s.secret_key = GetSecret("AWS_SECRET_ACCESS_KEY");
  if (s.access_key.empty() || s.secret_key.empty()) {
    return PermissionDenied(
        "s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set, as systemd credentials "
        "(LoadCredential=aws_access_key_id:FILE, in $CREDENTIALS_DIRECTORY) or in the environment of the "
        "process that starts the runtime (missing: " +
        std::string(s.access_key.empty() ? "AWS_ACCESS_KEY_ID" : "") +
        (s.access_key.empty() && s.secret_key.empty() ? ", " : "") +
        (s.secret_key.empty() ? "AWS_SECRET_ACCESS_KEY" : "") + ")");
  }
  s.session_token = GetSecret("AWS_SESSION_TOKEN");
  if (std::string r = GetEnv("AWS_DEFAULT_REGION"); !r.empty()) s.region = r;
  s.endpoint = GetEnv("S3_ENDPOINT");
  s.allow_bucket_create = GetEnv("S3_ALLOW_BUCKET_CREATE") == "1";
  return s;
}

Result<GcsSettings> GcsSettingsFromEnv() {
  GcsSettings s;
  s.token = GetSecret("GCS_ACCESS_TOKEN");
  if (s.token.empty()) {
    return PermissionDenied(
        "gcs: GCS_ACCESS_TOKEN must be set, as a systemd credential (LoadCredential=gcs_access_token:FILE) "
        "or in the environment of the process that starts the runtime (e.g. the output of "
        "`gcloud auth print-access-token`)");
  }
  if (std::string e = GetEnv("GCS_ENDPOINT"); !e.empty()) s.endpoint = e;
  if (std::string p = GetEnv("GCS_PROJECT_ID"); !p.empty()) s.project_id = p;
  s.allow_bucket_create = GetEnv("GCS_ALLOW_BUCKET_CREATE") == "1";
  return s;
}

StoreBase::StoreBase(std::string scheme, ObjectLocation location, http::Endpoint endpoint,
                     const ObjectStoreOptions& options)
    : scheme_(std::move(scheme)),
      location_(std::move(location)),
      options_(options),
      client_(std::move(endpoint), http::ClientOptions{options.request_timeout}) {}

ObjectStoreStats StoreBase::Stats() const {
  ObjectStoreStats s;
  s.requests = requests_.load();
  s.retries = retries_.load();
  s.connections = client_.connections_opened();
  s.bytes_put = bytes_put_.load();
  s.bytes_got = bytes_got_.load();
  return s;
}

Result<http::Response> StoreBase::Call(const std::string& what,
                                       const std::function<http::Request()>& build) {
  thread_local std::minstd_rand rng(std::random_device{}());
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + options_.retry.budget;
  std::string last;
  std::string last_answer;  // the last error the server itself answered, if any
  for (int attempt = 0;; ++attempt) {
    requests_.fetch_add(1);
    Result<http::Response> r = client_.Send(build(), deadline);
    // S3's 400 RequestTimeout: the server gave up waiting for our body; safe to send again.
    const bool retryable = !r.ok() || IsRetryableStatus(r->status) ||
                           (r->status == 400 && XmlField(r->body, "Code") == "RequestTimeout");
    if (!retryable) return r;
    last = r.ok() ? "HTTP " + std::to_string(r->status) + " " +
                        (XmlField(r->body, "Code").empty() ? Snippet(r->body)
                                                           : XmlField(r->body, "Code"))
                  : r.status().message();
    if (r.ok()) last_answer = last;
    // Full jitter: a random wait up to min(max, base * 2^attempt).
    const auto ceiling = std::min<std::chrono::milliseconds>(
        options_.retry.max, options_.retry.base * (1ll << std::min(attempt, 20)));
    const auto wait = std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(0, std::max<int64_t>(ceiling.count(), 1))(rng));
    const auto now = std::chrono::steady_clock::now();
    if (now + wait >= deadline) {
      const double secs = std::chrono::duration<double>(now - start).count();
      return IoError(what + ": gave up after " + std::to_string(attempt + 1) + " attempts in " +
                     std::to_string(static_cast<int>(secs * 10) / 10.0).substr(0, 5) +
                     " s: " + last +
                     // The deadline may have cut the last attempt: say what the server answered.
                     (!last_answer.empty() && last_answer != last ? " (the server answered before: " + last_answer + ")"
                                                                  : ""));
    }
    retries_.fetch_add(1);
    CLIO_LOG_DEBUG("{}: attempt {} failed ({}); retrying in {} ms", what, attempt + 1, last,
                   wait.count());
    std::this_thread::sleep_for(wait);
  }
}

std::string StoreBase::Failure(std::string_view op, const std::string& key,
                               const http::Response& r) const {
  std::string code = XmlField(r.body, "Code");
  std::string msg = XmlField(r.body, "Message");
  if (code.empty() && msg.empty()) msg = JsonMessage(r.body);
  if (code.empty() && msg.empty() && !r.body.empty()) msg = "body: " + Snippet(r.body);
  std::string out = scheme_ + " bucket '" + location_.bucket + "'";
  if (!key.empty()) out += " key '" + key + "'";
  out += ": " + std::string(op) + ": HTTP " + std::to_string(r.status);
  if (!code.empty()) out += " " + code;
  if (!msg.empty()) out += ": " + msg;
  return out;
}

Status StoreBase::HttpError(std::string_view op, const std::string& key,
                            const http::Response& r) const {
  std::string m = Failure(op, key, r);
  // A bucket in another region answers 301 (or 400) with no body to speak of, but says where.
  if (const std::string region = r.Header("x-amz-bucket-region"); !region.empty()) {
    m += " (the bucket is in region " + region + "; set AWS_DEFAULT_REGION)";
  }
  if (r.status == 401 || r.status == 403) return PermissionDenied(m);
  if (r.status == 404) return NotFound(m);
  if (r.status >= 400 && r.status < 500) return InvalidArgument(m);
  return IoError(m);
}

std::string StoreBase::RangeValue(uint64_t offset, uint64_t len) {
  return "bytes=" + std::to_string(offset) + "-" + std::to_string(offset + len - 1);
}

Status StoreBase::FinishRangedGet(std::string_view op, const std::string& key,
                                  const std::string& what, const http::Response& r,
                                  uint64_t offset, uint64_t len, char* out) {
  if (r.status == 404) return NotFound(Failure(op, key, r));
  if (r.status == 416) {
    return IoError(Failure(std::string(op) + " " + RangeValue(offset, len), key, r) +
                   " (the object is shorter than the block)");
  }
  if (r.status != 200 && r.status != 206) return HttpError(op, key, r);
  CLIO_RETURN_IF_ERROR(CopyRangedBody(what, r, offset, len, out));
  CountBytesGot(len);
  return Status::Ok();
}

Status CopyRangedBody(const std::string& what, const http::Response& r, uint64_t offset,
                      uint64_t len, char* out) {
  if (r.status == 200) {
    // The server ignored Range and sent the whole object.
    if (r.body.size() < offset || r.body.size() - offset < len) {
      return IoError(what + ": object holds " + std::to_string(r.body.size()) +
                     " bytes, fewer than the " + std::to_string(offset + len) + " asked for");
    }
    std::memcpy(out, r.body.data() + offset, len);
    return Status::Ok();
  }
  // 206: "bytes A-B/T" must cover the range asked for and match the body. Some servers answer
  // a wider range than asked (s3rver sends the whole object for "bytes=0-0"): the part asked
  // for is taken out of it.
  const std::string cr = r.Header("Content-Range");
  uint64_t first = 0, last = 0;
  bool parsed = false;
  if (cr.rfind("bytes ", 0) == 0) {
    const char* p = cr.data() + 6;
    const char* end = cr.data() + cr.size();
    auto [p1, e1] = std::from_chars(p, end, first);
    if (e1 == std::errc() && p1 < end && *p1 == '-') {
      auto [p2, e2] = std::from_chars(p1 + 1, end, last);
      parsed = e2 == std::errc() && p2 < end && *p2 == '/' && last >= first;
    }
  }
  if (!parsed || first > offset || last < offset + len - 1 || r.body.size() != last - first + 1) {
    return IoError(what + ": asked for " + std::to_string(len) + " bytes at " +
                   std::to_string(offset) + ", got " + std::to_string(r.body.size()) +
                   " bytes with Content-Range '" + cr + "'");
  }
  std::memcpy(out, r.body.data() + (offset - first), len);
  return Status::Ok();
}

}  // namespace clio
