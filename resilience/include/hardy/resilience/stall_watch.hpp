#pragma once
// When `hardy run` should ask a launch's nodes whether they are still there: a pure decision over
// the steps the job commits, with no clock, no process and no files, so that it is unit-tested
// with scripted timings. The supervisor feeds it the job's last committed step as it reads it
// (metrics.jsonl's last line, every quarter second), asks it whether a probe is due, probes the
// launch's nodes when it is, and ends the launch when some node does not answer
// (docs/resilience.md, "Silent nodes").
//
// Why: a node that freezes or is cut off takes no process with it, so nothing reports it. The
// ranks wait in their next collective for a peer that never answers, and Open MPI's runtime
// ends the job only when its out-of-band keepalive gives up (1 s idle, then 3 probes a second
// apart under `hardy run`): 3.4-4.3 s after the freeze on the emulated cluster, the largest part
// of the 6.5-7.2 s a silent node cost a one-job run of the goodput bench (2026-11-30). The job's
// own progress says it sooner: a job that commits a step every 140 ms and has committed none for
// a second is stuck. Being stuck is not enough to end it (a file system that stalls, a long
// checkpoint stall: every node still answers, and a relaunch would not help); a node that does
// not answer while the job is stuck is, and is what the keepalive would have found.
//
//   step time = the median of the intervals between the commits seen (the steps between two
//               reads, over the time between their commits), over the last kIntervals reads;
//   threshold = max(min_quiet_s, kQuietSteps x step time): a job of 2 s steps waits 10 s
//               (ten steps until 2026-11-30: a probe every node answers costs nothing but its
//               CPU, and half a second earlier is half a second less lost to each silent node);
//   due       = at least kMinIntervals intervals seen in this launch (its first steps, slow and
//               irregular, decide nothing), and nothing committed for the threshold since the
//               last commit or since the last probe that every node answered; each such probe
//               doubles the wait before the next (a job stuck for a reason no probe finds is
//               not probed four times a second), and a commit restores it.
#include <cstddef>
#include <deque>
#include <optional>

namespace hardy::resilience {

class StallWatch {
 public:
  static constexpr double kQuietSteps = 5;
  static constexpr std::size_t kIntervals = 16;
  static constexpr std::size_t kMinIntervals = 3;
  static constexpr double kMaxWaitS = 300;  // the longest wait between two probes of one stall

  // `min_quiet_s`: the least time without a commit before a probe (`hardy run
  // --stall-probe-after`); 0 turns the watch off.
  explicit StallWatch(double min_quiet_s);

  // The job's last committed step, committed at `committed_unix` (its metrics line's unix_time).
  // A step at or below the last one seen (a restore) starts the intervals again.
  void saw(long step, double committed_unix);
  // The time without a commit after which a probe is due; nullopt until enough intervals were seen.
  std::optional<double> threshold_s() const;
  // Whether the nodes should be probed at `now`.
  bool due(double now) const;
  // Seconds since the last commit at `now` (0 before any).
  double quiet_s(double now) const;
  // A probe at `now` found every node answering: the next one waits twice as long.
  void all_answered(double now);

 private:
  double min_quiet_s_;
  std::optional<long> last_step_;
  double last_commit_unix_ = 0;
  std::deque<double> intervals_;  // seconds per step between consecutive reads
  double probed_unix_ = 0;        // the last probe every node answered, in this stall
  double wait_multiple_ = 1;      // doubled by each such probe, reset by a commit
};

}  // namespace hardy::resilience
