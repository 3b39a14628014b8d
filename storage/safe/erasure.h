// Reed-Solomon erasure coding over GF(2^8) and CRC32C, both from ISA-L (libisal). The only
// code that includes ISA-L's headers; safe_bdev.cc sees this interface.
//
// A stripe has k data chunks and m parity chunks (positions 0..k-1 data, k..k+m-1 parity) of
// one length. The code is systematic with a Cauchy matrix, so any k of the k+m chunks rebuild
// the others (k + m <= 255).
//
// Thread safety: an ErasureCode is immutable after construction; call it from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace clio {

// CRC32C (Castagnoli, the iSCSI polynomial) of `n` bytes, hardware-accelerated where the CPU
// has it.
uint32_t Crc32c(const void* data, uint64_t n);

class ErasureCode {
 public:
  static constexpr int kMaxChunks = 255;  // GF(2^8)

  // InvalidArgument unless k >= 1, m >= 1 and k + m <= 255.
  static Result<ErasureCode> Make(int k, int m);

  int k() const { return k_; }
  int m() const { return m_; }

  // Computes the m parity chunks from the k data chunks; every pointer covers `len` bytes.
  void Encode(uint64_t len, const uint8_t* const* data, uint8_t* const* parity) const;

  // Rebuilds the chunks at `wanted` positions from the chunks at `sources` (exactly k distinct
  // positions, none of them wanted). `src[i]` holds position sources[i]; `out[j]` receives
  // position wanted[j]. InvalidArgument on bad positions.
  Status Reconstruct(uint64_t len, const std::vector<int>& sources, const uint8_t* const* src,
                     const std::vector<int>& wanted, uint8_t* const* out) const;

 private:
  ErasureCode(int k, int m);

  int k_ = 0;
  int m_ = 0;
  std::vector<uint8_t> matrix_;        // (k+m) x k encode matrix, identity on top
  std::vector<uint8_t> parity_tables_;  // ec_init_tables of the m parity rows
};

}  // namespace clio
