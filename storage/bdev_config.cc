#include "storage/bdev_config.h"

#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "common/size.h"
#include "storage/allocator.h"
#include "storage/media.h"
#include "storage/objstore/object_store.h"

namespace clio {
namespace {

constexpr uint64_t kMaxIoDepth = 4096;

// Keys of a bdev node, with the pool named in every error.
class BdevKeys {
 public:
  BdevKeys(ConfigReader& r, const std::string& name) : r_(r), pool_("bdev '" + name + "': ") {}

  Status Error(std::string_view key, std::string_view what) const {
    return r_.Error(key, pool_ + std::string(what));
  }

  // A size string ("2GB", "4k", "0"). Absent or empty: `def`.
  Result<uint64_t> Size(std::string_view key, uint64_t def) {
    CLIO_ASSIGN_OR_RETURN(std::string s, r_.String(key, ""));
    if (!r_.Has(key) || s.empty()) return def;
    if (s.find('-') != std::string::npos) return Error(key, "size '" + s + "' must not be negative");
    Result<uint64_t> v = ParseSize(s);
    if (!v.ok()) return Error(key, v.status().message());
    return *v;
  }

  Result<uint64_t> UInt(std::string_view key, uint64_t def) {
    CLIO_ASSIGN_OR_RETURN(std::string s, r_.String(key, ""));
    if (!r_.Has(key) || s.empty()) return def;
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (*end != '\0' || errno != 0 || s.find('-') != std::string::npos)
      return Error(key, "expected a non-negative integer, got '" + s + "'");
    return static_cast<uint64_t>(v);
  }

  ConfigReader& reader() { return r_; }

