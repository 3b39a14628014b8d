#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "common/codec.h"
#include "daemon/ipc.h"
#include "daemon/runtime.h"
#include "daemon/test_serving.h"

using namespace clio;

namespace {

// A pool that echoes its payload, or fails on method 2.
class EchoPool : public Pool {
 public:
  Result<std::string> Handle(uint32_t method, std::string_view payload) override {
    if (method == 2) return Status(Code::kNoSpace, "echo says full");
    return std::string(payload);
  }
};

struct RuntimeFixture {
  std::string dir;
  std::unique_ptr<Runtime> rt;
  testing::ServingThread serve;
  RuntimeFixture() {
    char tmpl[] = "/tmp/clio_ipc_XXXXXX";
    dir = mkdtemp(tmpl);
    auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "\n  http_port: 0\ncompose:\n  - mod_name: echo\n    pool_name: e\n    pool_id: \"7.0\"\n", "t");
    REQUIRE(cfg.ok());
    rt = std::make_unique<Runtime>(std::move(cfg).value());
    rt->RegisterModule("echo", testing::Makes<EchoPool>());
    REQUIRE(rt->Compose().ok());
    serve.Start(rt.get());
  }
  ~RuntimeFixture() {
    serve.Stop();
    (void)rt->StopPools();
    std::filesystem::remove_all(dir);
  }
  std::string sock() const { return rt->config().socket_path; }
};

}  // namespace

TEST_CASE("client and runtime exchange requests, errors and large payloads") {
  RuntimeFixture f;
  RuntimeClient::Options o;
  o.socket_path = f.sock();
  auto c = RuntimeClient::Connect(o);
  REQUIRE(c.ok());
  auto r = (*c)->Call(7, 1, "hello");
  REQUIRE(r.ok());
  CHECK(*r == "hello");
  std::string big(8u << 20, 'x');
  big[12345] = 'y';
  auto rb = (*c)->Call(7, 1, big);
  REQUIRE(rb.ok());
  CHECK(*rb == big);
  auto e = (*c)->Call(7, 2, "");
  CHECK(e.status().code() == Code::kNoSpace);
  CHECK(e.status().message() == "echo says full");
  CHECK((*c)->Call(99, 1, "").status().code() == Code::kNotFound);
  auto id = (*c)->FindPool("e");
  REQUIRE(id.ok());
  CHECK(*id == 7);
  auto none = (*c)->FindPool("no_such_pool");
  CHECK(none.status().code() == Code::kNotFound);
  CHECK(none.status().message().find("no_such_pool") != std::string::npos);
  // Concurrent callers share the connection pool.
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i)
    ts.emplace_back([&, i] {
      for (int j = 0; j < 50; ++j) {
        std::string p = std::to_string(i * 1000 + j);
        auto x = (*c)->Call(7, 1, p);
        if (x.ok() && *x == p) ++ok;
      }
    });
  for (auto& t : ts) t.join();
  CHECK(ok == 400);
}

