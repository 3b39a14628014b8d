#include "daemon/runtime.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/codec.h"
#include "common/durable_file.h"
#include "common/log.h"
#include "common/metrics.h"
#include "daemon/asio.h"
#include "daemon/confine.h"
#include "daemon/dashboard_html.h"
#include "daemon/http.h"
#include "daemon/ipc.h"
#include "daemon/module.h"
#include "daemon/server.h"
#include "daemon/token.h"

namespace clio {

struct Runtime::PoolSlot {
  std::unique_ptr<PoolRegistry> view;  // declared before pool: the pool goes first
  std::unique_ptr<Pool> pool;
  bool from_config = false;
  std::atomic<bool> lasting{false};  // from the config or in the pool log: back at every start
  std::atomic<int64_t> inflight{0};
  std::atomic<bool> retiring{false};
  std::vector<uint32_t> uses;  // ids of pools this one looked up (deps_mu_)
};

// The registry a pool is given: lookups through it are recorded as uses.
class Runtime::PoolView final : public PoolRegistry {
 public:
  PoolView(Runtime* rt, PoolSlot* owner) : rt_(rt), owner_(owner) {}
  Pool* FindByName(std::string_view name) override { return rt_->LookUp(owner_, name, 0); }
  Pool* FindById(uint32_t id) override { return rt_->LookUp(owner_, {}, id); }
  std::vector<uint32_t> PoolIds() override { return rt_->PoolIds(); }
  bool Lasting(uint32_t id) override { return rt_->Lasting(id); }
  void Release(uint32_t id) override { rt_->ReleaseUse(owner_, id); }

 private:
  Runtime* const rt_;
  PoolSlot* const owner_;
};

Runtime::Runtime(RuntimeConfig config)
    : config_(std::move(config)),
      start_time_(std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::steady_clock::now().time_since_epoch()).count()) {
  std::vector<std::string> roots = {config_.state_dir};
  roots.insert(roots.end(), config_.allowed_paths.begin(), config_.allowed_paths.end());
  // The runtime's own files, which a client's pool must not open (an alloc log written over the
  // metadata's CURRENT would lose the metadata).
  const std::string log = PoolLogPath(config_);
  SetConfinementRoots(std::move(roots), {config_.metadata_path, config_.token_file, config_.token_file + ".tmp", log,
                                         log + ".tmp", config_.socket_path, config_.socket_path + ".mount"});
}

Runtime::~Runtime() = default;

void Runtime::RegisterModule(std::string mod_name, ModuleFactory factory) {
  MutexLock l(&compose_mu_);
  factories_[std::move(mod_name)] = std::move(factory);
}

std::string PoolLogPath(const RuntimeConfig& config) { return config.state_dir + "/pools.json"; }

Status PrepareStateDir(const std::string& dir) {
  ::umask(077);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::FromErrno(ec.value(), "cannot create state directory " + dir);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::FromErrno(errno, "state directory " + dir);
  if (st.st_uid != ::geteuid()) {
    // Its owner could write the pool log, which the next start replays unconfined.
    if (st.st_uid != 0)
      return Status(Code::kPermissionDenied, "state directory " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                                                 ", not the runtime's user (uid " + std::to_string(::geteuid()) +
                                                 ") or root: set runtime.state_dir to a directory of the runtime's own");
    CLIO_LOG_WARN("state directory {} belongs to root, not the runtime's user (uid {}): its mode is left as it is", dir,
                  ::geteuid());
    return Status::Ok();
  }
  const group* g = ::getgrnam("clio");
  if (g && st.st_gid != g->gr_gid && ::chown(dir.c_str(), ::geteuid(), g->gr_gid) != 0) g = nullptr;
  if (::chmod(dir.c_str(), g ? 0750 : 0700) != 0) return Status::FromErrno(errno, "chmod of state directory " + dir);
  return Status::Ok();
}

