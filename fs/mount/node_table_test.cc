// The node table of the FUSE session: lookup counts from replies and FORGETs, opens, and the
// freeze that makes a restart's declaration exact.
#include "fs/mount/node_table.h"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>

using namespace clio;

TEST_CASE("a node lives while the kernel holds lookups or opens on it") {
  NodeTable t;
  t.Looked(1, "a", 10);
  t.Looked(1, "a", 10);
  t.Looked(1, "neg", 0);  // a negative entry holds nothing
  CHECK(t.size() == 1);
  CHECK(t.lookups(10) == 2);
  t.Opened(10);
  t.Forget(10, 2);
  CHECK(t.size() == 1);  // still open
  CHECK(t.opens(10) == 1);
  t.Released(10);
  CHECK(t.size() == 0);
  t.Opened(1);  // the root: opened, never looked up
  CHECK(t.opens(1) == 1);
  t.Released(1);
  CHECK(t.size() == 0);
}

TEST_CASE("an exchange swaps the names both nodes go by, and no other") {
  NodeTable t;
  t.Looked(1, "a", 7);
  t.Looked(5, "b", 8);
  t.Looked(1, "b", 9);  // same name as 8's, another directory: stays
  t.Exchanged(1, "a", 5, "b");
  auto nodes = t.Freeze();
  t.Thaw();
  REQUIRE(nodes.size() == 3);
  for (const auto& n : nodes) {
    if (n.ino == 7) CHECK((n.parent == 5 && n.name == "b"));
    else if (n.ino == 8) CHECK((n.parent == 1 && n.name == "a"));
    else CHECK((n.parent == 1 && n.name == "b"));
  }
}

TEST_CASE("the table keeps the last name a node was handed out under") {
  NodeTable t;
  t.Looked(1, "old", 7);
  t.Renamed(7, 5, "new");
  t.Looked(1, "other", 8);
  auto nodes = t.Freeze();
  t.Thaw();
  REQUIRE(nodes.size() == 2);
  for (const auto& n : nodes) {
    if (n.ino == 7) CHECK((n.parent == 5 && n.name == "new"));
    else CHECK((n.parent == 1 && n.name == "other"));
  }
}

TEST_CASE("a freeze never sees an open or release in flight, and holds new ones back") {
  NodeTable t;
  std::atomic<int> in_flight{0};
  std::atomic<bool> done{false};
  std::atomic<int> violations{0};
  std::thread opener([&] {
    for (int i = 0; i < 20000; ++i) {
      OpenChange change(&t);
      in_flight.fetch_add(1);
      t.Opened(42);
      t.Released(42);
      in_flight.fetch_sub(1);
    }
    done = true;
  });
  int freezes = 0;
  do {
    auto nodes = t.Freeze();
    if (in_flight.load() != 0) violations.fetch_add(1);
    for (const auto& n : nodes)
      if (n.opens != 0) violations.fetch_add(1);  // caught between an open and its release
    t.Thaw();
    ++freezes;
  } while (!done.load());
  opener.join();
  CHECK(violations.load() == 0);
  CHECK(freezes > 0);
}
