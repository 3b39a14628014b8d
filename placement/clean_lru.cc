#include "placement/clean_lru.h"

namespace clio {

void CleanCopyLru::Touch(uint64_t tier_id, uint64_t tag, uint64_t blob) {
  MutexLock l(&mu_);
  TierList& t = tiers_[tier_id];
  Key k{tag, blob};
  auto it = t.where.find(k);
  if (it != t.where.end()) {
    t.order.splice(t.order.end(), t.order, it->second);  // iterators stay valid
    return;
  }
  t.where.emplace(k, t.order.insert(t.order.end(), k));
}

void CleanCopyLru::Remove(uint64_t tier_id, uint64_t tag, uint64_t blob) {
  MutexLock l(&mu_);
  auto t = tiers_.find(tier_id);
  if (t == tiers_.end()) return;
  auto it = t->second.where.find({tag, blob});
  if (it == t->second.where.end()) return;
  t->second.order.erase(it->second);
  t->second.where.erase(it);
}

bool CleanCopyLru::PopOldest(uint64_t tier_id, uint64_t* tag, uint64_t* blob) {
  MutexLock l(&mu_);
  auto t = tiers_.find(tier_id);
  if (t == tiers_.end() || t->second.order.empty()) return false;
  Key k = t->second.order.front();
  t->second.order.pop_front();
  t->second.where.erase(k);
  *tag = k.first;
  *blob = k.second;
  return true;
}

size_t CleanCopyLru::Count(uint64_t tier_id) const {
  MutexLock l(&mu_);
  auto t = tiers_.find(tier_id);
  return t == tiers_.end() ? 0 : t->second.order.size();
}

void CleanCopyLru::RemoveTier(uint64_t tier_id) {
  MutexLock l(&mu_);
  tiers_.erase(tier_id);
}

}  // namespace clio
