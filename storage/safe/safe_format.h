// On-disk formats of the safe-bdev (internal to storage/safe/; documented in
// docs/safe-bdev.md): the chunk trailer written with every chunk on a member, and the
// superblock that records the array's geometry, its members and rebuild progress.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "storage/bdev.h"

namespace clio {

inline constexpr uint32_t kSafeFormatVersion = 1;

// --- chunk trailer ---
// A slot on a member is one chunk followed by its trailer. The trailer names the array, the
// stripe, the chunk's position in it and the device incarnation it was written for, and holds
// the chunk's CRC32C; a parity chunk's trailer also holds the CRC32C of every data chunk of the
// stripe (so a reconstructed chunk is checked too). A never-written slot's trailer is zeros.
struct ChunkTrailer {
  uint64_t stripe = 0;
  uint64_t incarnation = 0;
  uint16_t position = 0;
  uint32_t crc = 0;
  std::vector<uint32_t> data_crcs;  // parity chunks: k entries
};
// Trailer bytes for k data chunks with the device alignment `alignment`.
uint64_t TrailerBytes(uint32_t k, uint64_t alignment);
void EncodeTrailer(uint64_t array_id, const ChunkTrailer& t, char* out, uint64_t trailer_bytes);
enum class TrailerCheck { kValid, kBlank, kBad };
// Checks `trailer` against what the slot must hold and the chunk's bytes. Fills *t when valid.
// Zeros, or a sound trailer of another array or device incarnation, are kBlank (this array
// never wrote the slot); a torn or misdirected one, or a chunk whose CRC differs, is kBad.
TrailerCheck CheckTrailer(uint64_t array_id, std::string_view chunk, std::string_view trailer,
                          uint64_t stripe, uint16_t position, uint64_t incarnation, uint32_t k,
                          ChunkTrailer* t);

// --- superblock ---
struct SbDevice {
  std::string name;        // pool name when it was recorded
  uint64_t tier_id = 0;    // the member bdev's persistent id: how it is found again
  uint64_t incarnation = 0;  // random per assignment to a slot: stale trailers never match
  ExtentList extents;      // the member space the array allocated: stripes x slot bytes
};

struct SbSlot {
  SbDevice member;
  bool failed = false;
  std::string reason;
  bool has_target = false;  // a rebuild (or a copy before failure) onto `target` runs
  bool replacing = false;   // the copy is predictive: the member still works
  SbDevice target;
  uint64_t cursor = 0;      // stripes below it are durable on the target
};

struct Superblock {
  uint64_t array_id = 0;
  uint32_t k = 0, m = 0;
  uint64_t chunk_size = 0, slot_bytes = 0, stripes = 0, alignment = 0;
  std::vector<SbSlot> slots;
  std::vector<SbDevice> spares;
  std::vector<uint64_t> retired;  // tier ids of members replaced for good
};

std::string EncodeSuperblock(const Superblock& sb);
Result<Superblock> DecodeSuperblock(std::string_view bytes, const std::string& path);
// Atomic replace: "<path>.tmp", fsync, rename, fsync of the directory.
Status WriteSuperblock(const std::string& path, const Superblock& sb);
// NotFound when the file does not exist.
Result<Superblock> ReadSuperblock(const std::string& path);

}  // namespace clio
