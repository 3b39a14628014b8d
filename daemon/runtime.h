// The runtime kernel: module registry, pools, the admin pool and the client server.
// Asio stays inside runtime.cc / server.cc.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/thread_annotations.h"
#include "daemon/config.h"
#include "daemon/ipc.h"
#include "daemon/pool.h"
#include "daemon/pool_query.h"

namespace clio {

class HttpServer;
class Server;

// The node's pool log, state_dir/pools.json: the pools created at run time with `restart: true`,
// as a compose document, recreated at start. `clio_run start --fresh` removes it.
std::string PoolLogPath(const RuntimeConfig& config);

// Before the runtime makes anything: the process's umask becomes 077 (metadata, pid file, tier
// files and the token are the runtime's alone; the socket and the mount lock set their modes
// themselves), and the state directory is made, or set, 0700 — 0750 with group clio when that
// group exists, so that its members reach a socket inside it. A directory of root is left as it
// is (with a warning); one of another user is refused (its owner could write the pool log).
Status PrepareStateDir(const std::string& dir);

class Runtime : public PoolRegistry {
 public:
  explicit Runtime(RuntimeConfig config);
  ~Runtime() override;

  // Module factories by mod_name; register before Compose().
  void RegisterModule(std::string mod_name, ModuleFactory factory);
  // Creates the pools of the compose list in order, then those of the pool log (pools created
  // at run time with `restart: true`). On an error in the config the pools created so far are
  // stopped and destroyed; a logged pool that cannot be recreated is reported (log, status,
  // /api/v1/status) and stays in the log, and the runtime starts without it.
  Status Compose();
  // Creates the pools of a compose document (ParseComposeDocument: `compose start FILE`, `pool
  // create`) on the running node, in order; `source` names it in errors. An entry with
  // `restart: true` is recorded in the pool log. All or nothing: on an error the pools this
  // call made are destroyed again and the log is unchanged.
  Result<std::vector<PoolInfo>> CreatePools(std::string_view yaml, const std::string& source);
  // Stops and destroys a pool created at run time and drops it from the pool log. New requests
  // to it fail NotFound at once; those in flight finish first. Busy while another pool uses it
  // (looked it up), NotPermitted for a pool of the config (it comes back with every start).
  Status DestroyPool(std::string_view name);
  // `compose stop FILE`: destroys the pools the document names, in reverse order, skipping
  // those not running; returns the ones destroyed. Stops at the first refusal.
  Result<std::vector<PoolInfo>> DestroyPools(std::string_view yaml, const std::string& source);
  // Listens on the socket (0660 by default; stale socket files are replaced, a live runtime on
  // the same socket is refused with Busy) and serves until Stop() or SIGTERM/SIGINT.
  // `on_ready` runs once the socket accepts clients.
  Status Serve(const std::function<void()>& on_ready);
  // Asks Serve() to return; safe from any thread.
  void RequestStop();
  // Stops pools, users before the pools they use (else newest first); returns the first error.
  Status StopPools();

  // Dispatches one request (called by the server on worker threads). A query (daemon/
  // pool_query.h) other than local is resolved first: on this single node it runs the task
  // when it names this node's container, and is NotSupported (naming the container or node)
  // when it names another, InvalidArgument when it names none of the pool's.
  Result<std::string> Dispatch(uint32_t pool, uint32_t method, std::string_view payload,
                               const PoolQuery& query = {});
  // The same for a method the pool handles asynchronously (Pool::IsAsync): starts it; `done`
  // gets the answer, from the thread that ends the task.
  void DispatchAsync(uint32_t pool, uint32_t method, std::string payload, const PoolQuery& query, Pool::Done done);

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
  bool Lasting(uint32_t id) override;
  const RuntimeConfig& config() const { return config_; }

 private:
  struct PoolSlot;
  class PoolView;
  // A pool of the pool log (restart: true), as recorded.
  struct Logged {
    std::string name, mod_name;
    uint32_t major = 0;
    std::shared_ptr<ConfigValue> root;
    const ConfigValue* node = nullptr;
    std::string failure;  // why the last start could not recreate it; empty when running
    bool pending = false;  // during Compose(): read from the log, not created yet
    ComposeEntry entry;    // as the log holds it (node points into root)
  };

