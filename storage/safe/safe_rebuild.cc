// The safe-bdev's background work and membership operations: rebuild onto a spare or a
// replacement (bandwidth-bounded, resumable from the superblock's cursor), replacement of a
// member whose lifespan runs short, AddBdev / RemoveBdev / RecoverBdev, verification.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "storage/safe/safe_bdev_impl.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

// Stripes rebuilt between two records of the cursor in the superblock (each one syncs the
// target first, so the cursor never runs ahead of durable bytes).
constexpr uint64_t kCursorRecordEvery = 256;

Status Stopping(const std::string& name) { return Unavailable("safe-bdev '" + name + "' is closing"); }

}  // namespace

void SafeBdevImpl::Wake() {
  {
    MutexLock l(&bg_mu_);
    work_ = true;
  }
  bg_cv_.NotifyAll();
}

void SafeBdevImpl::BackgroundLoop() {
  using Clock = std::chrono::steady_clock;
  auto next_health = Clock::now();
  for (;;) {
    bool health = false;
    {
      MutexLock l(&bg_mu_);
      while (!stop_ && !work_ && Clock::now() < next_health) bg_cv_.WaitFor(&bg_mu_, next_health - Clock::now());
      if (stop_) return;
      health = Clock::now() >= next_health;
      if (!work_ && !health) continue;
      if (work_) rebuilding_ = true;
      work_ = false;
    }
    if (health) {
      Status s = CheckHealth();
      if (!s.ok()) CLIO_LOG_WARN("safe-bdev '{}': health check: {}", scfg_.name, s.ToString());
      next_health = Clock::now() + std::chrono::milliseconds(scfg_.health_interval_ms);
    }
    AssignSpares();
    Status result;
    for (;;) {
      auto l = Layout();
      uint32_t slot = n_;
      for (uint32_t i = 0; i < n_ && slot == n_; ++i)
        if (l->slots[i].target && l->slots[i].target->bdev) slot = i;
      if (slot == n_) break;
      {
        MutexLock lk(&bg_mu_);
        rebuilding_ = true;
      }
      result = RebuildSlot(slot, l->slots[slot].target);
      if (!result.ok()) {
        if (result.code() != Code::kUnavailable)
          CLIO_LOG_WARN("safe-bdev '{}': rebuild of slot {} stopped: {}", scfg_.name, slot, result.ToString());
        break;  // retried when something changes (a spare, a recovery, a restart)
      }
      MutexLock lk(&bg_mu_);
      ++rebuilds_done_;
    }
    {
      MutexLock l(&bg_mu_);
      rebuilding_ = false;
      last_rebuild_ = result;
    }
    bg_cv_.NotifyAll();
  }
}

