#pragma once
// Fault injection for testing recovery: `--inject-failure rank=3@step=40` kills rank 3 with
// SIGKILL when it reaches step 40; `node=1@step=40:allreduce` kills every rank of node 1 (ranks
// node*ranks_per_node ... +ranks_per_node-1 of the original world) in the middle of step 40's
// gradient allreduce. Injection only kills or hangs: detection and recovery take the same paths as
// a real failure or an external `kill -9`. A hang keeps the process alive, as a real one would:
// `rank=3@step=40:stop` stops it (SIGSTOP, in the forward pass unless a phase is given),
// `:spin` computes forever, `:stall` blocks forever in the node snapshot write; `:sleep=S` only
// delays it S seconds (a slow step, which must not be taken for a hang); `:slow=F` makes its
// forward and backward passes take F times as long from that step on (a node at 1/F of its
// speed: a straggler; a later `:slow=1` of the same rank ends it); `:noise=A` makes each step's
// forward and backward up to A times longer at random from that step on (timing noise, which
// must never be taken for a straggler).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hardy::resilience {

// log_write: after the step's agreement and its copies (node-local snapshot), before its lines
// are written to metrics.jsonl and samples.jsonl.
enum class Phase { forward, allreduce, checkpoint_write, snapshot_write, log_write, recovery };
Phase parse_phase(const std::string& name);
std::string to_string(Phase phase);

enum class Fault { kill, stop, spin, stall, sleep, slow, noise };
std::string to_string(Fault fault);

struct InjectedFailure {
  std::vector<int> world_ranks;  // ranks of the original world to kill
  long step = 0;                 // 1-based step at which they die
  Phase phase = Phase::forward;
  Fault fault = Fault::kill;
  double sleep_s = 0;      // Fault::sleep
  double slow_factor = 1;  // Fault::slow
  double noise = 0;        // Fault::noise: each step's own work up to this fraction longer
  std::string spec;        // as given, for events
};

// Parses "rank=R@step=S[:phase][:fault]" or "node=N@step=S[:phase][:fault]"; several specs are
// separated by commas or given as repeated options. Throws InvalidArgument naming the bad part.
std::vector<InjectedFailure> parse_injected_failures(const std::vector<std::string>& specs,
                                                     int ranks_per_node);

class FailureInjector {
 public:
  FailureInjector() = default;
  // `record_dir`: where a victim notes the time it died, so that survivors can report the
  // detection latency (rank 0 of the run directory's checkpoints/.. is fine).
  FailureInjector(std::vector<InjectedFailure> failures, int world_rank,
                  std::filesystem::path record_dir);
  // Kills or hangs this process (after recording the time) if a failure is due at this point.
  void at(long step, Phase phase) const;
  // How many times as long this rank's own work takes at `step`: the factor of its latest slow=
  // at or before the step (1 without one), times 1 + its latest noise= amplitude x a draw in
  // [0, 1) fixed by the rank and the step.
  double slowdown(long step) const;
  // The time the most recent injected victim recorded, if any (Unix seconds).
  std::optional<double> last_kill_time() const;

 private:
  std::vector<InjectedFailure> failures_;
  int world_rank_ = -1;
  std::filesystem::path record_dir_;
};

}  // namespace hardy::resilience
