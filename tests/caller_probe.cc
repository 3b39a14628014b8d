// clio_caller_probe: a client of the runtime's socket that is neither root nor the runtime's
// user, as tests/integration/security_test.py runs it. It drops to the uid, gid and groups it
// is given, then calls every method number below kMethods of the admin pool and of every pool
// the runtime lists, with an empty payload, and checks each answer against what such a caller
// may do: a method in the reader lists below runs (its answer may be any error but
// PermissionDenied), every other method is refused with PermissionDenied. A module it has no
// list for fails the run, and so does a method made a reader's without being added here.
//
//   clio_caller_probe --uid U --gid G [--groups A,B] [--locate INO:PATH=allow|deny]... SOCKET
//
// Prints one line per call and "N calls, M wrong"; exit 0 when nothing was wrong, 1 otherwise,
// 2 for bad arguments.
#include <grp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "daemon/admin_protocol.h"
#include "daemon/ipc.h"
#include "fs/protocol/fs_messages.h"
#include "fs/protocol/fs_protocol.h"
#include "placement/cte_protocol.h"
#include "storage/bdev_protocol.h"

using namespace clio;

namespace {

constexpr uint32_t kMethods = 64;

template <class E>
uint32_t M(E e) {
  return static_cast<uint32_t>(e);
}

// What a caller of the reader class may run, by module: reports, never a file's bytes or
// names, never a change.
const std::map<std::string, std::set<uint32_t>>& ReaderMethods() {
  static const std::map<std::string, std::set<uint32_t>> m = {
      {"admin",
       {M(AdminMethod::kPing), M(AdminMethod::kStatus), M(AdminMethod::kFindPool), M(AdminMethod::kListPools),
        M(AdminMethod::kRuntimeStats)}},
      {"clio_fs", {M(FsMethod::kStatfs), M(FsMethod::kLocate)}},
      {"clio_cte_core",
       {M(CteMethod::kListTiers), M(CteMethod::kDrainProgress), M(CteMethod::kWriteback), M(CteMethod::kTierStates)}},
      {"clio_bdev", {M(BdevMethod::kMonitor), M(BdevMethod::kGetStats)}},
      {"clio_safe_bdev", {M(BdevMethod::kMonitor), M(BdevMethod::kGetStats)}},
  };
  return m;
}

struct Args {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  struct LocateCase {
    uint64_t ino;
    std::string path;  // from the mount's root
    bool allow;        // whether the caller may locate it
  };
  std::vector<LocateCase> locates;
  std::string socket;
};

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr, "clio_caller_probe: %s\nusage: clio_caller_probe --uid U --gid G [--groups A,B] "
                       "[--locate INO:PATH=allow|deny]... SOCKET\n", why.c_str());
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  bool have_uid = false, have_gid = false;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(s + " needs a value");
      return argv[++i];
    };
    if (s == "--uid") {
      a.uid = static_cast<uid_t>(std::stoul(value()));
      have_uid = true;
    } else if (s == "--gid") {
      a.gid = static_cast<gid_t>(std::stoul(value()));
      have_gid = true;
    } else if (s == "--groups") {
      std::string list = value();
      for (size_t p = 0; p < list.size();) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        a.groups.push_back(static_cast<gid_t>(std::stoul(list.substr(p, q - p))));
        p = q + 1;
      }
    } else if (s == "--locate") {
      std::string v = value();
      const size_t colon = v.find(':'), eq = v.rfind('=');
      if (colon == std::string::npos || eq == std::string::npos || eq < colon ||
          (v.substr(eq + 1) != "allow" && v.substr(eq + 1) != "deny"))
        Usage("--locate takes INO:PATH=allow or INO:PATH=deny");
      a.locates.push_back({std::stoull(v.substr(0, colon)), v.substr(colon + 1, eq - colon - 1), v.substr(eq + 1) == "allow"});
    } else if (!s.empty() && s[0] == '-') {
      Usage("unknown option " + s);
    } else {
      a.socket = s;
    }
  }
  if (!have_uid || !have_gid || a.socket.empty()) Usage("--uid, --gid and SOCKET are required");
  if (a.uid == 0) Usage("--uid 0 would probe nothing: root may call everything");
  return a;
}

void DropPrivileges(const Args& a) {
  if (::setgroups(a.groups.size(), a.groups.data()) != 0 || ::setgid(a.gid) != 0 || ::setuid(a.uid) != 0) {
    std::perror("clio_caller_probe: dropping privileges (run it as root)");
    std::exit(2);
  }
  if (::getuid() != a.uid || ::geteuid() != a.uid) {
    std::fprintf(stderr, "clio_caller_probe: still uid %u after setuid\n", ::geteuid());
    std::exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  DropPrivileges(a);
  RuntimeClient::Options o;
  o.socket_path = a.socket;
  auto client = RuntimeClient::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "clio_caller_probe: %s\n", client.status().ToString().c_str());
    return 1;
  }
  RuntimeClient& c = **client;
  auto pools = c.Call(0, adminproto::ListPools{});
  if (!pools.ok()) {
    std::fprintf(stderr, "clio_caller_probe: listing the pools: %s\n", pools.status().ToString().c_str());
    return 1;
  }
  int calls = 0, wrong = 0;
  auto probe = [&](uint32_t pool, const std::string& module, const std::string& name) {
    auto readers = ReaderMethods().find(module);
    if (readers == ReaderMethods().end()) {
      std::printf("pool %u %s (%s): WRONG: no reader list for this module in tests/caller_probe.cc\n", pool,
                  name.c_str(), module.c_str());
      ++wrong;
      return;
    }
    for (uint32_t m = 0; m < kMethods; ++m) {
      // The transport methods are the connection's own (answered before any pool runs).
      if (pool == 0 && (m == M(AdminMethod::kOpenChannel) || m == M(AdminMethod::kHello) || m == M(AdminMethod::kProve)))
        continue;
      const bool reader = readers->second.count(m) != 0;
      auto r = c.Call(pool, m, "", RuntimeClient::Resend::kNever);
      const bool denied = !r.ok() && r.status().code() == Code::kPermissionDenied;
      const bool ok = reader ? !denied : denied;
      ++calls;
      if (!ok) ++wrong;
      std::printf("pool %u %s [%s] method %u: %s: %s%s\n", pool, name.c_str(), module.c_str(), m,
                  reader ? "reader" : "refused",
                  r.ok() ? "ok" : r.status().ToString().c_str(), ok ? "" : "  <- WRONG");
    }
  };
  probe(0, "admin", "admin");
  for (const PoolInfo& p : pools->pools) probe(p.id, p.module, p.name);
  for (const auto& [ino, path, allow] : a.locates) {
    uint32_t fs = 0;
    for (const PoolInfo& p : pools->pools)
      if (p.module == "clio_fs") fs = p.id;
    auto r = c.Call(fs, M(FsMethod::kLocate), fsproto::Encode(fsproto::Locate{.ino = ino, .path = {path}}));
    const bool denied = !r.ok() && r.status().code() == Code::kPermissionDenied;
    const bool ok = allow ? r.ok() : denied;
    ++calls;
    if (!ok) ++wrong;
    std::printf("locate inode %llu '%s': %s: %s%s\n", static_cast<unsigned long long>(ino), path.c_str(),
                allow ? "allowed" : "refused",
                r.ok() ? "ok" : r.status().ToString().c_str(), ok ? "" : "  <- WRONG");
  }
  std::printf("%d calls, %d wrong\n", calls, wrong);
  return wrong == 0 ? 0 : 1;
}
