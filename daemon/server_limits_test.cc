// The server's limits on their own: holders counted up to their cap and given back; the
// in-flight budget admitting whole frames in FIFO order, ending a wait when the connection
// closes or the server stops. Coroutines run on a real io_context; no timing.
#include <doctest/doctest.h>

#include <optional>
#include <vector>

#include "daemon/server_limits.h"

using namespace clio;
using server_internal::HolderCounts;
using server_internal::InflightBudget;

TEST_CASE("HolderCounts: a holder gets its cap, then refusals; the empty holder is never counted") {
  HolderCounts c(2);
  CHECK(c.Admit("uid 7"));
  CHECK(c.Admit("uid 7"));
  CHECK_FALSE(c.Admit("uid 7"));
  CHECK(c.Admit("address 10.0.0.1"));  // another holder, its own count
  c.Release("uid 7");
  CHECK(c.Admit("uid 7"));
  for (int i = 0; i < 10; ++i) CHECK(c.Admit(""));
  c.Release("uid 9");  // never admitted: nothing happens
  CHECK_FALSE(c.Admit("uid 7"));
}

namespace {

// A frame asking the budget for `n`: its outcome once the wait ends.
struct Frame {
  uint64_t n;
  std::optional<bool> admitted;
  std::shared_ptr<asio::steady_timer> wait;
  bool open = true;
};

void Ask(asio::io_context& ioc, InflightBudget& b, Frame& f) {
  asio::co_spawn(
      ioc,
      [&b, &f]() -> asio::awaitable<void> {
        bool ok = false;
        ok = co_await b.Admit(f.n, &f.wait, [&f] { return f.open; });
        f.admitted = ok;
      },
      asio::detached);
  ioc.poll();
  ioc.restart();
}

}  // namespace

TEST_CASE("InflightBudget: whole frames, in arrival order; a closed connection or a stop ends the wait") {
  asio::io_context ioc;
  InflightBudget b(100);
  Frame a{60, {}, {}}, big{50, {}, {}}, small{10, {}, {}};
  Ask(ioc, b, a);
  CHECK(a.admitted == true);
  CHECK(b.inflight() == 60);
  Ask(ioc, b, big);
  CHECK_FALSE(big.admitted.has_value());  // 110 would pass 100: it waits
  Ask(ioc, b, small);
  CHECK_FALSE(small.admitted.has_value());  // would fit, but queues behind the big one
  CHECK(b.waits() == 2);
  b.Release(60);
  ioc.poll();
  ioc.restart();
  CHECK(big.admitted == true);
  CHECK(small.admitted == true);
  CHECK(b.inflight() == 60);
  CHECK(big.wait == nullptr);

  // A waiter whose connection closes gives its place up, and the one behind it, which fits,
  // is admitted then (no Release has to come).
  Frame gone{95, {}, {}}, next{40, {}, {}};
  Ask(ioc, b, gone);
  Ask(ioc, b, next);
  CHECK_FALSE(gone.admitted.has_value());
  CHECK_FALSE(next.admitted.has_value());  // 60 + 40 fits, but it queues behind
  gone.open = false;
  gone.wait->cancel();  // what Connection::Close does
  ioc.poll();
  ioc.restart();
  CHECK(gone.admitted == false);
  CHECK(next.admitted == true);
  CHECK(b.inflight() == 100);
  b.Release(50);

  // Stopped: a waiter is not admitted, and a wait that ends says so.
  Frame late{90, {}, {}};
  Ask(ioc, b, late);
  b.Stop();
  late.wait->cancel();
  ioc.poll();
  CHECK(late.admitted == false);
}