// A bare connection to the runtime's socket, for frames no client would send.
static int ConnectRaw(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

TEST_CASE("a malformed frame closes that connection only; the runtime keeps serving") {
  RuntimeFixture f;
  RuntimeClient::Options o;
  o.socket_path = f.sock();
  for (int variant = 0; variant < 3; ++variant) {
    const int fd = ConnectRaw(f.sock());
    RequestHeader h;
    if (variant == 0) h.magic = 0xdeadbeef;
    if (variant == 1) h.payload_len = kMaxPayload + 1;
    if (variant == 2) h.magic = kIpcMagic + 1;
    REQUIRE(send(fd, &h, sizeof h, MSG_NOSIGNAL) == sizeof h);
    char b;
    CHECK(recv(fd, &b, 1, 0) == 0);  // closed without a reply
    close(fd);
  }
  auto c = RuntimeClient::Connect(o);
  REQUIRE(c.ok());
  CHECK((*c)->Call(7, 1, "still here").ok());
}

TEST_CASE("a client of an IPC version the runtime does not serve is told so, naming both versions") {
  RuntimeFixture f;
  RuntimeClient::Options o;
  o.socket_path = f.sock();
  for (uint16_t version : {static_cast<uint16_t>(kIpcVersion + 1), static_cast<uint16_t>(kIpcMinVersion - 1)}) {
    const int fd = ConnectRaw(f.sock());
    RequestHeader h;
    h.version = version;
    h.pool = 7;
    h.method = 1;
    h.request_id = 42;
    h.payload_len = 5;
    std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
    frame += "hello";
    REQUIRE(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(frame.size()));
    // The answer comes in the client's own version, so that client can read it.
    ResponseHeader r;
    REQUIRE(recv(fd, &r, sizeof r, MSG_WAITALL) == sizeof r);
    CHECK(r.magic == kIpcMagic);
    CHECK(r.version == version);
    CHECK(r.request_id == 42);
    CHECK(r.code == static_cast<uint16_t>(Code::kNotSupported));
    std::string why(r.payload_len, '\0');
    REQUIRE(recv(fd, why.data(), why.size(), MSG_WAITALL) == static_cast<ssize_t>(why.size()));
    CHECK(why.find("version " + std::to_string(version)) != std::string::npos);
    CHECK(why.find(std::to_string(kIpcMinVersion) + " to " + std::to_string(kIpcVersion)) != std::string::npos);
    CHECK(why.find(version > kIpcVersion ? "newer" : "older") != std::string::npos);
    char b;
    CHECK(recv(fd, &b, 1, 0) == 0);  // then closed
    close(fd);
  }
  // A client receiving an answer in another version names both.
  ResponseHeader other;
  other.version = kIpcVersion + 1;
  Status s = ValidateResponseHeader(other);
  CHECK(s.code() == Code::kCorruption);
  CHECK(s.message().find("version " + std::to_string(kIpcVersion + 1)) != std::string::npos);
  CHECK(s.message().find("version " + std::to_string(kIpcVersion) + " ") != std::string::npos);
  auto c = RuntimeClient::Connect(o);
  REQUIRE(c.ok());
  CHECK((*c)->Call(7, 1, "still here").ok());
}

TEST_CASE("a second runtime on the same socket is refused; no runtime is Unavailable") {
  RuntimeFixture f;
  Runtime second(f.rt->config());
  CHECK(second.Serve(nullptr).code() == Code::kBusy);
  RuntimeClient::Options o;
  o.socket_path = f.dir + "/nothing.sock";
  auto c = RuntimeClient::Connect(o);
  CHECK(c.status().code() == Code::kUnavailable);
  CHECK(c.status().message().find("not running") != std::string::npos);
}

TEST_CASE("the admin pool lists pools and reports runtime stats") {
  RuntimeFixture f;
  RuntimeClient::Options o;
  o.socket_path = f.sock();
  auto c = RuntimeClient::Connect(o);
  REQUIRE(c.ok());
  auto raw = (*c)->Call(0, static_cast<uint32_t>(AdminMethod::kListPools), "");
  REQUIRE(raw.ok());
  auto pools = DecodePoolList(*raw);
  REQUIRE(pools.ok());
  REQUIRE(pools->size() == 1);
  CHECK(pools->at(0).id == 7);
  CHECK(pools->at(0).name == "e");
  CHECK(pools->at(0).module == "echo");
  auto st_raw = (*c)->Call(0, static_cast<uint32_t>(AdminMethod::kRuntimeStats), "");
  REQUIRE(st_raw.ok());
  auto st = DecodeRuntimeStats(*st_raw);
  REQUIRE(st.ok());
  CHECK(st->pid == static_cast<uint64_t>(getpid()));  // the runtime runs in this process
  CHECK(st->worker_threads == f.rt->config().num_threads);
  CHECK(st->pools == 1);
  CHECK(st->client_connections >= 1);  // this client's
  CHECK((*c)->Call(0, static_cast<uint32_t>(AdminMethod::kRuntimeStats), "x").status().code() == Code::kCorruption);
  CHECK(DecodeRuntimeStats(std::string_view(*st_raw).substr(1)).status().code() == Code::kCorruption);
  CHECK(DecodePoolList(std::string_view(*raw).substr(0, raw->size() - 1)).status().code() == Code::kCorruption);
}

TEST_CASE("admin methods name who may call them: reports are readers', changes the admin's") {
  for (AdminMethod m : {AdminMethod::kPing, AdminMethod::kStatus, AdminMethod::kFindPool, AdminMethod::kListPools,
                        AdminMethod::kRuntimeStats, AdminMethod::kHello, AdminMethod::kProve, AdminMethod::kOpenChannel})
    CHECK(AdminCallerOf(static_cast<uint32_t>(m)) == CallerClass::kReader);
  for (AdminMethod m : {AdminMethod::kStop, AdminMethod::kCreatePools, AdminMethod::kDestroyPool,
                        AdminMethod::kComposeStop})
    CHECK(AdminCallerOf(static_cast<uint32_t>(m)) == CallerClass::kAdmin);
  CHECK(AdminCallerOf(999) == CallerClass::kAdmin);
}