Status SafeBdevImpl::RebuildSlot(uint32_t slot, const DevicePtr& target) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  uint64_t moved = 0;
  uint64_t stripe = target->cursor.load();
  CLIO_LOG_INFO("safe-bdev '{}': rebuilding slot {} onto '{}' from stripe {} of {}", scfg_.name, slot, target->name,
                stripe, g_.stripes);
  auto record = [&](uint64_t upto) -> Status {
    CLIO_RETURN_IF_ERROR(target->bdev->Sync());
    target->persisted = upto;
    return RecordLayout();
  };
  StripeBuf b;
  std::vector<uint32_t> need;
  std::string image;
  for (; stripe < g_.stripes; ++stripe) {
    {
      MutexLock l(&bg_mu_);
      if (stop_) {
        Status s = record(stripe);
        return s.ok() ? Stopping(scfg_.name) : s;
      }
    }
    {
      MutexLock lock(&StripeLock(stripe));
      auto l = Layout();
      if (l->slots[slot].target != target) return Status(Code::kUnavailable, "the rebuild target changed");
      const uint32_t pos = PosOf(stripe, slot);
      need.clear();
      for (uint32_t p = 0; p < g_.k; ++p) need.push_back(p);
      if (pos >= g_.k) need.push_back(pos);
      Status loaded = LoadStripe(*l, stripe, need, b);
      if (!loaded.ok()) {
        // Lost (more than m chunks of it are gone): the target keeps a blank slot there, which
        // reads as an error, and the rebuild goes on with the stripes it can save.
        ++lost_stripes_;
        CLIO_LOG_ERROR("safe-bdev '{}': stripe {} cannot be rebuilt onto '{}': {}", scfg_.name, stripe,
                       target->name, loaded.ToString());
        image.assign(g_.slot, '\0');
      } else if (b.blank) {
        image.assign(g_.slot, '\0');
      } else {
        BuildImage(stripe, pos, b, DataCrcs(b), target->incarnation, &image);
      }
      Status s = DeviceWrite(*target, stripe, image);
      if (!s.ok()) {
        FailDevice(slot, target, s);
        return s;
      }
      target->cursor = stripe + 1;
      ++rebuilt_stripes_;
    }
    moved += g_.slot;
    if ((stripe + 1) % kCursorRecordEvery == 0) CLIO_RETURN_IF_ERROR(record(stripe + 1));
    if (scfg_.rebuild_bandwidth > 0) {
      // Bounded bandwidth: wait until the bytes moved so far are due.
      const auto due = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                                   static_cast<double>(moved) / static_cast<double>(scfg_.rebuild_bandwidth)));
      MutexLock l(&bg_mu_);
      while (!stop_ && Clock::now() < due) bg_cv_.WaitFor(&bg_mu_, due - Clock::now());
    }
  }
  CLIO_RETURN_IF_ERROR(target->bdev->Sync());
  DevicePtr old;
  {
    // Every stripe lock: no read or write still works from a layout that names the old
    // member once its space goes back to its pool.
    StripeLocks all(stripe_mu_, kStripeLocks, 0, kStripeLocks - 1);
    CLIO_RETURN_IF_ERROR(ChangeLayout([&](SafeLayout& l) {
      SafeSlot& st = l.slots[slot];
      if (st.target != target) return Status(Code::kUnavailable, "the rebuild target changed");
      old = st.member;
      if (old && old->tier_id != target->tier_id) l.retired.push_back(old->tier_id);
      st.member = target;
      st.failed = false;
      st.reason.clear();
      st.target = nullptr;
      st.replacing = false;
      return Status::Ok();
    }));
  }
  // The replaced device's space goes back to its pool (a dying member that still answers).
  if (old && old->bdev && old->tier_id != target->tier_id) {
    Status s = old->bdev->Free(old->extents);
    if (!s.ok()) CLIO_LOG_WARN("safe-bdev '{}': freeing the array's space on '{}': {}", scfg_.name, old->name, s.ToString());
  }
  CLIO_LOG_INFO("safe-bdev '{}': slot {} rebuilt onto '{}' ({} stripes)", scfg_.name, slot, target->name, g_.stripes);
  return Status::Ok();
}

Status SafeBdevImpl::StartTarget(uint32_t slot, bool replacing) {
  bool started = false;
  Status s = ChangeLayout([&](SafeLayout& l) {
    SafeSlot& st = l.slots[slot];
    auto spare = std::find_if(l.spares.begin(), l.spares.end(), [](const DevicePtr& d) { return d->bdev != nullptr; });
    if (st.target || spare == l.spares.end()) return Status::Ok();
    st.target = *spare;
    st.target->cursor = 0;
    st.target->persisted = 0;
    st.replacing = replacing && !st.failed;
    l.spares.erase(spare);
    started = true;
    CLIO_LOG_WARN("safe-bdev '{}': {} member '{}' onto spare '{}'", scfg_.name,
                  st.replacing ? "copying dying" : "rebuilding failed", st.member->name, st.target->name);
    return Status::Ok();
  });
  if (started) Wake();
  return s;
}

void SafeBdevImpl::AssignSpares() {
  auto l = Layout();
  for (uint32_t i = 0; i < n_; ++i) {
    if (!l->slots[i].failed || l->slots[i].target) continue;
    Status s = StartTarget(i, false);
    if (!s.ok()) CLIO_LOG_WARN("safe-bdev '{}': cannot start a rebuild: {}", scfg_.name, s.ToString());
  }
}

