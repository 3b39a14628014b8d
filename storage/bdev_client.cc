#include "storage/bdev_client.h"

#include <algorithm>

#include "common/codec.h"
#include "daemon/ipc.h"
#include "storage/bdev_pool.h"

namespace clio {

Result<BdevClient> BdevClient::Connect(RuntimeClient* rpc, std::string_view pool_name) {
  CLIO_ASSIGN_OR_RETURN(uint32_t id, rpc->FindPool(pool_name));
  return BdevClient(rpc, id);
}

Result<std::string> BdevClient::Call(BdevMethod method, std::string_view payload,
                                     RuntimeClient::Resend resend) {
  if (pool_ != nullptr) return pool_->Handle(static_cast<uint32_t>(method), payload);
  return rpc_->Call(pool_id_, static_cast<uint32_t>(method), payload, resend);
}

Result<ExtentList> BdevClient::Allocate(uint64_t bytes) {
  if (pool_ != nullptr) return pool_->bdev()->Allocate(bytes);
  Encoder e;
  e.Put<uint64_t>(bytes);
  // Not resent: a resend after a lost reply would leak the first allocation.
  CLIO_ASSIGN_OR_RETURN(std::string reply, Call(BdevMethod::kAllocateBlocks, e.buffer(), RuntimeClient::Resend::kNever));
  Decoder d(reply);
  ExtentList extents;
  CLIO_RETURN_IF_ERROR(DecodeExtents(d, &extents));
  CLIO_RETURN_IF_ERROR(d.Finish("AllocateBlocks reply"));
  return extents;
}

Status BdevClient::Free(const ExtentList& extents) {
  if (pool_ != nullptr) return pool_->bdev()->Free(extents);
  Encoder e;
  EncodeExtents(e, extents);
  return Call(BdevMethod::kFreeBlocks, e.buffer(), RuntimeClient::Resend::kNever).status();
}

Result<uint64_t> BdevClient::Write(const ExtentList& extents, uint64_t offset,
                                   std::string_view data) {
  if (pool_ != nullptr) {
    CLIO_RETURN_IF_ERROR(pool_->bdev()->Write(extents, offset, data));
    return static_cast<uint64_t>(data.size());
  }
  uint64_t done = 0;
  do {
    const uint64_t n = std::min<uint64_t>(data.size() - done, kMaxBdevIoBytes);
    Encoder e;
    EncodeExtents(e, extents);
    e.Put<uint64_t>(offset + done).PutBytes(data.substr(done, n));
    CLIO_ASSIGN_OR_RETURN(std::string reply, Call(BdevMethod::kWrite, e.buffer(), RuntimeClient::Resend::kFreely));
    Decoder d(reply);
    uint64_t written = 0;
    d.Get(&written);
    CLIO_RETURN_IF_ERROR(d.Finish("Write reply"));
    if (written != n) return IoError("bdev write: " + std::to_string(written) + " of " +
                                     std::to_string(n) + " bytes written");
    done += n;
  } while (done < data.size());
  return done;
}

Status BdevClient::Read(const ExtentList& extents, uint64_t offset, uint64_t len, char* out) {
  if (pool_ != nullptr) return pool_->bdev()->Read(extents, offset, len, out);
  uint64_t done = 0;
  do {
    const uint64_t n = std::min<uint64_t>(len - done, kMaxBdevIoBytes);
    Encoder e;
    EncodeExtents(e, extents);
    e.Put<uint64_t>(offset + done).Put<uint64_t>(n);
    CLIO_ASSIGN_OR_RETURN(std::string reply, Call(BdevMethod::kRead, e.buffer(), RuntimeClient::Resend::kFreely));
    if (reply.size() != n)
      return Corruption("bdev read: " + std::to_string(reply.size()) + " bytes back, asked " +
                        std::to_string(n));
    std::copy(reply.begin(), reply.end(), out + done);
    done += n;
  } while (done < len);
  return Status::Ok();
}

Result<BdevStats> BdevClient::GetStats() {
  CLIO_ASSIGN_OR_RETURN(std::string reply, Call(BdevMethod::kGetStats, {}, RuntimeClient::Resend::kFreely));
  return DecodeBdevStats(reply);
}

Status BdevClient::Sync() { return Call(BdevMethod::kSync, {}, RuntimeClient::Resend::kFreely).status(); }

Status BdevClient::SetLifespan(double days) {
  Encoder e;
  e.Put<double>(days);
  return Call(BdevMethod::kSetLifespan, e.buffer(), RuntimeClient::Resend::kFreely).status();
}

Status BdevClient::FlushAllocLog() { return Call(BdevMethod::kFlushAllocLog, {}, RuntimeClient::Resend::kFreely).status(); }

Result<GpuMemoryInfo> BdevClient::Update() {
  CLIO_ASSIGN_OR_RETURN(std::string reply, Call(BdevMethod::kUpdate, {}, RuntimeClient::Resend::kFreely));
  return DecodeGpuMemoryInfo(reply);
}

Result<std::string> BdevClient::Monitor() {
  Encoder e;
  e.PutBytes("stats");
  return Call(BdevMethod::kMonitor, e.buffer(), RuntimeClient::Resend::kFreely);
}

}  // namespace clio
