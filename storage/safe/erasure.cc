#include "storage/safe/erasure.h"

#include <isa-l/crc.h>
#include <isa-l/erasure_code.h>

#include <algorithm>
#include <climits>
#include <string>

namespace clio {

uint32_t Crc32c(const void* data, uint64_t n) {
  // ISA-L keeps the raw register: start from all ones and invert at the end (RFC 3720).
  uint32_t crc = 0xffffffffu;
  const auto* p = static_cast<const unsigned char*>(data);
  // crc32_iscsi takes an int length: feed it at most 1 GiB at a time.
  while (n > 0) {
    const int step = static_cast<int>(std::min<uint64_t>(n, 1u << 30));
    crc = crc32_iscsi(const_cast<unsigned char*>(p), step, crc);
    p += step;
    n -= static_cast<uint64_t>(step);
  }
  return ~crc;
}

Result<ErasureCode> ErasureCode::Make(int k, int m) {
  if (k < 1 || m < 1 || k + m > kMaxChunks) {
    return InvalidArgument("erasure code " + std::to_string(k) + "+" + std::to_string(m) +
                           ": needs k >= 1, m >= 1 and k + m <= 255 (GF(2^8))");
  }
  return ErasureCode(k, m);
}

ErasureCode::ErasureCode(int k, int m) : k_(k), m_(m), matrix_((k + m) * k), parity_tables_(32 * k * m) {
  gf_gen_cauchy1_matrix(matrix_.data(), k + m, k);
  ec_init_tables(k, m, &matrix_[k * k], parity_tables_.data());
}

void ErasureCode::Encode(uint64_t len, const uint8_t* const* data, uint8_t* const* parity) const {
  ec_encode_data(static_cast<int>(len), k_, m_, const_cast<unsigned char*>(parity_tables_.data()),
                 const_cast<unsigned char**>(data), const_cast<unsigned char**>(parity));
}

Status ErasureCode::Reconstruct(uint64_t len, const std::vector<int>& sources, const uint8_t* const* src,
                                const std::vector<int>& wanted, uint8_t* const* out) const {
  const int n = k_ + m_;
  if (static_cast<int>(sources.size()) != k_ || wanted.empty() || static_cast<int>(wanted.size()) > m_)
    return InvalidArgument("erasure reconstruct: needs exactly k sources and 1..m wanted chunks");
  std::vector<bool> seen(n, false);
  for (int p : sources) {
    if (p < 0 || p >= n || seen[p]) return InvalidArgument("erasure reconstruct: bad source position");
    seen[p] = true;
  }
  for (int p : wanted)
    if (p < 0 || p >= n || seen[p]) return InvalidArgument("erasure reconstruct: bad wanted position");
  if (len > static_cast<uint64_t>(INT_MAX)) return InvalidArgument("erasure reconstruct: chunk too long");

  // The rows of the encode matrix for the sources, inverted, map the sources back to the data.
  std::vector<uint8_t> b(k_ * k_), inv(k_ * k_);
  for (int i = 0; i < k_; ++i)
    std::copy_n(&matrix_[sources[i] * k_], k_, &b[i * k_]);
  if (gf_invert_matrix(b.data(), inv.data(), k_) != 0)
    return Internal("erasure reconstruct: source rows are singular");
  // A wanted data chunk is its row of the inverse; a wanted parity chunk is its encode row
  // times the inverse.
  std::vector<uint8_t> rows(wanted.size() * k_, 0);
  for (size_t w = 0; w < wanted.size(); ++w) {
    const int p = wanted[w];
    if (p < k_) {
      std::copy_n(&inv[p * k_], k_, &rows[w * k_]);
      continue;
    }
    for (int j = 0; j < k_; ++j) {
      uint8_t s = 0;
      for (int i = 0; i < k_; ++i) s ^= gf_mul(matrix_[p * k_ + i], inv[i * k_ + j]);
      rows[w * k_ + j] = s;
    }
  }
  std::vector<uint8_t> tables(32 * k_ * wanted.size());
  ec_init_tables(k_, static_cast<int>(wanted.size()), rows.data(), tables.data());
  ec_encode_data(static_cast<int>(len), k_, static_cast<int>(wanted.size()), tables.data(),
                 const_cast<unsigned char**>(src), const_cast<unsigned char**>(out));
  return Status::Ok();
}

}  // namespace clio
