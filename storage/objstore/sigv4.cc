#include "storage/objstore/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/md5.h>

#include <algorithm>
#include <cctype>
#include <ctime>

namespace clio::sigv4 {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr char kHexUpper[] = "0123456789ABCDEF";

std::string Digest(const EVP_MD* md, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out, &len, md, nullptr);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Trims and collapses runs of spaces into one, as the canonical header value wants.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string HexEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

std::string Sha256Hex(std::string_view data) { return HexEncode(Digest(EVP_sha256(), data)); }

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string ContentMd5(std::string_view data) { return Base64Encode(Digest(EVP_md5(), data)); }

std::string UriEncode(std::string_view s, bool keep_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    const bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (alnum || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHexUpper[c >> 4];
      out += kHexUpper[c & 15];
    }
  }
  return out;
}

std::string UriDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string BuildQuery(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    out += UriEncode(name, false);
    out += '=';
    out += UriEncode(value, false);
  }
  return out;
}

std::string CanonicalQuery(std::string_view raw_query) {
  std::vector<std::pair<std::string, std::string>> params;
  size_t pos = 0;
  while (pos <= raw_query.size() && !raw_query.empty()) {
    size_t amp = raw_query.find('&', pos);
    if (amp == std::string_view::npos) amp = raw_query.size();
    std::string_view part = raw_query.substr(pos, amp - pos);
    if (!part.empty()) {
      size_t eq = part.find('=');
      std::string_view name = part.substr(0, eq);
      std::string_view value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
      params.emplace_back(UriEncode(UriDecode(name), false), UriEncode(UriDecode(value), false));
    }
    pos = amp + 1;
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

std::string AmzDate(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

Signed Sign(const Request& req, const Credentials& creds, std::string_view region,
            std::string_view service, std::string_view amz_date) {
  std::vector<std::pair<std::string, std::string>> headers;
  headers.reserve(req.headers.size());
  for (const auto& [name, value] : req.headers) {
    headers.emplace_back(Lower(name), CanonicalHeaderValue(value));
  }
  std::sort(headers.begin(), headers.end());
  std::string canonical_headers, signed_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ':' + value + '\n';
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }
  Signed out;
  out.canonical_request = req.method + '\n' + req.path + '\n' + CanonicalQuery(req.query) +
                          '\n' + canonical_headers + '\n' + signed_headers + '\n' +
                          req.payload_sha256;
  const std::string date(amz_date.substr(0, 8));
  const std::string scope =
      date + '/' + std::string(region) + '/' + std::string(service) + "/aws4_request";
  out.string_to_sign = "AWS4-HMAC-SHA256\n" + std::string(amz_date) + '\n' + scope + '\n' +
                       Sha256Hex(out.canonical_request);
  std::string key = HmacSha256("AWS4" + creds.secret_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, service);
  key = HmacSha256(key, "aws4_request");
  out.signature = HexEncode(HmacSha256(key, out.string_to_sign));
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + creds.access_key + '/' + scope +
                      ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature;
  return out;
}

}  // namespace clio::sigv4
