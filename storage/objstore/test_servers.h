// Test helpers: start the object-store stand-ins (tests/objstore/*.py) or s3rver as child
// processes on loopback, talk to their unsigned admin API, and point the environment at them.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage/objstore/http.h"
#include "storage/objstore/object_store.h"
#include "storage/test_util.h"

namespace clio::testing {

inline std::string SourceDir() { return CLIO_SOURCE_DIR; }

// A child process serving HTTP on 127.0.0.1; stopped (SIGTERM, then SIGKILL) at scope exit.
class ServerProcess {
 public:
  // Runs `argv`; the server writes its port to `port_file` (when given) or listens on `port`.
  ServerProcess(std::vector<std::string> argv, std::string port_file, uint16_t port = 0)
      : port_(port) {
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
    // Readiness wait (not a timed assertion): the port file, or a successful connection.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      if (!port_file.empty()) {
        std::ifstream in(port_file);
        unsigned p = 0;
        if (in >> p && p != 0) {
          port_ = static_cast<uint16_t>(p);
          if (Answers()) return;
        }
      } else if (Answers()) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServerProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool running() const { return pid_ > 0 && port_ != 0; }
  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Unsigned request to the server (the stand-ins' /_admin/ API).
  Result<http::Response> Admin(const std::string& method, const std::string& target,
                               const std::string& body = "") const {
    http::Client c(http::Endpoint{false, "127.0.0.1", port_}, http::ClientOptions{});
    http::Request r;
    r.method = method;
    r.target = target;
    r.headers = {{"Host", "127.0.0.1:" + std::to_string(port_)}};
    if (!body.empty()) r.headers.emplace_back("Content-Type", "application/json");
    r.body = body;
    return c.Send(r);
  }
  // Queues `count` faults of `kind` for the next matching requests (see tests/objstore/README.md).
  void Fault(const std::string& kind, int count, const std::string& method = "",
             double delay_s = 0) const {
    std::string body = "{\"kind\":\"" + kind + "\",\"count\":" + std::to_string(count);
    if (!method.empty()) body += ",\"method\":\"" + method + "\"";
    if (delay_s > 0) body += ",\"delay_s\":" + std::to_string(delay_s);
    body += "}";
    auto r = Admin("POST", "/_admin/fault", body);
    REQUIRE(r.ok());
    REQUIRE(r->status == 200);
  }
  // Requests waiting in a "hold" fault now.
  int Held() const {
    auto r = Admin("GET", "/_admin/faults");
    REQUIRE(r.ok());
    const size_t at = r->body.find("\"held\": ");
    REQUIRE(at != std::string::npos);
    return std::atoi(r->body.c_str() + at + 8);
  }
  // Serves the held requests (and lets later holds pass until the faults are cleared).
  void Release() const {
    auto r = Admin("POST", "/_admin/release");
    REQUIRE(r.ok());
    REQUIRE(r->status == 200);
  }

 private:
  bool Answers() const {
    http::Client c(http::Endpoint{false, "127.0.0.1", port_},
                   http::ClientOptions{std::chrono::milliseconds(2000)});
    http::Request r;
    r.method = "GET";
    r.target = "/";
    r.headers = {{"Host", "127.0.0.1"}};
    return c.Send(r).ok();
  }

  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

// Sets environment variables for the scope, restoring the old values after.
class ScopedEnv {
 public:
  ScopedEnv& Set(const std::string& name, const std::string& value) {
    Remember(name);
    ::setenv(name.c_str(), value.c_str(), 1);
    return *this;
  }
  ScopedEnv& Unset(const std::string& name) {
    Remember(name);
    ::unsetenv(name.c_str());
    return *this;
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }

 private:
  void Remember(const std::string& name) {
    const char* v = ::getenv(name.c_str());
    saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

inline constexpr char kTestAccessKey[] = "CLIOTESTKEY";
inline constexpr char kTestSecretKey[] = "clio/test+secret";
inline constexpr char kTestGcsToken[] = "ya29.clio-test-token";

// The S3 stand-in with the test credentials (and a session token when given).
inline std::unique_ptr<ServerProcess> StartS3Standin(const TempDir& dir,
                                                     const std::string& session_token = "",
                                                     const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {"python3", SourceDir() + "/tests/objstore/s3_server.py",
                                   "--port", "0", "--port-file", dir.File("s3.port"),
                                   "--access-key", kTestAccessKey, "--secret-key", kTestSecretKey,
                                   "--require-content-md5"};
  if (!session_token.empty()) {
    argv.push_back("--session-token");
    argv.push_back(session_token);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<ServerProcess>(argv, dir.File("s3.port"));
}

inline std::unique_ptr<ServerProcess> StartGcsStandin(const TempDir& dir) {
  return std::make_unique<ServerProcess>(
      std::vector<std::string>{"python3", SourceDir() + "/tests/objstore/gcs_server.py", "--port",
                               "0", "--port-file", dir.File("gcs.port"), "--token", kTestGcsToken,
                               "--require-md5"},
      dir.File("gcs.port"));
}

// True when the S3 tests run against s3rver (ctest objstore_test_s3rver).
inline bool UseS3rver() {
  const char* v = ::getenv("CLIO_OBJSTORE_SERVER");
  return v != nullptr && std::string(v) == "s3rver";
}

// The S3 server of this run: the stand-in, or s3rver (tests/objstore/run_s3rver.sh) with its
// fixed credentials. `standin` says whether the fault-injection admin API is there.
struct S3Server {
  TempDir dir;
  std::unique_ptr<ServerProcess> proc;
  std::string access_key = kTestAccessKey;
  std::string secret_key = kTestSecretKey;
  bool standin = true;

  explicit S3Server(const std::string& session_token = "") {
    if (UseS3rver()) {
      standin = false;
      access_key = secret_key = "S3RVER";
      proc = std::make_unique<ServerProcess>(
          std::vector<std::string>{"bash", SourceDir() + "/tests/objstore/run_s3rver.sh",
                                   "--port-file", dir.File("s3rver.port"), "--dir",
                                   dir.File("data")},
          dir.File("s3rver.port"));
    } else {
      proc = StartS3Standin(dir, session_token);
    }
    REQUIRE(proc->running());
  }
  // Settings for this server's credentials and endpoint, bucket creation allowed.
  S3Settings Settings() const {
    S3Settings s;
    s.access_key = access_key;
    s.secret_key = secret_key;
    s.endpoint = proc->url();
    s.allow_bucket_create = true;
    return s;
  }
};

}  // namespace clio::testing
