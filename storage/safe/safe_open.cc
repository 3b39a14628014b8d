// Creating and opening a safe-bdev: checks of the members, the superblock, the allocator log
// and journal replay; layout changes and member failure.
#include <algorithm>
#include <set>

#include "common/log.h"
#include "storage/bdev_metrics.h"
#include "storage/safe/safe_bdev_impl.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

std::string Quote(const std::string& s) { return "'" + s + "'"; }

// What every member and spare must agree on.
struct MemberShape {
  uint64_t capacity = 0;
  uint64_t alignment = 0;
  Persistence persistence = Persistence::kTemporary;
  BdevType type = BdevType::kFile;
};

MemberShape ShapeOf(Bdev* b) {
  BdevStats s = b->GetStats();
  return {s.capacity, b->config().alignment, s.persistence, s.type};
}

Status CheckShapes(const std::vector<SafeMember>& all, MemberShape* shape) {
  std::set<std::string> names;
  std::set<uint64_t> ids;
  for (size_t i = 0; i < all.size(); ++i) {
    const SafeMember& m = all[i];
    if (!m.bdev) return NotFound("members: pool " + Quote(m.name) + " does not exist");
    if (!names.insert(m.name).second)
      return InvalidArgument("members: " + Quote(m.name) + " is listed twice (members and spares included)");
    if (!ids.insert(m.bdev->tier_id()).second)
      return InvalidArgument("members: " + Quote(m.name) + " is the same device as another member");
    MemberShape s = ShapeOf(m.bdev);
    if (i == 0) {
      *shape = s;
      continue;
    }
    if (s.capacity != shape->capacity)
      return InvalidArgument("members: " + Quote(m.name) + " has capacity " + std::to_string(s.capacity) + ", " +
                             Quote(all[0].name) + " has " + std::to_string(shape->capacity) +
                             " (members must be of equal size)");
    if (s.alignment != shape->alignment)
      return InvalidArgument("members: " + Quote(m.name) + " has alignment " + std::to_string(s.alignment) + ", " +
                             Quote(all[0].name) + " has " + std::to_string(shape->alignment));
    if ((s.persistence == Persistence::kVolatile) != (shape->persistence == Persistence::kVolatile))
      return InvalidArgument("members: " + Quote(m.name) + " is " + std::string(PersistenceName(s.persistence)) +
                             ", " + Quote(all[0].name) + " is " +
                             std::string(PersistenceName(shape->persistence)) +
                             " (mixing volatile and persistent members)");
  }
  return Status::Ok();
}

}  // namespace

Result<DevicePtr> SafeBdevImpl::Enlist(const SafeMember& m, uint64_t slot_bytes, uint64_t stripes) {
  BdevStats st = m.bdev->GetStats();
  if (st.used != 0)
    return InvalidArgument("members: " + Quote(m.name) + " already holds " + std::to_string(st.used) +
                           " bytes of data; a new array member must be empty");
  auto extents = m.bdev->Allocate(slot_bytes * stripes);
  if (!extents.ok())
    return Status(extents.status().code(), "members: " + Quote(m.name) + ": " + extents.status().message());
  Status s = m.bdev->Sync();
  if (!s.ok()) return Status(s.code(), "members: " + Quote(m.name) + ": " + s.message());
  SbDevice d;
  d.name = m.name;
  d.tier_id = m.bdev->tier_id();
  d.incarnation = RandomTierId();
  d.extents = std::move(extents).value();
  return Attach(m.bdev, d);
}

DevicePtr SafeBdevImpl::Attach(Bdev* bdev, const SbDevice& d) {
  auto dev = std::make_shared<SafeDevice>();
  dev->bdev = bdev;
  dev->name = d.name;
  dev->tier_id = d.tier_id;
  dev->incarnation = d.incarnation;
  dev->extents = d.extents;
  uint64_t end = 0;
  for (const Extent& e : d.extents) dev->ends.push_back(end += e.size);
  return dev;
}

