// The node ids the kernel holds through a FUSE mount, and the opens on each (fs/mount/fuse_session.cc).
//
// The kernel counts a lookup for every entry a reply hands it (LOOKUP, CREATE, MKDIR, MKNOD,
// SYMLINK, LINK, each READDIRPLUS entry) and gives them back with FORGET; a node stays here
// while it has lookups or opens. After a runtime restart the mount re-declares this table to
// the new runtime (Namespace::Reattach): the opens keep its files unlinked while open alive,
// and the nodes the runtime no longer has (their creation was lost in a crash) are dropped
// from the kernel's caches by name and by node id. The name kept is the last one the node was
// handed out under (a hard link's other names, or a rename since, are not kept).
//
// Opens are counted when the runtime answered them and until their release. Freeze() holds
// back every open and release (BeginOpenChange) while a restart's declaration is made, so the
// opens declared are exactly those the new runtime has answered.
//
// Thread safety: all methods may be called concurrently. A lookup count that goes below zero
// is a bug (a FORGET for more lookups than replies gave): logged, and it stops a debug build.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/thread_annotations.h"

namespace clio {

class NodeTable {
 public:
  struct Node {
    uint64_t ino = 0;
    uint64_t parent = 0;  // 0: never handed out by name (the root, or opened only)
    std::string name;
    uint64_t lookups = 0;
    uint32_t opens = 0;
  };

  // A reply the kernel accepted handed it `ino` as the entry `name` of `parent`.
  void Looked(uint64_t parent, std::string_view name, uint64_t ino) EXCLUDES(mu_);
  // FORGET: the kernel dropped `n` lookups of `ino`.
  void Forget(uint64_t ino, uint64_t n) EXCLUDES(mu_);
  // The entry the node goes by changed (a rename answered by the runtime).
  void Renamed(uint64_t ino, uint64_t new_parent, std::string_view new_name) EXCLUDES(mu_);
  // RENAME_EXCHANGE swapped the entries (parent_a, name_a) and (parent_b, name_b): the nodes
  // held under each now go by the other. A scan of the table (exchanges are rare).
  void Exchanged(uint64_t parent_a, std::string_view name_a, uint64_t parent_b, std::string_view name_b)
      EXCLUDES(mu_);

  // Around an open's or a release's runtime call and the Opened/Released that follows: waits
  // while a Freeze() is on.
  void BeginOpenChange() EXCLUDES(mu_);
  void EndOpenChange() EXCLUDES(mu_);
  void Opened(uint64_t ino) EXCLUDES(mu_);
  void Released(uint64_t ino) EXCLUDES(mu_);

  // Waits until no open or release is in flight, then holds new ones back until Thaw(), and
  // returns every node. One freeze at a time.
  std::vector<Node> Freeze() EXCLUDES(mu_);
  void Thaw() EXCLUDES(mu_);

  size_t size() EXCLUDES(mu_);
  // 0 when the node is not held.
  uint32_t opens(uint64_t ino) EXCLUDES(mu_);
  uint64_t lookups(uint64_t ino) EXCLUDES(mu_);

 private:
  // The node of `ino`, made when missing.
  Node& At(uint64_t ino) REQUIRES(mu_);
  // Drops the node once nothing holds it.
  void DropIfUnused(std::unordered_map<uint64_t, Node>::iterator it) REQUIRES(mu_);

  Mutex mu_;
  CondVar cv_;  // an open change ended, or a freeze ended
  std::unordered_map<uint64_t, Node> nodes_ GUARDED_BY(mu_);
  int changing_ GUARDED_BY(mu_) = 0;  // opens and releases in flight
  bool frozen_ GUARDED_BY(mu_) = false;
};

// BeginOpenChange() ... EndOpenChange() for a scope.
class OpenChange {
 public:
  explicit OpenChange(NodeTable* t) : t_(t) { t_->BeginOpenChange(); }
  ~OpenChange() { t_->EndOpenChange(); }
  OpenChange(const OpenChange&) = delete;
  OpenChange& operator=(const OpenChange&) = delete;

 private:
  NodeTable* t_;
};

}  // namespace clio
