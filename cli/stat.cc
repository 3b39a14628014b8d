// `clioctl stat`: the daemon at a glance: the runtime (workers, clients, pools), every tier with
// its dirty bytes, and the write-back state (dirty blobs waiting for the flusher, flush lag).
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/cte_connection.h"
#include "cli/progress.h"
#include "common/size.h"
#include "daemon/ipc.h"
#include "placement/cte_pool.h"

namespace clio {

int Stat(const CommandContext& ctx) {
  auto c = CteConnection::Open(ctx);
  if (!c.ok()) {
    std::fprintf(stderr, "clioctl: stat: %s\n", c.status().message().c_str());
    return 1;
  }
  auto reply = c->client->Call(0, adminproto::GetRuntimeStats{});
  Result<RuntimeStats> rt = reply.ok() ? Result<RuntimeStats>(reply->stats) : Result<RuntimeStats>(reply.status());
  auto tiers = c->ListTiers();
  auto wb = c->Writeback();
  for (const Status& s : {rt.status(), tiers.status(), wb.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "clioctl: stat failed: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::map<uint64_t, DirtyLedger::TierCounters> dirty;  // volatile tiers, by id
  uint64_t dirty_total = 0;
  for (const DirtyLedger::TierCounters& d : wb->dirty) {
    dirty[d.tier_id] = d;
    dirty_total += d.dirty;
  }
  if (ctx.json) {
    nlohmann::json out = CteStatusJson(*tiers, *wb);
    out["runtime"] = {{"pid", rt->pid},
                      {"uptime_s", rt->uptime_s},
                      {"worker_threads", rt->worker_threads},
                      {"client_connections", rt->client_connections},
                      {"shm_channels", rt->shm_channels},
                      {"tcp_connections", rt->tcp_connections},
                      {"malformed_frames", rt->malformed_frames},
                      {"reaped_clients", rt->reaped_clients},
                      {"extra_workers", rt->extra_workers},
                      {"workers_added", rt->workers_added},
                      {"slow_threads", rt->slow_threads},
                      {"slow_tasks", rt->slow_tasks},
                      {"pools", rt->pools}};
    std::printf("%s\n", out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("runtime: pid %llu, up %llu s, %s, %s (this one included), %s\n",
              static_cast<unsigned long long>(rt->pid), static_cast<unsigned long long>(rt->uptime_s),
              Count(rt->worker_threads, "worker thread", "worker threads").c_str(),
              Count(rt->client_connections, "client connection", "client connections").c_str(),
              Count(rt->pools, "pool", "pools").c_str());
  std::printf("clients: %llu over shared memory, %llu over TCP, the rest over the Unix socket; "
              "%s closed for a malformed frame, %s of exited clients reaped\n",
              static_cast<unsigned long long>(rt->shm_channels), static_cast<unsigned long long>(rt->tcp_connections),
              Count(rt->malformed_frames, "connection", "connections").c_str(),
              Count(rt->reaped_clients, "connection", "connections").c_str());
  std::printf("workers: %u threads of the slow class (%llu slow tasks run), %u added to stuck I/O workers now "
              "(%llu ever)\n\n",
              rt->slow_threads, static_cast<unsigned long long>(rt->slow_tasks), rt->extra_workers,
              static_cast<unsigned long long>(rt->workers_added));
  int width = 4;  // the TIER column: as wide as the longest name
  for (const TierInfo& t : *tiers) width = std::max(width, static_cast<int>(t.name.size()));
  std::printf("%-*s %-6s %12s %12s %12s %12s %6s %s\n", width, "TIER", "TYPE", "CAPACITY", "USED", "DIRTY",
              "DIRTY LIMIT", "SCORE", "PERSISTENCE");
  for (const TierInfo& t : *tiers) {
    auto it = dirty.find(t.tier_id);
    std::printf("%-*s %-6s %12s %12s %12s %12s %6.2f %s\n", width, t.name.c_str(),
                std::string(BdevTypeName(t.stats.type)).c_str(), FormatSize(t.stats.capacity).c_str(),
                FormatSize(t.stats.used).c_str(), it != dirty.end() ? FormatSize(it->second.dirty).c_str() : "-",
                it != dirty.end() ? FormatSize(it->second.limit).c_str() : "-", t.score,
                std::string(PersistenceName(t.stats.persistence)).c_str());
  }
  std::printf("\nwrite-back: %s dirty in %s (the flush queue)", FormatSize(dirty_total).c_str(),
              Count(wb->dirty_blobs, "blob", "blobs").c_str());
  if (wb->dirty_blobs) std::printf(", the oldest dirty for %.1f s", wb->oldest_dirty_s);
  std::printf("\n  %s reserved on persistent tiers for flushes; %llu flusher passes, %llu failed flushes "
              "(retried)\n  %llu writers waited for a dirty limit (%llu placed elsewhere); %llu clean copies "
              "evicted (%s)\n",
              FormatSize(wb->reserved).c_str(), static_cast<unsigned long long>(wb->flush_passes),
              static_cast<unsigned long long>(wb->flush_failures),
              static_cast<unsigned long long>(wb->dirty_waits),
              static_cast<unsigned long long>(wb->dirty_wait_timeouts),
              static_cast<unsigned long long>(wb->evictions), FormatSize(wb->evicted_bytes).c_str());
  return 0;
}

}  // namespace clio
