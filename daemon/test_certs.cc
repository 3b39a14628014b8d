#include "daemon/test_certs.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <stdexcept>

namespace clio::testing {

Identity::~Identity() {
  X509_free(cert);
  EVP_PKEY_free(key);
}

namespace {

void Need(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("making a test certificate: " + what);
}

void AddExt(X509* x, X509V3_CTX* ctx, int nid, const char* value) {
  X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
  Need(e != nullptr, std::string("extension ") + value);
  X509_add_ext(x, e, -1);
  X509_EXTENSION_free(e);
}

void WritePem(const std::string& path, const std::function<int(FILE*)>& write) {
  FILE* f = std::fopen(path.c_str(), "w");
  Need(f != nullptr, "opening " + path);
  const int ok = write(f);
  std::fclose(f);
  Need(ok == 1, "writing " + path);
}

}  // namespace

void MakeIdentity(Identity* id, const std::string& dir, const std::string& name, bool ca, const std::string& san,
                  const Identity* issuer) {
  static std::atomic<long> serial{1};
  id->key = EVP_EC_gen("P-256");
  Need(id->key != nullptr, "a P-256 key");
  X509* x = X509_new();
  Need(x != nullptr, "X509_new");
  id->cert = x;
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, id->key);
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->cert) : subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer->cert : x, x, nullptr, nullptr, 0);
  if (ca) {
    AddExt(x, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    AddExt(x, &ctx, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    AddExt(x, &ctx, NID_basic_constraints, "CA:FALSE");
    AddExt(x, &ctx, NID_ext_key_usage, "serverAuth");
    AddExt(x, &ctx, NID_subject_alt_name, san.c_str());
  }
  Need(X509_sign(x, issuer ? issuer->key : id->key, EVP_sha256()) > 0, "signing " + name);
  id->key_file = dir + "/" + name + ".key";
  id->cert_file = dir + "/" + name + ".pem";
  WritePem(id->key_file,
           [&](FILE* f) { return PEM_write_PrivateKey(f, id->key, nullptr, nullptr, 0, nullptr, nullptr); });
  Need(::chmod(id->key_file.c_str(), 0600) == 0, "chmod " + id->key_file);
  WritePem(id->cert_file, [&](FILE* f) { return PEM_write_X509(f, x); });
}

}  // namespace clio::testing
