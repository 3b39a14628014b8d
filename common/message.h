// Typed messages: each request and reply of a pool protocol is a struct that lists its fields
// once, in wire order, in a static `Fields(self, visit)`. One list serves encoding and decoding,
// on both sides, so a field cannot be added to one and forgotten in the other.
//
//   struct Write {
//     static constexpr BdevMethod kMethod = BdevMethod::kWrite;  // requests only
//     static constexpr const char* kName = "Write";               // names decode errors
//     using Reply = WriteReply;                                   // requests only
//     WireExtents extents; uint64_t offset = 0; std::string_view data;
//     template <class S, class F> static void Fields(S& s, F&& f) { f(s.extents); f(s.offset); f(s.data); }
//   };
//
// Field types: integers, enums and floating point (fixed width, little-endian); std::string
// and std::string_view (u32 length, bytes: a decoded view borrows the payload); std::vector<T>
// (u32 count, elements); Trailing<T>; any struct with its own `Fields`; and any other type T
// with `void WireEncode(Encoder&, const T&)` and `Status WireDecode(Decoder&, T&)` found by
// argument-dependent lookup (a domain type's codec stays beside the type).
//
// Decoding is bounds-checked like Decoder: a truncated payload, trailing bytes or a count the
// payload cannot hold is Corruption naming the message; a field codec's own refusal keeps its
// code. Nothing a payload says makes the reader allocate much more than the payload's size.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/codec.h"
#include "common/status.h"

// The head of a request type: its method (`Enum::k<Method>`), its name in errors (`prefix`
// then the method), its reply, whether a client may send it again after a lost reply and who
// may call it (a CallerClass, daemon/caller.h). Requests borrow from their payload.
#define CLIO_WIRE_REQUEST(Enum, Method, prefix, ReplyType, idempotent, caller) \
  static constexpr Enum kMethod = Enum::k##Method;                              \
  static constexpr const char* kName = prefix #Method;                          \
  static constexpr bool kBorrows = true;                                        \
  static constexpr bool kIdempotent = idempotent;                               \
  static constexpr auto kCaller = caller;                                       \
  using Reply = ReplyType

namespace clio::wire {

// A field sent only when it is not its zero value, and read only when bytes are left: added
// at the end of a message after peers without it shipped (their messages still decode).
template <class T>
struct Trailing {
  T value{};
};

// The rest of the message, unframed: the last field of a request whose body is a document of
// its own (a tier spec). Decoded as a view into the payload.
struct Rest {
  std::string_view bytes;
};

// A reply that is the payload itself, no length (file bytes, JSON text).
struct Raw {
  static constexpr const char* kName = "raw reply";
  std::string bytes;
};

struct Empty {
  static constexpr const char* kName = "empty reply";
  template <class S, class F> static void Fields(S&, F&&) {}
};

namespace detail {
struct AnyField {
  template <class X> void operator()(X&) const {}
};
template <class T> struct IsVector : std::false_type {};
template <class T, class A> struct IsVector<std::vector<T, A>> : std::true_type {};
template <class T> struct IsTrailing : std::false_type {};
template <class T> struct IsTrailing<Trailing<T>> : std::true_type {};
template <class T>
constexpr bool kScalar = std::is_integral_v<T> || std::is_floating_point_v<T>;
// Fields whose every bit pattern is not a value: sent as a u8 and checked where decoded.
template <class T>
constexpr bool kUnchecked = std::is_same_v<T, bool> || std::is_enum_v<T>;
template <class T>
constexpr bool kText = std::is_same_v<T, std::string> || std::is_same_v<T, std::string_view>;
}  // namespace detail

template <class T>
concept HasFields = requires(T& t, detail::AnyField f) { T::Fields(t, f); };

// The fewest bytes a vector element takes on the wire: sizeof a scalar, 4 for bytes, a
// type's own `kMinWireSize` or `constexpr size_t WireMinSize(const T*)` (found by lookup on
// the type), else 1 (every field takes at least a byte).
template <class T>
constexpr size_t MinWireSize() {
  if constexpr (requires { T::kMinWireSize; }) static_assert(T::kMinWireSize > 0, "kMinWireSize must be > 0");
  if constexpr (detail::kScalar<T>) return sizeof(T);
  else if constexpr (detail::kText<T> || detail::IsVector<T>::value) return sizeof(uint32_t);
  else if constexpr (requires { T::kMinWireSize; }) return T::kMinWireSize;
  else if constexpr (requires(const T* p) { WireMinSize(p); }) return WireMinSize(static_cast<const T*>(nullptr));
  else return 1;
}

class FieldWriter {
 public:
  explicit FieldWriter(Encoder* e) : e_(e) {}
  template <class T>
  void operator()(const T& v) {
    static_assert(!detail::kUnchecked<T>, "a bool or enum field: send a u8 and check its range in a codec");
    if constexpr (detail::kScalar<T>) {
      e_->Put(v);
    } else if constexpr (detail::kText<T>) {
      e_->PutBytes(v);
    } else if constexpr (std::is_same_v<T, Rest>) {
      e_->PutRaw(v.bytes);
    } else if constexpr (detail::IsTrailing<T>::value) {
      if (v.value != decltype(v.value){}) (*this)(v.value);
    } else if constexpr (detail::IsVector<T>::value) {
      e_->Put<uint32_t>(static_cast<uint32_t>(v.size()));
      for (const auto& x : v) (*this)(x);
    } else if constexpr (HasFields<T>) {
      T::Fields(v, *this);
    } else {
      WireEncode(*e_, v);
    }
  }