SafeBdevImpl::SafeBdevImpl(BdevConfig config, SafeBdevConfig scfg, uint64_t array_id, Geometry g, bool persistent,
                           std::unique_ptr<AllocLog> log, SafeLayout layout)
    : BdevBase(std::move(config), array_id, g.stripes * g.k * g.chunk, /*growable=*/false, log.get()),
      scfg_(std::move(scfg)),
      array_id_(array_id),
      g_(g),
      n_(g.k + g.m),
      persistent_(persistent),
      sb_path_(scfg_.alloc_log + ".sb"),
      ec_(ErasureCode::Make(static_cast<int>(g.k), static_cast<int>(g.m)).value()),
      log_(std::move(log)),
      layout_(std::make_shared<SafeLayout>(std::move(layout))) {
  // Members and targets of every slot, twice: a record of at most max_batch_ stripes of
  // them fits half the journal.
  const uint64_t per_stripe = StripeJournal::RecordBytes(2 * n_, g_.slot) - StripeJournal::kRecordAlign;
  const uint64_t room = scfg_.journal_size > StripeJournal::kHeaderSize
                            ? (scfg_.journal_size - StripeJournal::kHeaderSize) / 2 : 0;
  max_batch_ = std::clamp<uint64_t>(per_stripe ? room / per_stripe : 1, 1, 16);
}

SafeBdevImpl::~SafeBdevImpl() {
  {
    MutexLock l(&bg_mu_);
    stop_ = true;
  }
  bg_cv_.NotifyAll();
  if (bg_.joinable()) bg_.join();
  if (!journal_) return;
  // A clean close leaves nothing to replay.
  Status s = Checkpoint();
  if (!s.ok()) CLIO_LOG_WARN("safe-bdev '{}': checkpoint at close: {}", scfg_.name, s.ToString());
}

Status SafeBdevImpl::Start(const AllocLog::Replay& replay) {
  CLIO_RETURN_IF_ERROR(alloc_->Restore(replay.live, replay.free).WithContext(Describe()));
  if (persistent_) {
    uint64_t replayed = 0;
    CLIO_ASSIGN_OR_RETURN(journal_,
                          StripeJournal::Open(scfg_.alloc_log + ".journal", array_id_, scfg_.journal_size, scfg_.io,
                                              [this](const StripeJournal::Entry& e) { return ReplayEntry(e); },
                                              &replayed));
    replayed_ = replayed;
    if (replayed > 0) {
      CLIO_LOG_INFO("safe-bdev '{}': replayed {} journaled stripe updates", scfg_.name, replayed);
      CLIO_RETURN_IF_ERROR(Checkpoint());
    }
  }
  auto l = Layout();
  for (uint32_t i = 0; i < n_; ++i)
    if (l->slots[i].failed)
      CLIO_LOG_WARN("safe-bdev '{}': member '{}' is failed ({}); the array is degraded", scfg_.name,
                    l->slots[i].member->name, l->slots[i].reason);
  bg_ = std::thread([this] { BackgroundLoop(); });
  return Status::Ok();
}

Superblock SafeBdevImpl::BuildSuperblock(const SafeLayout& l) {
  Superblock sb;
  sb.array_id = array_id_;
  sb.k = g_.k;
  sb.m = g_.m;
  sb.chunk_size = g_.chunk;
  sb.slot_bytes = g_.slot;
  sb.stripes = g_.stripes;
  sb.alignment = config_.alignment;
  auto rec = [](const DevicePtr& d) {
    SbDevice out;
    if (!d) return out;
    out.name = d->name;
    out.tier_id = d->tier_id;
    out.incarnation = d->incarnation;
    out.extents = d->extents;
    return out;
  };
  for (uint32_t i = 0; i < n_; ++i) {
    const SafeSlot& s = l.slots[i];
    SbSlot o;
    o.member = rec(s.member);
    o.failed = s.failed;
    o.reason = s.reason;
    o.has_target = s.target != nullptr;
    o.replacing = s.replacing;
    o.target = rec(s.target);
    o.cursor = s.target ? s.target->persisted.load() : 0;
    sb.slots.push_back(std::move(o));
  }
  for (const DevicePtr& d : l.spares) sb.spares.push_back(rec(d));
  sb.retired = l.retired;
  return sb;
}

Status SafeBdevImpl::ChangeLayout(const std::function<Status(SafeLayout&)>& change, bool always) {
  MutexLock sb(&sb_mu_);
  auto next = std::make_shared<SafeLayout>(*Layout());
  CLIO_RETURN_IF_ERROR(change(*next));
  Status recorded = persistent_ ? WriteSuperblock(sb_path_, BuildSuperblock(*next)) : Status::Ok();
  if (!recorded.ok() && !always) return recorded;
  MutexLock l(&layout_mu_);
  layout_ = std::move(next);
  return recorded;
}

