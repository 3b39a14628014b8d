#include <doctest/doctest.h>

#include "placement/blob_index.h"

using namespace clio;

TEST_CASE("RangeSet add merges overlapping and adjacent ranges") {
  RangeSet r;
  r.Add(10, 20);
  r.Add(30, 40);
  r.Add(20, 25);  // adjacent to the first
  CHECK(r.ranges() == std::vector<RangeSet::Range>{{10, 25}, {30, 40}});
  r.Add(0, 100);
  CHECK(r.ranges() == std::vector<RangeSet::Range>{{0, 100}});
  r.Subtract(40, 60);
  CHECK(r.ranges() == std::vector<RangeSet::Range>{{0, 40}, {60, 100}});
  CHECK(r.bytes() == 80);
  r.ClipTo(70);
  CHECK(r.ranges() == std::vector<RangeSet::Range>{{0, 40}, {60, 70}});
  CHECK(r.Intersect(30, 65).ranges() == std::vector<RangeSet::Range>{{30, 40}, {60, 65}});
  RangeSet o;
  o.Add(35, 62);
  CHECK(r.Minus(o).ranges() == std::vector<RangeSet::Range>{{0, 35}, {62, 70}});
  r.Add(5, 5);  // empty: no change
  CHECK(r.max_end() == 70);
}

TEST_CASE("blob keys sort by tag then blob id") {
  CHECK(BlobKey(1, 255) < BlobKey(1, 256));
  CHECK(BlobKey(1, 999) < BlobKey(2, 0));
  uint64_t t = 0, b = 0;
  CHECK(ParseBlobKey(BlobKey(7, 9), &t, &b));
  CHECK(t == 7);
  CHECK(b == 9);
  CHECK(BlobKey(7, 9).rfind(BlobTagPrefix(7), 0) == 0);
  CHECK_FALSE(ParseBlobKey("b/short", &t, &b));
}

TEST_CASE("blob entries round trip and corrupt ones are refused") {
  BlobEntry e;
  BlobCopy ram;
  ram.tier_id = 11;
  ram.state = CopyState::kDirty;
  ram.generation = 5;
  ram.extents = {{0, 4096}, {8192, 4096}};
  ram.written.Add(100, 5000);
  BlobCopy file;
  file.tier_id = 22;
  file.generation = 3;
  file.extents = {{1 << 20, 1 << 20}};
  file.written.Add(0, 1 << 20);
  e.copies = {ram, file};
  std::string bytes = EncodeBlobEntry(e);
  auto d = DecodeBlobEntry(bytes);
  REQUIRE(d.ok());
  CHECK(*d == e);
  CHECK(d->size() == (1u << 20));

  for (size_t cut = 0; cut < bytes.size(); ++cut)
    CHECK_FALSE(DecodeBlobEntry(std::string_view(bytes).substr(0, cut)).ok());
  std::string bad_version = bytes;
  bad_version[0] = 9;
  auto v = DecodeBlobEntry(bad_version);
  CHECK(v.status().code() == Code::kCorruption);
  CHECK(v.status().message().find("version 9") != std::string::npos);
  // A written range beyond the copy's extents is corruption, not a read past the device.
  BlobEntry over = e;
  over.copies[0].written.Add(0, 100000);
  CHECK_FALSE(DecodeBlobEntry(EncodeBlobEntry(over)).ok());
  std::string trailing = bytes + "x";
  CHECK_FALSE(DecodeBlobEntry(trailing).ok());
}
