// Tests of fs/: a namespace over a real CTE (a RAM tier and a file tier in a temp dir) and
// real RocksDB, restartable.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fs/namespace/namespace.h"
#include "placement/cte.h"
#include "storage/kv.h"

namespace clio::testing {

struct NsFixture {
  uint32_t flush_ms = 0;
  std::string dir;
  std::string ram_name = "ram::ns_test_" + std::to_string(getpid());
  NamespaceOptions options{.chunk_size = 1u << 20, .orphan_reclaim_s = 0};
  uint32_t commit_interval_ms = 2000;  // metadata group commits (KvOptions)
  std::unique_ptr<KvStore> kv;
  std::unique_ptr<Cte> cte;
  std::unique_ptr<Namespace> ns;
  // flush_interval_ms: the CTE flusher's interval (0: the default).
  explicit NsFixture(uint32_t flush_interval_ms = 0, bool open = true) : flush_ms(flush_interval_ms) {
    char tmpl[] = "/tmp/clio_ns_XXXXXX";
    dir = mkdtemp(tmpl);
    if (open) Open();
  }
  void Open() {
    KvOptions ko;
    ko.path = dir + "/md";
    ko.commit_interval_ms = commit_interval_ms;
    auto k = OpenRocksDbKv(ko);
    REQUIRE(k.ok());
    kv = std::move(k).value();
    CteConfig c;
    TierConfig ram;
    ram.bdev.name = ram_name;
    ram.bdev.type = BdevType::kRam;
    ram.bdev.capacity = 16u << 20;
    ram.score = 1;
    TierConfig file;
    file.bdev.name = dir + "/tier.dat";
    file.bdev.type = BdevType::kFile;
    file.bdev.capacity = 128u << 20;
    file.bdev.growth_unit = 8u << 20;
    file.score = 0.2;
    c.tiers = {ram, file};
    if (flush_ms != 0) c.flush_interval_ms = flush_ms;
    auto ct = Cte::Open(c, kv.get());
    REQUIRE_MESSAGE(ct.ok(), ct.status().ToString());
    cte = std::move(ct).value();
    auto n = Namespace::Open(kv.get(), cte.get(), options);
    REQUIRE_MESSAGE(n.ok(), n.status().ToString());
    ns = std::move(n).value();
  }
  void Close() {
    ns.reset();
    REQUIRE(cte->Stop().ok());
    cte.reset();
    REQUIRE(kv->Close().ok());
    kv.reset();
  }
  void Restart() {
    Close();
    Open();
  }
  // A crash: `work` runs on this store in a child process, which then dies without a stop
  // (_exit: what was not committed is lost, as with kill -9), and the store opens again here.
  // `work` returns what the test needs to know afterwards, or throws a std::string to fail.
  std::string CrashAfter(const std::function<std::string(NsFixture&)>& work) {
    Close();
    int out[2];
    REQUIRE(::pipe(out) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(out[0]);
      std::string said;
      int code = 0;
      try {
        Open();
        said = work(*this);
      } catch (const std::string& why) {
        said = why;
        code = 1;
      } catch (...) {
        said = "the crashing child failed";
        code = 1;
      }
      (void)!::write(out[1], said.data(), said.size());
      ::_exit(code);
    }
    ::close(out[1]);
    std::string said;
    char buf[4096];
    for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
    ::close(out[0]);
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    REQUIRE_MESSAGE((WIFEXITED(st) && WEXITSTATUS(st) == 0), "the child failed: " << said);
    Open();
    return said;
  }
  ~NsFixture() {
    ns.reset();
    cte.reset();
    kv.reset();
    std::filesystem::remove_all(dir);
  }
  uint64_t Create(uint64_t parent, const char* name) {
    auto a = ns->Create(parent, name, 0644, 1000, 1000);
    REQUIRE_MESSAGE(a.ok(), a.status().ToString());
    REQUIRE(ns->Release(a->ino).ok());
    return a->ino;
  }
  std::vector<std::string> List(uint64_t dir_ino) {
    auto r = ns->ReadDir(dir_ino, "", 0);
    REQUIRE(r.ok());
    std::vector<std::string> names;
    for (auto& e : *r) names.push_back(e.name);
    return names;
  }
};

}  // namespace clio::testing
