// clio-fuse: the FUSE daemon, a client of the runtime. The session itself (the operations and
// what they cache) is fs/mount/fuse_session.cc; this file takes the arguments, connects to the
// runtime and serves the mount. A runtime restart does not take the mount down: requests wait
// for the runtime to come back (up to 30 s) and the mutating ones are resent once with their
// request id, so they take effect once; a watcher thread notices the restart and has the
// session reattach (FuseMount::RuntimeRestarted).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/codec.h"
#include "common/log.h"
#include "daemon/config.h"
#include "daemon/ipc.h"
#include "daemon/service_notify.h"
#include "fs/protocol/fs_messages.h"
#include "fs/protocol/fs_protocol.h"
#include "fs/protocol/mount_lock.h"
#include "fs/mount/fuse_session.h"

namespace clio {
namespace {

int Usage(const char* msg) {
  if (msg) std::fprintf(stderr, "clio-fuse: %s\n", msg);
  std::fprintf(stderr,
               "usage: clio-fuse MOUNTPOINT [-f|--foreground] [-o OPT[,OPT...]] [-d]\n"
               "       mount.clio SOURCE MOUNTPOINT [-o OPT[,OPT...]]   (mount -t fuse.clio, /etc/fstab)\n"
               "  Mounts the CLIO filesystem served by the runtime (CLIO_CONF names its config).\n"
               "  -o allow_other   let other users in (default: only the mounting user)\n"
               "  -o attr_timeout=S,entry_timeout=S,negative_timeout=S   kernel cache lifetimes (1 s)\n"
               "  -o conf=FILE     the runtime's config (instead of CLIO_CONF)\n"
               "  Unmount with: fusermount3 -u MOUNTPOINT\n");
  return 2;
}

// The namespace's incarnation (Attach): a new one after a runtime restart.
Result<uint64_t> Incarnation(RuntimeClient& rc, uint32_t pool_id) {
  CLIO_ASSIGN_OR_RETURN(std::string r, rc.Call(pool_id, static_cast<uint32_t>(fsproto::Attach::kMethod),
                                               fsproto::Encode(fsproto::Attach{})));
  CLIO_ASSIGN_OR_RETURN(fsproto::AttachReply a, fsproto::Decode<fsproto::AttachReply>(r));
  return a.incarnation;
}

// Watches the runtime from a connection of its own: each time one is up, asks the
// namespace's incarnation; a new one (a runtime restarted under the mount, or the first
// answer) has the mount reattach. Then waits for that connection to hang up. On a thread of
// its own (libfuse's notifications must not come from a request's thread), until Stop(),
// which ends the client's waits for an absent runtime (CancelWaits): the session's loop has
// ended, so nothing else waits on it, and a stop never waits out the 30 s connect wait.
class RestartWatcher {
 public:
  RestartWatcher(std::shared_ptr<RuntimeClient> rc, uint32_t pool_id, FuseMount* mount)
      : rc_(std::move(rc)), pool_id_(pool_id), mount_(mount), stop_fd_(::eventfd(0, EFD_CLOEXEC)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~RestartWatcher() { Stop(); }
  void Stop() {
    if (!thread_.joinable()) return;
    rc_->CancelWaits();
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
    ::close(stop_fd_);
  }

 private:
  // Whether Stop() was called, waiting for it up to `ms`.
  bool stopping(int ms = 0) {
    pollfd p{stop_fd_, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0;
  }
  void Run() {
    while (!stopping()) {
      auto gone = rc_->WaitUntilGone(stop_fd_, [this] { Check(); });
      if (gone.ok() && !*gone) return;  // stopped
      // The runtime is not there now: ask again in a moment (each ask waits for it a while).
      if (!gone.ok() && stopping(1000)) return;
    }
  }
  void Check() {
    while (!stopping()) {
      auto now = Incarnation(*rc_, pool_id_);
      if (!now.ok()) {
        CLIO_LOG_WARN("asking the runtime who it is: {}; the mount waits for it", now.status().ToString());
        return;  // the watched connection tells when to ask again
      }
      if (known_ && *now == *known_) return;  // a broken connection, not a restart
      auto r = mount_->RuntimeRestarted();
      if (r.ok()) {
        if (known_) {
          CLIO_LOG_INFO("the runtime restarted under the mount: {} nodes the kernel holds declared ({} opens), "
                        "{} of them gone with the restart and dropped from the kernel's caches", r->nodes, r->opens,
                        r->gone);
        }
        known_ = *now;
        return;
      }
      CLIO_LOG_WARN("reattaching the mount to the runtime: {}; trying again", r.status().ToString());
      if (stopping(1000)) return;
    }
  }

  std::shared_ptr<RuntimeClient> rc_;
  const uint32_t pool_id_;
  FuseMount* const mount_;
  const int stop_fd_;
  std::optional<uint64_t> known_;  // the incarnation attached to; only the watcher's thread uses it
  std::thread thread_;
};

struct Args {
  FuseMountOptions mount;
  bool foreground = false;
  bool fake = false;  // mount -f: do everything but mount
};

// clio-fuse MOUNTPOINT [options], or, invoked as mount.clio / mount.fuse.clio by mount(8):
// SOURCE MOUNTPOINT [-o opts] [-n] [-s] [-f] [-v] (the mount helper convention).
Result<Args> ParseArgs(int argc, char** argv) {
  Args a;
  std::string name = argv[0];
  name = name.substr(name.rfind('/') + 1);
  const bool helper = name.rfind("mount.", 0) == 0;
  std::string opts;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-o" && i + 1 < argc) opts += std::string(",") + argv[++i];
    else if (s.rfind("-o", 0) == 0 && s.size() > 2) opts += "," + s.substr(2);
    else if (helper && (s == "-n" || s == "-s" || s == "-v")) continue;  // no mtab, sloppy, verbose
    else if (helper && s == "-f") a.fake = true;
    else if (!helper && (s == "-f" || s == "--foreground")) a.foreground = true;
    else if (!helper && (s == "-d" || s == "--debug")) a.mount.debug = a.foreground = true;
    else if (!s.empty() && s[0] == '-') return InvalidArgument("unknown option " + s);
    else positional.push_back(s);
  }
  if (helper) {
    if (positional.size() != 2) return InvalidArgument("expected SOURCE MOUNTPOINT");
    a.mount.mountpoint = positional[1];
  } else {
    if (positional.empty()) return InvalidArgument("no mount point given");
    if (positional.size() > 1) return InvalidArgument("more than one mount point given");
    a.mount.mountpoint = positional[0];
  }
  CLIO_RETURN_IF_ERROR(ApplyMountOptions(opts, &a.mount));
  return a;
}

int Main(int argc, char** argv) {
  InitLogging("fuse");
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help") return Usage(nullptr), 0;
  auto parsed = ParseArgs(argc, argv);
  if (!parsed.ok()) return Usage(parsed.status().message().c_str());
  Args args = std::move(parsed).value();
  if (!args.mount.conf.empty()) ::setenv("CLIO_CONF", args.mount.conf.c_str(), 1);
  auto real = CheckMountPoint(args.mount.mountpoint);
  if (!real.ok()) {
    std::fprintf(stderr, "clio-fuse: %s\n", real.status().message().c_str());
    return 1;
  }
  args.mount.mountpoint = *real;
  auto cfg = LoadRuntimeConfig();
  if (!cfg.ok()) {
    std::fprintf(stderr, "clio-fuse: %s\n", cfg.status().message().c_str());
    return 2;
  }
  RuntimeClient::Options co = RuntimeClient::OptionsFor(*cfg);
  auto client = RuntimeClient::Connect(co);
  if (!client.ok()) {
    std::fprintf(stderr, "clio-fuse: %s\n", client.status().message().c_str());
    return 1;
  }
  Result<uint32_t> pool = (*client)->FindPool("clio_fs");
  if (!pool.ok()) {
    std::fprintf(stderr, "clio-fuse: the runtime serves no filesystem pool 'clio_fs': %s\n",
                 pool.status().message().c_str());
    return 1;
  }
  const uint32_t pool_id = *pool;
  client->reset();
  co.connect_wait_ms = 30000;  // from now on, ride out a runtime restart
  std::shared_ptr<RuntimeClient> rc = std::move(RuntimeClient::Connect(co)).value();
  if (args.fake) return 0;  // mount -f: everything checked, nothing mounted

  auto call = [rc, pool_id](FsMethod m, std::string_view payload) {
    return rc->Call(pool_id, static_cast<uint32_t>(m), payload,
                    IsIdempotent(m) ? RuntimeClient::Resend::kFreely : RuntimeClient::Resend::kMarked);
  };
  args.mount.handle_signals = true;
  // One mount per runtime, held where the runtime's socket is: a client on another host (TCP)
  // has nothing there to lock.
  if (rc->mode() != IpcMode::kTcp) args.mount.mount_lock = MountLockPath(cfg->socket_path);
  auto mount = FuseMount::Mount(args.mount, call);
  if (!mount.ok()) {
    std::fprintf(stderr, "clio-fuse: %s\n", mount.status().message().c_str());
    return mount.status().code() == Code::kInvalidArgument ? 2 : 1;
  }
  const std::string mnt = (*mount)->mountpoint();
  if (args.foreground) std::fprintf(stderr, "clio-fuse: mounted on %s\n", mnt.c_str());
  (*mount)->Daemonize(args.foreground);
  // After the fork: a thread does not survive it.
  auto watcher = std::make_unique<RestartWatcher>(rc, pool_id, mount->get());
  NotifyReady("mounted on " + mnt);
  // 0, -errno, or the number of the signal that ended it. SIGTERM, SIGINT and SIGHUP are how
  // a stop asks (systemd sends SIGTERM right after ExecStop's fusermount3 -u, which can land
  // before the loop has seen the unmount): a clean exit, not a failed unit.
  int loop = (*mount)->Loop(16);
  watcher->Stop();
  int rc_exit = loop == 0 || loop == SIGTERM || loop == SIGINT || loop == SIGHUP ? 0 : 1;
  if (rc_exit != 0) std::fprintf(stderr, "clio-fuse: the session ended with %d\n", loop);
  return rc_exit;
}

}  // namespace
}  // namespace clio

int main(int argc, char** argv) { return clio::Main(argc, argv); }
