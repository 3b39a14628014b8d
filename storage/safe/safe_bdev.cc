// The safe-bdev's I/O path: stripe reads with checksum checks, reconstruction and repair;
// journaled stripe updates; sync and checkpoints. Geometry and lock order: safe_bdev_impl.h.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "storage/safe/safe_bdev_impl.h"

namespace clio {

std::shared_ptr<const SafeLayout> SafeBdevImpl::Layout() {
  MutexLock l(&layout_mu_);
  return layout_;
}

DevicePtr SafeBdevImpl::ReadDevice(const SafeLayout& l, uint32_t slot, uint64_t stripe) const {
  const SafeSlot& s = l.slots[slot];
  if (!s.failed && s.member && s.member->bdev) return s.member;
  if (s.target && s.target->bdev && stripe < s.target->cursor.load()) return s.target;
  return nullptr;
}

uint32_t SafeBdevImpl::FailedSlots(const SafeLayout& l, uint64_t stripe) const {
  uint32_t n = 0;
  for (uint32_t i = 0; i < n_; ++i)
    if (!ReadDevice(l, i, stripe)) ++n;
  return n;
}

Status SafeBdevImpl::CheckDevice() {
  auto l = Layout();
  // Stripes past every cursor are the worst case: targets do not count there.
  const uint32_t failed = FailedSlots(*l, g_.stripes);
  if (failed > g_.m) {
    return IoError("safe-bdev '" + scfg_.name + "': " + std::to_string(failed) + " of " + std::to_string(n_) +
                   " members failed; the array survives losing " + std::to_string(g_.m));
  }
  return Status::Ok();
}

// --- member I/O ---

namespace {

// The part of `extents` that holds bytes [offset, offset + len), and the offset into it.
ExtentList SubExtents(const SafeDevice& d, uint64_t offset, uint64_t len, uint64_t* inner) {
  auto it = std::upper_bound(d.ends.begin(), d.ends.end(), offset);
  size_t i = static_cast<size_t>(it - d.ends.begin());
  ExtentList out;
  if (i >= d.extents.size()) return out;
  *inner = offset - (d.ends[i] - d.extents[i].size);
  const uint64_t end = offset + len;
  for (; i < d.extents.size(); ++i) {
    out.push_back(d.extents[i]);
    if (d.ends[i] >= end) break;
  }
  return out;
}

}  // namespace

Status SafeBdevImpl::DeviceWrite(const SafeDevice& d, uint64_t stripe, std::string_view image) {
  uint64_t inner = 0;
  ExtentList ex = SubExtents(d, stripe * g_.slot, image.size(), &inner);
  if (ex.empty()) return Internal("safe-bdev: stripe " + std::to_string(stripe) + " past member " + d.name);
  return d.bdev->Write(ex, inner, image);
}

Status SafeBdevImpl::DeviceRead(const SafeDevice& d, uint64_t stripe, char* out) {
  uint64_t inner = 0;
  ExtentList ex = SubExtents(d, stripe * g_.slot, g_.slot, &inner);
  if (ex.empty()) return Internal("safe-bdev: stripe " + std::to_string(stripe) + " past member " + d.name);
  return d.bdev->Read(ex, inner, g_.slot, out);
}

SafeBdevImpl::Got SafeBdevImpl::ReadPosition(const SafeLayout& l, uint64_t stripe, uint32_t pos, StripeBuf& b) {
  const uint32_t slot = SlotOf(stripe, pos);
  DevicePtr dev = ReadDevice(l, slot, stripe);
  if (!dev) return b.got[pos] = Got::kMissing;
  char* img = Chunk(b, pos);
  Status s = DeviceRead(*dev, stripe, img);
  if (!s.ok()) {
    FailDevice(slot, dev, s);
    // A target below the cursor may still serve the slot.
    dev = ReadDevice(*Layout(), slot, stripe);
    if (!dev || !DeviceRead(*dev, stripe, img).ok()) return b.got[pos] = Got::kMissing;
  }
  const std::string_view chunk(img, g_.chunk), trailer(img + g_.chunk, g_.trailer);
  switch (CheckTrailer(array_id_, chunk, trailer, stripe, static_cast<uint16_t>(pos), dev->incarnation, g_.k,
                       &b.trailers[pos])) {
    case TrailerCheck::kValid:
      return b.got[pos] = Got::kOk;
    case TrailerCheck::kBlank:
      return b.got[pos] = Got::kBlank;
    case TrailerCheck::kBad:
      break;
  }
  ++checksum_errors_;
  CLIO_LOG_WARN("safe-bdev '{}': chunk {} of stripe {} on member '{}' fails its checksum; rebuilding it",
                scfg_.name, pos, stripe, dev->name);
  return b.got[pos] = Got::kBad;
}

std::vector<uint32_t> SafeBdevImpl::DataCrcs(StripeBuf& b) const {
  std::vector<uint32_t> crcs(g_.k);
  for (uint32_t p = 0; p < g_.k; ++p) crcs[p] = Crc32c(Chunk(b, p), g_.chunk);
  return crcs;
}

void SafeBdevImpl::BuildImage(uint64_t stripe, uint32_t pos, StripeBuf& b,
                              const std::vector<uint32_t>& data_crcs, uint64_t incarnation,
                              std::string* image) const {
  image->resize(g_.slot);
  BuildImage(stripe, pos, b, data_crcs, incarnation, image->data());
}

void SafeBdevImpl::BuildImage(uint64_t stripe, uint32_t pos, StripeBuf& b,
                              const std::vector<uint32_t>& data_crcs, uint64_t incarnation, char* out) const {
  std::memcpy(out, Chunk(b, pos), g_.chunk);
  ChunkTrailer t;
  t.stripe = stripe;
  t.incarnation = incarnation;
  t.position = static_cast<uint16_t>(pos);
  t.crc = pos < g_.k ? data_crcs[pos] : Crc32c(Chunk(b, pos), g_.chunk);
  if (pos >= g_.k) t.data_crcs = data_crcs;
  EncodeTrailer(array_id_, t, out + g_.chunk, g_.trailer);
}

Status SafeBdevImpl::LoadStripe(const SafeLayout& l, uint64_t stripe, const std::vector<uint32_t>& need,
                                StripeBuf& b) {
  if (!b.bytes) b.bytes.reset(new char[n_ * g_.slot]);  // reused by the caller's next stripe
  b.got.assign(n_, Got::kMissing);
  b.trailers.assign(n_, ChunkTrailer{});
  b.blank = false;
  std::vector<bool> read(n_, false);
  bool all_ok = true;
  for (uint32_t p : need) {
    read[p] = true;
    if (ReadPosition(l, stripe, p, b) != Got::kOk) all_ok = false;
  }
  if (all_ok) return Status::Ok();

  // Something wanted is missing, bad or blank: read the whole stripe.
  for (uint32_t p = 0; p < n_; ++p)
    if (!read[p]) ReadPosition(l, stripe, p, b);
  std::vector<int> ok, broken;
  bool written = false;
  for (uint32_t p = 0; p < n_; ++p) {
    if (b.got[p] == Got::kOk) ok.push_back(static_cast<int>(p));
    if (b.got[p] == Got::kOk || b.got[p] == Got::kBad) written = true;
  }
  if (!written) {
    // Never written (every readable slot is blank): it reads as zeros.
    for (uint32_t p = 0; p < n_; ++p) std::memset(Chunk(b, p), 0, g_.chunk);
    b.blank = true;
    return Status::Ok();
  }
  for (uint32_t p = 0; p < n_; ++p)
    if (b.got[p] != Got::kOk) broken.push_back(static_cast<int>(p));
  if (ok.size() < g_.k) {
    return IoError("safe-bdev '" + scfg_.name + "': stripe " + std::to_string(stripe) + " has " +
                   std::to_string(ok.size()) + " readable chunks of the " + std::to_string(g_.k) +
                   " needed (more than " + std::to_string(g_.m) + " members failed or corrupt)");
  }
  // Prefer data chunks as sources, and keep one parity chunk to check the result against.
  std::vector<int> src(ok.begin(), ok.begin() + g_.k);
  std::vector<const uint8_t*> sp;
  std::vector<uint8_t*> op;
  for (int p : src) sp.push_back(reinterpret_cast<const uint8_t*>(Chunk(b, p)));
  for (int p : broken) op.push_back(reinterpret_cast<uint8_t*>(Chunk(b, p)));
  CLIO_RETURN_IF_ERROR(ec_.Reconstruct(g_.chunk, src, sp.data(), broken, op.data()));
  const ChunkTrailer* check = nullptr;
  for (int p : ok)
    if (p >= static_cast<int>(g_.k) && b.trailers[p].data_crcs.size() == g_.k) check = &b.trailers[p];
  for (int p : broken) {
    if (p >= static_cast<int>(g_.k)) continue;
    const uint32_t crc = Crc32c(Chunk(b, p), g_.chunk);
    if (check && check->data_crcs[p] != crc) {
      return IoError("safe-bdev '" + scfg_.name + "': stripe " + std::to_string(stripe) + ": chunk " +
                     std::to_string(p) + " rebuilt from the others does not match the checksum its parity "
                     "records (the stripe is inconsistent)");
    }
  }
  // Repair what a working device holds wrongly (bad, or blank in a written stripe).
  const std::vector<uint32_t> crcs = DataCrcs(b);
  for (int p : broken) {
    if (std::find(need.begin(), need.end(), static_cast<uint32_t>(p)) != need.end() && p < static_cast<int>(g_.k))
      ++reconstructed_;
    if (b.got[p] == Got::kMissing) continue;
    const uint32_t slot = SlotOf(stripe, p);
    DevicePtr dev = ReadDevice(l, slot, stripe);
    if (!dev) continue;
    std::string image;
    BuildImage(stripe, p, b, crcs, dev->incarnation, &image);
    Status s = DeviceWrite(*dev, stripe, image);
    if (!s.ok()) {
      FailDevice(slot, dev, s);
      continue;
    }
    ++repaired_;
    CLIO_LOG_WARN("safe-bdev '{}': repaired chunk {} of stripe {} on member '{}'", scfg_.name, p, stripe, dev->name);
  }
  for (int p : broken) b.got[p] = Got::kOk;
  return Status::Ok();
}

// --- reads ---

Status SafeBdevImpl::ReadAt(uint64_t offset, uint64_t len, char* out) {
  const uint64_t stripe_data = g_.k * g_.chunk;
  StripeBuf b;
  while (len > 0) {
    const uint64_t stripe = offset / stripe_data;
    const uint64_t in = offset % stripe_data;
    const uint64_t n = std::min(len, stripe_data - in);
    std::vector<uint32_t> need;
    for (uint32_t p = static_cast<uint32_t>(in / g_.chunk); p <= (in + n - 1) / g_.chunk; ++p) need.push_back(p);
    {
      MutexLock lock(&StripeLock(stripe));
      auto l = Layout();
      CLIO_RETURN_IF_ERROR(LoadStripe(*l, stripe, need, b));
    }
    // Data positions of one stripe are contiguous chunks in the buffer, trailers between.
    uint64_t done = 0;
    while (done < n) {
      const uint64_t at = in + done;
      const uint32_t p = static_cast<uint32_t>(at / g_.chunk);
      const uint64_t c = std::min(n - done, g_.chunk - at % g_.chunk);
      std::memcpy(out + done, Chunk(b, p) + at % g_.chunk, c);
      done += c;
    }
    offset += n;
    out += n;
    len -= n;
  }
  return Status::Ok();
}

// --- writes ---

Status SafeBdevImpl::WriteAt(uint64_t offset, std::string_view data) {
  const uint64_t stripe_data = g_.k * g_.chunk;
  while (!data.empty()) {
    const uint64_t first = offset / stripe_data;
    const uint64_t last = std::min((offset + data.size() - 1) / stripe_data, first + max_batch_ - 1);
    const uint64_t n = std::min<uint64_t>(data.size(), (last + 1) * stripe_data - offset);
    for (int attempt = 0;; ++attempt) {
      Status s = UpdateStripes(first, last, offset, data.substr(0, n));
      if (s.code() != Code::kBusy) {
        CLIO_RETURN_IF_ERROR(s);
        break;
      }
      // The journal is full: a checkpoint empties it, and a batch always fits an empty one.
      if (attempt > 0) return Internal("safe-bdev '" + scfg_.name + "': a stripe update does not fit the journal");
      CLIO_RETURN_IF_ERROR(Checkpoint());
    }
    offset += n;
    data.remove_prefix(n);
  }
  return Status::Ok();
}

Status SafeBdevImpl::UpdateStripes(uint64_t first, uint64_t last, uint64_t offset, std::string_view data) {
  const uint64_t stripe_data = g_.k * g_.chunk;
  ReaderLock ckpt(&ckpt_mu_);
  StripeLocks locks(stripe_mu_, kStripeLocks, first, last);
  auto l = Layout();
  // Slot images go to an arena laid out device by device (member of slot i: 2i, its target:
  // 2i + 1), stripe by stripe, so the images of one device for consecutive stripes are
  // adjacent: one member write per run, no copies (a file member writes those through
  // O_DIRECT).
  const uint64_t count = last - first + 1;
  thread_local std::unique_ptr<char[]> arena;
  thread_local uint64_t arena_bytes = 0;
  const uint64_t need_bytes = 2 * n_ * count * g_.slot;
  if (arena_bytes < need_bytes) {
    arena.reset(new char[need_bytes]);
    arena_bytes = need_bytes;
  }
  std::vector<char> planned(2 * n_ * count, 0);
  std::vector<DevicePtr> devices(2 * n_);
  auto image_at = [&](size_t dev, uint64_t i) { return arena.get() + (dev * count + i) * g_.slot; };
  std::vector<StripeJournal::Entry> entries;
  StripeBuf b;
  for (uint64_t stripe = first; stripe <= last; ++stripe) {
    const uint32_t failed = FailedSlots(*l, stripe);
    if (failed > g_.m) {
      return IoError("safe-bdev '" + scfg_.name + "': " + std::to_string(failed) + " of " + std::to_string(n_) +
                     " members failed; the array survives losing " + std::to_string(g_.m));
    }
    const uint64_t s_begin = stripe * stripe_data;
    const uint64_t w_begin = std::max(offset, s_begin);
    const uint64_t w_end = std::min(offset + data.size(), s_begin + stripe_data);
    // Every data chunk the write does not cover whole is read: parity is computed from all k.
    std::vector<uint32_t> need;
    std::vector<bool> touched(g_.k, false);
    for (uint32_t p = 0; p < g_.k; ++p) {
      const uint64_t c_begin = s_begin + p * g_.chunk, c_end = c_begin + g_.chunk;
      touched[p] = w_begin < c_end && w_end > c_begin;
      if (!(w_begin <= c_begin && w_end >= c_end)) need.push_back(p);
    }
    CLIO_RETURN_IF_ERROR(LoadStripe(*l, stripe, need, b));
    for (uint64_t at = w_begin; at < w_end;) {
      const uint64_t in = at - s_begin;
      const uint32_t p = static_cast<uint32_t>(in / g_.chunk);
      const uint64_t c = std::min(w_end - at, g_.chunk - in % g_.chunk);
      std::memcpy(Chunk(b, p) + in % g_.chunk, data.data() + (at - offset), c);
      at += c;
    }
    std::vector<const uint8_t*> dp;
    std::vector<uint8_t*> pp;
    for (uint32_t p = 0; p < g_.k; ++p) dp.push_back(reinterpret_cast<const uint8_t*>(Chunk(b, p)));
    for (uint32_t p = g_.k; p < n_; ++p) pp.push_back(reinterpret_cast<uint8_t*>(Chunk(b, p)));
    ec_.Encode(g_.chunk, dp.data(), pp.data());
    const std::vector<uint32_t> crcs = DataCrcs(b);
    // A stripe's first write sets every chunk, so a written stripe has no blank slot.
    for (uint32_t p = 0; p < n_; ++p) {
      if (p < g_.k && !touched[p] && !b.blank && b.got[p] == Got::kOk) continue;
      const uint32_t slot = SlotOf(stripe, p);
      const SafeSlot& st = l->slots[slot];
      const uint64_t i = stripe - first;
      if (!st.failed && st.member && st.member->bdev) {
        devices[2 * slot] = st.member;
        planned[2 * slot * count + i] = 1;
        BuildImage(stripe, p, b, crcs, st.member->incarnation, image_at(2 * slot, i));
        entries.push_back({stripe, st.member->incarnation, slot, {image_at(2 * slot, i), g_.slot}});
      }
      if (st.target && st.target->bdev) {
        devices[2 * slot + 1] = st.target;
        planned[(2 * slot + 1) * count + i] = 1;
        BuildImage(stripe, p, b, crcs, st.target->incarnation, image_at(2 * slot + 1, i));
        entries.push_back({stripe, st.target->incarnation, slot, {image_at(2 * slot + 1, i), g_.slot}});
      }
    }
  }
  if (journal_) CLIO_RETURN_IF_ERROR(journal_->Commit(entries));
  for (size_t dev = 0; dev < devices.size(); ++dev) {
    for (uint64_t i = 0; i < count;) {
      if (!planned[dev * count + i]) {
        ++i;
        continue;
      }
      uint64_t j = i + 1;
      while (j < count && planned[dev * count + j]) ++j;
      Status s = DeviceWrite(*devices[dev], first + i, std::string_view(image_at(dev, i), (j - i) * g_.slot));
      if (!s.ok()) FailDevice(static_cast<uint32_t>(dev / 2), devices[dev], s);
      i = j;
    }
  }
  // The journal holds the update either way; the array still refuses to claim redundancy
  // it no longer has.
  auto after = Layout();
  for (uint64_t stripe = first; stripe <= last; ++stripe) {
    const uint32_t failed = FailedSlots(*after, stripe);
    if (failed > g_.m) {
      return IoError("safe-bdev '" + scfg_.name + "': " + std::to_string(failed) + " of " + std::to_string(n_) +
                     " members failed during a write; the array survives losing " + std::to_string(g_.m));
    }
  }
  return Status::Ok();
}

// --- durability ---

Status SafeBdevImpl::SyncDevices(const SafeLayout& l) {
  for (uint32_t i = 0; i < n_; ++i) {
    const SafeSlot& st = l.slots[i];
    if (!st.failed && st.member && st.member->bdev) {
      Status s = st.member->bdev->Sync();
      if (!s.ok()) FailDevice(i, st.member, s);
    }
    if (st.target && st.target->bdev) {
      Status s = st.target->bdev->Sync();
      if (!s.ok()) FailDevice(i, st.target, s);
    }
  }
  return CheckDevice();
}

Status SafeBdevImpl::Sync() {
  auto l = Layout();
  CLIO_RETURN_IF_ERROR(SyncDevices(*l));
  if (log_) CLIO_RETURN_IF_ERROR(log_->Sync().WithContext(Describe()));
  return Status::Ok();
}

Status SafeBdevImpl::Checkpoint() {
  WriterLock w(&ckpt_mu_);
  if (!journal_) return Status::Ok();
  // No update is between its journal record and its in-place writes now: once the members
  // are durable, the records are not needed.
  auto l = Layout();
  CLIO_RETURN_IF_ERROR(SyncDevices(*l));
  return journal_->Reset();
}

Status SafeBdevImpl::ReplayEntry(const StripeJournal::Entry& e) {
  if (e.slot >= n_ || e.stripe >= g_.stripes || e.image.size() != g_.slot)
    return Corruption("safe-bdev '" + scfg_.name + "': journal entry out of the array's geometry");
  auto l = Layout();
  const SafeSlot& st = l->slots[e.slot];
  DevicePtr dev;
  if (!st.failed && st.member && st.member->bdev && st.member->incarnation == e.incarnation) dev = st.member;
  if (st.target && st.target->bdev && st.target->incarnation == e.incarnation) dev = st.target;
  if (!dev) return Status::Ok();  // that device is gone or failed: nothing to restore there
  Status s = DeviceWrite(*dev, e.stripe, e.image);
  if (!s.ok()) FailDevice(e.slot, dev, s);
  return Status::Ok();
}

Status SafeBdevImpl::FlushAllocLog() {
  if (!log_) return Status::Ok();
  return alloc_
      ->WithSnapshot([this](const ExtentList& live, const ExtentList& free) { return log_->Compact(live, free); })
      .WithContext(Describe());
}

std::string SafeBdevImpl::BackendName() const {
  return "safe " + std::to_string(g_.k) + "+" + std::to_string(g_.m);
}

BdevStats SafeBdevImpl::GetStats() {
  BdevStats s = BdevBase::GetStats();
  SafeArrayStatus a = ArrayStatus();
  if (!a.degraded && !a.rebuilding) {
    s.health = "ok";
    return s;
  }
  std::string h = a.failed > a.m ? "failed:" : a.degraded ? "degraded:" : "rebuilding:";
  for (const SafeMemberStatus& m : a.members) {
    if (m.state == "ok") continue;
    h += " member '" + m.name + "' " + m.state;
    if (!m.reason.empty()) h += " (" + m.reason + ")";
    if (!m.target.empty())
      h += ", rebuilding onto '" + m.target + "' " +
           std::to_string(a.stripes ? m.rebuilt_stripes * 100 / a.stripes : 100) + "%";
    h += ";";
  }
  if (h.back() == ';') h.pop_back();
  s.health = h;
  return s;
}

std::vector<metrics::Sample> SafeBdevImpl::SampleMetrics() {
  const SafeArrayStatus a = ArrayStatus();
  std::vector<metrics::Sample> out;
  auto event = [&](const char* name, uint64_t n) {
    out.push_back({"clio_bdev_medium_events_total", "Events inside a device, by event",
                   {{"event", name}}, static_cast<double>(n), metrics::Sample::Kind::kCounter});
  };
  event("checksum_error", a.checksum_errors);
  event("chunk_repaired", a.repaired_chunks);
  event("chunk_reconstructed", a.reconstructed_reads);
  event("journal_record_replayed", a.journal_replayed);
  event("rebuild_done", a.rebuilds_done);
  event("rebuild_stripe_written", a.rebuild_stripes_written);
  event("stripe_lost", a.lost_stripes);
  auto state = [&](const char* name, double v) {
    out.push_back({"clio_bdev_medium_state", "State inside a device, by state", {{"state", name}},
                   v, metrics::Sample::Kind::kGauge});
  };
  state("failed_members", a.failed);
  state("spares", static_cast<double>(a.spares.size()));
  state("rebuilding", a.rebuilding ? 1 : 0);
  return out;
}

}  // namespace clio
