// S3 tier throughput against the signature-verifying stand-in (tests/objstore/s3_server.py),
// beside a plain HTTP PUT/GET loop to the same server, in one run:
//   objstore_bench [--mib N] [--block-kib K] [--threads T]
// The reference sends the same requests (signed payload hash and Content-MD5 on PUT, a Range
// on GET) over one bare HTTP client per thread, with no bdev, allocator, log or retry layer:
// the ratio is what the tier costs on top of the wire. Figures depend on the stand-in (a
// Python server): compare ratios, not MiB/s.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "storage/bdev.h"
#include "storage/objstore/http.h"
#include "storage/objstore/sigv4.h"

using namespace clio;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kKey[] = "BENCHKEY";
constexpr char kSecret[] = "bench-secret";

void Die(const std::string& what) {
  std::fprintf(stderr, "objstore_bench: %s\n", what.c_str());
  std::exit(1);
}

struct Server {
  pid_t pid = -1;
  uint16_t port = 0;
  explicit Server(const std::string& dir) {
    const std::string port_file = dir + "/port";
    pid = ::fork();
    if (pid == 0) {
      const std::string script = std::string(CLIO_SOURCE_DIR) + "/tests/objstore/s3_server.py";
      ::execlp("python3", "python3", script.c_str(), "--port", "0", "--port-file",
               port_file.c_str(), "--access-key", kKey, "--secret-key", kSecret, "--require-content-md5",
               (char*)nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 600 && port == 0; ++i) {
      std::ifstream in(port_file);
      unsigned p = 0;
      if (in >> p) port = static_cast<uint16_t>(p);
      else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (port == 0) Die("the S3 stand-in did not start");
  }
  ~Server() {
    ::kill(pid, SIGTERM);
    ::waitpid(pid, nullptr, 0);
  }
};

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

// The reference: signed requests straight over one HTTP client per thread.
struct PlainLoop {
  http::Client client;
  std::string host;
  uint64_t block;
  PlainLoop(uint16_t port, uint64_t block_size)
      : client(http::Endpoint{false, "127.0.0.1", port}, http::ClientOptions{}),
        host("127.0.0.1:" + std::to_string(port)), block(block_size) {}
  http::Request Build(const std::string& method, const std::string& path, std::string_view body) {
    sigv4::Request r;
    r.method = method;
    r.path = path;
    r.payload_sha256 = sigv4::Sha256Hex(body);
    const std::string date = sigv4::AmzDate(std::time(nullptr));
    r.headers = {{"host", host}, {"x-amz-date", date}, {"x-amz-content-sha256", r.payload_sha256}};
    if (method == "PUT") r.headers.emplace_back("content-md5", sigv4::ContentMd5(body));
    if (method == "GET") r.headers.emplace_back("range", "bytes=0-" + std::to_string(block - 1));
    auto s = sigv4::Sign(r, {kKey, kSecret, ""}, "us-east-1", "s3", date);
    http::Request req{method, path, r.headers, body};
    req.headers.emplace_back("Authorization", s.authorization);
    return req;
  }
  void Must(const http::Request& req, int want) {
    auto r = client.Send(req);
    if (!r.ok()) Die(r.status().ToString());
    if (r->status != want) Die(req.method + " " + req.target + ": HTTP " + std::to_string(r->status));
  }
};

void Report(const char* what, double clio_s, double ref_s, uint64_t bytes, uint64_t requests) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  std::printf("%-6s  clio s3 tier %8.1f MiB/s %8.0f req/s | plain HTTP loop %8.1f MiB/s %8.0f "
              "req/s | ratio %.2f\n",
              what, mib / clio_s, requests / clio_s, mib / ref_s, requests / ref_s, ref_s / clio_s);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 64, block_kib = 1024;
  int threads = 4;
  const char* usage = "usage: objstore_bench [--mib N] [--block-kib K] [--threads T]";
  auto number = [&](int i) -> uint64_t {
    if (i + 1 >= argc) Die(std::string(argv[i]) + " needs a value; " + usage);
    char* end = nullptr;
    const uint64_t v = std::strtoull(argv[i + 1], &end, 10);
    if (*argv[i + 1] == '\0' || *end != '\0' || v == 0) {
      Die(std::string(argv[i]) + ": '" + argv[i + 1] + "' is not a positive number");
    }
    return v;
  };
  for (int i = 1; i < argc; i += 2) {
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::printf("%s\n", usage);
      return 0;
    }
    if (!std::strcmp(argv[i], "--mib")) mib = number(i);
    else if (!std::strcmp(argv[i], "--block-kib")) block_kib = number(i);
    else if (!std::strcmp(argv[i], "--threads")) threads = static_cast<int>(std::min<uint64_t>(number(i), 256));
    else Die(std::string("unknown option ") + argv[i] + "; " + usage);
  }
  const uint64_t block = block_kib * 1024;
  const uint64_t blocks = mib * (1 << 20) / block;
  if (blocks == 0 || threads <= 0 || block > (1 << 20) || block < 512) Die("bad sizes");

