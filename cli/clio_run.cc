// clio_run: the runtime daemon. `start [--foreground] [--fresh] [--mount DIR [-o OPTS]]`,
// `stop`, `status`, `compose start|stop FILE` (the same as clioctl's).
// This is the composition root: the only place that names every module's factory.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "common/log.h"
#include "common/process.h"
#include "daemon/config.h"
#include "daemon/confine.h"
#include "daemon/ipc.h"
#include "daemon/service_notify.h"
#include "daemon/runtime.h"
#include "fs/namespace/fs_pool.h"
#include "fs/mount/fuse_session.h"
#include "fs/protocol/fs_messages.h"
#include "fs/protocol/mount_lock.h"
#include "placement/cte_pool.h"
#include "storage/bdev_pool.h"
#include "storage/safe/safe_pool.h"
#include "storage/kv.h"

namespace clio {
namespace {

std::string PidFile(const RuntimeConfig& cfg) { return cfg.state_dir + "/clio_run.pid"; }

// Runs the runtime in this process until it stops. `ready_fd` (if >= 0) receives one byte
// "0" when serving, or an error message, so a parent can report start-up failures.
// With --mount: how long a stop waits for files still open on the runtime's own mount to be
// closed before it aborts the FUSE connection.
constexpr int kMountStopGraceMs = 5000;

// What `clio_run start` waits for on `fd` (if >= 0): "0" once serving, or "1" and why it
// failed. A failure is told only when this object dies, after everything declared after it
// has let go (the metadata's lock, the socket, the mount lock), so that a start right after a
// refused one does not find them still held.
class StartReport {
 public:
  explicit StartReport(int fd) : fd_(fd) {}
  ~StartReport() {
    if (failure_.empty()) failure_ = "the runtime stopped during start-up (see the log above)";
    Tell();
  }
  StartReport(const StartReport&) = delete;
  StartReport& operator=(const StartReport&) = delete;
  // Empty: serving now, told at once. Else the first failure, told at the end.
  void operator()(const std::string& msg) {
    if (msg.empty()) return Tell();
    if (failure_.empty()) failure_ = msg;
  }

 private:
  void Tell() {
    if (fd_ < 0) return;
    const std::string m = failure_.empty() ? std::string("0") : "1" + failure_;
    (void)!::write(fd_, m.data(), m.size());
    ::close(fd_);
    fd_ = -1;
  }
  int fd_;
  std::string failure_;
};

// The runtime's own mount of its clio_fs pool (clio_run start --mount): each FUSE request runs
// the pool's handler on the session's thread, with no hop to another process.
Result<std::unique_ptr<FuseMount>> MountInRuntime(Runtime& rt, const FuseMountOptions& options) {
  Pool* fs = rt.FindByName("clio_fs");
  if (fs == nullptr) return NotFound("--mount: the runtime serves no filesystem pool 'clio_fs'");
  const uint32_t id = fs->id();
  FuseMountOptions opts = options;
  opts.mount_lock = MountLockPath(rt.config().socket_path);
  CLIO_ASSIGN_OR_RETURN(std::unique_ptr<FuseMount> fuse,
                        FuseMount::Mount(opts, [&rt, id](FsMethod method, std::string_view payload) {
                          return rt.Dispatch(id, static_cast<uint32_t>(method), payload);
                        }));
  // A new mount holds nothing yet: files kept for a mount that rode out the last restart (the
  // reclaim window) have no holder here.
  const std::string none = fsproto::Encode(fsproto::Reattach{.claims = {}, .flags = kReattachBegin | kReattachComplete});
  if (auto r = rt.Dispatch(id, static_cast<uint32_t>(fsproto::Reattach::kMethod), none); !r.ok())
    CLIO_LOG_WARN("ending the namespace's reclaim window: {}", r.status().ToString());
  fuse->Start(16);
  CLIO_LOG_INFO("mounted the filesystem on {} (in-runtime FUSE session)", fuse->mountpoint());
  return fuse;
}

// The state directory and metadata directory, when they did not exist before this start:
// Undo() removes them (with what the pools made there) after a start that failed composing.
class MadeHere {
 public:
  MadeHere(const std::string& state_dir, const std::string& metadata_path) : metadata_path_(metadata_path) {
    for (const std::string& p : {state_dir, metadata_path})
      if (!p.empty() && ::access(p.c_str(), F_OK) != 0 && errno == ENOENT) fresh_.push_back(p);
  }
  void Undo() {
    // Another start on the same new directories (racing this one) may hold the metadata now
    // that this one let it go: then they are its, not this start's to remove.
    if (MetadataHeldElsewhere()) {
      CLIO_LOG_WARN("{} is in use by another process: the state this failed start made is left", metadata_path_);
      return;
    }
    for (const std::string& p : fresh_) {
      std::error_code ec;
      const auto n = std::filesystem::remove_all(p, ec);
      if (ec) CLIO_LOG_WARN("removing {}, made by this failed start: {}", p, ec.message());
      else if (n > 0) CLIO_LOG_INFO("removed {}, made by this failed start", p);
    }
  }

