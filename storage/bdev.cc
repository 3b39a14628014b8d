// Bdev names, default performance figures and the one factory switch over transports.
#include "storage/bdev.h"

#include <algorithm>
#include <cctype>

#include "storage/bdev_base.h"
#include "storage/bdev_metrics.h"
#include "storage/gpu.h"

namespace clio {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string_view BdevTypeName(BdevType t) {
  switch (t) {
    case BdevType::kFile: return "file";
    case BdevType::kRam: return "ram";
    case BdevType::kHbm: return "hbm";
    case BdevType::kPinned: return "pinned";
    case BdevType::kNoop: return "noop";
    case BdevType::kS3: return "s3";
    case BdevType::kGcs: return "gcs";
  }
  return "unknown";
}

Result<BdevType> ParseBdevType(std::string_view s) {
  const std::string v = Lower(s);
  if (v == "file") return BdevType::kFile;
  if (v == "ram") return BdevType::kRam;
  if (v == "hbm") return BdevType::kHbm;
  if (v == "pinned") return BdevType::kPinned;
  if (v == "noop") return BdevType::kNoop;
  if (v == "s3") return BdevType::kS3;
  if (v == "gcs") return BdevType::kGcs;
  return InvalidArgument("unknown bdev_type '" + std::string(s) +
                         "' (expected file, ram, hbm, pinned, noop, s3 or gcs)");
}

std::string_view PersistenceName(Persistence p) {
  switch (p) {
    case Persistence::kVolatile: return "volatile";
    case Persistence::kTemporary: return "temporary";
    case Persistence::kLongTerm: return "long_term";
  }
  return "unknown";
}

Result<Persistence> ParsePersistence(std::string_view s) {
  const std::string v = Lower(s);
  if (v == "volatile") return Persistence::kVolatile;
  if (v == "temporary") return Persistence::kTemporary;
  if (v == "long_term") return Persistence::kLongTerm;
  return InvalidArgument("unknown persistence_level '" + std::string(s) +
                         "' (expected volatile, temporary or long_term)");
}

std::string_view AllocPolicyName(AllocPolicy p) {
  switch (p) {
    case AllocPolicy::kAuto: return "auto";
    case AllocPolicy::kEager: return "eager";
    case AllocPolicy::kLazy: return "lazy";
  }
  return "unknown";
}

Result<AllocPolicy> ParseAllocPolicy(std::string_view s) {
  const std::string v = Lower(s);
  if (v == "auto") return AllocPolicy::kAuto;
  if (v == "eager") return AllocPolicy::kEager;
  if (v == "lazy") return AllocPolicy::kLazy;
  return InvalidArgument("unknown alloc policy '" + std::string(s) +
                         "' (expected auto, eager or lazy)");
}

AllocPolicy ResolveAllocPolicy(AllocPolicy p, uint64_t configured_capacity) {
  if (p != AllocPolicy::kAuto) return p;
  return configured_capacity != 0 ? AllocPolicy::kEager : AllocPolicy::kLazy;
}

PerfMetrics DefaultPerfMetrics(BdevType t) {
  // Configured, not measured: only the order matters to placement (hbm > ram > pinned > rest).
  switch (t) {
    case BdevType::kHbm: return {20000, 20000, 1, 1, 10'000'000};
    case BdevType::kRam: return {10000, 10000, 2, 2, 5'000'000};
    case BdevType::kPinned: return {8000, 8000, 3, 3, 4'000'000};
    case BdevType::kFile: return {2000, 1000, 100, 200, 200'000};
    case BdevType::kNoop: return {1000, 1000, 100, 100, 100'000};
    case BdevType::kS3:
    case BdevType::kGcs: return {100, 100, 20'000, 50'000, 1'000};
  }
  return {};
}

namespace {

Result<std::unique_ptr<Bdev>> OpenTransport(const BdevConfig& config) {
  switch (config.type) {
    case BdevType::kFile: return OpenFileBdev(config);
    case BdevType::kRam: return OpenRamBdev(config);
    case BdevType::kNoop: return OpenNoopBdev(config);
    case BdevType::kHbm:
    case BdevType::kPinned: return OpenGpuBdev(config, MakeGpuRuntime());
    case BdevType::kS3:
    case BdevType::kGcs: return OpenObjectBdev(config);
  }
  return InvalidArgument("bdev: unknown type");
}

}  // namespace

Result<std::unique_ptr<Bdev>> Bdev::Open(const BdevConfig& config) {
  if (config.name.empty()) return ConfigError("bdev: the pool name (device location) is empty");
  CLIO_ASSIGN_OR_RETURN(std::unique_ptr<Bdev> bdev, OpenTransport(config));
  return Instrument(std::move(bdev));
}

}  // namespace clio
