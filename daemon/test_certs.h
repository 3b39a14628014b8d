// Tests and benchmarks only: certificates made on the spot with OpenSSL (a CA, server
// certificates it signs, self-signed ones), written as PEM files, for the TLS transport.
#pragma once

#include <string>

struct evp_pkey_st;
struct x509_st;

namespace clio::testing {

// A P-256 key and its certificate, and the PEM files holding them (the key 0600).
struct Identity {
  evp_pkey_st* key = nullptr;
  x509_st* cert = nullptr;
  std::string key_file, cert_file;
  Identity() = default;
  Identity(const Identity&) = delete;
  Identity& operator=(const Identity&) = delete;
  ~Identity();
};

// Makes `id` (DIR/NAME.key, DIR/NAME.pem), valid from an hour ago for a day: a CA when `ca`,
// else a server certificate whose subjectAltName is `san` ("IP:127.0.0.1,DNS:x"). Signed by
// `issuer`, or by itself. Throws std::runtime_error naming what failed.
void MakeIdentity(Identity* id, const std::string& dir, const std::string& name, bool ca, const std::string& san,
                  const Identity* issuer = nullptr);

}  // namespace clio::testing
