// The FUSE session's mount (fs/mount/fuse_session.h): mount options and mount-point checks,
// the one-mount-per-runtime lock, the session's loop and threads, stopping it, and what a
// runtime restart under the mount asks of the kernel. The operations are in session_ops.cc,
// the state they share in session_state.h. Stateless apart from caches and open directory
// listings, so a runtime restart under clio-fuse does not take the mount down.
#define FUSE_USE_VERSION 34

#include "fs/mount/fuse_session.h"

#include <fuse3/fuse_lowlevel.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/codec.h"
#include "common/log.h"
#include "common/metrics.h"
#include "common/mounts.h"
#include "common/thread_annotations.h"
#include "fs/mount/fuse_uring.h"
#include "fs/mount/node_table.h"
#include "fs/mount/session_state.h"
#include "fs/protocol/fs_messages.h"
#include "fs/protocol/fs_protocol.h"

namespace clio {
using fusemount::FuseState;
using fusemount::MakeOps;
namespace {

// libfuse's I/O on /dev/fuse, through the ring's hooks (fs/mount/fuse_uring.h).
ssize_t UringRead(int fd, void* buf, size_t len, void* userdata) {
  return static_cast<FuseState*>(userdata)->uring->Read(fd, buf, len);
}
ssize_t UringWritev(int fd, struct iovec* iov, int count, void* userdata) {
  return static_cast<FuseState*>(userdata)->uring->Writev(fd, iov, count);
}

// The mount on `path` (the last one when several are stacked); nullopt when nothing is
// mounted there or the table cannot be read.
std::optional<MountEntry> TopMount(const std::string& path) {
  auto mounts = ReadMounts();
  if (!mounts.ok()) return std::nullopt;
  std::optional<MountEntry> top;
  for (const MountEntry& m : *mounts)
    if (m.mountpoint == path) top = m;
  return top;
}

bool IsMountPoint(const std::string& path) { return TopMount(path).has_value(); }

// Options mount(8) and fstab pass that mean nothing to FUSE.
bool IsMountOnlyOption(const std::string& key) {
  static const char* kIgnored[] = {"defaults", "auto", "noauto", "user", "nouser", "users",
                                   "_netdev", "nofail", "owner", "group", "comment"};
  for (const char* k : kIgnored)
    if (key == k) return true;
  return key.rfind("x-", 0) == 0 || key.rfind("comment=", 0) == 0;
}

// Runs fusermount3 with `args` (an unprivileged unmount); whether it succeeded.
bool RunFusermount(const char* flags, const std::string& mountpoint) {
  pid_t pid = ::fork();
  if (pid < 0) return false;
  if (pid == 0) {
    ::execlp("fusermount3", "fusermount3", flags, "--", mountpoint.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}


}  // namespace

Status ApplyMountOptions(const std::string& opts, FuseMountOptions* options) {
  size_t pos = 0;
  while (pos <= opts.size()) {
    size_t comma = opts.find(',', pos);
    std::string o = opts.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? opts.size() + 1 : comma + 1;
    std::string key = o.substr(0, o.find('='));
    std::string val = o.find('=') == std::string::npos ? "" : o.substr(o.find('=') + 1);
    double* target = nullptr;
    if (key == "attr_timeout") target = &options->attr_timeout;
    if (key == "entry_timeout") target = &options->entry_timeout;
    if (key == "negative_timeout") target = &options->negative_timeout;
    if (target) {
      char* end = nullptr;
      *target = std::strtod(val.c_str(), &end);
      if (val.empty() || *end || *target < 0 || *target > 86400)
        return InvalidArgument("bad value in -o " + o + " (seconds, 0 to 86400)");
    } else if (key == "io_uring") {
      CLIO_ASSIGN_OR_RETURN(options->io_uring, ParseFuseUringMode(val));
    } else if (key == "uring_threads") {
      char* end = nullptr;
      const long n = std::strtol(val.c_str(), &end, 10);
      if (val.empty() || *end || n < 1 || n > 64)
        return InvalidArgument("bad value in -o " + o + " (ring threads per CPU, 1 to 64)");
      options->uring_threads = static_cast<int>(n);
    } else if (key == "conf") {
      if (val.empty()) return InvalidArgument("-o conf needs a file");
      options->conf = val;
    } else if (!o.empty() && !IsMountOnlyOption(key)) {
      options->fuse_opts += "," + o;
    }
  }
  return Status::Ok();
}

Result<std::string> CheckMountPoint(const std::string& path) {
  char real[PATH_MAX];
  struct stat st {};
  struct statvfs vfs {};
  // statfs, not stat: the kernel may answer a stat of a FUSE root from its cache, a statfs
  // always asks the file system.
  int probe = ::statvfs(path.c_str(), &vfs);
  // Over io_uring, a request the kernel was handing to a ring whose process died ends with
  // ECANCELED; the next one says ENOTCONN.
  if (probe != 0 && errno == ECANCELED) probe = ::statvfs(path.c_str(), &vfs);
  if (probe != 0 && (errno == ENOTCONN || errno == ECONNABORTED)) {
    // A dead mount: the process serving it died. One of ours (fuse.clio) holds nothing that
    // can still be served, so it is detached and the mount goes ahead (a restart after a
    // crash just works); any other is left to its owner.
    std::string abs = path;
    if (!abs.empty() && abs[0] != '/') {
      char cwd[PATH_MAX];
      if (::getcwd(cwd, sizeof cwd) != nullptr) abs = std::string(cwd) + "/" + abs;
    }
    while (abs.size() > 1 && abs.back() == '/') abs.pop_back();
    std::optional<MountEntry> top = TopMount(abs);
    const bool ours = top && top->fstype == "fuse.clio";
    const bool detached = ours && (::geteuid() == 0 ? ::umount2(abs.c_str(), MNT_DETACH) == 0 : RunFusermount("-uz", abs));
    if (!detached)
      return Status(Code::kBusy, path + " is a dead FUSE mount (the process serving it died): unmount it with "
                                        "fusermount3 -u " + path + " and mount again");
    CLIO_LOG_WARN("{} was a CLIO mount whose process died; detached it", abs);
  }
  if (::stat(path.c_str(), &st) != 0 || !::realpath(path.c_str(), real))
    return NotFound("mount point " + path + " does not exist (create it with mkdir -p " + path + ")");
  if (!S_ISDIR(st.st_mode)) return InvalidArgument("mount point " + path + " is not a directory");
  if (IsMountPoint(real))
    return Status(Code::kBusy, std::string(real) + " is busy: something is already mounted there (unmount it with fusermount3 -u " +
                                   real + ")");
  return std::string(real);
}

// One mount per runtime. Each mount's kernel caches (pages kept across opens, entries, absent
// xattrs, files known clean) are right only while it is the namespace's only writer: a second
// mount would read its own stale pages after the first wrote, and could write them back.
// Mounts of one runtime share its lock file and hold it (flock, so the kernel lets go when the
// process dies, kill -9 included) for as long as they serve. The holder writes its mount point
// into the file for the message of a refused mount. A holder whose mount is already gone (an
// unmount, then a mount again at once) is waited for a few seconds while it exits.
static Result<int> TakeMountLock(const std::string& path, const std::string& mountpoint) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && (errno == EACCES || errno == EPERM))
    return Status(Code::kPermissionDenied, "mounting needs root or the runtime's user (you are uid " +
                                               std::to_string(::geteuid()) + "; the mount lock " + path +
                                               " is theirs alone: docs/security.md)");
  if (fd < 0) return Status::FromErrno(errno, "opening the runtime's mount lock " + path);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    std::string holder;
    if (err == EWOULDBLOCK) {
      char buf[PATH_MAX + 1];
      const ssize_t n = ::pread(fd, buf, PATH_MAX, 0);
      holder.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
      holder = holder.substr(0, holder.find('\n'));
      for (char c : holder)
        if (static_cast<unsigned char>(c) < 0x20) holder.clear();  // not a path we wrote
      std::optional<MountEntry> top = holder.empty() ? std::nullopt : TopMount(holder);
      const bool serving = top && top->mountpoint == holder && top->fstype == "fuse.clio";
      if (!serving && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
    }
    ::close(fd);
    if (err != EWOULDBLOCK) return Status::FromErrno(err, "locking the runtime's mount lock " + path);
    const std::string there = holder.empty() ? std::string("elsewhere") : "on " + holder;
    const std::string bind = holder.empty() ? std::string("MOUNTED_PATH") : holder;
    return Status(Code::kBusy, "this runtime's filesystem is already mounted " + there +
                                   ": one mount per runtime keeps every mount's kernel cache right; "
                                   "to see it at " + mountpoint + " too, bind-mount it (mount --bind " + bind +
                                   " " + mountpoint + ")");
  }
  // Not through a read-only descriptor (a user's mount): a refused mount then cannot say where.
  const std::string line = mountpoint + "\n";
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, line.data(), line.size(), 0);
  return fd;
}

