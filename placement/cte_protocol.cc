#include "placement/cte_protocol.h"

#include "storage/media.h"

namespace clio {

void WireEncode(Encoder& e, const TierInfo& t) {
  e.PutBytes(t.name).Put<uint64_t>(t.tier_id).Put<double>(t.score);
  e.Put<uint8_t>(static_cast<uint8_t>(t.stats.type)).Put<uint8_t>(static_cast<uint8_t>(t.stats.persistence));
  e.Put<uint64_t>(t.stats.capacity).Put<uint64_t>(t.stats.remaining).Put<uint64_t>(t.stats.used);
  e.Put<double>(t.stats.lifetime_days).PutBytes(t.stats.backend).PutBytes(t.stats.health);
}

Status WireDecode(Decoder& d, TierInfo& t) {
  uint8_t type = 0, pers = 0;
  d.GetString(&t.name);
  d.Get(&t.tier_id);
  d.Get(&t.score);
  d.Get(&type);
  d.Get(&pers);
  d.Get(&t.stats.capacity);
  d.Get(&t.stats.remaining);
  d.Get(&t.stats.used);
  d.Get(&t.stats.lifetime_days);
  d.GetString(&t.stats.backend);
  d.GetString(&t.stats.health);
  if (d.failed()) return Status::Ok();  // the message's Finish says truncated
  if (FindMedium(static_cast<BdevType>(type)) == nullptr)
    return Corruption("medium type " + std::to_string(type) + " is unknown here (a newer runtime?)");
  if (pers > static_cast<uint8_t>(Persistence::kLongTerm)) return Corruption("bad persistence " + std::to_string(pers));
  t.stats.type = static_cast<BdevType>(type);
  t.stats.persistence = static_cast<Persistence>(pers);
  return Status::Ok();
}

void WireEncode(Encoder& e, const TierState& s) {
  e.Put<uint64_t>(s.tier_id).Put<uint8_t>(static_cast<uint8_t>(s.condition)).Put<uint64_t>(s.bytes_left);
  e.Put<uint8_t>(s.from_config ? 1 : 0);
}

Status WireDecode(Decoder& d, TierState& s) {
  uint8_t condition = 0, from_config = 0;
  d.Get(&s.tier_id);
  d.Get(&condition);
  d.Get(&s.bytes_left);
  d.Get(&from_config);
  if (d.failed()) return Status::Ok();  // the message's Finish says truncated
  if (condition > static_cast<uint8_t>(TierCondition::kActive))
    return Corruption("tier condition " + std::to_string(condition) + " is unknown here (a newer runtime?)");
  if (from_config > 1) return Corruption("bad from_config flag " + std::to_string(from_config));
  s.condition = static_cast<TierCondition>(condition);
  s.from_config = from_config == 1;
  return Status::Ok();
}

void WireEncode(Encoder& e, const DrainProgress& p) {
  e.Put<uint8_t>(p.draining ? 1 : 0).Put<uint64_t>(p.bytes_left).Put<uint64_t>(p.moved_bytes);
  e.Put<uint64_t>(p.moved_copies);
}

Status WireDecode(Decoder& d, DrainProgress& p) {
  uint8_t draining = 0;
  d.Get(&draining);
  d.Get(&p.bytes_left);
  d.Get(&p.moved_bytes);
  d.Get(&p.moved_copies);
  if (draining > 1) return Corruption("bad flag");
  p.draining = draining == 1;
  return Status::Ok();
}

void WireEncode(Encoder& e, const ReorganizeStats& s) {
  for (uint64_t v : {s.candidates, s.promoted, s.demoted, s.moved_bytes, s.budget, s.over_budget, s.skipped})
    e.Put<uint64_t>(v);
}

Status WireDecode(Decoder& d, ReorganizeStats& s) {
  for (uint64_t* f : {&s.candidates, &s.promoted, &s.demoted, &s.moved_bytes, &s.budget, &s.over_budget, &s.skipped})
    d.Get(f);
  return Status::Ok();
}

void WireEncode(Encoder& e, const WritebackStats& w) {
  e.Put<uint32_t>(static_cast<uint32_t>(w.dirty.size()));
  for (const DirtyLedger::TierCounters& c : w.dirty)
    e.Put<uint64_t>(c.tier_id).Put<uint64_t>(c.limit).Put<uint64_t>(c.dirty).Put<uint64_t>(c.peak);
  for (uint64_t v : {w.reserved, w.dirty_blobs, w.dirty_waits, w.dirty_wait_timeouts, w.evictions,
                     w.evicted_bytes, w.flush_failures, w.flush_passes})
    e.Put<uint64_t>(v);
  e.Put<double>(w.oldest_dirty_s);
}

Status WireDecode(Decoder& d, WritebackStats& w) {
  constexpr size_t kCounterBytes = 4 * sizeof(uint64_t);
  uint32_t n = 0;
  if (!d.Get(&n)) return Status::Ok();
  if (n > d.remaining() / kCounterBytes) return Corruption("impossible tier count " + std::to_string(n));
  w.dirty.resize(n);
  for (DirtyLedger::TierCounters& c : w.dirty) {
    d.Get(&c.tier_id);
    d.Get(&c.limit);
    d.Get(&c.dirty);
    d.Get(&c.peak);
  }
  for (uint64_t* f : {&w.reserved, &w.dirty_blobs, &w.dirty_waits, &w.dirty_wait_timeouts, &w.evictions,
                      &w.evicted_bytes, &w.flush_failures, &w.flush_passes})
    d.Get(f);
  d.Get(&w.oldest_dirty_s);
  return Status::Ok();
}

Result<std::vector<TierInfo>> DecodeTierList(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(cteproto::TierListReply r, wire::Decode<cteproto::TierListReply>(bytes));
  return std::move(r.tiers);
}

Result<DrainProgress> DecodeDrainProgress(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(cteproto::DrainProgressReply r, wire::Decode<cteproto::DrainProgressReply>(bytes));
  return r.progress;
}

Result<ReorganizeStats> DecodeReorganizeStats(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(cteproto::ReorganizeReply r, wire::Decode<cteproto::ReorganizeReply>(bytes));
  return r.stats;
}

Result<WritebackStats> DecodeWritebackStats(std::string_view bytes) {
  CLIO_ASSIGN_OR_RETURN(cteproto::WritebackReply r, wire::Decode<cteproto::WritebackReply>(bytes));
  return std::move(r.stats);
}

}  // namespace clio
