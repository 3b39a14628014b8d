// Pool queries: which containers run a task, resolved over pools of several containers (the
// cluster's routing, tested without one), their encoding, and a single-node runtime running
// what names its own container and refusing, by name, what names another.
#include <doctest/doctest.h>

#include <filesystem>

#include "daemon/ipc.h"
#include "daemon/pool_query.h"
#include "daemon/runtime.h"
#include "daemon/test_serving.h"

using namespace clio;
using V = std::vector<uint32_t>;

TEST_CASE("queries resolve to the containers they name, over a pool of five") {
  CHECK(*ResolvePoolQuery(PoolQuery::Local(), 5, 3) == V{3});
  CHECK(*ResolvePoolQuery(PoolQuery::DirectId(4), 5, 0) == V{4});
  CHECK(*ResolvePoolQuery(PoolQuery::DirectHash(17), 5, 0) == V{2});
  CHECK(*ResolvePoolQuery(PoolQuery::Range(1, 3), 5, 0) == V{1, 2, 3});
  CHECK(*ResolvePoolQuery(PoolQuery::Broadcast(), 5, 2) == V{0, 1, 2, 3, 4});
  CHECK(*ResolvePoolQuery(PoolQuery::Physical(1), 5, 4) == V{1});
  CHECK(*ResolvePoolQuery(PoolQuery::Dynamic(), 5, 0, /*dynamic=*/3) == V{3});
  // Outside the pool: refused, naming what and how many there are.
  auto far = ResolvePoolQuery(PoolQuery::DirectId(5), 5, 0);
  CHECK(far.status().code() == Code::kInvalidArgument);
  CHECK(far.status().message() == "container 5 is outside the pool's 5 containers (0..4)");
  CHECK(ResolvePoolQuery(PoolQuery::Range(3, 3), 5, 0).status().code() == Code::kInvalidArgument);
  CHECK(ResolvePoolQuery(PoolQuery::Range(0, 0), 5, 0).status().code() == Code::kInvalidArgument);
  CHECK(ResolvePoolQuery(PoolQuery::Range(~0u, 2), 5, 0).status().code() == Code::kInvalidArgument);
  CHECK(ResolvePoolQuery(PoolQuery::Dynamic(), 5, 0, 9).status().code() == Code::kInvalidArgument);
  CHECK(ResolvePoolQuery(PoolQuery::Local(), 0, 0).status().code() == Code::kInvalidArgument);
}

TEST_CASE("a query travels as 17 bytes at the front of the payload") {
  for (const PoolQuery& q : {PoolQuery::Local(), PoolQuery::DirectHash(~0ull), PoolQuery::Range(7, 9), PoolQuery::Dynamic()}) {
    std::string wire = EncodePoolQuery(q) + "rest";
    CHECK(wire.size() == kPoolQueryBytes + 4);
    std::string_view v = wire;
    auto back = DecodePoolQuery(&v);
    REQUIRE(back.ok());
    CHECK(*back == q);
    CHECK(v == "rest");
  }
  std::string_view shortv("\x01\x02", 2);
  CHECK(DecodePoolQuery(&shortv).status().code() == Code::kCorruption);
  std::string bad = EncodePoolQuery(PoolQuery::Local());
  bad[0] = 42;
  std::string_view badv = bad;
  CHECK(DecodePoolQuery(&badv).status().code() == Code::kCorruption);
}

namespace {

// Echoes; its dynamic choice is the first payload byte.
class ChoosingPool : public Pool {
 public:
  Result<std::string> Handle(uint32_t, std::string_view payload) override { return std::string(payload); }
  uint32_t DynamicContainer(uint32_t, std::string_view payload) const override {
    return payload.empty() ? 0 : static_cast<uint8_t>(payload[0]);
  }
};

}  // namespace

TEST_CASE("on one node, a query that names this node's container runs; one that names another is refused") {
  char tmpl[] = "/tmp/clio_query_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto cfg = ParseRuntimeConfig("runtime:\n  state_dir: " + dir +
                                    "\n  http_port: 0\n  node_id: 6\ncompose:\n  - mod_name: choose\n    pool_name: c\n"
                                    "    pool_id: \"7.0\"\n",
                                "q.yaml");
  REQUIRE(cfg.ok());
  Runtime rt(std::move(cfg).value());
  rt.RegisterModule("choose", testing::Makes<ChoosingPool>());
  REQUIRE(rt.Compose().ok());
  {
    testing::ServingThread serve(&rt);
    auto c = RuntimeClient::Connect(RuntimeClient::OptionsFor(rt.config()));
    REQUIRE(c.ok());
    using R = RuntimeClient::Resend;
    for (const PoolQuery& q : {PoolQuery::Local(), PoolQuery::DirectId(0), PoolQuery::DirectHash(12345),
                               PoolQuery::Range(0, 1), PoolQuery::Broadcast(), PoolQuery::Physical(6),
                               PoolQuery::Dynamic()}) {
      CAPTURE(PoolQueryName(q.kind));
      auto r = (*c)->Call(7, 1, std::string("\0ok", 3), R::kFreely, q);
      REQUIRE_MESSAGE(r.ok(), r.status().ToString());
      CHECK(*r == std::string("\0ok", 3));  // the query is not part of the pool's payload
    }
    auto other = (*c)->Call(7, 1, "x", R::kFreely, PoolQuery::Physical(2));
    CHECK(other.status().code() == Code::kNotSupported);
    CHECK(other.status().message().find("node 2 is not this runtime's (node 6)") != std::string::npos);
    auto outside = (*c)->Call(7, 1, "x", R::kFreely, PoolQuery::DirectId(1));
    CHECK(outside.status().code() == Code::kInvalidArgument);
    CHECK(outside.status().message().find("container 1 is outside the pool's 1 containers") != std::string::npos);
    auto chosen = (*c)->Call(7, 1, std::string("\3", 1), R::kFreely, PoolQuery::Dynamic());
    CHECK(chosen.status().code() == Code::kInvalidArgument);  // the pool chose container 3
    // The admin pool answers on the node asked.
    CHECK((*c)->Call(0, static_cast<uint32_t>(AdminMethod::kPing), "", R::kFreely, PoolQuery::Physical(6)).ok());
    CHECK((*c)->Call(0, static_cast<uint32_t>(AdminMethod::kPing), "", R::kFreely, PoolQuery::Physical(5)).status().code() ==
          Code::kInvalidArgument);
  }
  (void)rt.StopPools();
  std::filesystem::remove_all(dir);
}