 private:
  ConfigReader& r_;
  const std::string pool_;
};

Status ParsePerfMetrics(BdevKeys& keys, const ConfigValue* node, const std::string& file,
                        const std::string& name, PerfMetrics* perf) {
  if (node->kind != ConfigValue::Kind::kMap)
    return keys.Error("perf_metrics", "expected a map of read_bandwidth_mbps, write_bandwidth_mbps, "
                                      "read_latency_us, write_latency_us, iops");
  ConfigReader pr(node, file);
  struct Field {
    const char* key;
    double* value;
  };
  const Field fields[] = {{"read_bandwidth_mbps", &perf->read_bandwidth_mbps},
                          {"write_bandwidth_mbps", &perf->write_bandwidth_mbps},
                          {"read_latency_us", &perf->read_latency_us},
                          {"write_latency_us", &perf->write_latency_us},
                          {"iops", &perf->iops}};
  for (const Field& f : fields) {
    Result<double> v = pr.Double(f.key, *f.value);
    if (!v.ok()) return v.status().WithContext("bdev '" + name + "'");
    if (*v < 0) return pr.Error(f.key, "bdev '" + name + "': must not be negative");
    *f.value = *v;
  }
  Status unknown = pr.Finish();
  if (!unknown.ok()) return unknown.WithContext("bdev '" + name + "'");
  return Status::Ok();
}

// A file device's path must be creatable: its nearest existing ancestor is a directory we may
// write to. The real test is the open at pool creation; this one names the config key.
Status CheckFileLocation(BdevKeys& keys, std::string_view key, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return keys.Error(key, "a file device needs a path");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  while (!fs::exists(dir, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory) break;
    if (!dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
  fs::file_status st = fs::status(dir, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return keys.Error(key, "cannot use " + path + ": " + dir.string() + ": " + ec.message());
  }
  if (fs::exists(st) && !fs::is_directory(st)) {
    return keys.Error(key, "cannot use " + path + ": " + dir.string() + " is not a directory");
  }
  if (fs::exists(st) && ::access(dir.c_str(), W_OK | X_OK) != 0) {
    const int err = errno;
    return keys.Error(key, "cannot create " + path + ": directory " + dir.string() +
                               " is not writable (" + std::strerror(err) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status ParseBdevKeys(ConfigReader& r, BdevConfig* c) {
  BdevKeys keys(r, c->name);

  CLIO_ASSIGN_OR_RETURN(std::string type, r.String("bdev_type", "file"));
  Result<BdevType> bt = ParseBdevType(type.empty() ? "file" : type);
  if (!bt.ok()) return keys.Error("bdev_type", bt.status().message());
  c->type = *bt;

  // The seed's compose entry says capacity, the CTE's storage list capacity_limit.
  const bool has_capacity = r.Has("capacity"), has_limit = r.Has("capacity_limit");
  if (has_capacity && has_limit)
    return keys.Error("capacity_limit", "give capacity or capacity_limit, not both");
  CLIO_ASSIGN_OR_RETURN(uint64_t capacity, keys.Size("capacity", c->capacity));
  CLIO_ASSIGN_OR_RETURN(uint64_t capacity_limit, keys.Size("capacity_limit", c->capacity));
  c->capacity = has_limit ? capacity_limit : capacity;

  CLIO_ASSIGN_OR_RETURN(std::string alloc, r.String("alloc", "auto"));
  if (!alloc.empty()) {
    Result<AllocPolicy> ap = ParseAllocPolicy(alloc);
    if (ap.ok()) {
      c->alloc = *ap;
    } else {
      // The seed: an unknown value falls back to auto with a warning.
      CLIO_LOG_WARN("{}", keys.Error("alloc", ap.status().message() + "; using auto").message());
      c->alloc = AllocPolicy::kAuto;
    }
  }

  CLIO_ASSIGN_OR_RETURN(uint64_t io_depth, keys.UInt("io_depth", c->io_depth));
  if (io_depth == 0 || io_depth > kMaxIoDepth)
    return keys.Error("io_depth", "must be between 1 and " + std::to_string(kMaxIoDepth));
  c->io_depth = static_cast<uint32_t>(io_depth);

  CLIO_ASSIGN_OR_RETURN(c->alignment, keys.Size("alignment", c->alignment));
  // 0 keeps the transport's default (memory devices lower 0 and 4096 to 512).
  if (c->alignment != 0 && (!std::has_single_bit(c->alignment) ||
                            c->alignment < BlockAllocator::kMinClass ||
                            c->alignment > BlockAllocator::kMaxClass)) {
    return keys.Error("alignment", "must be a power of two between 512 and 1048576 bytes, got " +
                                       std::to_string(c->alignment));
  }

  CLIO_ASSIGN_OR_RETURN(c->growth_unit, keys.Size("growth_unit", c->growth_unit));
  if (c->growth_unit == 0) return keys.Error("growth_unit", "must be greater than 0");
  CLIO_ASSIGN_OR_RETURN(c->populate_unit, keys.Size("populate_unit", c->populate_unit));

  CLIO_ASSIGN_OR_RETURN(c->alloc_log, r.String("alloc_log", c->alloc_log));
  if (!c->alloc_log.empty()) CLIO_RETURN_IF_ERROR(CheckFileLocation(keys, "alloc_log", c->alloc_log));

  CLIO_ASSIGN_OR_RETURN(std::string persistence, r.String("persistence_level", ""));
  if (!persistence.empty()) {
    Result<Persistence> p = ParsePersistence(persistence);
    if (!p.ok()) return keys.Error("persistence_level", p.status().message());
    const bool object = IsObjectMedium(c->type);
    const bool memory = IsMemoryMedium(c->type);
    if (memory && *p != Persistence::kVolatile) {
      return keys.Error("persistence_level", std::string(BdevTypeName(c->type)) +
                                                 " devices can only be volatile");
    }
    if (object && *p == Persistence::kVolatile) {
      return keys.Error("persistence_level", std::string(BdevTypeName(c->type)) +
                                                 " devices cannot be volatile");
    }
    c->persistence = *p;
  }

  if (const ConfigValue* perf = r.Child("perf_metrics"); perf != nullptr &&
                                                        perf->kind != ConfigValue::Kind::kNull) {
    PerfMetrics pm = c->perf.value_or(DefaultPerfMetrics(c->type));
    CLIO_RETURN_IF_ERROR(ParsePerfMetrics(keys, perf, r.file(), c->name, &pm));
    c->perf = pm;
  }

  CLIO_ASSIGN_OR_RETURN(uint64_t timeout, keys.UInt("request_timeout_ms", c->request_timeout_ms));
  if (timeout == 0 || timeout > 600000)
    return keys.Error("request_timeout_ms", "must be between 1 and 600000");
  c->request_timeout_ms = static_cast<uint32_t>(timeout);
  CLIO_ASSIGN_OR_RETURN(uint64_t budget, keys.UInt("retry_budget_ms", c->retry_budget_ms));
  if (budget > 3600000) return keys.Error("retry_budget_ms", "must be at most 3600000 (one hour)");
  c->retry_budget_ms = static_cast<uint32_t>(budget);

  if (IsObjectMedium(c->type)) {
    const std::string loc_key = r.Has("path") ? "path" : "pool_name";
    Result<ObjectLocation> loc = ParseObjectLocation(c->name, BdevTypeName(c->type));
    if (!loc.ok()) return keys.Error(loc_key, loc.status().message());
    if (c->alloc_log.empty()) {
      return keys.Error("alloc_log", "required for " + std::string(BdevTypeName(c->type)) +
                                         " tiers: a local file that keeps the allocator state "
                                         "of the bucket (e.g. ${CLIO_STATE_DIR}/tiers/" +
                                         loc->bucket + ".alloc_log)");
    }
  }

  if (IsFileMedium(c->type)) {
    // The location key is the caller's (pool_name or path); name it by what it holds.
    CLIO_RETURN_IF_ERROR(CheckFileLocation(keys, r.Has("path") ? "path" : "pool_name", c->name));
  }
  return Status::Ok();
}

}  // namespace clio
