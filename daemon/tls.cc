#include "daemon/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509err.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace clio {

std::string TlsErrorText(const std::string& fallback) {
  std::string text;
  while (const unsigned long e = ::ERR_get_error()) {
    char buf[256];
    ::ERR_error_string_n(e, buf, sizeof buf);
    if (!text.empty()) text += "; ";
    text += buf;
  }
  return text.empty() ? fallback : text;
}

namespace {

// A file OpenSSL is about to read: the system's reason when it cannot be, which OpenSSL's own
// error text words poorly.
Status Readable(const std::string& key, const std::string& path) {
  if (path.empty()) return InvalidArgument("runtime." + key + " is empty");
  if (::access(path.c_str(), R_OK) != 0)
    return Status::FromErrno(errno, "runtime." + key + " " + path);
  return Status::Ok();
}

bool IsIpAddress(const std::string& s) {
  unsigned char buf[sizeof(in6_addr)];
  return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

bool IsWildcard(const std::string& s) {
  return s.empty() || s == "0.0.0.0" || s == "::" || s == "[::]" || s == "0:0:0:0:0:0:0:0";
}

}  // namespace

Status SetUpServerTls(ssl_ctx_st* ctx, const std::string& cert_file, const std::string& key_file) {
  CLIO_RETURN_IF_ERROR(Readable("tls_cert_file", cert_file));
  CLIO_RETURN_IF_ERROR(Readable("tls_key_file", key_file));
  struct stat st {};
  if (::stat(key_file.c_str(), &st) == 0 && (st.st_mode & 0007) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status(Code::kPermissionDenied, "runtime.tls_key_file " + key_file + " has mode " + mode +
                                               ": every user of the machine can read the runtime's private key; "
                                               "chmod 0600 it (or 0640 with the runtime's group)");
  }
  ::ERR_clear_error();
  ::SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  ::SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  ::SSL_CTX_set_num_tickets(ctx, 0);
  if (::SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1)
    return InvalidArgument("runtime.tls_cert_file " + cert_file + ": " +
                           TlsErrorText("not a PEM certificate chain"));
  const bool loaded = ::SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) == 1;
  const bool mismatch = !loaded && ERR_GET_REASON(::ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
  if (!loaded && !mismatch)
    return InvalidArgument("runtime.tls_key_file " + key_file + ": " + TlsErrorText("not a PEM private key"));
  if (mismatch || ::SSL_CTX_check_private_key(ctx) != 1)
    return InvalidArgument("runtime.tls_key_file " + key_file + " is not the key of the certificate in " +
                           "runtime.tls_cert_file " + cert_file + " (" + TlsErrorText("mismatch") + ")");
  return Status::Ok();
}

Result<std::shared_ptr<TlsClientContext>> TlsClientContext::Make(const TlsClientOptions& options) {
  std::shared_ptr<TlsClientContext> c(new TlsClientContext());
  c->options_ = options;
  const bool pinned = options.ca_file.empty();
  CLIO_RETURN_IF_ERROR(pinned ? Readable("tls_cert_file", options.cert_file) : Readable("tls_ca_file", options.ca_file));
  if (!options.server_name.empty()) {
    c->name_ = options.server_name;
  } else if (!IsWildcard(options.host)) {
    c->name_ = options.host;
  } else if (!pinned) {
    return InvalidArgument("runtime.tcp_address '" + options.host +
                           "' is a wildcard: set runtime.tls_server_name to the name the runtime's certificate "
                           "carries, so that a certificate of runtime.tls_ca_file " + options.ca_file +
                           " issued to another host is not taken for it");
  }
  // Pinned to the runtime's own certificate, the name adds nothing unless it was asked for.
  if (pinned && options.server_name.empty()) c->name_.clear();
  c->name_is_ip_ = IsIpAddress(c->name_);
  ::ERR_clear_error();
  c->ctx_ = ::SSL_CTX_new(::TLS_client_method());
  if (!c->ctx_) return Status(Code::kInternal, "SSL_CTX_new: " + TlsErrorText("out of memory"));
  ::SSL_CTX_set_min_proto_version(c->ctx_, TLS1_2_VERSION);
  ::SSL_CTX_set_verify(c->ctx_, SSL_VERIFY_PEER, nullptr);
  if (pinned) {
    // Only the chain file's first certificate, the runtime's own: the CAs after it would
    // otherwise be anchors too, and vouch for every certificate they ever issued.
    FILE* f = std::fopen(options.cert_file.c_str(), "r");
    if (!f) return Status::FromErrno(errno, "runtime.tls_cert_file " + options.cert_file);
    c->pinned_ = ::PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    if (!c->pinned_)
      return InvalidArgument("runtime.tls_cert_file " + options.cert_file + ": " +
                             TlsErrorText("no PEM certificate in it"));
    if (::X509_STORE_add_cert(::SSL_CTX_get_cert_store(c->ctx_), c->pinned_) != 1)
      return Status(Code::kInternal, "trusting runtime.tls_cert_file: " + TlsErrorText("X509_STORE_add_cert"));
    // The runtime's certificate is the anchor itself, not a CA above it.
    ::X509_VERIFY_PARAM_set_flags(::SSL_CTX_get0_param(c->ctx_), X509_V_FLAG_PARTIAL_CHAIN);
  } else if (::SSL_CTX_load_verify_locations(c->ctx_, options.ca_file.c_str(), nullptr) != 1) {
    return InvalidArgument("runtime.tls_ca_file " + options.ca_file + ": " + TlsErrorText("no PEM certificate in it"));
  }
  return c;
}

TlsClientContext::~TlsClientContext() {
  if (pinned_) ::X509_free(pinned_);
  if (ctx_) ::SSL_CTX_free(ctx_);
}

Result<std::unique_ptr<TlsStream>> TlsClientContext::Handshake(int fd) const {
  ::ERR_clear_error();
  ssl_st* ssl = ::SSL_new(ctx_);
  if (!ssl) return Status(Code::kInternal, "SSL_new: " + TlsErrorText("out of memory"));
  // Memory BIOs, the socket read and written here: sends carry MSG_NOSIGNAL (a runtime that
  // hung up must not kill the client with SIGPIPE), as the plain transport's do.
  BIO* rbio = ::BIO_new(::BIO_s_mem());
  BIO* wbio = ::BIO_new(::BIO_s_mem());
  if (!rbio || !wbio) {
    ::BIO_free(rbio);
    ::BIO_free(wbio);
    ::SSL_free(ssl);
    return Status(Code::kInternal, "BIO_new: out of memory");
  }
  ::SSL_set_bio(ssl, rbio, wbio);
  auto stream = std::make_unique<TlsStream>(ssl, fd);
  if (!name_.empty()) {
    // A name that cannot be set would leave the check out: an error, never a pass.
    const bool set = name_is_ip_ ? ::X509_VERIFY_PARAM_set1_ip_asc(::SSL_get0_param(ssl), name_.c_str()) == 1
                                 : ::SSL_set1_host(ssl, name_.c_str()) == 1 &&
                                       ::SSL_set_tlsext_host_name(ssl, name_.c_str()) == 1;
    if (!set)
      return InvalidArgument("'" + name_ + "' cannot be checked as the runtime's name (runtime.tls_server_name, "
                             "runtime.tcp_address): " + TlsErrorText("not a host name or address"));
  }
  Status s = stream->Drive([ssl] { return ::SSL_connect(ssl); });
  // A verified session has the runtime's certificate (no anonymous suite slipped through), and
  // when pinned it is that very certificate.
  if (s.ok()) {
    X509* peer = ::SSL_get0_peer_certificate(ssl);
    if (!peer || (pinned_ && ::X509_cmp(peer, pinned_) != 0))
      return Status(Code::kPermissionDenied,
                    "the runtime's certificate is not the one of runtime.tls_cert_file " + options_.cert_file);
  }
  if (!s.ok()) {
    const long verify = ::SSL_get_verify_result(ssl);
    if (verify != X509_V_OK) {
      const std::string trusted = options_.ca_file.empty()
                                      ? "the certificate of runtime.tls_cert_file " + options_.cert_file
                                      : "the CAs of runtime.tls_ca_file " + options_.ca_file;
      return Status(Code::kPermissionDenied,
                    std::string("the runtime's certificate does not verify: ") + ::X509_verify_cert_error_string(verify) +
                        (name_.empty() ? "" : " (it must name " + name_ + ")") + "; this client trusts " + trusted);
    }
    return s.WithContext("TLS handshake (does the runtime serve TLS? runtime.tls_cert_file on its node)");
  }
  return stream;
}

TlsStream::~TlsStream() { ::SSL_free(ssl_); }

Result<std::string> TlsBinding(ssl_st* ssl) {
  static constexpr char kLabel[] = "EXPORTER-clio-token";
  std::string out(32, '\0');
  if (::SSL_export_keying_material(ssl, reinterpret_cast<unsigned char*>(out.data()), out.size(), kLabel,
                                   sizeof kLabel - 1, nullptr, 0, 0) != 1)
    return Status(Code::kInternal, "exporting the TLS session's keying material: " + TlsErrorText("failed"));
  return out;
}

Status TlsStream::Flush() {
  BIO* wbio = ::SSL_get_wbio(ssl_);
  char buf[16384];
  while (::BIO_ctrl_pending(wbio) > 0) {
    const int n = ::BIO_read(wbio, buf, sizeof buf);
    if (n <= 0) break;
    const char* p = buf;
    size_t left = static_cast<size_t>(n);
    while (left > 0) {
      const ssize_t w = ::send(fd_, p, left, MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Unavailable(std::string("runtime connection lost while sending: ") + std::strerror(errno));
      }
      p += w;
      left -= static_cast<size_t>(w);
    }
  }
  return Status::Ok();
}

Status TlsStream::Fill() {
  char buf[16384];
  while (true) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n == 0) return Unavailable("runtime closed the connection");
    if (n < 0) {
      if (errno == EINTR) continue;
      return Unavailable(std::string("runtime connection lost while receiving: ") + std::strerror(errno));
    }
    if (::BIO_write(::SSL_get_rbio(ssl_), buf, static_cast<int>(n)) != n)
      return Status(Code::kInternal, "buffering TLS records: out of memory");
    return Status::Ok();
  }
}

