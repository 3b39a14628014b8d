// TLS for the TCP transport (docs/ipc.md, "TLS"). The runtime serves TCP over TLS when
// runtime.tls_cert_file and runtime.tls_key_file are set, and must on any address that is not
// loopback; a client speaks TLS when its config names a certificate to trust
// (runtime.tls_ca_file, or the runtime's own runtime.tls_cert_file on its node). The token
// handshake runs inside the TLS session, unchanged. OpenSSL stays inside tls.cc, server.cc and
// ipc.cc.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

struct ssl_ctx_st;
struct ssl_st;
struct x509_st;

namespace clio {

// The runtime's side: loads the certificate chain and its key into `ctx` and sets TLS 1.2 or
// later, no session tickets (a ticket would make an idle connection readable, which a client
// takes for a runtime that went away). InvalidArgument naming the key and the file, with
// OpenSSL's reason; PermissionDenied for a key file that other users can read.
Status SetUpServerTls(ssl_ctx_st* ctx, const std::string& cert_file, const std::string& key_file);

// What a client trusts and checks (RuntimeClient::Options).
struct TlsClientOptions {
  // The CA bundle that signed the runtime's certificate (runtime.tls_ca_file); empty: trust
  // exactly the first certificate of `cert_file` (the runtime's own, on its node), not the CAs
  // that may follow it in that chain file.
  std::string ca_file;
  std::string cert_file;
  // The name or address the certificate must carry (runtime.tls_server_name); empty: the
  // host connected to, unless that is a wildcard (then only a pinned certificate will do).
  std::string server_name;
  std::string host;  // runtime.tcp_address, what the client connects to
};

// The TLS session's channel binding for the token handshake (TokenProof): 32 bytes exported
// from the session's keys (RFC 5705, label "EXPORTER-clio-token"). Internal on failure.
Result<std::string> TlsBinding(ssl_st* ssl);

class TlsStream;

// A client's TLS settings, loaded once (RuntimeClient::Connect) and shared by its connections.
class TlsClientContext {
 public:
  // InvalidArgument naming the key and file when the trust anchor cannot be loaded or the
  // name to check cannot be decided.
  static Result<std::shared_ptr<TlsClientContext>> Make(const TlsClientOptions& options);
  ~TlsClientContext();
  // Runs the handshake over the connected socket `fd` (which the caller keeps owning):
  // Unavailable when the connection breaks, PermissionDenied when the runtime's certificate
  // does not verify (OpenSSL's reason, and what was trusted).
  Result<std::unique_ptr<TlsStream>> Handshake(int fd) const;

 private:
  TlsClientContext() = default;
  ssl_ctx_st* ctx_ = nullptr;
  x509_st* pinned_ = nullptr;  // the runtime's certificate, when pinned: the peer's must be it
  TlsClientOptions options_;
  std::string name_;      // checked in the certificate; empty when pinned
  bool name_is_ip_ = false;
};

// One client connection's TLS session over a blocking socket, which it reads and writes
// itself (OpenSSL works on memory buffers) so that sends never raise SIGPIPE.
class TlsStream {
 public:
  TlsStream(ssl_st* ssl, int fd) : ssl_(ssl), fd_(fd) {}
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;
  // Unavailable when the connection breaks, as the plain socket's.
  Status WriteAll(const void* data, size_t len);
  Status ReadAll(void* data, size_t len);
  // TlsBinding of this session.
  Result<std::string> Binding() const { return TlsBinding(ssl_); }

 private:
  friend class TlsClientContext;
  // Runs an OpenSSL call until it succeeds (its result in *done), moving records between
  // OpenSSL and the socket as it asks.
  Status Drive(const std::function<int()>& op, int* done = nullptr);
  Status Flush();  // OpenSSL's pending records to the socket
  Status Fill();   // one read of the socket into OpenSSL
  ssl_st* ssl_;
  int fd_;
};

// OpenSSL's queued errors as one line (and the queue emptied); `fallback` when there are none.
std::string TlsErrorText(const std::string& fallback);

}  // namespace clio
