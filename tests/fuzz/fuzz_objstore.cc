// libFuzzer target: what the object-store transports parse from outside the process. Pool
// names (config), endpoints (environment), query strings and percent-encoding (SigV4), and
// the Content-Range/body pairs of server answers. Each must give a value or an error, never a
// crash, and the round-trip properties below must hold.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "storage/objstore/http.h"
#include "storage/objstore/object_store.h"
#include "storage/objstore/sigv4.h"
#include "storage/objstore/store_base.h"

namespace {

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_objstore: property violated: %s\n", what);
    std::abort();
  }
}

uint64_t Take64(std::string_view& in) {
  uint64_t v = 0;
  for (int i = 0; i < 8 && !in.empty(); ++i) {
    v = v << 8 | static_cast<unsigned char>(in.front());
    in.remove_prefix(1);
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % 5;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (which) {
    case 0: {
      for (const char* scheme : {"s3", "gcs"}) {
        auto loc = clio::ParseObjectLocation(in, scheme);
        if (!loc.ok()) continue;
        Require(loc->bucket.size() >= 3 && loc->bucket.size() <= 63, "bucket name length");
        const std::string key = loc->Key("block_0");
        Require(key.size() >= 7 && key.compare(key.size() - 7, 7, "block_0") == 0, "key suffix");
      }
      break;
    }
    case 1: {
      auto e = clio::http::ParseEndpoint(in);
      if (e.ok()) Require(!e->host.empty() && e->port != 0, "endpoint host and port");
      break;
    }
    case 2: {
      const std::string once = clio::sigv4::CanonicalQuery(in);
      Require(clio::sigv4::CanonicalQuery(once) == once, "canonical query is idempotent");
      break;
    }
    case 3: {
      for (bool keep_slash : {false, true}) {
        const std::string enc = clio::sigv4::UriEncode(in, keep_slash);
        Require(clio::sigv4::UriDecode(enc) == in, "UriDecode(UriEncode(x)) == x");
      }
      break;
    }
    case 4: {
      const uint64_t offset = Take64(in) % 100000;
      const uint64_t len = Take64(in) % 100000 + 1;
      const size_t split = in.empty() ? 0 : static_cast<unsigned char>(in.front()) % (in.size());
      clio::http::Response r;
      r.status = (data[0] & 0x80) ? 206 : 200;
      r.headers.emplace_back("Content-Range", std::string(in.substr(0, split)));
      r.body = std::string(in.substr(split));
      std::string out(len, '\0');
      clio::Status s = clio::CopyRangedBody("fuzz", r, offset, len, out.data());
      if (s.ok()) {
        Require(r.body.find(out) != std::string::npos, "the bytes returned come from the body");
      }
      break;
    }
  }
  return 0;
}