struct FuseMount::Impl {
  FuseState state;
  int lock_fd = -1;  // the runtime's mount lock, held until the session is gone
  fuse_args args = FUSE_ARGS_INIT(0, nullptr);
  fuse_session* se = nullptr;
  bool signals = false;
  dev_t dev = 0;  // the mount's device: its minor is the connection's number in fusectl
  std::thread loop;
  Mutex mu;
  CondVar ended_cv;
  bool ended GUARDED_BY(mu) = false;
  bool abandoned = false;  // Stop() could not end the loop; its threads still use this
  metrics::SamplerRegistration uring_metrics;

  ~Impl() {
    if (se != nullptr) {
      if (signals) fuse_remove_signal_handlers(se);
      fuse_session_unmount(se);
      fuse_session_destroy(se);
    }
    fuse_opt_free_args(&args);
    ReleaseLock();
  }

  const std::string& mountpoint() const { return state.options.mountpoint; }

  // Lazy unmount, only while the mount there is still this session's (not one made after an
  // unmount from outside). With nothing open the kernel lets go at once, sends DESTROY and
  // ends the connection, which ends the loop; open files keep it until they close.
  void Detach() {
    const std::string& mnt = mountpoint();
    std::optional<MountEntry> now = TopMount(mnt);
    if (!now || now->dev != dev) return;
    if (::geteuid() == 0) {
      if (::umount2(mnt.c_str(), MNT_DETACH) != 0) CLIO_LOG_WARN("unmounting {}: {}", mnt, std::strerror(errno));
    } else if (!RunFusermount("-uz", mnt)) {
      CLIO_LOG_WARN("unmounting {}: fusermount3 -uz failed", mnt);
    }
  }