Status SafeBdevImpl::CheckHealth() {
  AssignSpares();
  auto l = Layout();
  for (uint32_t i = 0; i < n_; ++i) {
    const SafeSlot& st = l->slots[i];
    if (st.failed || st.target || !st.member || !st.member->bdev) continue;
    const double days = st.member->bdev->GetStats().lifetime_days;
    if (days >= scfg_.replace_below_days) continue;
    if (l->spares.empty()) {
      CLIO_LOG_WARN("safe-bdev '{}': member '{}' is predicted to fail in {} days and no spare is left", scfg_.name,
                    st.member->name, days);
      continue;
    }
    CLIO_RETURN_IF_ERROR(StartTarget(i, true));
  }
  return Status::Ok();
}

Status SafeBdevImpl::WaitRebuilds() {
  MutexLock l(&bg_mu_);
  while (!stop_ && (work_ || rebuilding_)) bg_cv_.Wait(&bg_mu_);
  return last_rebuild_;
}

Status SafeBdevImpl::CheckNewDevice(const SafeMember& m, const SafeLayout& l) const {
  if (!m.bdev) return NotFound("pool '" + m.name + "' does not exist");
  const uint64_t id = m.bdev->tier_id();
  auto same = [id](const DevicePtr& d) { return d && d->tier_id == id; };
  for (const SafeSlot& s : l.slots)
    if (same(s.member) || same(s.target)) return InvalidArgument("'" + m.name + "' is already a member of the array");
  for (const DevicePtr& d : l.spares)
    if (same(d)) return InvalidArgument("'" + m.name + "' is already a spare of the array");
  BdevStats st = m.bdev->GetStats();
  if (st.capacity != g_.member_capacity || m.bdev->config().alignment != config_.alignment)
    return InvalidArgument("'" + m.name + "' has capacity " + std::to_string(st.capacity) + " and alignment " +
                           std::to_string(m.bdev->config().alignment) + "; the members have " +
                           std::to_string(g_.member_capacity) + " and " + std::to_string(config_.alignment));
  if ((st.persistence == Persistence::kVolatile) == persistent_)
    return InvalidArgument("'" + m.name + "' is " + std::string(PersistenceName(st.persistence)) +
                           ": members must all be volatile or all persistent");
  return Status::Ok();
}

Status SafeBdevImpl::AddSpare(const SafeMember& spare) {
  CLIO_RETURN_IF_ERROR(CheckNewDevice(spare, *Layout()).WithContext("safe-bdev '" + scfg_.name + "' AddBdev"));
  CLIO_ASSIGN_OR_RETURN(DevicePtr d, Enlist(spare, g_.slot, g_.stripes));
  CLIO_RETURN_IF_ERROR(ChangeLayout([&](SafeLayout& l) {
    l.spares.push_back(d);
    return Status::Ok();
  }));
  CLIO_LOG_INFO("safe-bdev '{}': '{}' added as a spare", scfg_.name, spare.name);
  Wake();
  return Status::Ok();
}

Status SafeBdevImpl::RemoveMember(const std::string& name, const std::string& reason) {
  auto l = Layout();
  for (uint32_t i = 0; i < n_; ++i) {
    const SafeSlot& st = l->slots[i];
    if (!st.member || st.member->name != name) continue;
    if (st.failed) return Status::Ok();
    if (FailedSlots(*l, g_.stripes) + 1 > g_.m)
      return InvalidArgument("safe-bdev '" + scfg_.name + "' RemoveBdev: removing '" + name + "' would leave more "
                             "than max_failures (" + std::to_string(g_.m) + ") members out of the array");
    FailDevice(i, st.member, IoError("removed by the operator" + (reason.empty() ? "" : ": " + reason)));
    return Status::Ok();
  }
  for (const DevicePtr& d : l->spares) {
    if (d->name != name) continue;
    CLIO_RETURN_IF_ERROR(ChangeLayout([&](SafeLayout& nl) {
      auto it = std::find(nl.spares.begin(), nl.spares.end(), d);
      if (it == nl.spares.end())
        return Status(Code::kBusy, "safe-bdev '" + scfg_.name + "' RemoveBdev: spare '" + name + "' was just taken "
                                   "for a rebuild");
      nl.spares.erase(it);
      return Status::Ok();
    }));
    // Only once no layout names it: the pool gets its space back.
    if (d->bdev) (void)d->bdev->Free(d->extents);
    return Status::Ok();
  }
  return NotFound("safe-bdev '" + scfg_.name + "' RemoveBdev: no member or spare '" + name + "'");
}