void SafeBdevImpl::FailDevice(uint32_t slot, const DevicePtr& dev, const Status& why) {
  bool changed = false;
  Status s = ChangeLayout([&](SafeLayout& l) {
    SafeSlot& st = l.slots[slot];
    if (st.member == dev && !st.failed) {
      st.failed = true;
      st.reason = why.message();
      // A copy before failure becomes a rebuild: the member can no longer be a source.
      st.replacing = false;
      changed = true;
      CLIO_LOG_WARN("safe-bdev '{}': member '{}' failed: {}; the array is degraded", scfg_.name, dev->name,
                    why.ToString());
    } else if (st.target == dev) {
      // Its space stays allocated in its pool: recorded as retired, it is never mistaken
      // for a spare.
      l.retired.push_back(dev->tier_id);
      st.target = nullptr;
      st.replacing = false;
      changed = true;
      CLIO_LOG_WARN("safe-bdev '{}': rebuild target '{}' failed: {}; the rebuild stops", scfg_.name, dev->name,
                    why.ToString());
    }
    return Status::Ok();
  }, /*always=*/true);
  if (!s.ok()) CLIO_LOG_ERROR("safe-bdev '{}': cannot record a failed member: {}", scfg_.name, s.ToString());
  if (changed) Wake();
}

namespace {

Status CheckMemberCount(const SafeBdevConfig& c, size_t members) {
  if (c.max_failures == 0) return InvalidArgument("max_failures: must be at least 1 (m = 0 is no redundancy)");
  if (members <= c.max_failures)
    return InvalidArgument("members: " + std::to_string(members) + " members leave no data member with "
                           "max_failures " + std::to_string(c.max_failures) + " (k = members - max_failures >= 1)");
  if (members > ErasureCode::kMaxChunks)
    return InvalidArgument("members: " + std::to_string(members) + " members; k + m is at most 255 (GF(2^8))");
  return Status::Ok();
}

// The configured geometry of an array (found or new), after checking the rest of the
// configuration against the members' shape.
Result<SafeBdevImpl::Geometry> PlanGeometry(const SafeBdevConfig& c, size_t members, const MemberShape& shape,
                                            bool persistent) {
  if (c.chunk_size == 0 || c.chunk_size % std::max<uint64_t>(512, shape.alignment) != 0)
    return InvalidArgument("chunk_size: " + std::to_string(c.chunk_size) + " is not a multiple of the members' "
                           "alignment " + std::to_string(shape.alignment));
  if (persistent && c.alloc_log.empty())
    return InvalidArgument("alloc_log: required for an array of persistent members (a local file for the "
                           "array's allocator log, superblock and journal)");
  SafeBdevImpl::Geometry g;
  g.m = c.max_failures;
  g.k = static_cast<uint32_t>(members) - g.m;
  g.chunk = c.chunk_size;
  g.trailer = TrailerBytes(g.k, shape.alignment);
  g.slot = g.chunk + g.trailer;
  g.stripes = shape.capacity / g.slot;
  g.member_capacity = shape.capacity;
  if (g.stripes == 0)
    return InvalidArgument("chunk_size: one chunk and its trailer (" + std::to_string(g.slot) +
                           " bytes) do not fit in a member of " + std::to_string(shape.capacity) + " bytes");
  const uint64_t min_journal = StripeJournal::kHeaderSize + 4 * StripeJournal::RecordBytes(2 * (g.k + g.m), g.slot);
  if (persistent && c.journal_size < min_journal)
    return InvalidArgument("journal_size: " + std::to_string(c.journal_size) + " bytes is less than four "
                           "full-stripe records (" + std::to_string(min_journal) + " bytes)");
  return g;
}

// An existing array, from its superblock `sb` (at `sb_path`): checks the configuration against
// it, takes its geometry into *g and its slots, spares and targets into *layout; a configured
// pool the array does not know becomes a spare.
Status AdoptArray(const SafeBdevConfig& c, const Superblock& sb, const std::string& sb_path,
                  const std::vector<SafeMember>& all, const MemberShape& shape, SafeBdevImpl::Geometry* g,
                  SafeLayout* layout) {
  if (sb.m != g->m)
    return InvalidArgument("max_failures: " + std::to_string(g->m) + " differs from the array's " +
                           std::to_string(sb.m) + " recorded in " + sb_path);
  if (sb.chunk_size != g->chunk)
    return InvalidArgument("chunk_size: " + std::to_string(g->chunk) + " differs from the array's " +
                           std::to_string(sb.chunk_size) + " recorded in " + sb_path);
  if (sb.alignment != shape.alignment || sb.k + sb.m != sb.slots.size())
    return InvalidArgument("members: their alignment differs from the array recorded in " + sb_path);
  g->k = sb.k;
  g->trailer = TrailerBytes(g->k, shape.alignment);
  g->slot = g->chunk + g->trailer;
  g->stripes = shape.capacity / g->slot;
  if (g->slot != sb.slot_bytes || g->stripes != sb.stripes)
    return InvalidArgument("members: their capacity or alignment differs from the array recorded in " + sb_path);
  auto find = [&all](uint64_t tier_id) -> Bdev* {
    for (const SafeMember& m : all)
      if (m.bdev->tier_id() == tier_id) return m.bdev;
    return nullptr;
  };
  std::set<uint64_t> used;
  for (const SbSlot& s : sb.slots) {
    SafeSlot slot;
    slot.member = SafeBdevImpl::Attach(find(s.member.tier_id), s.member);
    slot.failed = s.failed || !slot.member->bdev;
    slot.reason = s.failed ? s.reason : !slot.member->bdev ? "its pool is not composed" : "";
    if (!s.failed && !slot.member->bdev)
      CLIO_LOG_WARN("safe-bdev '{}': member '{}' (tier {}) is not among the configured pools", c.name,
                    s.member.name, s.member.tier_id);
    if (s.has_target) {
      if (s.cursor > sb.stripes) return Corruption(sb_path + ": a rebuild cursor is past the last stripe");
      slot.target = SafeBdevImpl::Attach(find(s.target.tier_id), s.target);
      slot.target->cursor = s.cursor;
      slot.target->persisted = s.cursor;
      slot.replacing = s.replacing && !slot.failed;
      if (!slot.target->bdev) {
        CLIO_LOG_WARN("safe-bdev '{}': rebuild target '{}' is not among the configured pools; the rebuild "
                      "restarts on a spare", c.name, s.target.name);
        layout->retired.push_back(s.target.tier_id);
        slot.target = nullptr;
      }
      used.insert(s.target.tier_id);
    }
    used.insert(s.member.tier_id);
    layout->slots.push_back(std::move(slot));
  }
  // A recorded spare whose pool is not composed stays recorded (without a device).
  for (const SbDevice& d : sb.spares) {
    used.insert(d.tier_id);
    layout->spares.push_back(SafeBdevImpl::Attach(find(d.tier_id), d));
  }
  layout->retired = sb.retired;
  // A pool the array does not know becomes a spare; one it replaced for good is left alone.
  for (const SafeMember& m : all) {
    const uint64_t id = m.bdev->tier_id();
    if (used.count(id)) continue;
    if (std::count(sb.retired.begin(), sb.retired.end(), id)) {
      CLIO_LOG_WARN("safe-bdev '{}': pool '{}' was replaced in this array; it is not used (remove it from "
                    "members)", c.name, m.name);
      continue;
    }
    if (const uint64_t held = m.bdev->GetStats().used; held != 0) {
      CLIO_LOG_WARN("safe-bdev '{}': pool '{}' is not in the array and holds {} bytes; it is left alone", c.name,
                    m.name, held);
      continue;
    }
    CLIO_ASSIGN_OR_RETURN(DevicePtr d, SafeBdevImpl::Enlist(m, g->slot, g->stripes));
    CLIO_LOG_INFO("safe-bdev '{}': pool '{}' is new to the array; it is a spare", c.name, m.name);
    layout->spares.push_back(std::move(d));
  }
  return Status::Ok();
}

// A new array over empty pools: the first `members` of `all` are its slots, the rest spares.
// A creation that fails half way gives back what it took.
Status CreateArray(const std::vector<SafeMember>& all, size_t members, const SafeBdevImpl::Geometry& g,
                   SafeLayout* layout) {
  for (const SafeMember& m : all) {
    const uint64_t used = m.bdev->GetStats().used;
    if (used != 0)
      return InvalidArgument("members: " + Quote(m.name) + " already holds " + std::to_string(used) +
                             " bytes of data; a new array member must be empty");
  }
  std::vector<DevicePtr> enlisted;
  for (const SafeMember& m : all) {
    auto d = SafeBdevImpl::Enlist(m, g.slot, g.stripes);
    if (!d.ok()) {
      for (const DevicePtr& e : enlisted) (void)e->bdev->Free(e->extents);
      return d.status();
    }
    enlisted.push_back(std::move(d).value());
  }
  for (size_t i = 0; i < enlisted.size(); ++i) {
    if (i < members) {
      SafeSlot s;
      s.member = enlisted[i];
      layout->slots.push_back(std::move(s));
    } else {
      layout->spares.push_back(enlisted[i]);
    }
  }
  return Status::Ok();
}

}  // namespace

