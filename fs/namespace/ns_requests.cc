// Request records: a mutating request's (client, id) committed in the same batch as its
// effect, so that a resend after a runtime restart is answered instead of run twice.
#include <chrono>

#include "common/codec.h"
#include "common/log.h"
#include "fs/namespace/namespace.h"
#include "fs/namespace/ns_keys.h"
#include "storage/kv.h"

namespace clio {

using namespace ns;

namespace {

// The request whose effect the next commit on this thread carries, if any.
thread_local Namespace::RequestRecord* t_pending = nullptr;

constexpr int64_t kRecordLifetimeNs = int64_t{3600} * 1000000000;

}  // namespace

Namespace::RequestRecord::RequestRecord(uint32_t c, uint64_t id, uint32_t m) : client(c), request_id(id), method(m) {
  t_pending = this;
}

Namespace::RequestRecord::~RequestRecord() { t_pending = nullptr; }

Status Namespace::Commit(KvBatch b) {
  if (t_pending && !t_pending->recorded) {
    b.Put(RequestKey(t_pending->client, t_pending->request_id, kRequestSlots),
          EncodeRequestRecord(t_pending->request_id, t_pending->method, NowNs()));
    CLIO_RETURN_IF_ERROR(kv_->Apply(std::move(b)));
    t_pending->recorded = true;  // only the first batch: the one with the request's effect
    return Status::Ok();
  }
  return kv_->Apply(std::move(b));
}

Result<bool> Namespace::RequestRan(uint32_t client, uint64_t request_id) {
  CLIO_ASSIGN_OR_RETURN(auto v, kv_->Get(RequestKey(client, request_id, kRequestSlots)));
  if (!v) return false;
  Decoder d(*v);
  uint8_t version = 0;
  uint64_t id = 0;
  d.Get(&version);
  d.Get(&id);
  if (d.failed() || version != 1) return Corruption("a request record that does not decode");
  return id == request_id;  // the slot may hold a later request of the client
}

Status Namespace::ExpireRequestRecords() {
  CLIO_ASSIGN_OR_RETURN(KvPairs records, kv_->Scan(kRequestPrefix, "", 0));
  const int64_t oldest = NowNs() - kRecordLifetimeNs;
  KvBatch b;
  size_t dropped = 0;
  for (auto& [k, v] : records) {
    Decoder d(v);
    uint8_t version = 0;
    uint64_t id = 0;
    uint32_t method = 0;
    int64_t when = 0;
    d.Get(&version);
    d.Get(&id);
    d.Get(&method);
    d.Get(&when);
    // A record that does not decode is of no use to anyone: dropped with the old ones.
    if (!d.failed() && version == 1 && when >= oldest) continue;
    b.Delete(k);
    ++dropped;
  }
  if (dropped == 0) return Status::Ok();
  CLIO_LOG_INFO("dropped {} request records older than an hour", dropped);
  return kv_->Apply(std::move(b));
}

}  // namespace clio
