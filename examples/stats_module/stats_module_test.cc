// The example module loaded from a shared library by a real runtime: libclio_stats.so copied
// into a root-owned module directory, composed in front of a clio_bdev pool, driven over the
// socket with the bdev protocol, its counters read back; and the loader's refusals: a module
// directory others may write, a library not owned by root, another ABI, a name that is no
// module. Needs root (the module directory must be root's); reports itself skipped otherwise.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon/ipc.h"
#include "daemon/module.h"
#include "daemon/runtime.h"
#include "daemon/test_serving.h"
#include "storage/bdev_client.h"
#include "storage/bdev_pool.h"

using namespace clio;
namespace fs = std::filesystem;

namespace {

struct ModuleDir {
  std::string dir;
  ModuleDir() {
    char tmpl[] = "/tmp/clio_modules_XXXXXX";
    dir = mkdtemp(tmpl);
    ::chmod(dir.c_str(), 0755);
    Install(CLIO_STATS_MODULE, "libclio_stats.so");
    Install(CLIO_BAD_ABI_MODULE, "libclio_bad_abi.so");
  }
  ~ModuleDir() { fs::remove_all(dir); }
  void Install(const std::string& from, const std::string& as) {
    fs::copy_file(from, dir + "/" + as, fs::copy_options::overwrite_existing);
    ::chmod((dir + "/" + as).c_str(), 0644);
  }
};

struct Node {
  std::string dir;
  std::unique_ptr<Runtime> rt;
  testing::ServingThread serve;
  Status composed;
  Node(const std::string& module_dir, const std::string& compose) {
    char tmpl[] = "/tmp/clio_modnode_XXXXXX";
    dir = mkdtemp(tmpl);
    auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "\n  http_port: 0\n  module_dir: " + module_dir +
                                      "\ncompose:\n  - mod_name: clio_bdev\n    pool_name: \"ram::modtest_" +
                                      std::to_string(getpid()) +
                                      "\"\n    pool_id: \"301.0\"\n    bdev_type: ram\n    capacity: 8MB\n" + compose,
                                  "m.yaml");
    REQUIRE_MESSAGE(cfg.ok(), cfg.status().ToString());
    rt = std::make_unique<Runtime>(std::move(cfg).value());
    rt->RegisterModule("clio_bdev", MakeBdevModuleFactory());
    composed = rt->Compose();
    if (!composed.ok()) return;
    serve.Start(rt.get());
  }
  ~Node() {
    if (serve.serving()) {
      serve.Stop();
      (void)rt->StopPools();
    }
    rt.reset();
    fs::remove_all(dir);
  }
};

const char* kStats = "  - mod_name: clio_stats\n    pool_name: \"stats::ram\"\n    pool_id: \"320.0\"\n    next_pool_id: \"301.0\"\n";

// External modules load only from root-owned directories: without root the test cannot make
// one. It says so and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE), not passed.
void SkipUnlessRoot() {
  if (geteuid() == 0) return;
  std::fprintf(stderr, "stats_module_test: skipped: needs root (module directories are root's)\n");
  std::exit(77);
}

}  // namespace

TEST_CASE("the example module, loaded from a shared library, counts and forwards a bdev's requests") {
  SkipUnlessRoot();
  ModuleDir mods;
  Node n(mods.dir, kStats);
  REQUIRE_MESSAGE(n.composed.ok(), n.composed.ToString());
  auto rpc = RuntimeClient::Connect(RuntimeClient::OptionsFor(n.rt->config()));
  REQUIRE(rpc.ok());
  // The stats pool speaks the bdev protocol: a BdevClient pointed at it drives the device.
  BdevClient through(rpc->get(), 320);
  auto ext = through.Allocate(64 * 1024);
  REQUIRE_MESSAGE(ext.ok(), ext.status().ToString());
  const std::string data(40000, 'q');
  REQUIRE(through.Write(*ext, 100, data).ok());
  std::string back(data.size(), '\0');
  REQUIRE(through.Read(*ext, 100, back.size(), back.data()).ok());
  CHECK(back == data);
  CHECK(through.Read(*ext, 0, 1u << 30, back.data()).code() != Code::kOk);  // past the extents: an error, counted
  auto mon = through.Monitor();
  REQUIRE(mon.ok());
  auto j = nlohmann::json::parse(*mon);
  CHECK(j["module"] == "clio_stats");
  CHECK(j["next_pool"] == n.rt->FindById(301)->name());
  CHECK(j["methods"]["10"]["calls"] == 1);   // AllocateBlocks
  CHECK(j["methods"]["11"]["calls"] == 1);   // Write
  CHECK(j["methods"]["11"]["bytes_in"].get<uint64_t>() > data.size());
  CHECK(j["methods"]["12"]["calls"] == 2);   // Read, one refused
  CHECK(j["methods"]["12"]["errors"] == 1);
  CHECK(j["methods"]["12"]["bytes_out"].get<uint64_t>() == data.size());
  CHECK(j["next"]["used"].get<uint64_t>() >= 64 * 1024);  // the device's own Monitor, as it is
  // The device underneath holds what went through.
  BdevClient direct(rpc->get(), 301);
  std::string raw(data.size(), '\0');
  REQUIRE(direct.Read(*ext, 100, raw.size(), raw.data()).ok());
  CHECK(raw == data);
  // A method the module answers itself.
  REQUIRE((*rpc)->Call(320, 30, "").ok());
  CHECK(nlohmann::json::parse(*through.Monitor())["methods"].empty());
  // The module's pool uses the device's: the runtime stops it first.
  CHECK(n.rt->FindByName("stats::ram")->Describe() == "statistics in front of " + n.rt->FindById(301)->name());
}