 private:
  // Whether another process holds RocksDB's lock (a POSIX record lock on metadata/LOCK).
  bool MetadataHeldElsewhere() const {
    const int fd = ::open((metadata_path_ + "/LOCK").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    const bool held = ::fcntl(fd, F_GETLK, &probe) == 0 && probe.l_type != F_UNLCK;
    ::close(fd);
    return held;
  }

  std::string metadata_path_;
  std::vector<std::string> fresh_;
};

// `mount` (if set): the runtime serves the filesystem on that mount itself (in-runtime mode):
// each FUSE request runs the namespace pool's handler on the session's thread, with no hop to
// another process. Mounted once the runtime serves; unmounted before its pools stop.
int RunRuntime(RuntimeConfig cfg, int ready_fd, const std::optional<FuseMountOptions>& mount) {
  // Declared before everything it outlives, so that it tells a failure last.
  StartReport report(ready_fd);
  // What this start makes, it removes again if the pools cannot be composed: a config refused
  // at start leaves no state behind (an error in the last compose entry is found only after
  // the earlier pools opened their devices and the metadata).
  MadeHere made{cfg.state_dir, cfg.metadata_path};
  if (Status s = PrepareStateDir(cfg.state_dir); !s.ok()) {
    report(s.message());
    return 1;
  }
  {
    // A live runtime on this socket holds the metadata too: say so now rather than wait for
    // its lock (which the store waits for only while a killed runtime is still exiting).
    RuntimeClient::Options o;
    o.socket_path = cfg.socket_path;
    o.mode = IpcMode::kUnix;
    if (::access(cfg.socket_path.c_str(), F_OK) == 0 && RuntimeClient::Connect(o).ok()) {
      report("another CLIO runtime is already serving on " + cfg.socket_path + " (stop it with 'clio_run stop')");
      return 1;
    }
  }
  KvOptions ko;
  ko.path = cfg.metadata_path;
  ko.commit_interval_ms = cfg.commit_interval_ms;
  auto kv = OpenRocksDbKv(ko);
  if (!kv.ok()) {
    std::string m = "opening metadata: " + kv.status().ToString();
    CLIO_LOG_ERROR("{}", m);
    report(m);
    return 1;
  }
  std::string pidfile = PidFile(cfg);
  const uint32_t node_id = cfg.node_id;
  Runtime rt(std::move(cfg));
  ForbidConfinedPath(pidfile);  // beside the runtime's own files (daemon/confine.h)
  rt.RegisterModule("clio_bdev", MakeBdevModuleFactory());
  rt.RegisterModule("clio_safe_bdev", MakeSafeBdevModuleFactory());
  rt.RegisterModule("clio_cte_core", MakeCteModuleFactory(kv->get(), node_id));
  rt.RegisterModule("clio_fs", MakeFsModuleFactory(kv->get(), MountLockPath(rt.config().socket_path)));
  Status s = rt.Compose();
  if (!s.ok()) {
    CLIO_LOG_ERROR("{}", s.ToString());
    (void)(*kv)->Close();  // Compose stopped the pools it made
    made.Undo();
    report(s.ToString());
    return s.code() == Code::kConfigError ? 2 : 1;
  }
  const std::string socket_path = rt.config().socket_path;
  std::unique_ptr<FuseMount> fuse;
  Status mounted;
  s = rt.Serve([&] {
    if (mount) {
      auto m = MountInRuntime(rt, *mount);
      if (m.ok()) fuse = std::move(m).value();
      else mounted = m.status();
      if (!mounted.ok()) {
        CLIO_LOG_ERROR("{}", mounted.ToString());
        report(mounted.ToString());
        rt.RequestStop();
        return;
      }
    }
    std::ofstream(pidfile) << getpid() << "\n";
    report("");
    NotifyReady(fuse ? "serving on " + socket_path + ", mounted on " + fuse->mountpoint()
                     : "serving on " + socket_path);
  });
  if (!s.ok()) {
    CLIO_LOG_ERROR("{}", s.ToString());
    report(s.ToString());
  }
  if (fuse) {
    CLIO_LOG_INFO("unmounting {}", fuse->mountpoint());
    // False when the session could not be ended: its requests are refused from now on.
    (void)fuse->Stop(kMountStopGraceMs);
    fuse.reset();
  }
  CLIO_LOG_INFO("stopping: flushing volatile tiers and committing metadata");
  NotifyStopping("stopping: flushing volatile tiers and committing metadata");
  Status stop = rt.StopPools();
  Status close = (*kv)->Close();
  ::unlink(pidfile.c_str());
  if (!stop.ok() || !close.ok()) {
    CLIO_LOG_ERROR("unclean stop: {} / {}", stop.ToString(), close.ToString());
    return 1;
  }
  CLIO_LOG_INFO("stopped cleanly");
  return s.ok() && mounted.ok() ? 0 : 1;
}

int Start(RuntimeConfig cfg, bool foreground, bool fresh, const std::optional<FuseMountOptions>& mount) {
  if (fresh) {
    // The runtime's own state: the pools created at run time. Volatile tiers start empty
    // anyway; the filesystem (metadata and persistent tiers) is never touched.
    const std::string log = PoolLogPath(cfg);
    if (::unlink(log.c_str()) == 0)
      CLIO_LOG_INFO("--fresh: discarded the pool log {} (pools created at run time)", log);
    else if (errno != ENOENT)
      CLIO_LOG_WARN("--fresh: cannot remove {}: {}", log, std::strerror(errno));
    CLIO_LOG_INFO("--fresh: volatile tiers start empty; the filesystem is kept");
  }
  if (foreground) return RunRuntime(std::move(cfg), -1, mount);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("clio_run: pipe");
    return 1;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("clio_run: fork");
    return 1;
  }
  if (pid == 0) {
    ::close(fds[0]);
    ::setsid();
    int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) ::dup2(null, 0);
    // stderr stays: logs go wherever the caller sent them (journald under systemd).
    if (::fork() > 0) _exit(0);  // the grandchild is not a session leader
    _exit(RunRuntime(std::move(cfg), fds[1], mount));
  }
  ::close(fds[1]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  if (msg == "0") return 0;
  if (msg.empty()) msg = "1the runtime exited during start-up (see the log above)";
  std::fprintf(stderr, "clio_run: start failed: %s\n", msg.c_str() + 1);
  return msg.find("ConfigError") != std::string::npos ? 2 : 1;
}

Result<std::unique_ptr<RuntimeClient>> ConnectTo(const RuntimeConfig& cfg) {
  RuntimeClient::Options o = RuntimeClient::OptionsFor(cfg);
  return RuntimeClient::Connect(o);
}

int Stop(const RuntimeConfig& cfg) {
  auto c = ConnectTo(cfg);
  if (!c.ok()) {
    std::fprintf(stderr, "clio_run: %s\n", c.status().message().c_str());
    return 1;
  }
  auto ping = (*c)->Call(0, adminproto::Ping{});
  const uint64_t pid = ping.ok() ? ping->pid : 0;
  auto r = (*c)->Call(0, adminproto::Stop{});
  if (!r.ok()) {
    std::fprintf(stderr, "clio_run: stop failed: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "clio_run: stopping runtime (pid %llu), flushing data...\n",
               static_cast<unsigned long long>(pid));
  // Wait for the process to finish flushing and exit; a stop that flushes gigabytes takes time.
  // Every 30 s the wait says so, naming any thread stuck in the kernel (a hung device or
  // network file system keeps it in uninterruptible sleep, where no signal reaches it).
  const auto begun = std::chrono::steady_clock::now();
  auto next_word = begun + std::chrono::seconds(30);
  while (pid != 0 && !ProcessExited(static_cast<pid_t>(pid))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto now = std::chrono::steady_clock::now();
    if (now < next_word) continue;
    next_word = now + std::chrono::seconds(30);
    const long secs = std::chrono::duration_cast<std::chrono::seconds>(now - begun).count();
    const std::string stuck = ThreadsInDiskSleep(static_cast<pid_t>(pid));
    std::fprintf(stderr, "clio_run: still waiting for pid %llu to exit after %ld s%s%s\n",
                 static_cast<unsigned long long>(pid), secs,
                 stuck.empty() ? "" : "; in uninterruptible sleep: ", stuck.c_str());
  }
  std::fprintf(stderr, "clio_run: stopped\n");
  return 0;
}

int StatusCmd(const RuntimeConfig& cfg) {
  auto c = ConnectTo(cfg);
  if (!c.ok()) {
    std::printf("not running (%s)\n", c.status().message().c_str());
    return 1;
  }
  auto r = (*c)->Call(0, adminproto::GetStatus{});
  if (!r.ok()) {
    std::fprintf(stderr, "clio_run: status failed: %s\n", r.status().ToString().c_str());
    return 1;
  }
  std::printf("running: %s", r->bytes.c_str());
  return 0;
}

int Main(int argc, char** argv) {
  InitLogging("run");
  CLI::App app{"clio_run: the CLIO runtime daemon (config: CLIO_CONF, ~/.clio/clio.yaml, /etc/clio/clio.yaml)"};
  app.require_subcommand(1);
  bool foreground = false, fresh = false;
  auto* start = app.add_subcommand("start", "start the runtime (daemonizes once serving unless --foreground)");
  start->add_flag("--foreground,-f", foreground, "stay in the foreground (systemd)");
  start->add_flag("--fresh", fresh, "discard the runtime's own state; never the filesystem");
  std::string mount_dir, mount_opts;
  start->add_option("--mount", mount_dir,
                    "serve the filesystem on this mount point from the runtime itself (in-runtime FUSE "
                    "session: no hop to clio-fuse; the mount goes away when the runtime stops)");
  start->add_option("-o,--mount-options", mount_opts, "with --mount: clio-fuse's -o options (allow_other, "
                    "attr_timeout=S, entry_timeout=S, negative_timeout=S)")->needs("--mount");
  auto* stop = app.add_subcommand("stop", "stop the runtime gracefully, flushing all data");
  auto* status = app.add_subcommand("status", "show whether the runtime runs and its pools");
  auto* compose = app.add_subcommand("compose", "create or destroy the pools of a compose file while the runtime serves");
  compose->require_subcommand(1);
  std::string compose_file;
  auto* cstart = compose->add_subcommand("start", "create the file's pools in order (all or none)");
  cstart->add_option("file", compose_file, "YAML: `compose:` with a list of pool entries, as in the config")->required();
  auto* cstop = compose->add_subcommand("stop", "destroy the file's pools in reverse order");
  cstop->add_option("file", compose_file, "the file given to compose start")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto cfg = LoadRuntimeConfig();
  if (!cfg.ok()) {
    std::fprintf(stderr, "clio_run: %s\n", cfg.status().message().c_str());
    return 2;
  }
  std::optional<FuseMountOptions> mount;
  if (*start && !mount_dir.empty()) {
    mount.emplace();
    mount->mountpoint = mount_dir;
    Status o = ApplyMountOptions(mount_opts, &*mount);
    if (o.ok() && !mount->conf.empty()) o = InvalidArgument("-o conf is clio-fuse's; clio_run reads CLIO_CONF");
    if (!o.ok()) {
      std::fprintf(stderr, "clio_run: %s\n", o.message().c_str());
      return 2;
    }
    // Checked here too, so that a bad mount point fails the command, not the daemon.
    auto real = CheckMountPoint(mount_dir);
    if (!real.ok()) {
      std::fprintf(stderr, "clio_run: %s\n", real.status().message().c_str());
      return 1;
    }
    if (mount->io_uring == FuseUringMode::kOn) {
      if (Status u = FuseUringAvailable(); !u.ok()) {
        std::fprintf(stderr, "clio_run: -o io_uring=on: %s\n", u.message().c_str());
        return 1;
      }
    }
  }
  if (*start) return Start(std::move(cfg).value(), foreground, fresh, mount);
  if (*stop) return Stop(*cfg);
  if (*status) return StatusCmd(*cfg);
  if (*cstart || *cstop) {
    CommandContext ctx;
    ctx.rpc = RuntimeClient::OptionsFor(*cfg);
    return Compose(ctx, static_cast<bool>(*cstart), compose_file);
  }
  return 2;
}

}  // namespace
}  // namespace clio

int main(int argc, char** argv) { return clio::Main(argc, argv); }
