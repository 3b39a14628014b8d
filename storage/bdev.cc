// Bdev type, persistence and allocation-policy names, and Bdev::Open through the media table.
#include "storage/bdev.h"

#include <algorithm>
#include <cctype>

#include "storage/bdev_base.h"
#include "storage/bdev_metrics.h"
#include "storage/media.h"

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
  const Medium* m = FindMedium(t);
  return m ? m->name : "unknown";
}

Result<BdevType> ParseBdevType(std::string_view s) {
  if (const Medium* m = FindMedium(s)) return m->type;
  std::string names;
  const std::vector<const Medium*> all = AllMedia();
  for (size_t i = 0; i < all.size(); ++i)
    names += (i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + std::string(all[i]->name);
  return InvalidArgument("unknown bdev_type '" + std::string(s) + "' (expected " + names + ")");
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
  const Medium* m = FindMedium(t);
  return m ? m->perf : PerfMetrics{};
}

Result<std::unique_ptr<Bdev>> Bdev::Open(const BdevConfig& config) {
  if (config.name.empty()) return ConfigError("bdev: the pool name (device location) is empty");
  const Medium* m = FindMedium(config.type);
  if (m == nullptr) return InvalidArgument("bdev: unknown type " + std::to_string(static_cast<int>(config.type)));
  CLIO_ASSIGN_OR_RETURN(std::unique_ptr<Bdev> bdev, m->open(config));
  return Instrument(std::move(bdev));
}

}  // namespace clio
