#include "storage/tier_header.h"

#include <xxhash.h>

#include "common/codec.h"

namespace clio {
namespace {
constexpr size_t kSummed = kTierHeaderSize - 8;
}  // namespace

std::string EncodeTierHeader(std::string_view magic, uint32_t version, const TierHeader& h) {
  Encoder enc;
  enc.PutRaw(magic.substr(0, 8));
  enc.Put<uint32_t>(version).Put<uint32_t>(0);
  enc.Put<uint64_t>(h.tier_id).Put<uint64_t>(h.alignment).Put<uint64_t>(h.created_ns);
  std::string& b = enc.buffer();
  enc.Put<uint64_t>(XXH3_64bits(b.data(), b.size()));
  return enc.Take();
}

Result<TierHeader> DecodeTierHeader(std::string_view bytes, std::string_view magic,
                                    uint32_t version, const std::string& what,
                                    std::string_view kind) {
  if (bytes.size() < kTierHeaderSize || bytes.substr(0, 8) != magic.substr(0, 8)) {
    return Corruption(what + ": bad magic (not a " + std::string(kind) + ")");
  }
  Decoder dec(bytes.substr(8, kTierHeaderSize - 8));
  uint32_t got_version = 0, reserved = 0;
  uint64_t sum = 0;
  TierHeader h;
  dec.Get(&got_version);
  dec.Get(&reserved);
  dec.Get(&h.tier_id);
  dec.Get(&h.alignment);
  dec.Get(&h.created_ns);
  dec.Get(&sum);
  if (sum != XXH3_64bits(bytes.data(), kSummed)) {
    return Corruption(what + ": header checksum mismatch");
  }
  if (got_version != version) {
    return Corruption(what + ": format version " + std::to_string(got_version) +
                      " is unknown (this build reads version " + std::to_string(version) + ")");
  }
  return h;
}

}  // namespace clio
