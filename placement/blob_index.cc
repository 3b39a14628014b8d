#include "placement/blob_index.h"

#include <algorithm>

#include "common/codec.h"

namespace clio {

void RangeSet::Add(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  std::vector<Range> out;
  out.reserve(ranges_.size() + 1);
  bool placed = false;
  for (const Range& r : ranges_) {
    if (r.end < begin) {
      out.push_back(r);
    } else if (end < r.begin) {
      if (!placed) out.push_back({begin, end}), placed = true;
      out.push_back(r);
    } else {  // overlapping or adjacent: merge
      begin = std::min(begin, r.begin);
      end = std::max(end, r.end);
    }
  }
  if (!placed) out.push_back({begin, end});
  ranges_ = std::move(out);
}

void RangeSet::Subtract(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  std::vector<Range> out;
  for (const Range& r : ranges_) {
    if (r.end <= begin || r.begin >= end) {
      out.push_back(r);
      continue;
    }
    if (r.begin < begin) out.push_back({r.begin, begin});
    if (r.end > end) out.push_back({end, r.end});
  }
  ranges_ = std::move(out);
}

RangeSet RangeSet::Intersect(uint64_t begin, uint64_t end) const {
  RangeSet out;
  for (const Range& r : ranges_) {
    uint64_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b < e) out.ranges_.push_back({b, e});
  }
  return out;
}

RangeSet RangeSet::Minus(const RangeSet& other) const {
  RangeSet out = *this;
  for (const Range& r : other.ranges_) out.Subtract(r.begin, r.end);
  return out;
}

uint64_t RangeSet::bytes() const {
  uint64_t n = 0;
  for (const Range& r : ranges_) n += r.end - r.begin;
  return n;
}

std::string BlobKey(uint64_t tag, uint64_t blob) {
  std::string k(kBlobKeyPrefix);
  AppendBigEndian64(&k, tag);
  AppendBigEndian64(&k, blob);
  return k;
}

std::string BlobTagPrefix(uint64_t tag) {
  std::string k(kBlobKeyPrefix);
  AppendBigEndian64(&k, tag);
  return k;
}

bool ParseBlobKey(std::string_view key, uint64_t* tag, uint64_t* blob) {
  if (key.size() != kBlobKeyPrefix.size() + 16 || key.substr(0, 2) != kBlobKeyPrefix) return false;
  *tag = ReadBigEndian64(key.substr(2, 8));
  *blob = ReadBigEndian64(key.substr(10, 8));
  return true;
}

std::string EncodeBlobEntry(const BlobEntry& e) {
  Encoder out;
  out.Put<uint8_t>(kBlobIndexVersion).Put<uint32_t>(static_cast<uint32_t>(e.copies.size()));
  for (const BlobCopy& c : e.copies) {
    out.Put<uint64_t>(c.tier_id).Put<uint8_t>(static_cast<uint8_t>(c.state)).Put<uint64_t>(c.generation);
    out.Put<uint32_t>(static_cast<uint32_t>(c.extents.size()));
    for (const Extent& x : c.extents) out.Put<uint64_t>(x.offset).Put<uint64_t>(x.size);
    out.Put<uint32_t>(static_cast<uint32_t>(c.written.ranges().size()));
    for (const auto& r : c.written.ranges()) out.Put<uint64_t>(r.begin).Put<uint64_t>(r.end);
  }
  return out.Take();
}

Result<BlobEntry> DecodeBlobEntry(std::string_view bytes) {
  Decoder in(bytes);
  uint8_t version = 0;
  uint32_t ncopies = 0;
  in.Get(&version);
  if (!in.failed() && version != kBlobIndexVersion)
    return Corruption("blob index entry has unknown format version " + std::to_string(version));
  in.Get(&ncopies);
  BlobEntry e;
  // Each copy takes at least 25 bytes; a count larger than the input allows is corruption.
  if (ncopies > in.remaining() / 25 + 1) return Corruption("blob index entry: impossible copy count");
  for (uint32_t i = 0; i < ncopies && !in.failed(); ++i) {
    BlobCopy c;
    uint8_t state = 0;
    uint32_t n = 0;
    in.Get(&c.tier_id);
    in.Get(&state);
    in.Get(&c.generation);
    if (state > 1) return Corruption("blob index entry: bad copy state");
    c.state = static_cast<CopyState>(state);
    in.Get(&n);
    if (n > in.remaining() / 16) return Corruption("blob index entry: impossible extent count");
    for (uint32_t j = 0; j < n; ++j) {
      Extent x;
      in.Get(&x.offset);
      in.Get(&x.size);
      c.extents.push_back(x);
    }
    in.Get(&n);
    if (n > in.remaining() / 16) return Corruption("blob index entry: impossible range count");
    uint64_t prev_end = 0;
    for (uint32_t j = 0; j < n; ++j) {
      uint64_t b = 0, en = 0;
      in.Get(&b);
      in.Get(&en);
      if (b >= en || (j > 0 && b <= prev_end) || en > TotalSize(c.extents))
        return Corruption("blob index entry: bad written range");
      prev_end = en;
      c.written.mutable_ranges().push_back({b, en});
    }
    e.copies.push_back(std::move(c));
  }
  CLIO_RETURN_IF_ERROR(in.Finish("blob index entry"));
  return e;
}

}  // namespace clio