Result<std::shared_ptr<Runtime::PoolSlot>> Runtime::MakePool(const ComposeEntry& entry, const std::string& file) {
  auto it = factories_.find(entry.mod_name);
  if (it == factories_.end()) {
    // Not built in: an external module of runtime.module_dir (daemon/module.h).
    auto loaded = LoadModule(config_.module_dir, entry.mod_name);
    if (!loaded.ok() && loaded.status().code() == Code::kNotFound) {
      std::string known;
      for (const auto& [k, _] : factories_) known += (known.empty() ? "" : ", ") + k;
      return ConfigReader(entry.node, file)
          .Error("mod_name", "unknown module '" + entry.mod_name + "' (known: " + known + "; no lib" +
                                 entry.mod_name + ".so in runtime.module_dir " + config_.module_dir + ")");
    }
    if (!loaded.ok()) return ConfigReader(entry.node, file).Error("mod_name", loaded.status().message());
    it = factories_.emplace(entry.mod_name, std::move(loaded).value()).first;
  }
  for (const auto& s : Slots()) {
    ConfigReader r(entry.node, file);
    if (s->pool->name() == entry.pool_name)
      return Status(Code::kAlreadyExists, r.Error("pool_name", "a pool named '" + entry.pool_name + "' is running").message());
    if (s->pool->id() == entry.pool_major)
      return Status(Code::kAlreadyExists, r.Error("pool_id", "pool id " + std::to_string(entry.pool_major) +
                                                                 " is taken by pool '" + s->pool->name() + "'").message());
  }
  CLIO_LOG_INFO("creating pool {} ({}, id {}.{})", entry.pool_name, entry.mod_name, entry.pool_major, entry.pool_minor);
  auto slot = std::make_shared<PoolSlot>();
  slot->view = std::make_unique<PoolView>(this, slot.get());
  auto pool = it->second(entry, file, *slot->view);
  if (!pool.ok()) return pool.status().WithContext("creating pool '" + entry.pool_name + "'");
  (*pool)->SetIdentity(entry.mod_name, entry.pool_name, entry.pool_major);
  slot->pool = std::move(pool).value();
  return slot;
}

Status Runtime::Compose() {
  MutexLock l(&compose_mu_);
  // The log is read first: a pool of the config may use a pool of the log (a tier added at run
  // time on a pool made with --restart), which is then created when it is looked up.
  Status loaded = LoadLog();
  if (!loaded.ok()) return loaded;
  composing_.store(std::this_thread::get_id());
  for (const auto& entry : config_.compose) {
    auto slot = MakePool(entry, config_.file);
    if (!slot.ok()) {
      composing_.store({});
      (void)StopPools();
      return slot.status();
    }
    (*slot)->from_config = true;
    (*slot)->lasting = true;
    WriterLock w(&mu_);
    pools_.push_back(std::move(slot).value());
  }
  composing_.store({});
  for (size_t i = 0; i < logged_.size(); ++i)
    if (logged_[i].pending) RecreateLogged(i);
  return Status::Ok();
}

Status Runtime::LoadLog() {
  const std::string path = PoolLogPath(config_);
  std::ifstream in(path);
  if (!in) return Status::Ok();  // no pools were created at run time
  std::stringstream text;
  text << in.rdbuf();
  auto doc = ParseComposeDocument(text.str(), path, config_.state_dir);
  if (!doc.ok())
    return ConfigError(doc.status().message() +
                       " (the pool log is written by the runtime; fix it, or start with --fresh to "
                       "discard the pools created at run time)");
  for (const ComposeEntry& e : doc->entries) {
    logged_.push_back({e.pool_name, e.mod_name, e.pool_major, doc->root, e.node, {}, /*pending=*/true, e});
  }
  return Status::Ok();
}

void Runtime::RecreateLogged(size_t i) {
  const std::string path = PoolLogPath(config_);
  logged_[i].pending = false;  // before MakePool: a lookup cycle must not come back here
  const ComposeEntry e = logged_[i].entry;
  auto slot = MakePool(e, path);
  if (slot.ok()) {
    (*slot)->lasting = true;
    WriterLock w(&mu_);
    pools_.push_back(std::move(slot).value());
    return;
  }
  logged_[i].failure = slot.status().ToString();
  CLIO_LOG_ERROR("pool {} of the pool log was not recreated: {} (it stays in {}; `clioctl pool "
                 "destroy {}` drops it)", e.pool_name, logged_[i].failure, path, e.pool_name);
}

bool Runtime::RecreateOnDemand(std::string_view name, uint32_t id) {
  for (size_t i = 0; i < logged_.size(); ++i) {
    if (!logged_[i].pending || (name.empty() ? logged_[i].major != id : logged_[i].name != name)) continue;
    CLIO_LOG_INFO("pool {} of the pool log is used by a pool of the config: created first", logged_[i].name);
    RecreateLogged(i);
    return logged_[i].failure.empty();
  }
  return false;
}

