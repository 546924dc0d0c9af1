// The stall watch (hardy/resilience/stall_watch.hpp) on scripted commit times: a probe is due once
// the job has committed nothing for five of its steps, and at least the least wait; not before
// the launch has shown its pace; each probe every node answered doubles the wait, and a commit
// restores it; a restore starts the pace again; 0 turns it off.
#include <catch2/catch.hpp>

#include "hardy/resilience/stall_watch.hpp"

using hardy::resilience::StallWatch;

namespace {

// Reads of a job committing a step every `step_s` seconds from step `first` at `start`, read
// every `every` steps, as the supervisor reads metrics.jsonl's last line; returns the last read's
// commit time.
double commit(StallWatch& watch, long first, long steps, double start, double step_s, long every) {
  double at = start;
  for (long step = first; step < first + steps; step += every) {
    at = start + static_cast<double>(step - first) * step_s;
    watch.saw(step, at);
  }
  return at;
}

}  // namespace

TEST_CASE("stall watch: due after five steps without a commit, at least the least wait") {
  StallWatch watch(1.0);
  const double last = commit(watch, 1, 40, 100.0, 0.28, 2);
  REQUIRE(watch.threshold_s());
  CHECK(*watch.threshold_s() == Approx(1.4));  // five steps of 280 ms, over the 1 s floor
  CHECK_FALSE(watch.due(last + 1.3));
  CHECK(watch.due(last + 1.45));
  CHECK(watch.quiet_s(last + 1.45) == Approx(1.45));

  StallWatch fast(1.0);
  const double fast_last = commit(fast, 1, 40, 100.0, 0.14, 3);
  CHECK(*fast.threshold_s() == Approx(1.0));  // five steps of 140 ms are 0.7 s: the floor holds
  CHECK_FALSE(fast.due(fast_last + 0.9));
  CHECK(fast.due(fast_last + 1.0));

  StallWatch slow(1.0);  // a job of 2 s steps waits 10 s
  const double slow_last = commit(slow, 1, 10, 100.0, 2.0, 1);
  CHECK_FALSE(slow.due(slow_last + 9.5));
  CHECK(slow.due(slow_last + 10.5));
}

TEST_CASE("stall watch: nothing is due before the launch has shown its pace") {
  StallWatch watch(1.0);
  CHECK_FALSE(watch.due(1e9));
  watch.saw(5, 100.0);
  watch.saw(6, 100.1);
  watch.saw(7, 100.2);  // two intervals
  CHECK_FALSE(watch.threshold_s());
  CHECK_FALSE(watch.due(200.0));
  watch.saw(8, 100.3);
  CHECK(watch.due(200.0));
  // The same line read again is no new commit.
  watch.saw(8, 100.3);
  CHECK(watch.due(200.0));
}

TEST_CASE("stall watch: a probe every node answered doubles the wait; a commit restores it") {
  StallWatch watch(1.0);
  const double last = commit(watch, 1, 20, 100.0, 0.05, 1);
  CHECK(watch.due(last + 1.0));
  watch.all_answered(last + 1.1);
  CHECK_FALSE(watch.due(last + 2.5));  // next after 2 s
  CHECK(watch.due(last + 3.1));
  watch.all_answered(last + 3.2);
  CHECK_FALSE(watch.due(last + 7.0));  // then after 4 s
  CHECK(watch.due(last + 7.2));
  watch.saw(21, last + 7.5);  // it went on: the wait is the threshold again
  CHECK_FALSE(watch.due(last + 8.4));
  CHECK(watch.due(last + 8.5));
}

TEST_CASE("stall watch: a restore to an earlier step starts the pace again; 0 is off") {
  StallWatch watch(1.0);
  const double last = commit(watch, 1, 20, 100.0, 0.05, 1);
  REQUIRE(watch.threshold_s());
  watch.saw(10, last + 5.0);  // the job went back to step 10 (an in-job restore)
  CHECK_FALSE(watch.threshold_s());
  CHECK_FALSE(watch.due(last + 60));
  commit(watch, 11, 4, last + 5.1, 0.05, 1);
  CHECK(watch.threshold_s());

  StallWatch off(0);
  const double off_last = commit(off, 1, 20, 100.0, 0.05, 1);
  CHECK_FALSE(off.threshold_s());
  CHECK_FALSE(off.due(off_last + 1e6));
}