TEST_CASE("the module loader refuses what it must not load, saying why") {
  SkipUnlessRoot();
  ModuleDir mods;
  SUBCASE("a module directory others may write") {
    ::chmod(mods.dir.c_str(), 0777);
    Node n(mods.dir, kStats);
    CHECK(n.composed.code() == Code::kConfigError);
    CHECK_MESSAGE(n.composed.message().find("writable by its group or others") != std::string::npos, n.composed.ToString());
  }
  SUBCASE("a library not owned by root") {
    REQUIRE(::chown((mods.dir + "/libclio_stats.so").c_str(), 1, 1) == 0);
    Node n(mods.dir, kStats);
    CHECK_MESSAGE(n.composed.message().find("owned by uid 1, not root") != std::string::npos, n.composed.ToString());
  }
  SUBCASE("another ABI") {
    Node n(mods.dir, "  - mod_name: clio_bad_abi\n    pool_name: bad\n    pool_id: \"321.0\"\n");
    CHECK_MESSAGE(n.composed.message().find("built for module ABI " + std::to_string(kModuleAbiVersion + 98)) != std::string::npos, n.composed.ToString());
  }
  SUBCASE("a library that serves another name") {
    mods.Install(CLIO_STATS_MODULE, "libclio_other.so");
    Node n(mods.dir, "  - mod_name: clio_other\n    pool_name: other\n    pool_id: \"321.0\"\n");
    CHECK_MESSAGE(n.composed.message().find("it serves 'clio_stats', not 'clio_other'") != std::string::npos,
                  n.composed.ToString());
  }
  SUBCASE("no such module") {
    Node n(mods.dir, "  - mod_name: clio_nothing\n    pool_name: x\n    pool_id: \"321.0\"\n");
    CHECK_MESSAGE(n.composed.message().find("unknown module 'clio_nothing' (known: clio_bdev; no libclio_nothing.so in "
                                            "runtime.module_dir " + mods.dir + ")") != std::string::npos,
                  n.composed.ToString());
  }
  SUBCASE("the module's own keys are checked") {
    Node n(mods.dir, "  - mod_name: clio_stats\n    pool_name: s\n    pool_id: \"321.0\"\n    next_pool_id: \"999.0\"\n");
    CHECK_MESSAGE(n.composed.message().find("next_pool_id: no pool 999.0") != std::string::npos, n.composed.ToString());
  }
}

namespace {

// Answers method 1 asynchronously, from a thread of its own (as a device's completion would).
class AsyncEcho : public Pool {
 public:
  ~AsyncEcho() override {
    for (auto& t : threads_) t.join();
  }
  Result<std::string> Handle(uint32_t, std::string_view p) override { return std::string(p); }
  bool IsAsync(uint32_t method) const override { return method == 1; }
  void HandleAsync(uint32_t, std::string payload, Done done) override {
    std::lock_guard<std::mutex> l(mu_);
    threads_.emplace_back([payload = std::move(payload), done = std::move(done)] { done("async:" + payload); });
  }

 private:
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

}  // namespace

TEST_CASE("the example module stays asynchronous in front of a pool that answers asynchronously") {
  SkipUnlessRoot();
  ModuleDir mods;
  char tmpl[] = "/tmp/clio_modnode_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir + "\n  http_port: 0\n  module_dir: " + mods.dir +
                                    "\ncompose:\n  - mod_name: async_echo\n    pool_name: echo\n    pool_id: \"301.0\"\n" +
                                    kStats,
                                "a.yaml");
  REQUIRE(cfg.ok());
  Runtime rt(std::move(cfg).value());
  rt.RegisterModule("async_echo", testing::Makes<AsyncEcho>());
  REQUIRE(rt.Compose().ok());
  {
    testing::ServingThread serve(&rt);
    auto c = RuntimeClient::Connect(RuntimeClient::OptionsFor(rt.config()));
    REQUIRE(c.ok());
    CHECK(rt.FindById(320)->IsAsync(1));
    CHECK_FALSE(rt.FindById(320)->IsAsync(9));
    CHECK(*(*c)->Call(320, 1, "hi") == "async:hi");
    CHECK(*(*c)->Call(320, 2, "sync") == "sync");
    auto j = nlohmann::json::parse(*(*c)->Call(320, 9, ""));
    CHECK(j["methods"]["1"]["calls"] == 1);
    CHECK(j["methods"]["1"]["bytes_out"] == 8);
    CHECK(j["methods"]["2"]["calls"] == 1);
    auto st = DecodeRuntimeStats(*(*c)->Call(0, static_cast<uint32_t>(AdminMethod::kRuntimeStats), ""));
    REQUIRE(st.ok());
    CHECK(st->async_tasks == 1);
  }
  (void)rt.StopPools();
  fs::remove_all(dir);
}