  // Ends the connection as the kernel does when a FUSE daemon exits: requests waiting and to
  // come fail with ENOTCONN, and the loop's reads with ENODEV. Whether the kernel took it.
  bool Abort() {
    const std::string path = "/sys/fs/fuse/connections/" + std::to_string(minor(dev)) + "/abort";
    auto write_abort = [&] {
      std::ofstream out(path);
      out << "1\n";
      out.flush();
      return out.good();
    };
    if (write_abort()) return true;
    if (::geteuid() != 0) return false;
    // fusectl is not mounted (a container, a minimal system): mount it, as systemd would.
    (void)::mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, nullptr);
    return write_abort();
  }

  bool WaitEnded(int ms) {
    MutexLock l(&mu);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!ended && std::chrono::steady_clock::now() < deadline) {
      ended_cv.WaitFor(&mu, deadline - std::chrono::steady_clock::now());
    }
    return ended;
  }

  int RunLoop(int max_idle_threads) {
    fuse_loop_config lc{};
    lc.clone_fd = 0;
    lc.max_idle_threads = static_cast<unsigned>(max_idle_threads);
    const int rc = fuse_session_loop_mt(se, &lc);
    // The connection ended (or the session was told to exit): the rings have nothing more
    // to serve, and closing them lets the kernel release the connection.
    if (state.uring) state.uring->Stop();
    ReleaseLock();  // nothing is served here any more: another mount may go ahead
    return rc;
  }

  void ReleaseLock() {
    if (lock_fd >= 0) ::close(std::exchange(lock_fd, -1));
  }
};

