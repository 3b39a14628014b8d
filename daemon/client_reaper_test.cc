// ClientReaper with real processes: a client that exited (a zombie here) is closed once the
// grace has passed and no request of it runs; a live one never. Time is passed in, not waited.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "daemon/client_reaper.h"

using namespace clio;

TEST_CASE("ClientReaper closes an exited client's connection after the grace, never a live or busy one") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(0);
  // Not waited for yet: a zombie, which counts as gone.
  ClientReaper r(5);
  int closed_dead = 0, closed_live = 0;
  bool busy = true;
  r.Watch(1, {child, [&] { return busy; }, [&] { ++closed_dead; }});
  r.Watch(2, {::getpid(), nullptr, [&] { ++closed_live; }});
  r.Watch(3, {0, nullptr, [&] { ++closed_live; }});  // no pid: not watched
  const auto t0 = std::chrono::steady_clock::now();
  // The child may take a moment to exit: looks until it has (left a zombie), busy all the while.
  while (true) {
    CHECK(r.Reap(t0 + std::chrono::hours(1)) == 0);  // busy: never
    siginfo_t info{};
    REQUIRE(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0);
    if (info.si_pid == child) break;
  }
  busy = false;
  CHECK(r.Reap(t0) == 0);                              // gone from t0 on: within the grace
  CHECK(r.Reap(t0 + std::chrono::seconds(4)) == 0);
  CHECK(r.Reap(t0 + std::chrono::seconds(5)) == 1);
  CHECK(closed_dead == 1);
  CHECK(r.Reap(t0 + std::chrono::seconds(60)) == 0);  // forgotten once closed
  CHECK(closed_live == 0);
  r.Forget(2);
  ::waitpid(child, nullptr, 0);
}
