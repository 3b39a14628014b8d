#include "storage/safe/safe_format.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/codec.h"
#include "storage/io.h"
#include "storage/safe/erasure.h"
#include "storage/sys_util.h"

namespace clio {
namespace {

constexpr char kTrailerMagic[8] = {'C', 'L', 'I', 'O', 'C', 'H', 'N', 'K'};
constexpr char kSbMagic[8] = {'C', 'L', 'I', 'O', 'S', 'A', 'F', 'E'};
constexpr uint64_t kTrailerFixed = 8 + 8 + 8 + 8 + 2 + 4 + 2;  // magic .. crc count
constexpr uint32_t kMaxSbDevices = 4096;
constexpr uint32_t kMaxSbExtents = 1u << 26;

void PutDevice(Encoder& e, const SbDevice& d) {
  e.PutBytes(d.name).Put<uint64_t>(d.tier_id).Put<uint64_t>(d.incarnation);
  e.Put<uint32_t>(static_cast<uint32_t>(d.extents.size()));
  for (const Extent& x : d.extents) e.Put<uint64_t>(x.offset).Put<uint64_t>(x.size);
}

bool GetDevice(Decoder& d, SbDevice* out) {
  uint32_t n = 0;
  if (!d.GetString(&out->name) || !d.Get(&out->tier_id) || !d.Get(&out->incarnation) || !d.Get(&n)) return false;
  if (n > kMaxSbExtents || d.remaining() < static_cast<uint64_t>(n) * 16) return false;
  out->extents.resize(n);
  for (Extent& x : out->extents)
    if (!d.Get(&x.offset) || !d.Get(&x.size)) return false;
  return true;
}

}  // namespace

uint64_t TrailerBytes(uint32_t k, uint64_t alignment) {
  const uint64_t need = kTrailerFixed + 4ull * k + 4;
  return RoundUpTo(need, std::max<uint64_t>(512, alignment));
}

void EncodeTrailer(uint64_t array_id, const ChunkTrailer& t, char* out, uint64_t trailer_bytes) {
  std::memset(out, 0, trailer_bytes);
  char* p = out;
  auto put = [&p](const void* v, size_t n) {
    std::memcpy(p, v, n);
    p += n;
  };
  put(kTrailerMagic, 8);
  put(&array_id, 8);
  put(&t.stripe, 8);
  put(&t.incarnation, 8);
  put(&t.position, 2);
  put(&t.crc, 4);
  const uint16_t n = static_cast<uint16_t>(t.data_crcs.size());
  put(&n, 2);
  for (uint32_t c : t.data_crcs) put(&c, 4);
  const uint32_t crc = Crc32c(out, trailer_bytes - 4);
  std::memcpy(out + trailer_bytes - 4, &crc, 4);
}

TrailerCheck CheckTrailer(uint64_t array_id, std::string_view chunk, std::string_view trailer, uint64_t stripe,
                          uint16_t position, uint64_t incarnation, uint32_t k, ChunkTrailer* t) {
  if (trailer.size() < kTrailerFixed + 4) return TrailerCheck::kBad;
  if (std::all_of(trailer.begin(), trailer.end(), [](char c) { return c == 0; })) return TrailerCheck::kBlank;
  uint32_t tcrc = 0;
  std::memcpy(&tcrc, trailer.data() + trailer.size() - 4, 4);
  if (tcrc != Crc32c(trailer.data(), trailer.size() - 4)) return TrailerCheck::kBad;
  const char* p = trailer.data();
  auto get = [&p](void* v, size_t n) {
    std::memcpy(v, p, n);
    p += n;
  };
  char magic[8];
  uint64_t id = 0;
  uint16_t n = 0;
  get(magic, 8);
  get(&id, 8);
  get(&t->stripe, 8);
  get(&t->incarnation, 8);
  get(&t->position, 2);
  get(&t->crc, 4);
  get(&n, 2);
  if (std::memcmp(magic, kTrailerMagic, 8) != 0) return TrailerCheck::kBad;
  // Left by another array, or by this slot's device before it was (re)assigned: nothing this
  // array wrote, so it counts as never written.
  if (id != array_id || t->incarnation != incarnation) return TrailerCheck::kBlank;
  if (t->stripe != stripe || t->position != position || (n != 0 && n != k) ||
      kTrailerFixed + 4ull * n + 4 > trailer.size())
    return TrailerCheck::kBad;
  t->data_crcs.resize(n);
  for (uint32_t& c : t->data_crcs) get(&c, 4);
  if (t->crc != Crc32c(chunk.data(), chunk.size())) return TrailerCheck::kBad;
  return TrailerCheck::kValid;
}

std::string EncodeSuperblock(const Superblock& sb) {
  Encoder e;
  e.PutRaw(std::string_view(kSbMagic, 8)).Put<uint32_t>(kSafeFormatVersion);
  e.Put<uint64_t>(sb.array_id).Put<uint32_t>(sb.k).Put<uint32_t>(sb.m);
  e.Put<uint64_t>(sb.chunk_size).Put<uint64_t>(sb.slot_bytes).Put<uint64_t>(sb.stripes).Put<uint64_t>(sb.alignment);
  e.Put<uint32_t>(static_cast<uint32_t>(sb.slots.size()));
  for (const SbSlot& s : sb.slots) {
    PutDevice(e, s.member);
    e.Put<uint8_t>(s.failed).PutBytes(s.reason).Put<uint8_t>(s.has_target).Put<uint8_t>(s.replacing);
    PutDevice(e, s.target);
    e.Put<uint64_t>(s.cursor);
  }
  e.Put<uint32_t>(static_cast<uint32_t>(sb.spares.size()));
  for (const SbDevice& d : sb.spares) PutDevice(e, d);
  e.Put<uint32_t>(static_cast<uint32_t>(sb.retired.size()));
  for (uint64_t id : sb.retired) e.Put<uint64_t>(id);
  const uint32_t crc = Crc32c(e.buffer().data(), e.buffer().size());
  e.Put<uint32_t>(crc);
  return e.Take();
}

Result<Superblock> DecodeSuperblock(std::string_view bytes, const std::string& path) {
  const std::string what = "safe-bdev superblock " + path;
  if (bytes.size() < 16) return Corruption(what + ": truncated (" + std::to_string(bytes.size()) + " bytes)");
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  if (crc != Crc32c(bytes.data(), bytes.size() - 4)) return Corruption(what + ": checksum mismatch");
  Decoder d(bytes.substr(0, bytes.size() - 4));
  std::string_view magic;
  uint32_t version = 0, nslots = 0, nspares = 0, nretired = 0;
  Superblock sb;
  d.GetRaw(8, &magic);
  if (magic != std::string_view(kSbMagic, 8)) return Corruption(what + ": not a safe-bdev superblock (bad magic)");
  d.Get(&version);
  if (version != kSafeFormatVersion)
    return Corruption(what + ": unknown version " + std::to_string(version) + " (this build reads " +
                      std::to_string(kSafeFormatVersion) + ")");
  d.Get(&sb.array_id);
  d.Get(&sb.k);
  d.Get(&sb.m);
  d.Get(&sb.chunk_size);
  d.Get(&sb.slot_bytes);
  d.Get(&sb.stripes);
  d.Get(&sb.alignment);
  d.Get(&nslots);
  if (nslots > kMaxSbDevices || nslots != sb.k + sb.m) return Corruption(what + ": bad member count");
  sb.slots.resize(nslots);
  for (SbSlot& s : sb.slots) {
    uint8_t failed = 0, has_target = 0, replacing = 0;
    if (!GetDevice(d, &s.member)) break;
    d.Get(&failed);
    d.GetString(&s.reason);
    d.Get(&has_target);
    d.Get(&replacing);
    if (!GetDevice(d, &s.target)) break;
    d.Get(&s.cursor);
    s.failed = failed != 0;
    s.has_target = has_target != 0;
    s.replacing = replacing != 0;
  }
  d.Get(&nspares);
  if (nspares > kMaxSbDevices) return Corruption(what + ": bad spare count");
  sb.spares.resize(nspares);
  for (SbDevice& s : sb.spares)
    if (!GetDevice(d, &s)) break;
  d.Get(&nretired);
  if (nretired > kMaxSbDevices) return Corruption(what + ": bad retired count");
  sb.retired.resize(nretired);
  for (uint64_t& id : sb.retired) d.Get(&id);
  CLIO_RETURN_IF_ERROR(d.Finish(what));
  if (sb.k == 0 || sb.m == 0 || sb.k + sb.m > 255 || sb.chunk_size == 0 || sb.slot_bytes <= sb.chunk_size ||
      sb.stripes == 0)
    return Corruption(what + ": bad geometry");
  for (const SbSlot& s : sb.slots)
    if (s.cursor > sb.stripes) return Corruption(what + ": a rebuild cursor is past the last stripe");
  return sb;
}

Status WriteSuperblock(const std::string& path, const Superblock& sb) {
  const std::string tmp = path + ".tmp";
  IoOptions o;
  o.backend = IoBackend::kPosix;
  CLIO_ASSIGN_OR_RETURN(auto f, OpenIoFile(tmp, o));
  const std::string bytes = EncodeSuperblock(sb);
  CLIO_RETURN_IF_ERROR(f->Truncate(0));
  CLIO_RETURN_IF_ERROR(f->Write(0, bytes));
  CLIO_RETURN_IF_ERROR(f->Sync());
  f.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    return IoError("safe-bdev superblock " + path + ": rename: " + std::strerror(errno));
  return SyncParentDir(path);
}

Result<Superblock> ReadSuperblock(const std::string& path) {
  if (::access(path.c_str(), F_OK) != 0) return NotFound("safe-bdev superblock " + path + " does not exist");
  IoOptions o;
  o.backend = IoBackend::kPosix;
  o.create = false;
  CLIO_ASSIGN_OR_RETURN(auto f, OpenIoFile(path, o));
  CLIO_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  if (size > (1ull << 31)) return Corruption("safe-bdev superblock " + path + ": too large");
  std::string bytes(size, '\0');
  CLIO_RETURN_IF_ERROR(f->Read(0, size, bytes.data()));
  return DecodeSuperblock(bytes, path);
}

}  // namespace clio
