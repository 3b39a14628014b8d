// `clioctl tier lifespan get|set`, `clioctl tier drain`, `clioctl tier undrain`.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "common/codec.h"
#include "common/size.h"
#include "placement/cte_pool.h"

namespace clio {
namespace {

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "clioctl: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// Redraws one stderr line every half second until `done`: bytes moved, bytes left, rate and
// time left. Interrupting clioctl leaves the drain running in the runtime; `tier drain`
// again waits for it and finishes what is left.
void DrainProgressBar(CteConnection& c, const std::string& request, uint64_t total, const std::atomic<bool>& done) {
  const auto start = std::chrono::steady_clock::now();
  bool last = false;
  while (!last) {
    for (int i = 0; i < 10 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    last = done.load();  // one more line once the drain answered: its final figures
    auto p = c.client->Call(c.pool, static_cast<uint32_t>(CteMethod::kDrainProgress), request);
    if (!p.ok()) continue;
    auto progress = DecodeDrainProgress(*p);
    if (!progress.ok()) continue;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const uint64_t left = progress->bytes_left;
    const uint64_t gone = total > left ? total - left : 0;
    const double rate = secs > 0 ? static_cast<double>(gone) / secs : 0;
    const int width = 30;
    const int filled = total ? static_cast<int>(width * static_cast<double>(gone) / static_cast<double>(total)) : 0;
    std::string eta = rate > 0 ? std::to_string(static_cast<long long>(static_cast<double>(left) / rate)) + " s" : "?";
    std::fprintf(stderr, "\r[%s%s] %s left, %s moved, %s/s, %s left ", std::string(filled, '#').c_str(),
                 std::string(width - std::min(width, filled), ' ').c_str(), FormatSize(left).c_str(),
                 FormatSize(progress->moved_bytes).c_str(), FormatSize(static_cast<uint64_t>(rate)).c_str(),
                 eta.c_str());
    std::fflush(stderr);
  }
  std::fprintf(stderr, "\n");
}

}  // namespace

int TierLifespan(const CommandContext& ctx, const std::string& name, std::optional<double> days) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) return Fail("tier lifespan", c.status());
  auto t = c->FindTier(name);
  if (!t.ok()) return Fail("tier lifespan", t.status());
  if (days) {
    Encoder e;
    e.Put<uint64_t>(t->tier_id).Put<double>(*days);
    auto r = c->client->Call(c->pool, static_cast<uint32_t>(CteMethod::kSetLifespan), e.buffer());
    if (!r.ok()) return Fail("tier lifespan set " + name, r.status());
    t = c->FindTier(name);
    if (!t.ok()) return Fail("tier lifespan", t.status());
  }
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"name", t->name}, {"lifetime_days", t->stats.lifetime_days}}.dump().c_str());
  } else {
    std::printf("%s %g days%s\n", t->name.c_str(), t->stats.lifetime_days,
                t->stats.lifetime_days >= 999999 ? " (healthy)" : "");
  }
  return 0;
}

int TierDrain(const CommandContext& ctx, const std::string& name, bool undrain) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) return Fail("tier drain", c.status());
  auto t = c->FindTier(name);
  if (!t.ok()) return Fail("tier drain", t.status());
  Encoder e;
  e.Put<uint64_t>(t->tier_id);
  const CteMethod m = undrain ? CteMethod::kUndrain : CteMethod::kDrain;
  // A drain answers once the tier is empty (or fails naming why, leaving every blob intact);
  // meanwhile, on a terminal, a second connection polls its progress.
  std::atomic<bool> done{false};
  std::thread bar;
  if (!undrain && !ctx.json && isatty(STDERR_FILENO))
    bar = std::thread([&] { DrainProgressBar(*c, e.buffer(), t->stats.used, done); });
  auto r = c->client->Call(c->pool, static_cast<uint32_t>(m), e.buffer());
  done.store(true);
  if (bar.joinable()) bar.join();
  if (!r.ok()) return Fail(std::string(undrain ? "tier undrain " : "tier drain ") + name, r.status());
  auto p = c->client->Call(c->pool, static_cast<uint32_t>(CteMethod::kDrainProgress), e.buffer());
  if (!p.ok()) return Fail("tier drain progress", p.status());
  auto progress = DecodeDrainProgress(*p);
  if (!progress.ok()) return Fail("tier drain progress", progress.status());
  if (ctx.json) {
    std::printf("%s\n", nlohmann::json{{"name", name},
                                       {"draining", progress->draining},
                                       {"bytes_left", progress->bytes_left},
                                       {"moved_bytes", progress->moved_bytes},
                                       {"moved_copies", progress->moved_copies}}
                            .dump()
                            .c_str());
  } else if (undrain) {
    std::printf("%s takes new data again\n", name.c_str());
  } else {
    std::printf("%s drained: %s left, %s moved in %llu copies; it takes no new data until "
                "`clioctl tier undrain`\n",
                name.c_str(), FormatSize(progress->bytes_left).c_str(),
                FormatSize(progress->moved_bytes).c_str(),
                static_cast<unsigned long long>(progress->moved_copies));
  }
  return 0;
}

}  // namespace clio