FuseMount::FuseMount(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FuseMount::~FuseMount() {
  if (impl_->loop.joinable()) (void)Stop(0);
  if (impl_->abandoned) {
    // The loop's threads still run: the session, its state and the calls' gate (closed by
    // Stop) must outlive them; the process is ending.
    (void)impl_.release();
  }
}

Result<std::unique_ptr<FuseMount>> FuseMount::Mount(FuseMountOptions options, FsCaller call) {
  CLIO_ASSIGN_OR_RETURN(std::string real, CheckMountPoint(options.mountpoint));
  auto impl = std::make_unique<Impl>();
  options.mountpoint = real;
  impl->state.options = options;
  impl->state.call = std::move(call);
  const char* argv[] = {"clio-fuse", "-o", options.fuse_opts.c_str(), "-d"};
  for (int i = 0; i < (options.debug ? 4 : 3); ++i) {
    if (fuse_opt_add_arg(&impl->args, argv[i]) != 0) return Internal("out of memory");
  }
  fuse_lowlevel_ops ops = MakeOps();
  impl->se = fuse_session_new(&impl->args, &ops, sizeof ops, &impl->state);
  if (impl->se == nullptr) return InvalidArgument("bad mount options '" + options.fuse_opts + "'");
  if (options.handle_signals) {
    if (fuse_set_signal_handlers(impl->se) != 0) return Internal("cannot install signal handlers");
    impl->signals = true;
  }
  if (options.io_uring == FuseUringMode::kOn) CLIO_RETURN_IF_ERROR(FuseUringAvailable().WithContext("-o io_uring=on"));
  if (!options.mount_lock.empty()) {
    CLIO_ASSIGN_OR_RETURN(impl->lock_fd, TakeMountLock(options.mount_lock, real));
  }
  if (fuse_session_mount(impl->se, real.c_str()) != 0) {
    return IoError("mounting " + real + " failed (see the message above)");
  }
  if (options.io_uring != FuseUringMode::kOff) {
    // Before the loop reads FUSE_INIT, which decides whether the kernel uses the ring.
    fuse_session* se = impl->se;
    const int fd = fuse_session_fd(se);
    impl->state.uring = std::make_unique<FuseUring>(fd, options.io_uring, options.uring_threads,
                                                    [se](const void* request, size_t size) {
                                                      fuse_buf b{};
                                                      b.size = size;
                                                      b.mem = const_cast<void*>(request);
                                                      fuse_session_process_buf(se, &b);
                                                    });
    fuse_custom_io io{};
    io.read = UringRead;
    io.writev = UringWritev;
    if (int rc = fuse_session_custom_io(se, &io, fd); rc != 0) {
      return Internal("cannot take over the FUSE session's I/O (libfuse: " + std::string(std::strerror(-rc)) + ")");
    }
    FuseUring* uring = impl->state.uring.get();
    impl->uring_metrics = metrics::SamplerRegistration([uring] {
      const char* help = "FUSE requests served, by the channel they came through";
      return std::vector<metrics::Sample>{
          {"clio_fuse_requests_total", help, {{"channel", "io_uring"}}, static_cast<double>(uring->ring_requests()),
           metrics::Sample::Kind::kCounter},
          {"clio_fuse_requests_total", help, {{"channel", "dev"}}, static_cast<double>(uring->dev_requests()),
           metrics::Sample::Kind::kCounter}};
    });
  }
  std::optional<MountEntry> mounted = TopMount(real);
  impl->dev = mounted ? mounted->dev : 0;
  return std::unique_ptr<FuseMount>(new FuseMount(std::move(impl)));
}

void FuseMount::Daemonize(bool foreground) { fuse_daemonize(foreground ? 1 : 0); }

int FuseMount::Loop(int max_idle_threads) { return impl_->RunLoop(max_idle_threads); }

void FuseMount::Start(int max_idle_threads) {
  Impl* m = impl_.get();  // not `this`: the thread may outlive the FuseMount (Stop gave up)
  m->loop = std::thread([m, max_idle_threads] {
    int rc = m->RunLoop(max_idle_threads);
    if (rc != 0) {
      // The session failed: leave no mount behind that nobody serves.
      CLIO_LOG_ERROR("the FUSE session on {} ended with {}; detaching the mount", m->mountpoint(), rc);
      m->Detach();
      (void)m->Abort();
    }
    MutexLock l(&m->mu);
    m->ended = true;
    m->ended_cv.NotifyAll();
  });
}

bool FuseMount::Stop(int grace_ms) {
  Impl& m = *impl_;
  if (!m.loop.joinable()) return true;
  const std::string& mnt = m.mountpoint();
  if (!m.WaitEnded(0)) m.Detach();  // ended already: unmounted from outside, leave the path alone
  if (!m.WaitEnded(grace_ms)) {
    CLIO_LOG_WARN("{}: files still open after {} ms; aborting the FUSE connection", mnt, grace_ms);
    if (!m.Abort() || !m.WaitEnded(5000)) {
      CLIO_LOG_ERROR("{}: the FUSE session did not end (is fusectl mounted on /sys/fs/fuse/connections?); "
                     "refusing its requests from now on and leaving it to the process exit", mnt);
      fuse_session_exit(m.se);
      m.state.gate.Close();
      m.loop.detach();
      m.abandoned = true;
      return false;
    }
  }
  m.loop.join();
  return true;
}

const std::string& FuseMount::mountpoint() const { return impl_->mountpoint(); }

Result<FuseMount::Reattached> FuseMount::RuntimeRestarted() {
  FuseState& s = impl_->state;
  std::vector<NodeTable::Node> nodes = s.nodes.Freeze();
  std::vector<bool> exists;
  exists.reserve(nodes.size());
  Status declared;
  // In parts; the last (an empty one when the kernel holds nothing) says it is complete.
  for (size_t first = 0; declared.ok() && (first < nodes.size() || first == 0); first += kMaxReattachNodes) {
    const size_t n = std::min<size_t>(kMaxReattachNodes, nodes.size() - first);
    const bool last = first + n == nodes.size();
    fsproto::Reattach req;
    req.claims.reserve(n);
    for (size_t i = first; i < first + n; ++i) req.claims.push_back({nodes[i].ino, nodes[i].opens});
    req.flags = static_cast<uint8_t>((first == 0 ? kReattachBegin : 0) | (last ? kReattachComplete : 0));
    if (!s.gate.Enter()) {
      declared = Unavailable("the mount is being stopped");
      break;
    }
    Result<std::string> r = s.call(fsproto::Reattach::kMethod, fsproto::Encode(req));
    s.gate.Leave();
    auto reply = r.ok() ? fsproto::Decode<fsproto::ReattachReply>(*r) : Result<fsproto::ReattachReply>(r.status());
    if (!reply.ok()) {
      declared = reply.status();
      break;
    }
    if (reply->exists.size() != n) {
      declared = Corruption("reattach: the runtime answered for another number of nodes");
      break;
    }
    for (uint8_t x : reply->exists) exists.push_back(x != 0);
    if (last) break;
  }
  s.nodes.Thaw();
  CLIO_RETURN_IF_ERROR(declared.WithContext("declaring the mount's nodes to the restarted runtime"));
  // From here on no lock of this side is held: notifications may wait for requests (a dirty
  // page written back before its page is dropped), which must be free to run.
  s.dir_attrs.ChangingAll();
  s.clean_files.Clear();
  s.absent_xattrs.Clear();
  s.deleted.Clear();
  Reattached out;
  out.nodes = nodes.size();
  fuse_session* se = impl_->se;
  std::vector<const NodeTable::Node*> gone;
  for (size_t i = 0; i < nodes.size(); ++i) {
    out.opens += nodes[i].opens;
    if (!exists[i]) gone.push_back(&nodes[i]);
  }
  out.gone = gone.size();
  // The names of the nodes that are gone: children before their directories (a directory
  // with entries in the kernel's cache is not dropped), newest numbers first, and once more
  // for what a first pass could not drop.
  std::sort(gone.begin(), gone.end(), [](const auto* a, const auto* b) { return a->ino > b->ino; });
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<const NodeTable::Node*> again;
    for (const NodeTable::Node* n : gone) {
      if (n->parent == 0) continue;
      if (fuse_lowlevel_notify_delete(se, n->parent, n->ino, n->name.data(), n->name.size()) == -ENOTEMPTY)
        again.push_back(n);
    }
    gone.swap(again);
  }
  // The names of the nodes that remain: a change lost in the crash (a rename not yet
  // committed) may have left the kernel a name the runtime gives to another node or to none,
  // and a later directory fsync would then commit what the user never saw. Dropped, each name
  // is looked up again. (Only the last name a node was handed out under is known; the other
  // links of a file keep theirs until the entry timeout.)
  for (size_t i = 0; i < nodes.size(); ++i)
    if (exists[i] && nodes[i].parent != 0)
      (void)fuse_lowlevel_notify_inval_entry(se, nodes[i].parent, nodes[i].name.data(), nodes[i].name.size());
  // Then what the kernel caches of every node: attributes, and pages (dirty ones written
  // back first; to a node that is gone that fails with ESTALE and stores nothing).
  for (const NodeTable::Node& n : nodes) (void)fuse_lowlevel_notify_inval_inode(se, n.ino, 0, 0);
  (void)fuse_lowlevel_notify_inval_inode(se, kRootIno, 0, 0);
  return out;
}

}  // namespace clio