Status Runtime::SaveLog() {
  const std::string path = PoolLogPath(config_);
  if (logged_.empty()) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::FromErrno(errno, "removing " + path);
    return Status::Ok();
  }
  std::vector<const ConfigValue*> nodes;
  for (const Logged& l : logged_) nodes.push_back(l.node);
  return ReplaceFileDurably(path, ComposeDocumentJson(nodes));
}

Result<std::vector<PoolInfo>> Runtime::CreatePools(std::string_view yaml, const std::string& source) {
  // A client's pools make their files beneath the runtime's allowed directories (daemon/confine.h).
  ScopedConfinement confine(CurrentRequest().peer != nullptr);
  MutexLock l(&compose_mu_);
  CLIO_ASSIGN_OR_RETURN(ComposeDocument doc, ParseComposeDocument(yaml, source, config_.state_dir));
  for (const ComposeEntry& e : doc.entries)
    for (const Logged& rec : logged_)
      if (rec.name == e.pool_name && !rec.failure.empty())
        return Status(Code::kAlreadyExists, "pool '" + e.pool_name + "' is in the pool log, not running (" +
                                                rec.failure + "); `clioctl pool destroy " + e.pool_name +
                                                "` drops it first");
  std::vector<PoolInfo> made;
  Status failed;
  for (const ComposeEntry& e : doc.entries) {
    auto slot = MakePool(e, source);
    if (!slot.ok()) {
      failed = slot.status();
      break;
    }
    made.push_back({e.pool_major, e.pool_name, e.mod_name, (*slot)->pool->Describe()});
    WriterLock w(&mu_);
    pools_.push_back(std::move(slot).value());
  }
  if (failed.ok()) {
    const size_t before = logged_.size();
    for (const ComposeEntry& e : doc.entries)
      if (e.restart) logged_.push_back({e.pool_name, e.mod_name, e.pool_major, doc.root, e.node, {}, false, e});
    if (logged_.size() != before) failed = SaveLog().WithContext("recording the pool log");
    if (failed.ok()) {
      for (const ComposeEntry& e : doc.entries)
        if (e.restart)
          if (auto slot = SlotById(e.pool_major)) slot->lasting = true;
      return made;
    }
    logged_.resize(before);
  }
  // All or nothing: undo this call's pools, newest first.
  for (auto it = made.rbegin(); it != made.rend(); ++it) {
    Status undo = RetireLocked(it->name);
    if (!undo.ok()) CLIO_LOG_ERROR("undoing pool {}: {}", it->name, undo.ToString());
  }
  return failed;
}

Status Runtime::DestroyPool(std::string_view name) {
  MutexLock l(&compose_mu_);
  return DestroyLocked(name);
}

Status Runtime::DestroyLocked(std::string_view name) {
  auto logged = std::find_if(logged_.begin(), logged_.end(), [&](const Logged& r) { return r.name == name; });
  if (logged != logged_.end() && !logged->failure.empty()) {  // in the log, but not running
    const Logged keep = *logged;
    logged_.erase(logged);
    Status s = SaveLog();
    if (!s.ok()) logged_.insert(logged_.begin(), keep);
    return s;
  }
  CLIO_RETURN_IF_ERROR(RetireLocked(name));
  if (logged == logged_.end()) return Status::Ok();
  logged_.erase(logged);
  return SaveLog().WithContext("pool destroyed, but the pool log still names it");
}

Status Runtime::RetireLocked(std::string_view name) {
  std::shared_ptr<PoolSlot> slot;
  {
    WriterLock w(&mu_);
    auto it = std::find_if(pools_.begin(), pools_.end(), [&](const auto& s) { return s->pool->name() == name; });
    if (it == pools_.end()) return NotFound("no pool named '" + std::string(name) + "'");
    if ((*it)->from_config)
      return Status(Code::kNotPermitted, "pool '" + std::string(name) + "' comes from the config (" + config_.file +
                                             ") and comes back with every start; remove it there");
    const uint32_t id = (*it)->pool->id();
    {
      MutexLock d(&deps_mu_);
      for (const auto& other : pools_) {
        if (other == *it) continue;
        if (std::find(other->uses.begin(), other->uses.end(), id) != other->uses.end())
          return Status(Code::kBusy, "pool '" + std::string(name) + "' is used by pool '" + other->pool->name() +
                                         "'; destroy that one first");
      }
    }
    slot = *it;
    slot->retiring = true;
    pools_.erase(it);
  }
  {
    MutexLock i(&idle_mu_);
    while (slot->inflight.load() != 0) idle_cv_.Wait(&idle_mu_);
  }
  CLIO_LOG_INFO("destroying pool {}", name);
  Status s = slot->pool->Stop();
  if (!s.ok()) CLIO_LOG_ERROR("stopping pool {}: {}", name, s.ToString());
  return s;
}