  // The admin pool's methods (daemon/admin_protocol.h): one Run per request type.
  Result<std::string> HandleAdmin(uint32_t method, std::string_view payload);
  using AdminHandlers = wire::Handlers<Runtime, adminproto::AllRequests>;
  friend AdminHandlers;
  Result<adminproto::PingReply> Run(const adminproto::Ping& r);
  Result<wire::Raw> Run(const adminproto::GetStatus& r);
  Result<wire::Empty> Run(const adminproto::Stop& r);
  Result<adminproto::FindPoolReply> Run(const adminproto::FindPool& r);
  Result<adminproto::PoolListReply> Run(const adminproto::ListPools& r);
  Result<adminproto::RuntimeStatsReply> Run(const adminproto::GetRuntimeStats& r);
  Result<adminproto::PoolListReply> Run(const adminproto::CreatePools& r);
  Result<wire::Empty> Run(const adminproto::DestroyPool& r);
  Result<adminproto::PoolListReply> Run(const adminproto::ComposeStop& r);
  Result<adminproto::OpenChannelReply> Run(const adminproto::OpenChannel& r);
  Result<adminproto::HelloReply> Run(const adminproto::Hello& r);
  Result<wire::Empty> Run(const adminproto::Prove& r);
  Status RouteHere(const Pool& pool, uint32_t method, std::string_view payload, const PoolQuery& query) const;
  // Whether the current request's peer (CurrentRequest().peer) may call `method` of `pool`
  // (null: the admin pool): PermissionDenied naming the method, its class and the caller.
  Status Authorize(const Pool* pool, uint32_t method) const;
  // The HTTP actions behind the token (daemon/http_api.cc).
  void RouteHttpActions(HttpServer& http, std::string token);
  // Creates one pool; it is not yet visible to clients.
  Result<std::shared_ptr<PoolSlot>> MakePool(const ComposeEntry& entry, const std::string& file)
      REQUIRES(compose_mu_);
  // DestroyPool with compose_mu_ held; RetireLocked takes the slot out and stops its pool.
  Status DestroyLocked(std::string_view name) REQUIRES(compose_mu_);
  Status RetireLocked(std::string_view name) REQUIRES(compose_mu_);
  Status SaveLog() REQUIRES(compose_mu_);
  // Reads the pool log into logged_, every entry pending.
  Status LoadLog() REQUIRES(compose_mu_);
  // Creates logged_[i] (pending); a failure is recorded in it and logged, not returned.
  void RecreateLogged(size_t i) REQUIRES(compose_mu_);
  // During Compose(), on the composing thread: a pool of the config looked up a pool that is
  // not running; if the pool log holds it, it is created now. Whether it was.
  bool RecreateOnDemand(std::string_view name, uint32_t id) REQUIRES(compose_mu_);
  std::shared_ptr<PoolSlot> SlotById(uint32_t id) const EXCLUDES(mu_);
  // A request enters its pool's slot (counted in flight, so a destroy waits for it) and leaves
  // it when it ends. Null when no pool has the id.
  std::shared_ptr<PoolSlot> EnterSlot(uint32_t pool) EXCLUDES(mu_);
  void LeaveSlot(PoolSlot& slot);
  std::vector<std::shared_ptr<PoolSlot>> Slots() const EXCLUDES(mu_);
  // A lookup by a pool's own registry: recorded, so the pool found cannot be destroyed first.
  Pool* LookUp(PoolSlot* user, std::string_view name, uint32_t id) EXCLUDES(mu_);
  Pool* LookUpRunning(PoolSlot* user, std::string_view name, uint32_t id) EXCLUDES(mu_);
  void ReleaseUse(PoolSlot* user, uint32_t id) EXCLUDES(mu_);

  const RuntimeConfig config_;
  // Built-in modules (RegisterModule) and external ones loaded so far (MakePool).
  std::map<std::string, ModuleFactory> factories_ GUARDED_BY(compose_mu_);
  // One create or destroy at a time; taken before mu_.
  Mutex compose_mu_ ACQUIRED_BEFORE(mu_);
  std::vector<Logged> logged_ GUARDED_BY(compose_mu_);
  // The thread running Compose() (holding compose_mu_), so that its lookups may recreate
  // pools of the log on demand; a default id otherwise.
  std::atomic<std::thread::id> composing_{};
  // The pools in creation order. Requests hold a slot (shared) while they run, so a destroyed
  // pool goes away only after its last request.
  mutable SharedMutex mu_;
  std::vector<std::shared_ptr<PoolSlot>> pools_ GUARDED_BY(mu_);
  Mutex deps_mu_ ACQUIRED_AFTER(mu_);  // PoolSlot::uses
  Mutex idle_mu_;                       // with idle_cv_: a request on a retiring pool ended
  CondVar idle_cv_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::string http_state_;  // for status: "http://127.0.0.1:8930", "off", or why not
  std::atomic<bool> stop_requested_{false};
  const int64_t start_time_;
};

}  // namespace clio