Result<OpenedSafeBdev> OpenSafeBdev(const SafeBdevConfig& c, const std::vector<SafeMember>& members,
                                    const std::vector<SafeMember>& spares) {
  CLIO_RETURN_IF_ERROR(CheckMemberCount(c, members.size()));
  std::vector<SafeMember> all = members;
  all.insert(all.end(), spares.begin(), spares.end());
  MemberShape shape;
  CLIO_RETURN_IF_ERROR(CheckShapes(all, &shape));
  const bool persistent = shape.persistence != Persistence::kVolatile;
  CLIO_ASSIGN_OR_RETURN(SafeBdevImpl::Geometry g, PlanGeometry(c, members.size(), shape, persistent));

  // The superblock is the truth about an existing array; the configured pools are what is
  // there to find its devices in.
  const std::string sb_path = c.alloc_log + ".sb";
  Result<Superblock> found = persistent ? ReadSuperblock(sb_path) : Result<Superblock>(NotFound("volatile"));
  if (!found.ok() && found.status().code() != Code::kNotFound) return found.status();
  Superblock sb;
  SafeLayout layout;
  if (found.ok()) {
    sb = std::move(found).value();
    CLIO_RETURN_IF_ERROR(AdoptArray(c, sb, sb_path, all, shape, &g, &layout));
  } else {
    sb.array_id = RandomTierId();
    CLIO_RETURN_IF_ERROR(CreateArray(all, members.size(), g, &layout));
    sb.slots.resize(layout.slots.size());
  }

  BdevConfig bc;
  bc.name = c.name;
  bc.type = shape.type;
  bc.capacity = g.stripes * g.k * g.chunk;
  bc.alignment = shape.alignment;
  bc.persistence = shape.persistence;
  bc.alloc_log = c.alloc_log;
  bc.tier_id = sb.array_id;
  if (c.perf) {
    bc.perf = c.perf;
  } else {
    // Reads spread over k members; a write moves n/k as many bytes, twice (journal, in place).
    PerfMetrics p = members[0].bdev->GetStats().perf;
    p.read_bandwidth_mbps *= g.k;
    p.write_bandwidth_mbps *= static_cast<double>(g.k) / (2.0 * (g.k + g.m)) * g.k;
    bc.perf = p;
  }

  // Until a new array's superblock is written it does not exist: a failure gives its
  // members' space back, so the next attempt finds them empty.
  std::vector<DevicePtr> taken;
  if (!found.ok()) {
    for (const SafeSlot& s : layout.slots) taken.push_back(s.member);
    taken.insert(taken.end(), layout.spares.begin(), layout.spares.end());
  }
  auto give_back = [&taken](const Status& s) {
    for (const DevicePtr& d : taken) (void)d->bdev->Free(d->extents);
    return s;
  };
  std::unique_ptr<AllocLog> log;
  AllocLog::Replay replay;
  if (persistent) {
    auto opened = AllocLog::Open(c.alloc_log, sb.array_id, c.io, &replay);
    if (!opened.ok()) return give_back(opened.status());
    log = std::move(opened).value();
  }
  auto impl = std::make_unique<SafeBdevImpl>(bc, c, sb.array_id, g, persistent, std::move(log), std::move(layout));
  if (persistent) {
    // A new array's first superblock; for an existing one, what opening changed (new spares,
    // targets left out).
    Status s = impl->RecordLayout();
    if (!s.ok()) return give_back(s);
  }
  CLIO_RETURN_IF_ERROR(impl->Start(replay));
  OpenedSafeBdev out;
  out.array = impl.get();
  out.bdev = Instrument(std::move(impl), "safe");
  return out;
}

}  // namespace clio
