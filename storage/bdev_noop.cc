// noop transport: allocator bookkeeping only; writes go nowhere and reads return zeros. It
// measures the runtime's own overhead.
#include <cstring>

#include "storage/bdev_base.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

class NoopBdev final : public BdevBase {
 public:
  NoopBdev(BdevConfig config, uint64_t tier_id, uint64_t capacity)
      : BdevBase(std::move(config), tier_id, capacity, /*growable=*/false, nullptr) {}

  Status Sync() override { return Status::Ok(); }

 protected:
  Status WriteAt(uint64_t, std::string_view) override { return Status::Ok(); }
  Status ReadAt(uint64_t, uint64_t len, char* out) override {
    std::memset(out, 0, len);
    return Status::Ok();
  }
  std::string BackendName() const override { return "noop"; }
  uint64_t CommittedBytes() override { return 0; }
};

}  // namespace

Result<std::unique_ptr<Bdev>> OpenNoopBdev(const BdevConfig& config) {
  BdevConfig c = config;
  if (c.alignment == 0 || c.alignment == 4096) c.alignment = 512;
  CLIO_RETURN_IF_ERROR(BlockAllocator::ValidateAlignment(c.alignment).WithContext("noop bdev"));
  if (c.persistence.value_or(Persistence::kVolatile) != Persistence::kVolatile) {
    return ConfigError("noop bdev '" + c.name + "' can only be volatile");
  }
  c.persistence = Persistence::kVolatile;
  const uint64_t capacity = c.capacity == 0 ? kUnboundedCapacity : c.capacity;
  const uint64_t id = c.tier_id != 0 ? c.tier_id : RandomTierId();
  return std::unique_ptr<Bdev>(new NoopBdev(std::move(c), id, capacity));
}

}  // namespace clio