 private:
  Encoder* e_;
};

// A message whose fields may be views into the payload it was decoded from (std::string_view,
// Rest) says so with `static constexpr bool kBorrows = true`; requests do (a write's data is
// never copied to decode it). Decoding one from a string about to die is a compile error, and
// so is a view field in a message that does not borrow (a reply outliving its buffer).
template <class M>
constexpr bool Borrows() {
  if constexpr (requires { M::kBorrows; }) return M::kBorrows;
  else return false;
}
template <class M>
constexpr bool kBorrows = Borrows<M>();

template <bool kMayBorrow>
class FieldReader {
 public:
  explicit FieldReader(Decoder* d) : d_(d) {}
  template <class T>
  void operator()(T& v) {
    static_assert(kMayBorrow || !(std::is_same_v<T, std::string_view> || std::is_same_v<T, Rest>),
                  "a view field in a message without kBorrows: its bytes would outlive their buffer");
    if (!status_.ok() || d_->failed()) return;
    if constexpr (detail::kScalar<T>) {
      d_->Get(&v);
    } else if constexpr (std::is_same_v<T, std::string_view>) {
      d_->GetBytes(&v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      d_->GetString(&v);
    } else if constexpr (std::is_same_v<T, Rest>) {
      d_->GetRaw(d_->remaining(), &v.bytes);
    } else if constexpr (detail::IsTrailing<T>::value) {
      if (d_->remaining() > 0) (*this)(v.value);
    } else if constexpr (detail::IsVector<T>::value) {
      uint32_t n = 0;
      if (!d_->Get(&n)) return;
      using E = typename T::value_type;
      if (n > d_->remaining() / MinWireSize<E>()) {
        std::string_view rest;
        d_->GetRaw(d_->remaining() + 1, &rest);  // fails the decoder: truncated
        return;
      }
      v.resize(n);
      for (E& x : v) {
        if (d_->failed() || !status_.ok()) break;
        (*this)(x);
      }
    } else if constexpr (HasFields<T>) {
      T::Fields(v, *this);
    } else {
      Status s = WireDecode(*d_, v);
      if (!s.ok()) status_ = std::move(s);
    }
  }
  // A field codec's refusal, else the decoder's verdict (`exact`: every byte consumed).
  Status Finish(std::string_view what, bool exact = true) const {
    if (!status_.ok()) return Status(status_.code(), std::string(what) + ": " + status_.message());
    return d_->Finish(what, exact);
  }

 private:
  Decoder* d_;
  Status status_;
};

template <class M>
std::string Encode(const M& m) {
  if constexpr (std::is_same_v<M, Raw>) {
    return m.bytes;
  } else {
    Encoder e;
    M::Fields(m, FieldWriter(&e));
    return e.Take();
  }
}
// A Raw reply's bytes (a read's, up to megabytes) are moved, not copied.
inline std::string Encode(Raw&& m) { return std::move(m.bytes); }

// The whole input must be the message: a truncated one or trailing bytes are Corruption.
template <class M>
Result<M> Decode(std::string_view bytes) {
  M m;
  if constexpr (std::is_same_v<M, Raw>) {
    m.bytes.assign(bytes);
  } else {
    Decoder d(bytes);
    FieldReader<kBorrows<M>> r(&d);
    M::Fields(m, r);
    CLIO_RETURN_IF_ERROR(r.Finish(M::kName));
  }
  return m;
}
// A reply as a client reads it: bytes past the fields it knows are a newer runtime's additions
// (a reply grows only at its end) and are passed over; anything short is still Corruption.
template <class M>
Result<M> DecodeReply(std::string&& bytes) {
  static_assert(!kBorrows<M>, "a reply never borrows from its payload");
  if constexpr (std::is_same_v<M, Raw>) {
    return Raw{std::move(bytes)};
  } else {
    M m;
    Decoder d(bytes);
    FieldReader<false> r(&d);
    M::Fields(m, r);
    CLIO_RETURN_IF_ERROR(r.Finish(M::kName, /*exact=*/false));
    return m;
  }
}

// A reply received whole: a Raw one takes the string without a copy.
template <class M>
Result<M> Decode(std::string&& bytes) {
  static_assert(!kBorrows<M>, "decoding a message that borrows from a string that dies on return");
  if constexpr (std::is_same_v<M, Raw>) {
    return Raw{std::move(bytes)};
  } else {
    return Decode<M>(std::string_view(bytes));
  }
}

namespace detail {
template <class... Req, class V>
bool VisitRequest(std::tuple<Req...>*, uint32_t method, V& visit) {
  return ((static_cast<uint32_t>(Req::kMethod) == method ? (visit(std::type_identity<Req>{}), true) : false) || ...);
}
}  // namespace detail

// Which request type of `Requests` (a tuple) has `method`: calls visit(std::type_identity<It>)
// and returns true; false when none has.
template <class Requests, class V>
bool VisitRequest(uint32_t method, V&& visit) {
  return detail::VisitRequest(static_cast<Requests*>(nullptr), method, visit);
}

// Whether the request types of `Requests` have exactly the methods first..last, one each (a
// protocol's headers check their enum against their tuple with it).
template <class... Req, class M>
constexpr bool CoversMethods(std::tuple<Req...>*, M first, M last) {
  const uint32_t lo = static_cast<uint32_t>(first), hi = static_cast<uint32_t>(last);
  if (sizeof...(Req) != hi - lo + 1) return false;
  std::array<uint32_t, sizeof...(Req)> m{static_cast<uint32_t>(Req::kMethod)...};
  std::sort(m.begin(), m.end());
  for (size_t i = 0; i < m.size(); ++i)
    if (m[i] != lo + i) return false;
  return true;
}
template <class Requests, class M>
constexpr bool CoversMethods(M first, M last) {
  return CoversMethods(static_cast<Requests*>(nullptr), first, last);
}

// A pool's handler table, built from the tuple of its request types: the handler of method m
// decodes the request (after the type's `Precheck(payload)`, where it has one), calls
// `pool.Run(request)` (which returns Result<Request::Reply>) and encodes the reply. A pool whose
// Run overloads are private names `friend class wire::Handlers<Pool, Requests>`.
template <class P, class Requests>
class Handlers;

template <class P, class... Req>
class Handlers<P, std::tuple<Req...>> {
 public:
  using Fn = Result<std::string> (*)(P&, std::string_view);
  static constexpr uint32_t kEnd = std::max({static_cast<uint32_t>(Req::kMethod)...}) + 1;

  // The handler of `method`; null when no request type has it.
  static Fn Find(uint32_t method) { return method < kEnd ? kTable[method] : nullptr; }

 private:
  template <class R>
  static Result<std::string> Serve(P& pool, std::string_view payload) {
    if constexpr (requires { R::Precheck(payload); }) CLIO_RETURN_IF_ERROR(R::Precheck(payload));
    CLIO_ASSIGN_OR_RETURN(R req, Decode<R>(payload));
    CLIO_ASSIGN_OR_RETURN(typename R::Reply reply, pool.Run(req));
    return Encode(std::move(reply));
  }
  static constexpr std::array<Fn, kEnd> Build() {
    std::array<Fn, kEnd> t{};
    ((t[static_cast<uint32_t>(Req::kMethod)] = &Serve<Req>), ...);
    return t;
  }
  static constexpr bool Distinct() {
    std::array<uint32_t, sizeof...(Req)> m{static_cast<uint32_t>(Req::kMethod)...};
    std::sort(m.begin(), m.end());
    return std::adjacent_find(m.begin(), m.end()) == m.end();
  }
  static_assert(Distinct(), "two request types share a method number");
  static constexpr std::array<Fn, kEnd> kTable = Build();
};

}  // namespace clio::wire
