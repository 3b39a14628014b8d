// Crash test for the allocator log: a child process churns a file bdev and is killed with
// SIGKILL at a point chosen by message count; the reopened bdev must never hand out an extent
// the child reported live.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "storage/bdev.h"
#include "storage/test_util.h"

using namespace clio;
using clio::testing::Disjoint;
using clio::testing::Pattern;
using clio::testing::TempDir;

namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;
constexpr int kRounds = 10;
constexpr int kChildOps = 1000000;  // far more than the parent ever reads before the kill

BdevConfig CrashConfig(const TempDir& dir) {
  BdevConfig c;
  c.name = dir.File("crash.dat");
  c.type = BdevType::kFile;
  c.capacity = 8 * kMiB;
  c.alignment = 4096;
  c.growth_unit = kMiB;
  return c;
}

// One message per extent, one write(2) each: shorter than PIPE_BUF, so never torn by the kill.
void Report(int fd, char kind, const Extent& e) {
  const std::string msg = std::string(1, kind) + " " + std::to_string(e.offset) + " " +
                          std::to_string(e.size) + "\n";
  if (::write(fd, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) ::_exit(4);
}

// The child: allocate/write/free of random sizes until killed. "A" after Allocate returns,
// "F" before Free is called. Never returns into the test framework.
[[noreturn]] void ChildChurn(const BdevConfig& c, uint64_t seed, int fd) {
  auto opened = Bdev::Open(c);
  if (!opened.ok()) ::_exit(2);
  auto& b = *opened;
  std::mt19937_64 rng(seed * 7919 + 1);
  std::vector<ExtentList> held;
  for (int i = 0; i < kChildOps; ++i) {
    if (held.empty() || rng() % 5 < 3) {
      const uint64_t bytes = 1 + rng() % (rng() % 4 == 0 ? 2 * kMiB : 64 * kKiB);
      auto r = b->Allocate(bytes);
      if (!r.ok()) {
        if (r.status().code() != Code::kNoSpace) ::_exit(3);
        continue;  // full: the next frees make room
      }
      for (const auto& e : *r) Report(fd, 'A', e);
      const uint64_t n = std::min<uint64_t>(bytes, 8 * kKiB);
      if (!b->Write(*r, 0, Pattern(n, static_cast<unsigned>(i))).ok()) ::_exit(5);
      held.push_back(std::move(r).value());
    } else {
      const size_t k = rng() % held.size();
      for (const auto& e : held[k]) Report(fd, 'F', e);
      if (!b->Free(held[k]).ok()) ::_exit(6);
      held[k] = std::move(held.back());
      held.pop_back();
    }
  }
  ::_exit(0);
}

}  // namespace

TEST_CASE("file bdev: kill -9 during churn; no extent reported live is handed out again") {
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t seed = 1000 + static_cast<uint64_t>(round);
    CAPTURE(seed);
    TempDir dir;
    const BdevConfig c = CrashConfig(dir);
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    // Fork before this round opens anything (the I/O layer keeps per-process rings).
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::close(fds[0]);
      ChildChurn(c, seed, fds[1]);
    }
    ::close(fds[1]);

    std::mt19937_64 rng(seed);
    const int kill_after = 1 + static_cast<int>(rng() % 600);
    std::map<uint64_t, uint64_t> live;  // offset -> size: reported allocated, not yet freed
    int messages = 0;
    bool killed = false;
    FILE* in = ::fdopen(fds[0], "r");
    REQUIRE(in != nullptr);
    char kind = 0;
    unsigned long long offset = 0, size = 0;
    // After the kill, drain what the child wrote before it died: the parent's view must cover
    // everything the child did, or a block it freed and reused would look like a double use.
    while (std::fscanf(in, " %c %llu %llu", &kind, &offset, &size) == 3) {
      if (kind == 'A') {
        REQUIRE(live.emplace(offset, size).second);
      } else {
        REQUIRE(kind == 'F');
        auto it = live.find(offset);
        REQUIRE(it != live.end());
        REQUIRE(it->second == size);
        live.erase(it);
      }
      if (++messages == kill_after && !killed) {
        REQUIRE(::kill(child, SIGKILL) == 0);
        killed = true;
      }
    }
    std::fclose(in);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    // The child dies only by the kill (an early _exit would name its failing step).
    REQUIRE_MESSAGE(killed, "child exited after " << messages << " messages, status " << status);
    REQUIRE_MESSAGE(WIFSIGNALED(status), "child exit status " << WEXITSTATUS(status));
    CHECK(WTERMSIG(status) == SIGKILL);

    auto reopened = Bdev::Open(c);
    REQUIRE_MESSAGE(reopened.ok(), reopened.status().ToString());
    auto& b = *reopened;
    std::vector<Extent> reported;
    uint64_t reported_bytes = 0;
    for (const auto& [off, sz] : live) {
      reported.push_back({off, sz});
      reported_bytes += sz;
    }
    CHECK(b->GetStats().used >= reported_bytes);
    std::vector<Extent> fresh;
    for (;;) {
      auto r = b->Allocate(4096);
      if (!r.ok()) {
        CHECK(r.status().code() == Code::kNoSpace);
        break;
      }
      fresh.insert(fresh.end(), r->begin(), r->end());
    }
    std::vector<Extent> all = reported;
    all.insert(all.end(), fresh.begin(), fresh.end());
    CHECK(Disjoint(all));
    CHECK(b->GetStats().remaining == 0);
  }
}