Status TlsStream::Drive(const std::function<int()>& op, int* done) {
  while (true) {
    ::ERR_clear_error();
    const int r = op();
    if (r > 0) {
      if (done) *done = r;
      return Flush();
    }
    const int e = ::SSL_get_error(ssl_, r);
    CLIO_RETURN_IF_ERROR(Flush());
    switch (e) {
      case SSL_ERROR_WANT_READ: CLIO_RETURN_IF_ERROR(Fill()); break;
      case SSL_ERROR_WANT_WRITE: break;  // written to memory: flushed above
      case SSL_ERROR_ZERO_RETURN: return Unavailable("runtime closed the TLS session");
      default: return Unavailable("TLS: " + TlsErrorText("the session failed"));
    }
  }
}

Status TlsStream::WriteAll(const void* data, size_t len) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(len, 1u << 20));
    int n = 0;
    CLIO_RETURN_IF_ERROR(Drive([&] { return ::SSL_write(ssl_, p, chunk); }, &n));
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status TlsStream::ReadAll(void* data, size_t len) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    const int chunk = static_cast<int>(std::min<size_t>(len, 1u << 20));
    int n = 0;
    CLIO_RETURN_IF_ERROR(Drive([&] { return ::SSL_read(ssl_, p, chunk); }, &n));
    p += n;
    len -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

}  // namespace clio
