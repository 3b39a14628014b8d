// `clioctl tier lifespan get|set`, `clioctl tier drain`, `clioctl tier undrain`.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "cli/progress.h"
#include "common/size.h"
#include "placement/cte_pool.h"

namespace clio {
namespace {

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "clioctl: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int TierLifespan(const CommandContext& ctx, const std::string& name, std::optional<double> days) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) return Fail("tier lifespan", c.status());
  auto t = c->FindTier(name);
  if (!t.ok()) return Fail("tier lifespan", t.status());
  if (days) {
    auto r = c->client->Call(c->pool, cteproto::SetLifespan{.tier = t->tier_id, .days = *days});
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
  // A drain answers once the tier is empty (or fails naming why, leaving every blob intact);
  // meanwhile, on a terminal, a second connection polls its progress.
  auto r = WithProgress(
      !undrain && !ctx.json && isatty(STDERR_FILENO), t->stats.used, "moved",
      [&]() -> std::optional<Progress> {
        auto p = c->client->Call(c->pool, cteproto::GetDrainProgress{.tier = t->tier_id});
        if (!p.ok()) return std::nullopt;
        return Progress{p->progress.bytes_left, p->progress.moved_bytes};
      },
      [&] {
        return undrain ? c->client->Call(c->pool, cteproto::Undrain{.tier = t->tier_id}).status()
                       : c->client->Call(c->pool, cteproto::Drain{.tier = t->tier_id}).status();
      });
  if (!r.ok()) return Fail(std::string(undrain ? "tier undrain " : "tier drain ") + name, r);
  auto p = c->client->Call(c->pool, cteproto::GetDrainProgress{.tier = t->tier_id});
  if (!p.ok()) return Fail("tier drain progress", p.status());
  const DrainProgress* progress = &p->progress;
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
