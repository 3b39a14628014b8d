#include "fs/mount/node_table.h"

#include <cassert>

#include "common/log.h"

namespace clio {

NodeTable::Node& NodeTable::At(uint64_t ino) {
  Node& n = nodes_[ino];
  n.ino = ino;
  return n;
}

void NodeTable::DropIfUnused(std::unordered_map<uint64_t, Node>::iterator it) {
  if (it->second.lookups == 0 && it->second.opens == 0) nodes_.erase(it);
}

void NodeTable::Looked(uint64_t parent, std::string_view name, uint64_t ino) {
  if (ino == 0) return;  // a negative entry: the kernel counts nothing
  MutexLock l(&mu_);
  Node& n = At(ino);
  n.parent = parent;
  n.name.assign(name);
  ++n.lookups;
}

void NodeTable::Forget(uint64_t ino, uint64_t count) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  const uint64_t had = it == nodes_.end() ? 0 : it->second.lookups;
  if (count > had) {
    CLIO_LOG_ERROR("FORGET of {} lookups of node {}, which has {}: the node table is out of step with the kernel",
                   count, ino, had);
    assert(false && "lookup count underflow");
    count = had;
  }
  if (it == nodes_.end()) return;
  it->second.lookups -= count;
  DropIfUnused(it);
}

void NodeTable::Renamed(uint64_t ino, uint64_t new_parent, std::string_view new_name) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return;
  it->second.parent = new_parent;
  it->second.name.assign(new_name);
}

void NodeTable::Exchanged(uint64_t parent_a, std::string_view name_a, uint64_t parent_b,
                          std::string_view name_b) {
  MutexLock l(&mu_);
  for (auto& [ino, n] : nodes_) {
    if (n.parent == parent_a && n.name == name_a) {
      n.parent = parent_b;
      n.name.assign(name_b);
    } else if (n.parent == parent_b && n.name == name_b) {
      n.parent = parent_a;
      n.name.assign(name_a);
    }
  }
}

void NodeTable::BeginOpenChange() {
  MutexLock l(&mu_);
  while (frozen_) cv_.Wait(&mu_);
  ++changing_;
}

void NodeTable::EndOpenChange() {
  MutexLock l(&mu_);
  if (--changing_ == 0) cv_.NotifyAll();
}

void NodeTable::Opened(uint64_t ino) {
  MutexLock l(&mu_);
  ++At(ino).opens;
}

void NodeTable::Released(uint64_t ino) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || it->second.opens == 0) {
    CLIO_LOG_ERROR("release of node {}, which has no open: the node table is out of step with the kernel", ino);
    assert(false && "open count underflow");
    return;
  }
  --it->second.opens;
  DropIfUnused(it);
}

std::vector<NodeTable::Node> NodeTable::Freeze() {
  MutexLock l(&mu_);
  while (frozen_) cv_.Wait(&mu_);
  frozen_ = true;
  while (changing_ != 0) cv_.Wait(&mu_);
  std::vector<Node> out;
  out.reserve(nodes_.size());
  for (const auto& [ino, n] : nodes_) out.push_back(n);
  return out;
}

void NodeTable::Thaw() {
  MutexLock l(&mu_);
  frozen_ = false;
  cv_.NotifyAll();
}

size_t NodeTable::size() {
  MutexLock l(&mu_);
  return nodes_.size();
}

uint32_t NodeTable::opens(uint64_t ino) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? 0 : it->second.opens;
}

uint64_t NodeTable::lookups(uint64_t ino) {
  MutexLock l(&mu_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? 0 : it->second.lookups;
}

}  // namespace clio
