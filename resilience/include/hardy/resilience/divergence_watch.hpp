#pragma once
// Whether a job's training loss has gone wrong: a pure decision over the committed steps' losses,
// with no clock, no ranks and no files, so that it is unit-tested with scripted losses. The
// session's divergence hook feeds it and reports what it finds; nothing here acts on the job.
//
// The rule (docs/training.md, "A diverging job"):
//   early level = the mean loss of the first `early_steps` committed steps this launch trains
//                 (non-finite losses are left out of it); by default the first step's alone,
//                 the untrained network's loss for a new job, since a rate far too high can
//                 double the loss by the second step (issue 70's CosmoFlow: 0.54, then 1.24);
//   a step is above when its loss is not finite or exceeds factor x the early level;
//   the job is diverging once `window` consecutive committed steps were above. It is reported
//   once per launch, at the step that completes the window.
// A step trained again after a recovery (the same step number or an earlier one) replaces what
// the watch had seen from that step on.
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace hardy::resilience {

struct DivergenceThresholds {
  // How far above its early level the loss must stay; 0 turns the watch off, else > 1.
  double factor = 2.0;
  // For how many consecutive committed steps, >= 1.
  long window = 20;
  // How many first committed steps make the early level, >= 1.
  long early_steps = 1;
};

// What the training_diverging event says.
struct DivergenceReport {
  long step = 0;           // the step that completed the window
  long since_step = 0;     // the window's first step
  double early_loss = 0;   // the early level
  double window_mean = 0;  // the mean of the window's finite losses (NaN when none is)
  double loss = 0;         // the loss at `step`
  long non_finite = 0;     // losses in the window that were NaN or infinite
};

class DivergenceWatch {
 public:
  // Throws InvalidArgument for thresholds outside their documented ranges.
  explicit DivergenceWatch(DivergenceThresholds thresholds);

  // One committed step's loss (the mean over the global batch). Returns the report the first
  // time the rule above holds, nothing before or after.
  std::optional<DivergenceReport> observe(long step, double loss);

  bool enabled() const { return thresholds_.factor > 0; }
  const DivergenceThresholds& thresholds() const { return thresholds_; }

 private:
  DivergenceThresholds thresholds_;
  std::vector<std::pair<long, double>> early_;  // (step, loss) until the early level is known
  std::optional<double> early_level_;
  std::deque<std::pair<long, double>> above_;  // the current run of steps above, oldest first
  bool reported_ = false;
};

}  // namespace hardy::resilience