  char tmpl[] = "/tmp/clio-objbench.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  Server server(dir);
  ::setenv("AWS_ACCESS_KEY_ID", kKey, 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", kSecret, 1);
  ::setenv("S3_ENDPOINT", ("http://127.0.0.1:" + std::to_string(server.port)).c_str(), 1);
  ::setenv("S3_ALLOW_BUCKET_CREATE", "1", 1);

  BdevConfig c;
  c.type = BdevType::kS3;
  c.name = "s3://benchbucket/tier";
  c.alloc_log = dir + "/s3.alloc_log";
  auto opened = Bdev::Open(c);
  if (!opened.ok()) Die(opened.status().ToString());
  auto& bdev = *opened;
  std::vector<ExtentList> extents(blocks);
  for (auto& e : extents) {
    auto a = bdev->Allocate(block);
    if (!a.ok()) Die(a.status().ToString());
    e = *a;
  }
  std::string data(block, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);

  auto parallel = [&](auto&& fn) {
    const auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (uint64_t i = t; i < blocks; i += threads) fn(t, i);
      });
    for (auto& t : ts) t.join();
    return Seconds(t0);
  };

  auto clio_write = [&] {
    return parallel([&](int, uint64_t i) {
      Status s = bdev->Write(extents[i], 0, data);
      if (!s.ok()) Die(s.ToString());
    });
  };
  auto clio_read = [&] {
    return parallel([&](int, uint64_t i) {
      std::string out(block, '\0');
      Status s = bdev->Read(extents[i], 0, block, out.data());
      if (!s.ok()) Die(s.ToString());
      if (out != data) Die("read back different bytes");
    });
  };
  std::vector<std::unique_ptr<PlainLoop>> loops;
  for (int t = 0; t < threads; ++t) loops.push_back(std::make_unique<PlainLoop>(server.port, block));
  auto plain_write = [&] {
    return parallel([&](int t, uint64_t i) {
      loops[t]->Must(loops[t]->Build("PUT", "/benchbucket/plain/" + std::to_string(i), data), 200);
    });
  };
  auto plain_read = [&] {
    return parallel([&](int t, uint64_t i) {
      loops[t]->Must(loops[t]->Build("GET", "/benchbucket/plain/" + std::to_string(i), ""), 206);
    });
  };
  // Two rounds in alternating order (CLIO first, then the plain loop first), times summed, so
  // that neither side gains from going second against a warmed-up server.
  double w = clio_write(), pw = plain_write();
  pw += plain_write();
  w += clio_write();
  double r = clio_read(), pr = plain_read();
  pr += plain_read();
  r += clio_read();
  std::printf("objstore_bench: %llu x %llu KiB blocks, %d threads, S3 stand-in on loopback\n",
              static_cast<unsigned long long>(blocks), static_cast<unsigned long long>(block_kib),
              threads);
  Report("write", w, pw, 2 * blocks * block, 2 * blocks);
  Report("read", r, pr, 2 * blocks * block, 2 * blocks);
  std::printf("(ratio = plain loop time / clio time; 1.00 means the tier adds nothing)\n");
  std::filesystem::remove_all(dir);
  return 0;
}
