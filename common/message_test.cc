// Typed messages (common/message.h): every field kind round-trips, a broken payload is refused
// naming the message, counts never allocate past the payload, and a handler table serves the
// request type its method names.
#include "common/message.h"

#include <doctest/doctest.h>

namespace clio {
namespace {

// A domain type with its own field codec, which refuses the value 7.
struct Odd {
  uint8_t v = 0;
  bool operator==(const Odd&) const = default;
};
void WireEncode(Encoder& e, const Odd& o) { e.Put(o.v); }
Status WireDecode(Decoder& d, Odd& o) {
  d.Get(&o.v);
  return o.v == 7 ? InvalidArgument("odd value 7") : Status::Ok();
}

struct Pair {
  uint32_t a = 0;
  std::string b;
  static constexpr size_t kMinWireSize = 8;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.a); f(s.b); }
  bool operator==(const Pair&) const = default;
};

enum class TestMethod : uint32_t { kEcho = 3, kSum = 5 };

struct Every {
  static constexpr const char* kName = "every";
  static constexpr bool kBorrows = true;  // `view`
  uint8_t u8 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  uint16_t u16 = 0;
  std::string s;
  std::string_view view;
  std::vector<uint16_t> numbers;
  std::vector<Pair> pairs;
  Odd odd;
  wire::Trailing<uint32_t> later;
  template <class S, class F> static void Fields(S& s, F&& f) {
    f(s.u8); f(s.i64); f(s.f64); f(s.u16); f(s.s); f(s.view); f(s.numbers); f(s.pairs); f(s.odd); f(s.later);
  }
};

struct Pairs {
  static constexpr const char* kName = "pairs";
  std::vector<Pair> pairs;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.pairs); }
};
struct Doc {
  static constexpr const char* kName = "doc";
  static constexpr bool kBorrows = true;
  uint8_t version = 0;
  wire::Rest body;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.version); f(s.body); }
};

struct EchoReplyV1 {
  static constexpr const char* kName = "echo reply";
  std::string text;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.text); }
};

TEST_CASE("every field kind round-trips, and a trailing field is optional") {
  Every m;
  m.u8 = 200;
  m.i64 = -5;
  m.f64 = 2.5;
  m.u16 = 513;
  m.s = std::string("a\0b", 3);
  m.view = "view";
  m.numbers = {1, 65535};
  m.pairs = {{1, "x"}, {2, ""}};
  m.odd = {3};
  m.later.value = 9;
  const std::string wire = wire::Encode(m);
  auto back = wire::Decode<Every>(wire);
  REQUIRE(back.ok());
  CHECK(back->u8 == 200);
  CHECK(back->i64 == -5);
  CHECK(back->f64 == 2.5);
  CHECK(back->u16 == 513);
  CHECK(back->s == m.s);
  CHECK(back->view == "view");
  CHECK(back->numbers == m.numbers);
  CHECK(back->pairs == m.pairs);
  CHECK(back->odd == Odd{3});
  CHECK(back->later.value == 9);

  // Without the trailing field (a peer from before it): 4 bytes shorter, decodes as 0.
  m.later.value = 0;
  const std::string older = wire::Encode(m);
  CHECK(older.size() == wire.size() - 4);
  auto old_back = wire::Decode<Every>(older);
  REQUIRE(old_back.ok());
  CHECK(old_back->later.value == 0);
}

TEST_CASE("a truncated payload, trailing bytes or a refused field are errors naming the message") {
  Every m;
  m.s = "text";
  const std::string wire = wire::Encode(m);
  for (size_t n = 0; n + 4 < wire.size(); ++n) {  // every cut before the (absent) trailing field
    auto r = wire::Decode<Every>(std::string_view(wire).substr(0, n));
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::kCorruption);
    CHECK(r.status().message().find("every") == 0);
  }
  const std::string padded = wire + "\x01\x02\x03\x04\x05";
  auto extra = wire::Decode<Every>(padded);
  CHECK(extra.status().code() == Code::kCorruption);

  m.odd = {7};
  const std::string seven = wire::Encode(m);
  auto refused = wire::Decode<Every>(seven);
  CHECK(refused.status().code() == Code::kInvalidArgument);
  CHECK(refused.status().message() == "every: odd value 7");
}

TEST_CASE("a client passes over reply fields a newer runtime appended, never missing ones") {
  const std::string wire = wire::Encode(EchoReplyV1{"hello"});
  auto newer = wire::DecodeReply<EchoReplyV1>(wire + "\x01\x02");
  REQUIRE(newer.ok());
  CHECK(newer->text == "hello");
  CHECK(wire::DecodeReply<EchoReplyV1>(wire.substr(0, wire.size() - 1)).status().code() == Code::kCorruption);
  CHECK(wire::DecodeReply<wire::Empty>("\x07").ok());
  const std::string extra = wire + "\x01";
  CHECK(wire::Decode<EchoReplyV1>(extra).status().code() == Code::kCorruption);  // a request stays exact
}

