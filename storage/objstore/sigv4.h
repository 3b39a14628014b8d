// AWS Signature Version 4 for S3 requests (header authorization), written for CLIO over
// OpenSSL's SHA-256 and HMAC. Pure functions: no I/O, no clock; the caller supplies the time.
// Checked against botocore-generated vectors (tests/objstore/sigv4_vectors.json).
//
// Reference: "Signature Version 4 signing process" and "Authenticating Requests
// (AWS Signature Version 4)" in the Amazon S3 API documentation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace clio::sigv4 {

using Headers = std::vector<std::pair<std::string, std::string>>;

std::string Sha256Hex(std::string_view data);
// Raw 32-byte HMAC-SHA256.
std::string HmacSha256(std::string_view key, std::string_view data);
std::string HexEncode(std::string_view bytes);
std::string Base64Encode(std::string_view bytes);
// Base64 of the MD5 of `data` (Content-MD5).
std::string ContentMd5(std::string_view data);

// RFC 3986 percent-encoding as SigV4 wants it: A-Z a-z 0-9 - _ . ~ kept, every other byte
// %XX (upper-case hex); '/' kept when `keep_slash` (object paths), encoded otherwise.
std::string UriEncode(std::string_view s, bool keep_slash);
// Decodes %XX escapes ('+' is left as is: S3 query strings encode spaces as %20).
std::string UriDecode(std::string_view s);

// A query string built from unencoded (name, value) pairs, each part UriEncode'd, in the
// given order: what goes on the wire after '?'.
std::string BuildQuery(const std::vector<std::pair<std::string, std::string>>& params);
// The canonical query string of a raw (wire) query: parameters decoded, re-encoded, sorted by
// name then value; a parameter without '=' has an empty value.
std::string CanonicalQuery(std::string_view raw_query);

// "20261202T170000Z" and "20261202" for a Unix time in seconds.
std::string AmzDate(int64_t unix_seconds);

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty when none
};

struct Request {
  std::string method;       // "GET", "PUT", ...
  std::string path;         // as sent: already URI-encoded, starts with '/'
  std::string query;        // raw, as sent, without '?'
  Headers headers;          // every header that is signed (host, x-amz-date, x-amz-content-sha256, ...)
  std::string payload_sha256;  // hex, the x-amz-content-sha256 value
};

struct Signed {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;      // hex
  std::string authorization;  // the Authorization header value
};

// Signs `req` for `region` and `service` at `amz_date` ("YYYYMMDDTHHMMSSZ"). Every header in
// req.headers is signed.
Signed Sign(const Request& req, const Credentials& creds, std::string_view region,
            std::string_view service, std::string_view amz_date);

}  // namespace clio::sigv4