Result<std::vector<PoolInfo>> Runtime::DestroyPools(std::string_view yaml, const std::string& source) {
  MutexLock l(&compose_mu_);
  CLIO_ASSIGN_OR_RETURN(ComposeDocument doc, ParseComposeDocument(yaml, source, config_.state_dir));
  std::vector<PoolInfo> gone;
  for (auto it = doc.entries.rbegin(); it != doc.entries.rend(); ++it) {
    PoolInfo info{it->pool_major, it->pool_name, it->mod_name, "(not running; dropped from the pool log)"};
    bool known = false;
    for (const Logged& r : logged_) known |= r.name == it->pool_name;
    for (const auto& slot : Slots()) {
      if (slot->pool->name() != it->pool_name) continue;
      known = true;
      info.describe = slot->pool->Describe();
    }
    if (!known) continue;  // not running: nothing to stop
    Status s = DestroyLocked(it->pool_name);
    if (!s.ok()) {
      std::string done;
      for (const PoolInfo& g : gone) done += (done.empty() ? "" : ", ") + g.name;
      return s.WithContext(done.empty() ? "compose stop" : "compose stop (destroyed so far: " + done + ")");
    }
    gone.push_back(std::move(info));
  }
  return gone;
}

Status Runtime::Serve(const std::function<void()>& on_ready) {
  Server::Options so;
  so.socket_path = config_.socket_path;
  so.threads = config_.num_threads;
  so.tcp_address = config_.tcp_address;
  so.tcp_port = config_.tcp_port;
  so.tls_cert_file = config_.tls_cert_file;
  so.tls_key_file = config_.tls_key_file;
  so.shm_channel_bytes = config_.shm_channel_bytes;
  so.max_inflight_bytes = config_.max_inflight_bytes;
  so.reap_grace_s = config_.client_reap_grace_s;
  so.slow_task_us = config_.slow_task_us;
  so.stuck_task_ms = config_.stuck_task_ms;
  CLIO_ASSIGN_OR_RETURN(so.token, EnsureToken(config_.token_file));
  Server::AsyncDispatcher async;
  async.handles = [this](uint32_t pool, uint32_t method) {
    auto slot = pool == 0 ? nullptr : SlotById(pool);
    return slot && slot->pool->IsAsync(method);
  };
  async.start = [this](uint32_t pool, uint32_t method, std::string payload, const PoolQuery& query, Pool::Done done) {
    DispatchAsync(pool, method, std::move(payload), query, std::move(done));
  };
  server_ = std::make_unique<Server>(
      so,
      [this](uint32_t pool, uint32_t method, std::string_view payload, const PoolQuery& query) {
        return Dispatch(pool, method, payload, query);
      },
      std::move(async));
  CLIO_RETURN_IF_ERROR(server_->Listen());
  CLIO_LOG_INFO("serving on {}", config_.socket_path);
  // HTTP is for operators, not the data path: a port that cannot be bound is logged, and the
  // runtime serves its clients without it.
  http_state_ = "off (runtime.http_port is 0)";
  if (config_.http_port != 0) {
    http_ = std::make_unique<HttpServer>();
    http_->Route("/api/v1/status", "application/json", [this] { return StatusJson(); });
    http_->Route("/", "text/html; charset=utf-8", [] { return std::string(kDashboardHtml); });
    // The actions carry the token in a header: without TLS, only over loopback.
    if (IsLoopbackAddress(config_.http_address)) {
      RouteHttpActions(*http_, so.token);
    } else {
      CLIO_LOG_WARN("HTTP on {} is not a loopback address: the actions that change the node (/api/v1/pools, "
                    "/api/v1/stop) are off, since their token would cross the network in clear",
                    config_.http_address);
    }
    Status h = http_->Start(config_.http_address, config_.http_port);
    if (h.ok()) {
      const std::string base = "http://" + config_.http_address + ":" + std::to_string(http_->port());
      http_state_ = base + "/metrics (the dashboard at " + base + "/, JSON at /api/v1/status)";
      CLIO_LOG_INFO("HTTP on {}", http_state_);
    } else {
      http_state_ = "not serving: " + h.message();
      CLIO_LOG_ERROR("no HTTP server: {}", h.ToString());
      http_.reset();
    }
  }
  metrics::SamplerRegistration runtime_metrics([this] {
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::steady_clock::now().time_since_epoch()).count();
    return std::vector<metrics::Sample>{
        {"clio_runtime_uptime_seconds", "Seconds since the runtime started", {},
         static_cast<double>(now - start_time_)},
        {"clio_runtime_pools", "Pools running in the runtime", {}, static_cast<double>(Slots().size())},
        {"clio_runtime_worker_threads", "Worker threads serving client requests", {},
         static_cast<double>(config_.num_threads)},
        {"clio_runtime_client_connections", "Client connections open now", {},
         static_cast<double>(server_ ? server_->stats().connections : 0)},
        {"clio_runtime_shm_channels", "Client connections with a shared-memory channel open now", {},
         static_cast<double>(server_ ? server_->stats().shm_channels : 0)},
        {"clio_runtime_malformed_frames_total", "Client connections closed for a malformed frame", {},
         static_cast<double>(server_ ? server_->stats().malformed_frames : 0)},
        {"clio_runtime_reaped_clients_total", "Connections closed because their client process had exited", {},
         static_cast<double>(server_ ? server_->stats().reaped_clients : 0)},
        {"clio_runtime_inflight_bytes", "Payload bytes of the frames being read or run now (runtime.max_inflight)", {},
         static_cast<double>(server_ ? server_->stats().inflight_bytes : 0)},
        {"clio_runtime_inflight_waits_total", "Frames that waited unread because runtime.max_inflight was reached", {},
         static_cast<double>(server_ ? server_->stats().budget_waits : 0)},
        {"clio_runtime_refused_connections_total",
         "Connections closed at accept for a per-user or pre-handshake limit (docs/ipc.md, Limits)", {},
         static_cast<double>(server_ ? server_->stats().refused_connections : 0)},
        {"clio_runtime_tls_handshake_failures_total",
         "TCP connections closed because their TLS handshake failed (a client without TLS, or one that "
         "rejected the runtime's certificate)",
         {}, static_cast<double>(server_ ? server_->stats().tls_handshake_failures : 0)}};
  });
  server_->Run(on_ready);
  runtime_metrics = metrics::SamplerRegistration();
  if (http_) http_->Stop();
  http_.reset();
  server_.reset();
  return Status::Ok();
}

