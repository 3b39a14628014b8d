// TCP over TLS against a real runtime in this process, with certificates the test makes (a CA,
// certificates it signs, self-signed ones): requests of every size over TLS; a client pinned to
// the runtime's own certificate; a client checking a CA and a name; wrong CAs and names refused
// with their reason; a client without TLS and a raw plaintext frame never served; a stalled
// handshake closed at the hello deadline; the bytes on the wire are not the frames; the
// runtime's refusals of a missing, mismatched or world-readable key and of a non-loopback
// address without TLS.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/codec.h"
#include "common/metrics.h"
#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/server.h"
#include "daemon/test_certs.h"
#include "daemon/test_serving.h"
#include "daemon/tls.h"
#include "daemon/token.h"

using namespace clio;
using testing::ConnectLoopback;
using testing::FreePort;
using testing::Identity;

namespace {

class EchoPool : public Pool {
 public:
  Result<std::string> Handle(uint32_t method, std::string_view payload) override {
    if (method == 3) {  // answers `n` bytes
      Decoder d(payload);
      uint64_t n = 0;
      d.Get(&n);
      CLIO_RETURN_IF_ERROR(d.Finish("size"));
      return std::string(n, 'r');
    }
    return std::string(payload);
  }
};



// A runtime serving TCP over TLS with `server` (or without TLS when null) on `address`.
struct Node {
  std::string dir;
  uint32_t port = FreePort();
  std::unique_ptr<Runtime> rt;
  testing::ServingThread serve;
  Node(const std::string& d, const Identity* server, const std::string& address = "127.0.0.1") : dir(d) {
    std::string keys = "  tcp_address: \"" + address + "\"\n  tcp_port: " + std::to_string(port) + "\n";
    if (server) keys += "  tls_cert_file: " + server->cert_file + "\n  tls_key_file: " + server->key_file + "\n";
    auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "/state" + std::to_string(port) + "\n  http_port: 0\n" + keys +
                                      "compose:\n  - mod_name: echo\n    pool_name: e\n    pool_id: \"7.0\"\n",
                                  "t.yaml");
    REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
    rt = std::make_unique<Runtime>(std::move(cfg).value());
    rt->RegisterModule("echo", testing::Makes<EchoPool>());
    REQUIRE(rt->Compose().ok());
    serve.Start(rt.get());
  }
  ~Node() {
    serve.Stop();
    (void)rt->StopPools();
  }
  // A TCP client of this node's config (pinned to its certificate), adjusted by `edit`.
  template <typename F>
  Result<std::unique_ptr<RuntimeClient>> Client(F edit) {
    RuntimeClient::Options o = RuntimeClient::OptionsFor(rt->config());
    o.mode = IpcMode::kTcp;
    edit(o);
    return RuntimeClient::Connect(o);
  }
  Result<std::unique_ptr<RuntimeClient>> Client() {
    return Client([](RuntimeClient::Options&) {});
  }
  RuntimeStats Stats() {
    RuntimeClient::Options o = RuntimeClient::OptionsFor(rt->config());
    o.mode = IpcMode::kUnix;
    auto c = RuntimeClient::Connect(o);
    REQUIRE(c.ok());
    auto raw = (*c)->Call(0, static_cast<uint32_t>(AdminMethod::kRuntimeStats), "");
    REQUIRE(raw.ok());
    auto s = DecodeRuntimeStats(*raw);
    REQUIRE(s.ok());
    return *s;
  }
};

std::string Size(uint64_t n) {
  Encoder e;
  e.Put<uint64_t>(n);
  return e.Take();
}

// A sample of the runtime's metrics, as /metrics serves it.
double ScrapedValue(const std::string& name) {
  const std::string text = metrics::Scrape();
  const size_t at = text.find("\n" + name + " ");
  REQUIRE_MESSAGE(at != std::string::npos, name);
  return std::stod(text.substr(at + name.size() + 2));
}

bool Has(const Status& s, const std::string& what) { return s.ToString().find(what) != std::string::npos; }

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/clio_tls_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("TLS: requests of every size, from many threads, with the client pinned to the runtime's certificate") {
  TempDir t;
  Identity server;
  testing::MakeIdentity(&server, t.path, "server", false, "IP:127.0.0.1");
  Node n(t.path, &server);
  auto c = n.Client();
  REQUIRE_MESSAGE(c.ok(), c.status().ToString());
  CHECK((*c)->mode() == IpcMode::kTcp);
  CHECK(*(*c)->Call(7, 1, "hello") == "hello");
  CHECK(*(*c)->Call(7, 1, "") == "");
  std::string big(5u << 20, 'x');
  big[123457] = 'y';
  CHECK(*(*c)->Call(7, 1, big) == big);
  auto r = (*c)->Call(7, 3, Size(9u << 20));
  REQUIRE(r.ok());
  CHECK(r->size() == 9u << 20);
  CHECK((*c)->Call(99, 1, "").status().code() == Code::kNotFound);
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&, i] {
      for (int j = 0; j < 30; ++j) {
        std::string p = std::to_string(i * 1000 + j) + std::string(j * 331, 'p');
        auto x = (*c)->Call(7, 1, p);
        if (x.ok() && *x == p) ++ok;
      }
    });
  for (auto& th : ts) th.join();
  CHECK(ok == 120);
  const RuntimeStats st = n.Stats();
  CHECK(st.malformed_frames == 0);
}

