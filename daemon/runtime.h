// The runtime kernel: module registry, pools, the admin pool and the client server.
// Asio stays inside runtime.cc / server.cc.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/config.h"
#include "daemon/ipc.h"
#include "daemon/pool.h"

namespace clio {

class HttpServer;
class Server;

class Runtime : public PoolRegistry {
 public:
  explicit Runtime(RuntimeConfig config);
  ~Runtime() override;

  // Module factories by mod_name; register before Compose().
  void RegisterModule(std::string mod_name, ModuleFactory factory);
  // Creates the pools of the compose list in order. On error the pools created so far are
  // stopped and destroyed.
  Status Compose();
  // Listens on the socket (0660 by default; stale socket files are replaced, a live runtime on
  // the same socket is refused with Busy) and serves until Stop() or SIGTERM/SIGINT.
  // `on_ready` runs once the socket accepts clients.
  Status Serve(const std::function<void()>& on_ready);
  // Asks Serve() to return; safe from any thread.
  void RequestStop();
  // Stops pools in reverse order; returns the first error.
  Status StopPools();

  // Dispatches one request (called by the server on worker threads).
  Result<std::string> Dispatch(uint32_t pool, uint32_t method, std::string_view payload);

  // The HTTP port actually serving (0 when off or when it could not bind).
  uint32_t http_port() const;
  // pid, uptime, workers, client connections, pools (AdminMethod::kRuntimeStats).
  RuntimeStats Stats() const;
  // GET /api/v1/status: {"runtime": Stats and the config, socket and state paths, "pools":
  // [{id, name, module, describe, state: the pool's MonitorJson}], "errors": RecentProblems()}.
  // Read by the dashboard (GET /) and by scripts.
  std::string StatusJson() const;

  Pool* FindByName(std::string_view name) override;
  Pool* FindById(uint32_t id) override;
  std::vector<uint32_t> PoolIds() override;
  const RuntimeConfig& config() const { return config_; }

 private:
  Result<std::string> HandleAdmin(uint32_t method, std::string_view payload);

  const RuntimeConfig config_;
  std::map<std::string, ModuleFactory> factories_;
  // Pools are created before serving starts and destroyed after it ends, so lookups need no
  // lock while serving.
  std::vector<std::unique_ptr<Pool>> pools_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::string http_state_;  // for status: "http://127.0.0.1:8930", "off", or why not
  std::atomic<bool> stop_requested_{false};
  const int64_t start_time_;
};

}  // namespace clio