Status SafeBdevImpl::Recover(const std::string& name, const SafeMember& replacement) {
  const std::string what = "safe-bdev '" + scfg_.name + "' RecoverBdev";
  auto l = Layout();
  uint32_t slot = n_;
  for (uint32_t i = 0; i < n_; ++i)
    if (l->slots[i].member && l->slots[i].member->name == name) slot = i;
  if (slot == n_) return NotFound(what + ": no member '" + name + "'");
  const SafeSlot& st = l->slots[slot];
  if (st.target)
    return Status(Code::kBusy, what + ": member '" + name + "' is already being rebuilt onto '" + st.target->name + "'");
  DevicePtr target;
  bool from_spares = false;
  for (const DevicePtr& d : l->spares)
    if (d->name == replacement.name || (replacement.bdev && d->tier_id == replacement.bdev->tier_id())) {
      target = d;
      from_spares = true;
    }
  if (!target && replacement.bdev && st.member && replacement.bdev->tier_id() == st.member->tier_id) {
    // The member's own device works again: rebuild it in place, under a new incarnation so
    // nothing it held before counts until it is rewritten.
    if (!st.failed) return InvalidArgument(what + ": member '" + name + "' has not failed");
    SbDevice d;
    d.name = st.member->name;
    d.tier_id = st.member->tier_id;
    d.incarnation = RandomTierId();
    d.extents = st.member->extents;
    target = Attach(replacement.bdev, d);
  }
  if (!target) {
    CLIO_RETURN_IF_ERROR(CheckNewDevice(replacement, *l).WithContext(what));
    CLIO_ASSIGN_OR_RETURN(target, Enlist(replacement, g_.slot, g_.stripes));
  }
  CLIO_RETURN_IF_ERROR(ChangeLayout([&](SafeLayout& nl) {
    SafeSlot& s = nl.slots[slot];
    if (s.target) return Status(Code::kBusy, what + ": a rebuild of '" + name + "' started meanwhile");
    if (from_spares) {
      auto it = std::find(nl.spares.begin(), nl.spares.end(), target);
      if (it == nl.spares.end()) return Status(Code::kBusy, what + ": spare '" + target->name + "' was just taken");
      nl.spares.erase(it);
    }
    target->cursor = 0;
    target->persisted = 0;
    s.target = target;
    s.replacing = !s.failed;
    return Status::Ok();
  }));
  CLIO_LOG_INFO("{}: rebuilding '{}' onto '{}'", what, name, target->name);
  Wake();
  return Status::Ok();
}

