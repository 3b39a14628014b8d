#include "daemon/client_reaper.h"

#include <vector>

#include "common/log.h"
#include "common/process.h"

namespace clio {

void ClientReaper::Watch(uint64_t id, Client client) {
  if (client.pid <= 0) return;
  MutexLock l(&mu_);
  watched_[id] = Watched{std::move(client), std::nullopt};
}

void ClientReaper::Forget(uint64_t id) {
  MutexLock l(&mu_);
  watched_.erase(id);
}

size_t ClientReaper::Reap(std::chrono::steady_clock::time_point now) {
  std::vector<Client> doomed;
  {
    MutexLock l(&mu_);
    for (auto it = watched_.begin(); it != watched_.end();) {
      Watched& w = it->second;
      if (!ProcessExited(w.client.pid) || (w.client.busy && w.client.busy())) {
        w.dead_since.reset();
        ++it;
        continue;
      }
      if (!w.dead_since) w.dead_since = now;
      if (now - *w.dead_since < grace_) {
        ++it;
        continue;
      }
      CLIO_LOG_INFO("client pid {} has exited; its connection (held open by another process) is closed",
                    w.client.pid);
      doomed.push_back(std::move(w.client));
      it = watched_.erase(it);
    }
  }
  for (Client& c : doomed)
    if (c.close) c.close();
  return doomed.size();
}

}  // namespace clio