TEST_CASE("a vector's count is bounded by the bytes left, before anything is allocated") {
  // 2 pairs claimed, 15 bytes left: less than two elements of at least 8 bytes each.
  Encoder e;
  e.Put<uint32_t>(2).Put<uint32_t>(1).PutBytes("abc").Put<uint32_t>(0);
  std::string wire = e.Take();
  wire.resize(wire.size() - 1);
  CHECK(wire::Decode<Pairs>(wire).status().code() == Code::kCorruption);
  Encoder huge;
  huge.Put<uint32_t>(0xffffffff);
  CHECK(wire::Decode<Pairs>(huge.buffer()).status().code() == Code::kCorruption);
}

TEST_CASE("Raw and Rest carry bytes without a length") {
  CHECK(wire::Encode(wire::Raw{"abc"}) == "abc");
  CHECK(wire::Decode<wire::Raw>(std::string_view("abc"))->bytes == "abc");
  CHECK(wire::Decode<wire::Raw>(std::string("abc"))->bytes == "abc");
  const std::string wire = wire::Encode(Doc{1, {"anything at all"}});
  CHECK(wire == "\x01" "anything at all");
  auto back = wire::Decode<Doc>(wire);
  REQUIRE(back.ok());
  CHECK(back->body.bytes == "anything at all");
  CHECK(wire::Decode<Doc>(std::string_view("\x01", 1))->body.bytes.empty());
}

// A pool with two methods, served through its handler table.
struct EchoReply {
  static constexpr const char* kName = "echo reply";
  std::string text;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.text); }
};
struct Echo {
  static constexpr TestMethod kMethod = TestMethod::kEcho;
  static constexpr bool kBorrows = true;
  static constexpr const char* kName = "Echo";
  using Reply = EchoReply;
  std::string_view text;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.text); }
};
struct SumReply {
  static constexpr const char* kName = "sum reply";
  uint64_t sum = 0;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.sum); }
};
struct Sum {
  static constexpr TestMethod kMethod = TestMethod::kSum;
  static constexpr const char* kName = "Sum";
  using Reply = SumReply;
  std::vector<uint32_t> terms;
  template <class S, class F> static void Fields(S& s, F&& f) { f(s.terms); }
  static Status Precheck(std::string_view payload) {
    return payload.size() > 64 ? InvalidArgument("Sum: too many terms") : Status::Ok();
  }
};

class Calculator {
 public:
  using Handlers = wire::Handlers<Calculator, std::tuple<Echo, Sum>>;
  Result<std::string> Handle(uint32_t method, std::string_view payload) {
    if (auto serve = Handlers::Find(method)) return serve(*this, payload);
    return Status(Code::kNotSupported, "unknown method " + std::to_string(method));
  }
  int runs = 0;

 private:
  friend Handlers;
  Result<EchoReply> Run(const Echo& r) {
    ++runs;
    return EchoReply{std::string(r.text)};
  }
  Result<SumReply> Run(const Sum& r) {
    ++runs;
    uint64_t s = 0;
    for (uint32_t t : r.terms) s += t;
    if (s == 0) return InvalidArgument("nothing to sum");
    return SumReply{s};
  }
};

TEST_CASE("a handler table serves the request type its method names, and only that") {
  Calculator c;
  auto echo = c.Handle(3, wire::Encode(Echo{"hi"}));
  REQUIRE(echo.ok());
  CHECK(wire::Decode<EchoReply>(*echo)->text == "hi");
  auto sum = c.Handle(5, wire::Encode(Sum{{1, 2, 3}}));
  REQUIRE(sum.ok());
  CHECK(wire::Decode<SumReply>(*sum)->sum == 6);
  CHECK(c.runs == 2);

  CHECK(c.Handle(5, wire::Encode(Sum{{0}})).status().code() == Code::kInvalidArgument);  // Run's error
  CHECK(c.Handle(5, "\x01").status().code() == Code::kCorruption);  // not run
  CHECK(c.Handle(5, std::string(65, 'x')).status().message() == "Sum: too many terms");  // Precheck
  CHECK(c.runs == 3);
  for (uint32_t m : {0u, 1u, 4u, 6u, 1000u}) CHECK(c.Handle(m, "").status().code() == Code::kNotSupported);
  CHECK(Calculator::Handlers::kEnd == 6);

  int seen = 0;
  CHECK(wire::VisitRequest<std::tuple<Echo, Sum>>(5, [&](auto t) { seen = decltype(t)::type::kMethod == TestMethod::kSum; }));
  CHECK(seen == 1);
  CHECK(!wire::VisitRequest<std::tuple<Echo, Sum>>(4, [&](auto) { seen = 2; }));
  CHECK(seen == 1);
}

}  // namespace
}  // namespace clio