Result<uint64_t> SafeBdevImpl::Verify() {
  uint64_t bad = 0;
  StripeBuf b;
  b.bytes.reset(new char[n_ * g_.slot]);
  std::vector<uint8_t> parity(g_.m * g_.chunk);
  for (uint64_t stripe = 0; stripe < g_.stripes; ++stripe) {
    MutexLock lock(&StripeLock(stripe));
    auto l = Layout();
    b.got.assign(n_, Got::kMissing);
    b.trailers.assign(n_, ChunkTrailer{});
    uint32_t ok = 0, blank = 0, broken = 0;
    for (uint32_t p = 0; p < n_; ++p) {
      switch (ReadPosition(*l, stripe, p, b)) {
        case Got::kOk: ++ok; break;
        case Got::kBlank: ++blank; break;
        case Got::kBad: ++broken; break;
        case Got::kMissing: break;
      }
    }
    if (ok == 0 && broken == 0) continue;  // never written
    bool good = broken == 0 && blank == 0;
    bool data_ok = true;
    for (uint32_t p = 0; p < g_.k; ++p) data_ok = data_ok && b.got[p] == Got::kOk;
    if (good && data_ok) {
      std::vector<const uint8_t*> dp;
      std::vector<uint8_t*> pp;
      for (uint32_t p = 0; p < g_.k; ++p) dp.push_back(reinterpret_cast<const uint8_t*>(Chunk(b, p)));
      for (uint32_t p = 0; p < g_.m; ++p) pp.push_back(&parity[p * g_.chunk]);
      ec_.Encode(g_.chunk, dp.data(), pp.data());
      const std::vector<uint32_t> crcs = DataCrcs(b);
      for (uint32_t p = g_.k; p < n_; ++p) {
        if (b.got[p] != Got::kOk) continue;
        if (std::memcmp(&parity[(p - g_.k) * g_.chunk], Chunk(b, p), g_.chunk) != 0 || b.trailers[p].data_crcs != crcs)
          good = false;
      }
    }
    if (good) continue;
    ++bad;
    CLIO_LOG_WARN("safe-bdev '{}': stripe {} does not verify ({} chunks good, {} bad, {} blank); repairing it",
                  scfg_.name, stripe, ok, broken, blank);
    if (broken > 0 || blank > 0 || !data_ok) {
      // Rebuilds every chunk that fails its checks and rewrites it where its device works.
      std::vector<uint32_t> all(n_);
      for (uint32_t p = 0; p < n_; ++p) all[p] = p;
      Status s = LoadStripe(*l, stripe, all, b);
      if (!s.ok()) CLIO_LOG_ERROR("safe-bdev '{}': stripe {} cannot be repaired: {}", scfg_.name, stripe, s.ToString());
      continue;
    }
    // Sound chunks, but parity that is not the code of the data: the data wins.
    const std::vector<uint32_t> crcs = DataCrcs(b);
    for (uint32_t p = g_.k; p < n_; ++p) {
      DevicePtr dev = ReadDevice(*l, SlotOf(stripe, p), stripe);
      if (!dev) continue;
      std::memcpy(Chunk(b, p), &parity[(p - g_.k) * g_.chunk], g_.chunk);
      std::string image;
      BuildImage(stripe, p, b, crcs, dev->incarnation, &image);
      Status s = DeviceWrite(*dev, stripe, image);
      if (!s.ok()) {
        FailDevice(SlotOf(stripe, p), dev, s);
        continue;
      }
      ++repaired_;
    }
  }
  return bad;
}

SafeArrayStatus SafeBdevImpl::ArrayStatus() {
  SafeArrayStatus a;
  a.k = g_.k;
  a.m = g_.m;
  a.chunk_size = g_.chunk;
  a.stripes = g_.stripes;
  auto l = Layout();
  for (uint32_t i = 0; i < n_; ++i) {
    const SafeSlot& st = l->slots[i];
    SafeMemberStatus m;
    m.name = st.member ? st.member->name : "";
    m.state = st.failed ? "failed" : st.replacing ? "replacing" : "ok";
    if (st.failed && st.target) m.state = "rebuilding";
    m.reason = st.reason;
    if (st.target) {
      m.target = st.target->name;
      m.rebuilt_stripes = st.target->cursor.load();
    }
    if (!st.failed && st.member && st.member->bdev) m.lifetime_days = st.member->bdev->GetStats().lifetime_days;
    a.members.push_back(std::move(m));
  }
  for (const DevicePtr& d : l->spares) a.spares.push_back(d->name);
  a.failed = FailedSlots(*l, g_.stripes);
  for (const SafeSlot& st : l->slots) {
    a.degraded = a.degraded || st.failed;
    a.rebuilding = a.rebuilding || st.target != nullptr;
  }
  a.checksum_errors = checksum_errors_.load();
  a.repaired_chunks = repaired_.load();
  a.reconstructed_reads = reconstructed_.load();
  a.journal_replayed = replayed_.load();
  a.rebuild_stripes_written = rebuilt_stripes_.load();
  a.lost_stripes = lost_stripes_.load();
  MutexLock bl(&bg_mu_);
  a.rebuilds_done = rebuilds_done_;
  return a;
}

}  // namespace clio
