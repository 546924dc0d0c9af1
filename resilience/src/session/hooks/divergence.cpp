// --divergence-factor, --divergence-window: the committed losses go to the divergence watch
// (session/divergence_watch.hpp); when it finds the job diverging, the event training_diverging
// and one line on stderr say so. Nothing else happens: the job trains on.
#include <fmt/format.h>

#include <cmath>
#include <iostream>

#include "hardy/resilience/divergence_watch.hpp"
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

namespace {

class DivergenceHook final : public StepHook {
 public:
  DivergenceHook(const Trainer& trainer, const Membership& membership, core::EventLog& events,
                 DivergenceThresholds thresholds)
      : StepHook("divergence watch", std::nullopt),
        trainer_(trainer),
        membership_(membership),
        events_(events),
        watch_(thresholds) {}

  void after_commit(const CommittedStep&) override {
    const auto report = watch_.observe(trainer_.step(), trainer_.last_loss());
    if (!report) return;
    const auto& limits = watch_.thresholds();
    nlohmann::json fields = {{"step", report->step},
                             {"since_step", report->since_step},
                             {"early_loss", report->early_loss},
                             {"factor", limits.factor},
                             {"window", limits.window},
                             {"early_steps", limits.early_steps},
                             {"non_finite", report->non_finite}};
    if (std::isfinite(report->loss)) fields["loss"] = report->loss;
    if (std::isfinite(report->window_mean)) fields["window_mean_loss"] = report->window_mean;
    events_.emit("training_diverging", std::move(fields));
    if (!membership_.writes_run_files()) return;
    std::cerr << fmt::format(
                     "hardy: training is diverging: the loss stayed above {:g} x its early level "
                     "({:.4g}, {}) for {} steps, steps {}-{} (mean {:.4g}{}; {:.4g} at step {}). "
                     "The job trains on; a smaller --lr or the network's recipe (hardy train "
                     "--help) may help.\n",
                     limits.factor, report->early_loss,
                     limits.early_steps == 1
                         ? std::string("the first step's loss")
                         : fmt::format("the mean of the first {} steps", limits.early_steps),
                     limits.window, report->since_step, report->step, report->window_mean,
                     report->non_finite > 0 ? fmt::format(", {} not finite", report->non_finite)
                                            : std::string(),
                     report->loss, report->step)
              << std::flush;
  }

 private:
  const Trainer& trainer_;
  const Membership& membership_;
  core::EventLog& events_;
  DivergenceWatch watch_;
};

}  // namespace

std::unique_ptr<StepHook> divergence_hook(const Trainer& trainer, const Membership& membership,
                                          core::EventLog& events,
                                          const DivergenceThresholds& thresholds) {
  return std::make_unique<DivergenceHook>(trainer, membership, events, thresholds);
}

}  // namespace hardy::resilience