uint32_t Runtime::http_port() const { return http_ ? http_->port() : 0; }

RuntimeStats Runtime::Stats() const {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  RuntimeStats s;
  s.pid = static_cast<uint64_t>(getpid());
  s.uptime_s = static_cast<uint64_t>(std::max<int64_t>(now - start_time_, 0));
  s.worker_threads = config_.num_threads;
  if (server_) {
    const Server::Stats ss = server_->stats();
    s.client_connections = static_cast<uint64_t>(ss.connections);
    s.shm_channels = static_cast<uint64_t>(ss.shm_channels);
    s.tcp_connections = static_cast<uint64_t>(ss.tcp_connections);
    s.malformed_frames = ss.malformed_frames;
    s.reaped_clients = ss.reaped_clients;
    s.extra_workers = ss.extra_workers;
    s.workers_added = ss.workers_added;
    s.slow_threads = ss.slow_threads;
    s.slow_tasks = ss.slow_tasks;
    s.async_tasks = ss.async_tasks;
  }
  s.pools = static_cast<uint32_t>(Slots().size());
  return s;
}

std::string Runtime::StatusJson() const {
  const RuntimeStats s = Stats();
  nlohmann::json pools = nlohmann::json::array();
  for (const auto& slot : Slots()) {
    const Pool* p = slot->pool.get();
    // A pool's state is its own JSON; text that does not parse is shown as text, never dropped.
    const std::string state = p->MonitorJson();
    nlohmann::json parsed = nlohmann::json::parse(state, nullptr, /*allow_exceptions=*/false);
    pools.push_back({{"id", p->id()},
                     {"name", p->name()},
                     {"module", p->module_name()},
                     {"describe", p->Describe()},
                     {"state", parsed.is_discarded() ? nlohmann::json(state) : parsed}});
  }
  nlohmann::json out = {{"runtime",
                         {{"pid", s.pid},
                          {"uptime_s", s.uptime_s},
                          {"worker_threads", s.worker_threads},
                          {"client_connections", s.client_connections},
                          {"pools", s.pools},
                          {"node_id", config_.node_id},
                          {"config", config_.file},
                          {"socket", config_.socket_path},
                          {"state_dir", config_.state_dir}}},
                        {"pools", std::move(pools)},
                        {"errors", RecentProblems()}};
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Runtime::RequestStop() {
  stop_requested_ = true;
  if (server_) server_->Stop();
}

Status Runtime::StopPools() {
  // Users before the pools they use, else newest first: a CTE flushes into its tiers on stop.
  std::vector<std::shared_ptr<PoolSlot>> left;
  {
    WriterLock w(&mu_);
    left.swap(pools_);
  }
  Status first;
  while (!left.empty()) {
    size_t pick = left.size() - 1;
    {
      MutexLock d(&deps_mu_);
      for (size_t i = left.size(); i-- > 0;) {
        const uint32_t id = left[i]->pool->id();
        bool used = false;
        for (const auto& other : left)
          used |= other != left[i] && std::find(other->uses.begin(), other->uses.end(), id) != other->uses.end();
        if (!used) {
          pick = i;
          break;
        }
      }
    }
    std::shared_ptr<PoolSlot> slot = left[pick];
    left.erase(left.begin() + static_cast<std::ptrdiff_t>(pick));
    Status s = slot->pool->Stop();
    if (!s.ok()) {
      CLIO_LOG_ERROR("stopping pool {}: {}", slot->pool->name(), s.ToString());
      if (first.ok()) first = s;
    }
  }
  return first;
}

std::vector<std::shared_ptr<Runtime::PoolSlot>> Runtime::Slots() const {
  ReaderLock r(&mu_);
  return pools_;
}

std::shared_ptr<Runtime::PoolSlot> Runtime::SlotById(uint32_t id) const {
  ReaderLock r(&mu_);
  for (const auto& s : pools_)
    if (s->pool->id() == id) return s;
  return nullptr;
}

Pool* Runtime::LookUp(PoolSlot* user, std::string_view name, uint32_t id) {
  if (Pool* p = LookUpRunning(user, name, id)) return p;
  if (composing_.load() != std::this_thread::get_id()) return nullptr;
  compose_mu_.AssertHeld();  // Compose() holds it on this thread, around the factory calling us
  return RecreateOnDemand(name, id) ? LookUpRunning(user, name, id) : nullptr;
}

void Runtime::ReleaseUse(PoolSlot* user, uint32_t id) {
  MutexLock d(&deps_mu_);
  std::erase(user->uses, id);
}

bool Runtime::Lasting(uint32_t id) {
  std::shared_ptr<PoolSlot> s = SlotById(id);
  return s && s->lasting.load();
}

Pool* Runtime::LookUpRunning(PoolSlot* user, std::string_view name, uint32_t id) {
  ReaderLock r(&mu_);
  for (const auto& s : pools_) {
    if (name.empty() ? s->pool->id() != id : s->pool->name() != name) continue;
    if (s.get() != user) {
      MutexLock d(&deps_mu_);
      if (std::find(user->uses.begin(), user->uses.end(), s->pool->id()) == user->uses.end())
        user->uses.push_back(s->pool->id());
    }
    return s->pool.get();
  }
  return nullptr;
}

Pool* Runtime::FindByName(std::string_view name) {
  ReaderLock r(&mu_);
  for (const auto& s : pools_)
    if (s->pool->name() == name) return s->pool.get();
  return nullptr;
}

std::vector<uint32_t> Runtime::PoolIds() {
  std::vector<uint32_t> out;
  for (const auto& s : Slots()) out.push_back(s->pool->id());
  return out;
}

Pool* Runtime::FindById(uint32_t id) {
  std::shared_ptr<PoolSlot> s = SlotById(id);
  return s ? s->pool.get() : nullptr;
}

std::shared_ptr<Runtime::PoolSlot> Runtime::EnterSlot(uint32_t pool) {
  ReaderLock r(&mu_);
  for (const auto& s : pools_) {
    if (s->pool->id() != pool) continue;
    ++s->inflight;  // under mu_: a destroy that took the slot out waits for it
    return s;
  }
  return nullptr;
}

void Runtime::LeaveSlot(PoolSlot& slot) {
  if (--slot.inflight == 0 && slot.retiring) {
    MutexLock i(&idle_mu_);
    idle_cv_.NotifyAll();
  }
}

Result<std::string> Runtime::Dispatch(uint32_t pool, uint32_t method, std::string_view payload,
                                      const PoolQuery& query) {
  if (pool == 0) {
    if (query.kind != PoolQuery::Kind::kLocal && query.kind != PoolQuery::Kind::kBroadcast &&
        !(query.kind == PoolQuery::Kind::kPhysical && query.a == config_.node_id))
      return InvalidArgument("the admin pool answers on the node asked; query " +
                             std::string(PoolQueryName(query.kind)) + " names no node of this runtime");
    CLIO_RETURN_IF_ERROR(Authorize(nullptr, method));
    return HandleAdmin(method, payload);
  }
  std::shared_ptr<PoolSlot> slot = EnterSlot(pool);
  if (!slot) return NotFound("no pool with id " + std::to_string(pool));
  Status routed = Authorize(slot->pool.get(), method);
  if (routed.ok()) routed = RouteHere(*slot->pool, method, payload, query);
  Result<std::string> r = routed.ok() ? slot->pool->Handle(method, payload) : Result<std::string>(routed);
  LeaveSlot(*slot);
  return r;
}

void Runtime::DispatchAsync(uint32_t pool, uint32_t method, std::string payload, const PoolQuery& query,
                            Pool::Done done) {
  std::shared_ptr<PoolSlot> slot = EnterSlot(pool);  // left when the task ends
  if (!slot) return done(NotFound("no pool with id " + std::to_string(pool)));
  auto finish = [this, slot, done = std::move(done)](Result<std::string> r) {
    done(std::move(r));
    LeaveSlot(*slot);
  };
  Status routed = Authorize(slot->pool.get(), method);
  if (routed.ok()) routed = RouteHere(*slot->pool, method, payload, query);
  if (!routed.ok()) return finish(routed);
  slot->pool->HandleAsync(method, std::move(payload), std::move(finish));
}

Status Runtime::Authorize(const Pool* pool, uint32_t method) const {
  const Peer* peer = CurrentRequest().peer;
  if (!peer) return Status::Ok();
  const CallerClass needs = pool ? pool->CallerOf(method) : AdminCallerOf(method);
  if (peer->May(needs)) return Status::Ok();
  const std::string what = pool ? "pool '" + pool->name() + "': " + pool->MethodName(method)
                                : "the runtime's " + DeclaredName<adminproto::AllRequests>(method);
  const std::string who = needs == CallerClass::kReader ? std::string("anyone who can open the socket")
                                                        : "root or the runtime's user (uid " + std::to_string(::geteuid()) + ")";
  return Status(Code::kPermissionDenied, what + " is for " + CallerClassName(needs) + " callers: " + who +
                                              "; you are " + peer->Describe());
}

Status Runtime::RouteHere(const Pool& pool, uint32_t method, std::string_view payload, const PoolQuery& query) const {
  if (query.kind == PoolQuery::Kind::kLocal) return Status::Ok();
  // One node: the pool has one container, this node's (index 0). A physical query names a node
  // by its id (runtime.node_id).
  PoolQuery q = query;
  if (q.kind == PoolQuery::Kind::kPhysical) {
    if (q.a != config_.node_id)
      return Status(Code::kNotSupported, "node " + std::to_string(q.a) + " is not this runtime's (node " +
                                             std::to_string(config_.node_id) + "); this runtime has no cluster yet");
    q.a = 0;
  }
  const uint32_t dynamic = q.kind == PoolQuery::Kind::kDynamic ? pool.DynamicContainer(method, payload) : 0;
  auto where = ResolvePoolQuery(q, /*containers=*/1, /*here=*/0, dynamic);
  if (!where.ok()) return where.status().WithContext("pool '" + pool.name() + "', query " + std::string(PoolQueryName(q.kind)));
  for (uint32_t c : *where)
    if (c != 0) return Status(Code::kNotSupported, "container " + std::to_string(c) + " is not on this node");
  return Status::Ok();
}

Result<std::string> Runtime::HandleAdmin(uint32_t method, std::string_view payload) {
  if (auto serve = AdminHandlers::Find(method)) return serve(*this, payload);
  return Status(Code::kNotSupported, "unknown admin method " + std::to_string(method));
}

Result<adminproto::PingReply> Runtime::Run(const adminproto::Ping&) {
  return adminproto::PingReply{static_cast<uint64_t>(getpid())};
}

Result<wire::Raw> Runtime::Run(const adminproto::GetStatus&) {
  int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::steady_clock::now().time_since_epoch()).count();
  std::string s = "runtime pid " + std::to_string(getpid()) + ", up " + std::to_string(now - start_time_) +
                  " s, config " + config_.file + "\nsocket " + config_.socket_path + "\nstate " + config_.state_dir +
                  "\nhttp " + http_state_ + "\npools:\n";
  for (const auto& slot : Slots()) {
    const Pool& p = *slot->pool;
    s += "  " + std::to_string(p.id()) + "  " + p.name() + "  (" + p.module_name() + ") " + p.Describe() +
         (slot->from_config ? "" : " [created at run time]") + "\n";
  }
  MutexLock l(&compose_mu_);
  for (const Logged& rec : logged_)
    if (!rec.failure.empty()) s += "  -  " + rec.name + "  NOT RUNNING (pool log): " + rec.failure + "\n";
  return wire::Raw{std::move(s)};
}

