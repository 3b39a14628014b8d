// The media table: every medium CLIO knows, and the answers derived from each one's kind.
#include "storage/media.h"

#include <strings.h>

#include <mutex>

#include "storage/bdev_base.h"
#include "storage/gpu.h"

namespace clio {
namespace {

Result<std::unique_ptr<Bdev>> OpenGpu(const BdevConfig& c) { return OpenGpuBdev(c, MakeGpuRuntime()); }

// Default figures order placement: hbm > ram > pinned > file > noop > object stores.
const Medium kTable[] = {
    {BdevType::kFile, "file", MediumKind::kFile, {2000, 1000, 100, 200, 200'000}, OpenFileBdev},
    {BdevType::kRam, "ram", MediumKind::kMemory, {10000, 10000, 2, 2, 5'000'000}, OpenRamBdev},
    {BdevType::kHbm, "hbm", MediumKind::kMemory, {20000, 20000, 1, 1, 10'000'000}, OpenGpu},
    {BdevType::kPinned, "pinned", MediumKind::kMemory, {8000, 8000, 3, 3, 4'000'000}, OpenGpu},
    {BdevType::kNoop, "noop", MediumKind::kMemory, {1000, 1000, 100, 100, 100'000}, OpenNoopBdev},
    {BdevType::kS3, "s3", MediumKind::kObject, {100, 100, 20'000, 50'000, 1'000}, OpenObjectBdev},
    {BdevType::kGcs, "gcs", MediumKind::kObject, {100, 100, 20'000, 50'000, 1'000}, OpenObjectBdev},
};

// Media added at run time; never removed, so pointers into it stay valid (a deque would do;
// a vector of unique_ptr keeps the rows where they are).
std::mutex g_mu;
std::vector<std::unique_ptr<Medium>>& Registered() {
  static auto* v = new std::vector<std::unique_ptr<Medium>>();
  return *v;
}

}  // namespace

const Medium* FindMedium(BdevType t) {
  for (const Medium& m : kTable)
    if (m.type == t) return &m;
  std::lock_guard l(g_mu);
  for (const auto& m : Registered())
    if (m->type == t) return m.get();
  return nullptr;
}

const Medium* FindMedium(std::string_view name) {
  auto same = [&](std::string_view n) { return n.size() == name.size() && strncasecmp(n.data(), name.data(), n.size()) == 0; };
  for (const Medium& m : kTable)
    if (same(m.name)) return &m;
  std::lock_guard l(g_mu);
  for (const auto& m : Registered())
    if (same(m->name)) return m.get();
  return nullptr;
}

std::vector<const Medium*> AllMedia() {
  std::vector<const Medium*> out;
  for (const Medium& m : kTable) out.push_back(&m);
  std::lock_guard l(g_mu);
  for (const auto& m : Registered()) out.push_back(m.get());
  return out;
}

Status RegisterMedium(const Medium& m) {
  if (m.name.empty() || m.open == nullptr) return InvalidArgument("a medium needs a name and an open function");
  if (FindMedium(m.type) != nullptr)
    return Status(Code::kAlreadyExists, "medium type " + std::to_string(static_cast<int>(m.type)) + " is taken");
  if (FindMedium(m.name) != nullptr)
    return Status(Code::kAlreadyExists, "medium name '" + std::string(m.name) + "' is taken");
  std::lock_guard l(g_mu);
  Registered().push_back(std::make_unique<Medium>(m));
  return Status::Ok();
}

bool IsMemoryMedium(BdevType t) {
  const Medium* m = FindMedium(t);
  return m != nullptr && m->kind == MediumKind::kMemory;
}

bool IsObjectMedium(BdevType t) {
  const Medium* m = FindMedium(t);
  return m != nullptr && m->kind == MediumKind::kObject;
}

bool IsFileMedium(BdevType t) {
  const Medium* m = FindMedium(t);
  return m != nullptr && m->kind == MediumKind::kFile;
}

bool LeavesFile(BdevType t) { return IsFileMedium(t); }

Persistence DefaultPersistence(BdevType t) {
  return IsMemoryMedium(t) ? Persistence::kVolatile : Persistence::kTemporary;
}

std::string LocalStateFile(const BdevConfig& c) {
  const Medium* m = FindMedium(c.type);
  if (m == nullptr) return {};
  switch (m->kind) {
    case MediumKind::kFile: return c.name;
    case MediumKind::kObject: return c.alloc_log;
    case MediumKind::kMemory: return {};
  }
  return {};
}

std::string NodeTierName(const std::string& path, BdevType type, uint32_t node) {
  const std::string n = std::to_string(node);
  if (!IsObjectMedium(type)) return path + "_node" + n;
  // bucket, bucket/prefix, s3://bucket/prefix (ParseObjectLocation).
  const size_t scheme = path.find("://");
  const size_t start = scheme == std::string::npos ? 0 : scheme + 3;
  std::string p = path;
  while (p.size() > start && p.back() == '/') p.pop_back();
  if (p.find('/', start) == std::string::npos) return p + "/node" + n;
  return p + "_node" + n;
}

}  // namespace clio
