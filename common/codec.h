// Bounds-checked little-endian binary encoding for IPC frames and metadata values.
//
// Decoder never reads past its input and never allocates more than the input could hold, so a
// malformed or hostile message yields a Corruption status, not a crash or a huge allocation.
// Strings and byte arrays are a u32 length followed by the bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace clio {

class Encoder {
 public:
  template <typename T>
  requires std::is_integral_v<T> || std::is_enum_v<T> || std::is_floating_point_v<T>
  Encoder& Put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // hosts are little-endian (x86-64, arm64)
    buf_.append(b, sizeof(T));
    return *this;
  }
  Encoder& PutBytes(std::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    buf_.append(s.data(), s.size());
    return *this;
  }
  // Appends raw bytes with no length prefix (the reader must know the size).
  Encoder& PutRaw(std::string_view s) {
    buf_.append(s.data(), s.size());
    return *this;
  }
  std::string& buffer() { return buf_; }
  std::string Take() { return std::move(buf_); }

 private:
  std::string buf_;
};

class Decoder {
 public:
  explicit Decoder(std::string_view in) : in_(in) {}

  template <typename T>
  requires std::is_integral_v<T> || std::is_enum_v<T> || std::is_floating_point_v<T>
  bool Get(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return Fail();
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // Reads a length-prefixed byte string as a view into the input.
  bool GetBytes(std::string_view* out) {
    uint32_t n = 0;
    if (!Get(&n)) return false;
    if (in_.size() - pos_ < n) return Fail();
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool GetString(std::string* out) {
    std::string_view v;
    if (!GetBytes(&v)) return false;
    out->assign(v);
    return true;
  }
  bool GetRaw(size_t n, std::string_view* out) {
    if (in_.size() - pos_ < n) return Fail();
    *out = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }
  bool failed() const { return failed_; }
  // Ok when every Get succeeded and, if `exact`, all input was consumed.
  Status Finish(std::string_view what, bool exact = true) const {
    if (failed_) return Corruption(std::string(what) + ": message truncated");
    if (exact && pos_ != in_.size())
      return Corruption(std::string(what) + ": " + std::to_string(in_.size() - pos_) +
                        " unexpected trailing bytes");
    return Status::Ok();
  }

 private:
  bool Fail() {
    failed_ = true;
    pos_ = in_.size();
    return false;
  }
  std::string_view in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

// Big-endian fixed-width integers for ordered metadata keys.
inline void AppendBigEndian64(std::string* s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>((v >> (i * 8)) & 0xff));
}
inline uint64_t ReadBigEndian64(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < s.size(); ++i) v = (v << 8) | static_cast<uint8_t>(s[i]);
  return v;
}

}  // namespace clio
