// A pool is a running instance of a module (bdev tier, CTE core, filesystem namespace). The
// runtime creates pools from the compose list in order, routes client requests to them by pool
// id, and stops them in reverse order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/caller.h"
#include "daemon/config.h"

namespace clio {

class Pool {
 public:
  virtual ~Pool() = default;
  // Handles one client request. Runs on a runtime worker thread; may block on I/O. Must not
  // throw. The returned string is the response payload.
  virtual Result<std::string> Handle(uint32_t method, std::string_view payload) = 0;
  // Who may call a method (daemon/caller.h): the one place the runtime asks. A method a pool
  // does not name is the administrator's.
  virtual CallerClass CallerOf(uint32_t method) const {
    (void)method;
    return CallerClass::kAdmin;
  }
  // A method's name in errors ("clio_bdev Write").
  virtual std::string MethodName(uint32_t method) const { return "method " + std::to_string(method); }

  // Tasks that wait. A method for which IsAsync() is true is run by HandleAsync(): the pool
  // starts the task and returns at once; the request's coroutine yields (its worker serves
  // other clients) until the task calls `done`, exactly once, from any thread: when the
  // subtask it awaits (another pool's task, PoolRegistry::Submit) or its device answers.
  // HandleAsync must not throw; `done` must not be called with locks held that the caller of
  // Submit may take.
  using Done = std::function<void(Result<std::string>)>;
  virtual bool IsAsync(uint32_t method) const {
    (void)method;
    return false;
  }
  virtual void HandleAsync(uint32_t method, std::string payload, Done done) { done(Handle(method, payload)); }
  // Graceful stop: flush what must be flushed. Called once, in reverse compose order.
  virtual Status Stop() { return Status::Ok(); }
  // One line for `clio_run status`.
  virtual std::string Describe() const { return {}; }
  // A task sent with a dynamic pool query (daemon/pool_query.h): the container that runs it.
  // By default this node's (container 0 on a single node).
  virtual uint32_t DynamicContainer(uint32_t method, std::string_view payload) const {
    (void)method;
    (void)payload;
    return 0;
  }
  // The pool's state as one JSON object, for the HTTP API (/api/v1/status) and the dashboard.
  // Called on HTTP threads while requests are served: it must be thread-safe.
  virtual std::string MonitorJson() const { return "{}"; }

  const std::string& name() const { return name_; }
  const std::string& module_name() const { return module_; }
  uint32_t id() const { return id_; }
  void SetIdentity(std::string module, std::string name, uint32_t id) {
    module_ = std::move(module);
    name_ = std::move(name);
    id_ = id;
  }

 private:
  std::string module_;
  std::string name_;
  uint32_t id_ = 0;
};

class PoolRegistry;

// The client request a handler runs for, set by the server around Pool::Handle on the
// handler's thread: the client's id (random, chosen by the client, the same for all its
// connections and across runtime restarts), the request's id, and whether this is a resend
// after a broken connection (RuntimeClient::Resend::kMarked). client 0: an in-process caller,
// or a request outside the server.
struct RequestContext {
  uint32_t client = 0;
  uint64_t request_id = 0;
  bool resent = false;
  // Who sent it, as the kernel (or the TCP token) vouched at connect; null: an in-process
  // caller (a pool's own subtask, the runtime itself), which may call anything. The connection
  // owns it and outlives the request's dispatch; read it only while the request is dispatched
  // (not from an async continuation). A plain pointer keeps this struct trivially copyable:
  // g++ 12 destroys non-trivial captures of lambdas built in a co_await expression twice (the
  // release build corrupted its heap with a shared_ptr here).
  const Peer* peer = nullptr;
};
inline thread_local RequestContext t_current_request;
inline const RequestContext& CurrentRequest() { return t_current_request; }
// Sets the current request for a scope; restores the previous one after.
class ScopedRequest {
 public:
  explicit ScopedRequest(RequestContext r) : saved_(t_current_request) { t_current_request = r; }
  ~ScopedRequest() { t_current_request = saved_; }
  ScopedRequest(const ScopedRequest&) = delete;
  ScopedRequest& operator=(const ScopedRequest&) = delete;

 private:
  RequestContext saved_;
};

// Creates a pool from its compose entry. `file` is the config file, for error messages.
// Earlier pools are reachable through `registry` (a pool may only name pools composed before
// it).
using ModuleFactory = std::function<Result<std::unique_ptr<Pool>>(
    const ComposeEntry& entry, const std::string& file, PoolRegistry& registry)>;

class PoolRegistry {
 public:
  virtual ~PoolRegistry() = default;
  virtual Pool* FindByName(std::string_view name) = 0;
  virtual Pool* FindById(uint32_t id) = 0;
  // The ids of the pools composed so far, in compose order.
  virtual std::vector<uint32_t> PoolIds() { return {}; }
  // Whether the pool comes back by itself at the next start: a pool of the config, or one
  // recorded in the pool log (restart: true). State that lasts (a tier record) may name only
  // such a pool. A lookup of such a pool during the start finds it even when the pool log
  // recreates it after the config's pools.
  virtual bool Lasting(uint32_t id) {
    (void)id;
    return true;
  }
  // Drops the use a lookup recorded (FindByName/FindById): the pool may be destroyed before
  // the caller again. For a pool that stops using another one (a tier removed).
  virtual void Release(uint32_t id) { (void)id; }
  // Runs a task of pool `id` as a subtask (recorded as a use, like a lookup): `done` gets its
  // answer, on another thread when that pool handles the method asynchronously, else before
  // Submit returns. NotFound for an unknown pool.
  virtual void Submit(uint32_t id, uint32_t method, std::string payload, Pool::Done done) {
    Pool* p = FindById(id);
    if (!p) return done(Status(Code::kNotFound, "no pool with id " + std::to_string(id)));
    if (p->IsAsync(method)) return p->HandleAsync(method, std::move(payload), std::move(done));
    done(p->Handle(method, payload));
  }
  template <typename T>
  T* Find(std::string_view name) {
    return dynamic_cast<T*>(FindByName(name));
  }
};

}  // namespace clio