Result<wire::Empty> Runtime::Run(const adminproto::Stop&) {
  stop_requested_ = true;
  return wire::Empty{};
}

Result<adminproto::FindPoolReply> Runtime::Run(const adminproto::FindPool& r) {
  Pool* p = FindByName(r.name);
  if (!p) return NotFound("no pool named '" + r.name + "'");
  return adminproto::FindPoolReply{p->id()};
}

Result<adminproto::PoolListReply> Runtime::Run(const adminproto::ListPools&) {
  adminproto::PoolListReply list;
  for (const auto& slot : Slots())
    list.pools.push_back({slot->pool->id(), slot->pool->name(), slot->pool->module_name(), slot->pool->Describe()});
  MutexLock l(&compose_mu_);
  for (const Logged& rec : logged_)
    if (!rec.failure.empty())
      list.pools.push_back({rec.major, rec.name, rec.mod_name, "NOT RUNNING (pool log): " + rec.failure});
  return list;
}

Result<adminproto::RuntimeStatsReply> Runtime::Run(const adminproto::GetRuntimeStats&) {
  return adminproto::RuntimeStatsReply{Stats()};
}

Result<adminproto::PoolListReply> Runtime::Run(const adminproto::CreatePools& r) {
  CLIO_ASSIGN_OR_RETURN(std::vector<PoolInfo> made, CreatePools(r.yaml, r.source));
  return adminproto::PoolListReply{std::move(made)};
}

Result<wire::Empty> Runtime::Run(const adminproto::DestroyPool& r) {
  CLIO_RETURN_IF_ERROR(DestroyPool(r.name));
  return wire::Empty{};
}

Result<adminproto::PoolListReply> Runtime::Run(const adminproto::ComposeStop& r) {
  CLIO_ASSIGN_OR_RETURN(std::vector<PoolInfo> gone, DestroyPools(r.yaml, r.source));
  return adminproto::PoolListReply{std::move(gone)};
}

// The transport methods reach the runtime only through a path that skips the server (an
// in-process call): the server answers them on the connection.
Result<adminproto::OpenChannelReply> Runtime::Run(const adminproto::OpenChannel&) {
  return Status(Code::kNotSupported, "a transport method: answered by the server on a connection");
}

Result<adminproto::HelloReply> Runtime::Run(const adminproto::Hello&) {
  return Status(Code::kNotSupported, "a transport method: answered by the server on a connection");
}

Result<wire::Empty> Runtime::Run(const adminproto::Prove&) {
  return Status(Code::kNotSupported, "a transport method: answered by the server on a connection");
}

}  // namespace clio
