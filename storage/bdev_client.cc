#include "storage/bdev_client.h"

#include <algorithm>

#include "daemon/ipc.h"
#include "storage/bdev_pool.h"

namespace clio {

Result<BdevClient> BdevClient::Connect(RuntimeClient* rpc, std::string_view pool_name) {
  CLIO_ASSIGN_OR_RETURN(uint32_t id, rpc->FindPool(pool_name));
  return BdevClient(rpc, id);
}

template <class Req>
Result<typename Req::Reply> BdevClient::Call(const Req& req) {
  if (pool_ == nullptr) return rpc_->Call(pool_id_, req);
  CLIO_ASSIGN_OR_RETURN(std::string reply, pool_->Handle(static_cast<uint32_t>(Req::kMethod), wire::Encode(req)));
  return wire::DecodeReply<typename Req::Reply>(std::move(reply));
}

Result<ExtentList> BdevClient::Allocate(uint64_t bytes) {
  if (pool_ != nullptr) return pool_->bdev()->Allocate(bytes);
  CLIO_ASSIGN_OR_RETURN(bdevproto::ExtentsReply r, Call(bdevproto::AllocateBlocks{.bytes = bytes}));
  return std::move(r.extents.list);
}

Status BdevClient::Free(const ExtentList& extents) {
  if (pool_ != nullptr) return pool_->bdev()->Free(extents);
  return Call(bdevproto::FreeBlocks{.extents = {extents}}).status();
}

Result<uint64_t> BdevClient::Write(const ExtentList& extents, uint64_t offset,
                                   std::string_view data) {
  if (pool_ != nullptr) {
    CLIO_RETURN_IF_ERROR(pool_->bdev()->Write(extents, offset, data));
    return static_cast<uint64_t>(data.size());
  }
  bdevproto::Write req{.extents = {extents}, .offset = 0, .data = {}};
  uint64_t done = 0;
  do {
    const uint64_t n = std::min<uint64_t>(data.size() - done, kMaxBdevIoBytes);
    req.offset = offset + done;
    req.data = data.substr(done, n);
    CLIO_ASSIGN_OR_RETURN(bdevproto::WriteReply r, Call(req));
    if (r.written != n) return IoError("bdev write: " + std::to_string(r.written) + " of " +
                                       std::to_string(n) + " bytes written");
    done += n;
  } while (done < data.size());
  return done;
}

Status BdevClient::Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out) {
  if (pool_ != nullptr) return pool_->bdev()->Read(extents, offset, len, out);
  bdevproto::Read req{.extents = {extents}, .offset = 0, .len = 0};
  uint64_t done = 0;
  do {
    const uint64_t n = std::min<uint64_t>(len - done, kMaxBdevIoBytes);
    req.offset = offset + done;
    req.len = n;
    CLIO_ASSIGN_OR_RETURN(wire::Raw reply, Call(req));
    if (reply.bytes.size() != n)
      return Corruption("bdev read: " + std::to_string(reply.bytes.size()) + " bytes back, asked " +
                        std::to_string(n));
    std::copy(reply.bytes.begin(), reply.bytes.end(), out + done);
    done += n;
  } while (done < len);
  return Status::Ok();
}

Result<BdevStats> BdevClient::GetStats() {
  CLIO_ASSIGN_OR_RETURN(bdevproto::StatsReply r, Call(bdevproto::GetStats{}));
  return r.stats;
}

Status BdevClient::Sync() { return Call(bdevproto::Sync{}).status(); }

Status BdevClient::SetLifespan(double days) { return Call(bdevproto::SetLifespan{.days = days}).status(); }

Status BdevClient::FlushAllocLog() { return Call(bdevproto::FlushAllocLog{}).status(); }

Result<GpuMemoryInfo> BdevClient::Update() {
  CLIO_ASSIGN_OR_RETURN(bdevproto::GpuMemoryReply r, Call(bdevproto::Update{}));
  return r.info;
}

Result<std::string> BdevClient::Monitor() {
  CLIO_ASSIGN_OR_RETURN(wire::Raw r, Call(bdevproto::Monitor{.query = {"stats"}}));
  return std::move(r.bytes);
}

}  // namespace clio