TEST_CASE("TLS: a client trusting a CA checks the certificate's name and issuer") {
  TempDir t;
  Identity ca, other_ca, server;
  testing::MakeIdentity(&ca, t.path, "ca", true, "");
  testing::MakeIdentity(&other_ca, t.path, "other-ca", true, "");
  testing::MakeIdentity(&server, t.path, "server", false, "IP:127.0.0.1,DNS:node1.example", &ca);
  Node n(t.path, &server);

  auto good = n.Client([&](RuntimeClient::Options& o) { o.tls_ca_file = ca.cert_file; });
  REQUIRE_MESSAGE(good.ok(), good.status().ToString());
  CHECK(*(*good)->Call(7, 1, "via the CA") == "via the CA");
  auto by_name = n.Client([&](RuntimeClient::Options& o) {
    o.tls_ca_file = ca.cert_file;
    o.tls_server_name = "node1.example";
  });
  REQUIRE_MESSAGE(by_name.ok(), by_name.status().ToString());

  auto wrong_name = n.Client([&](RuntimeClient::Options& o) {
    o.tls_ca_file = ca.cert_file;
    o.tls_server_name = "node2.example";
  });
  CHECK(wrong_name.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(Has(wrong_name.status(), "does not verify"), wrong_name.status().ToString());
  CHECK_MESSAGE(Has(wrong_name.status(), "node2.example"), wrong_name.status().ToString());

  auto wrong_ca = n.Client([&](RuntimeClient::Options& o) { o.tls_ca_file = other_ca.cert_file; });
  CHECK(wrong_ca.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(Has(wrong_ca.status(), "runtime.tls_ca_file " + other_ca.cert_file), wrong_ca.status().ToString());

  // Pinned to a certificate that is not the runtime's: refused too.
  Identity impostor;
  testing::MakeIdentity(&impostor, t.path, "impostor", false, "IP:127.0.0.1");
  auto pinned_wrong = n.Client([&](RuntimeClient::Options& o) { o.tls_cert_file = impostor.cert_file; });
  CHECK(pinned_wrong.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(Has(pinned_wrong.status(), "runtime.tls_cert_file " + impostor.cert_file),
                pinned_wrong.status().ToString());

  // Pinned to a chain file (the runtime's certificate, then its CA): only that certificate is
  // trusted, not every one the CA signed.
  const std::string chain = t.path + "/chain.pem";
  {
    std::ifstream a(server.cert_file), b(ca.cert_file);
    std::ofstream out(chain);
    out << a.rdbuf() << b.rdbuf();
  }
  auto pinned_chain = n.Client([&](RuntimeClient::Options& o) { o.tls_cert_file = chain; });
  REQUIRE_MESSAGE(pinned_chain.ok(), pinned_chain.status().ToString());
  Identity sibling;
  testing::MakeIdentity(&sibling, t.path, "sibling", false, "IP:127.0.0.1,DNS:node1.example", &ca);
  Node s(t.path, &sibling);
  auto to_sibling = s.Client([&](RuntimeClient::Options& o) { o.tls_cert_file = chain; });
  CHECK(to_sibling.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(Has(to_sibling.status(), "does not verify"), to_sibling.status().ToString());

  // A CA-signed server certificate that names another address.
  Identity elsewhere;
  testing::MakeIdentity(&elsewhere, t.path, "elsewhere", false, "IP:10.9.8.7", &ca);
  Node m(t.path, &elsewhere);
  auto mismatch = m.Client([&](RuntimeClient::Options& o) { o.tls_ca_file = ca.cert_file; });
  CHECK(mismatch.status().code() == Code::kPermissionDenied);
  CHECK_MESSAGE(Has(mismatch.status(), "127.0.0.1"), mismatch.status().ToString());
}

TEST_CASE("TLS: a client without TLS, a raw frame and a stalled handshake are never served") {
  TempDir t;
  Identity server;
  testing::MakeIdentity(&server, t.path, "server", false, "IP:127.0.0.1");
  Node n(t.path, &server);

  auto plain = n.Client([](RuntimeClient::Options& o) {
    o.tls_cert_file.clear();
    o.tls_ca_file.clear();
  });
  CHECK(plain.status().code() == Code::kUnavailable);
  CHECK_MESSAGE(Has(plain.status(), "if the runtime serves TLS"), plain.status().ToString());

  // A plaintext request frame: no answer, the connection closed.
  int fd = ConnectLoopback(n.port);
  RequestHeader h;
  h.pool = 7;
  h.method = 1;
  REQUIRE(::send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h);
  char buf[64];
  ssize_t got = 0;
  std::string answer;
  while ((got = ::recv(fd, buf, sizeof buf, 0)) > 0) answer.append(buf, static_cast<size_t>(got));
  ::close(fd);
  // Whatever came back (a TLS alert at most) is not a response header.
  CHECK(answer.size() < sizeof(ResponseHeader));

  // Connected, silent: closed by the hello deadline, the handshake included.
  fd = ConnectLoopback(n.port);
  CHECK(::recv(fd, buf, sizeof buf, 0) <= 0);
  ::close(fd);
  const RuntimeStats st = n.Stats();
  CHECK(st.malformed_frames == 0);  // nothing was read as a frame
  // The plain client's and the raw frame's handshakes at least.
  CHECK(ScrapedValue("clio_runtime_tls_handshake_failures_total") >= 2);
  auto good = n.Client();
  REQUIRE_MESSAGE(good.ok(), good.status().ToString());
  CHECK(*(*good)->Call(7, 1, "still serving") == "still serving");
}

TEST_CASE("TLS: the bytes on the wire are neither the frames nor the payloads") {
  TempDir t;
  Identity server;
  testing::MakeIdentity(&server, t.path, "server", false, "IP:127.0.0.1");
  Node n(t.path, &server);
  // A relay between client and runtime that records what the client sends.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(lfd, 4) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const uint32_t relay_port = ntohs(a.sin_port);
  std::string seen;
  std::thread relay([&] {
    const int in = ::accept(lfd, nullptr, nullptr);
    const int out = ConnectLoopback(n.port);
    pollfd p[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
    char buf[65536];
    while (::poll(p, 2, -1) > 0) {
      if (p[0].revents) {
        const ssize_t k = ::recv(in, buf, sizeof buf, 0);
        if (k <= 0) break;
        seen.append(buf, static_cast<size_t>(k));
        if (::send(out, buf, static_cast<size_t>(k), MSG_NOSIGNAL) != k) break;
      }
      if (p[1].revents) {
        const ssize_t k = ::recv(out, buf, sizeof buf, 0);
        if (k <= 0) break;
        if (::send(in, buf, static_cast<size_t>(k), MSG_NOSIGNAL) != k) break;
      }
    }
    ::close(in);
    ::close(out);
  });
  {
    auto c = n.Client([&](RuntimeClient::Options& o) { o.tcp_port = relay_port; });
    REQUIRE_MESSAGE(c.ok(), c.status().ToString());
    const std::string secret = "a payload nobody on the path may read";
    CHECK(*(*c)->Call(7, 1, secret) == secret);
  }  // the client closes its connection: the relay ends
  relay.join();
  ::close(lfd);
  REQUIRE(seen.size() > 5);
  CHECK(static_cast<unsigned char>(seen[0]) == 0x16);  // a TLS handshake record
  CHECK(seen.find("a payload nobody") == std::string::npos);
  CHECK(seen.find("clio-client") == std::string::npos);
}

TEST_CASE("TLS: the runtime refuses a key others can read, a key of another certificate, and a "
          "non-loopback address without TLS") {
  TempDir t;
  Identity server, other;
  testing::MakeIdentity(&server, t.path, "server", false, "IP:127.0.0.1");
  testing::MakeIdentity(&other, t.path, "other", false, "IP:127.0.0.1");
  auto listen = [&](const std::string& address, const std::string& cert, const std::string& key) {
    Server::Options o;
    o.socket_path = t.path + "/s.sock";
    o.tcp_address = address;
    o.tcp_port = FreePort();
    o.token = "token-token-token-token-token-token";
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    Server s(o, [](uint32_t, uint32_t, std::string_view, const PoolQuery&) -> Result<std::string> { return std::string(); });
    return s.Listen();
  };
  CHECK(listen("127.0.0.1", server.cert_file, server.key_file).ok());
  CHECK(listen("0.0.0.0", server.cert_file, server.key_file).ok());

  Status none = listen("0.0.0.0", "", "");
  CHECK(none.code() == Code::kInvalidArgument);
  CHECK_MESSAGE(Has(none, "runtime.tls_cert_file"), none.ToString());

  Status mismatch = listen("127.0.0.1", server.cert_file, other.key_file);
  CHECK(mismatch.code() == Code::kInvalidArgument);
  CHECK_MESSAGE(Has(mismatch, "is not the key of the certificate"), mismatch.ToString());

  REQUIRE(::chmod(server.key_file.c_str(), 0644) == 0);
  Status open = listen("127.0.0.1", server.cert_file, server.key_file);
  CHECK(open.code() == Code::kPermissionDenied);
  CHECK_MESSAGE(Has(open, "0644"), open.ToString());
  REQUIRE(::chmod(server.key_file.c_str(), 0600) == 0);

  Status missing = listen("127.0.0.1", t.path + "/nope.pem", server.key_file);
  CHECK_FALSE(missing.ok());
  CHECK_MESSAGE(Has(missing, "runtime.tls_cert_file " + t.path + "/nope.pem"), missing.ToString());

  Status garbage_cert = [&] {
    const std::string junk = t.path + "/junk.pem";
    FILE* f = std::fopen(junk.c_str(), "w");
    std::fputs("not a certificate\n", f);
    std::fclose(f);
    return listen("127.0.0.1", junk, server.key_file);
  }();
  CHECK(garbage_cert.code() == Code::kInvalidArgument);
  CHECK_MESSAGE(Has(garbage_cert, "junk.pem"), garbage_cert.ToString());
}

TEST_CASE("TLS: a runtime on a wildcard address serves a pinned client; a CA client there must name the server") {
  TempDir t;
  Identity ca, server;
  testing::MakeIdentity(&ca, t.path, "ca", true, "");
  testing::MakeIdentity(&server, t.path, "server", false, "DNS:node1.example", &ca);
  Node n(t.path, &server, "0.0.0.0");
  auto pinned = n.Client();
  REQUIRE_MESSAGE(pinned.ok(), pinned.status().ToString());
  CHECK(*(*pinned)->Call(7, 1, "any") == "any");
  auto unnamed = n.Client([&](RuntimeClient::Options& o) { o.tls_ca_file = ca.cert_file; });
  CHECK(unnamed.status().code() == Code::kInvalidArgument);
  CHECK_MESSAGE(Has(unnamed.status(), "runtime.tls_server_name"), unnamed.status().ToString());
  auto named = n.Client([&](RuntimeClient::Options& o) {
    o.tls_ca_file = ca.cert_file;
    o.tls_server_name = "node1.example";
  });
  REQUIRE_MESSAGE(named.ok(), named.status().ToString());
  CHECK(*(*named)->Call(7, 1, "named") == "named");
}

TEST_CASE("TLS: the token proofs are bound to the session; a proof without the binding is refused") {
  TempDir t;
  Identity server;
  testing::MakeIdentity(&server, t.path, "server", false, "IP:127.0.0.1");
  Node n(t.path, &server);
  auto token = ReadTokenFile(n.rt->config().token_file);
  REQUIRE(token.ok());
  auto ctx = TlsClientContext::Make({"", server.cert_file, "", "127.0.0.1"});
  REQUIRE_MESSAGE(ctx.ok(), ctx.status().ToString());
  // One exchange on the session: the answer's code and payload.
  auto call = [](TlsStream& s, AdminMethod m, const std::string& payload) {
    RequestHeader h;
    h.method = static_cast<uint32_t>(m);
    h.payload_len = static_cast<uint32_t>(payload.size());
    REQUIRE(s.WriteAll(&h, sizeof h).ok());
    REQUIRE(s.WriteAll(payload.data(), payload.size()).ok());
    ResponseHeader r;
    REQUIRE(s.ReadAll(&r, sizeof r).ok());
    std::string body(r.payload_len, '\0');
    REQUIRE(s.ReadAll(body.data(), body.size()).ok());
    return std::pair<Code, std::string>{static_cast<Code>(r.code), body};
  };
  for (const bool bound : {false, true}) {
    CAPTURE(bound);
    const int fd = ConnectLoopback(n.port);
    auto s = (*ctx)->Handshake(fd);
    REQUIRE_MESSAGE(s.ok(), s.status().ToString());
    auto binding = (*s)->Binding();
    REQUIRE(binding.ok());
    CHECK(binding->size() == 32);
    const std::string nonce = NewNonce();
    auto [code, raw] = call(**s, AdminMethod::kHello, wire::Encode(adminproto::Hello{nonce}));
    REQUIRE(code == Code::kOk);
    auto hello = wire::Decode<adminproto::HelloReply>(raw);
    REQUIRE(hello.ok());
    // The runtime's proof covers the binding: without it, it would not match.
    CHECK(hello->proof == TokenProof(*token, "clio-runtime", nonce, hello->nonce, *binding));
    CHECK(hello->proof != TokenProof(*token, "clio-runtime", nonce, hello->nonce));
    const std::string proof = TokenProof(*token, "clio-client", hello->nonce, nonce, bound ? *binding : "");
    auto [pcode, pbody] = call(**s, AdminMethod::kProve, wire::Encode(adminproto::Prove{proof}));
    CHECK(pcode == (bound ? Code::kOk : Code::kPermissionDenied));
    s->reset();
    ::close(fd);
  }
}
