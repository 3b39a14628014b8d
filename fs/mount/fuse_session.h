// The FUSE session of CLIO (libfuse3 low-level API): maps the kernel's file operations onto
// requests to the namespace pool (fs/protocol/fs_protocol.h). Two hosts use it: clio-fuse, a client of
// the runtime in its own process (the default: a runtime restart never takes the mount down),
// and `clio_run start --mount DIR`, which serves the mount inside the runtime and saves the
// hop between the two processes. libfuse's headers stay inside fuse_session.cc.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "fs/protocol/fs_protocol.h"
#include "fs/mount/fuse_uring.h"

namespace clio {

// How an operation reaches the clio_fs pool: the answer's body as FsPool::Handle returns it.
// Called from the session's threads, several at once.
using FsCaller = std::function<Result<std::string>(FsMethod method, std::string_view payload)>;

struct FuseMountOptions {
  std::string mountpoint;  // an existing directory with nothing mounted on it
  // For libfuse (-o); CLIO's defaults first.
  std::string fuse_opts = "default_permissions,fsname=clio,subtype=clio";
  // Kernel cache lifetimes in seconds: -o attr_timeout=, entry_timeout=, negative_timeout=.
  double attr_timeout = 1.0;
  double entry_timeout = 1.0;
  double negative_timeout = 1.0;
  std::string conf;  // -o conf=FILE: the runtime's config (clio-fuse only)
  // The runtime's mount lock (fs/protocol/mount_lock.h), held while the session
  // serves: a second mount of the same runtime is refused. Empty: no lock.
  std::string mount_lock;
  bool debug = false;  // libfuse's -d: every request on stderr
  // -o io_uring=auto|on|off: FUSE over io_uring (fs/mount/fuse_uring.h). auto uses it when the
  // kernel offers it (fuse.enable_uring=1); on refuses to mount when the kernel does not. Off
  // by default: on the 2-core VM it helps some operations and slows others (bench/README).
  FuseUringMode io_uring = FuseUringMode::kOff;
  // -o uring_threads=N: ring threads per CPU, each answering one request at a time (more
  // keep a CPU's requests moving while one waits on a slow tier).
  int uring_threads = 2;
  // SIGTERM, SIGINT and SIGHUP end Loop(), installed before the mount (clio-fuse; the runtime
  // has handlers of its own).
  bool handle_signals = false;
};

// Takes a comma list of -o options: CLIO's own keys (the timeouts, conf) into `options`, those
// that mean something to mount(8) only (defaults, noauto, _netdev, x-*, ...) dropped, the rest
// appended to options->fuse_opts. InvalidArgument names a bad value.
Status ApplyMountOptions(const std::string& opts, FuseMountOptions* options);

// The real path of a mount point that exists, is a directory and has nothing mounted on it;
// otherwise an error saying which, and how to fix it. A CLIO mount left dead there by a crash
// (ENOTCONN) is detached first; another file system's dead mount is refused.
Result<std::string> CheckMountPoint(const std::string& path);

class FuseMount {
 public:
  // Mounts options.mountpoint (CheckMountPoint first); requests go to `call`.
  static Result<std::unique_ptr<FuseMount>> Mount(FuseMountOptions options, FsCaller call);
  ~FuseMount();

  // Goes to the background (fork, setsid, stdio to /dev/null) unless `foreground`; changes
  // to / either way, so the mount does not keep the starting directory busy (clio-fuse).
  void Daemonize(bool foreground);
  // Serves requests on up to `max_idle_threads` idle threads (more while busy) until the mount
  // goes away: 0, the number of the signal that ended it, or -errno.
  int Loop(int max_idle_threads);
  // Loop() on a thread of its own (the runtime's mount); Stop() ends it.
  void Start(int max_idle_threads);
  // Detaches the mount (a lazy unmount: new lookups fail, files already open keep working)
  // and waits up to `grace_ms` for the last of them to close, then aborts the connection
  // (their users get ENOTCONN) and waits for the loop to end. Only with Start(). False when
  // the loop could not be ended (no fusectl): its requests are refused from then on, and the
  // session is left to the process exit. A session unmounted from outside is not unmounted
  // again (the path may hold another mount by then).
  bool Stop(int grace_ms);
  const std::string& mountpoint() const;

  // What RuntimeRestarted did.
  struct Reattached {
    size_t nodes = 0;  // node ids the kernel held, declared to the new runtime
    size_t opens = 0;  // opens on them
    size_t gone = 0;   // nodes the new runtime does not have (dropped from the kernel)
  };
  // After the runtime restarted under the mount (clio-fuse notices; call it from a thread of
  // its own, never from a request's, as libfuse's notifications require). Declares to the new
  // runtime every node the kernel holds and the opens on each (Namespace::Reattach), with
  // opens and releases held back meanwhile, so files unlinked while open stay alive. Then it
  // drops what a crash may have made wrong in the kernel: the entries of nodes the runtime no
  // longer has (their creation was lost), and every held node's attributes and cached pages
  // (dirty pages are written back first: to a node that is gone they fail with ESTALE); and
  // this session's own caches. Unavailable when the runtime went away again meanwhile.
  Result<Reattached> RuntimeRestarted();

 private:
  struct Impl;
  explicit FuseMount(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace clio
