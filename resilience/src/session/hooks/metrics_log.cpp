// The committed step's lines written: samples.jsonl's (--audit-samples) as step_lines.cpp kept
// it, metrics.jsonl's final (every rank keeps it; the writer of the run files writes both), and,
// every --log-every steps, the console's progress line.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "hardy/core/support/process_info.hpp"
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

nlohmann::json metrics_line(const CommittedStep& done, double step_s, const Trainer& trainer,
                            double snapshot_stall_s, double snapshot_write_cpu_s, int world_size) {
  const auto global_batch = static_cast<double>(trainer.batch().samples.size());
  nlohmann::json line = {{"step", trainer.step()},
                         {"epoch", trainer.batch().epochs.front()},
                         {"loss", trainer.last_loss()},
                         {"lr", done.lr},
                         {"global_batch", trainer.batch().samples.size()},
                         {"samples_per_s", global_batch / step_s},
                         {"step_s", step_s},
                         {"compute_s", done.compute_s},
                         {"data_wait_s", done.data_wait_s},
                         {"input_copy_s", done.input_copy_s},
                         {"input_device_s", done.input_device_s},
                         {"input_staged", done.input_staged},
                         {"allreduce_s", done.allreduce_s},
                         // The background writes that finished since the last line: with the stall,
                         // the whole cost.
                         {"snapshot_s", snapshot_stall_s + snapshot_write_cpu_s},
                         {"snapshot_stall_s", snapshot_stall_s},
                         {"snapshot_write_cpu_s", snapshot_write_cpu_s},
                         {"skipped_samples", done.skipped_samples},
                         {"world_size", world_size},
                         {"unix_time", core::unix_time()}};
  // A GPU's span from the step's first kernel to the end of its backward (gaps included): what
  // step_s holds beyond it is time in which the device had none of the step's compute to run.
  if (done.compute_span) line["compute_device_s"] = done.compute_span->seconds();
  if (!done.rank_scores.empty()) {
    const auto rounded = [](double score) { return std::round(score * 1000) / 1000; };
    const auto lowest = std::min_element(done.rank_scores.begin(), done.rank_scores.end());
    line["slowest_rank"] = lowest - done.rank_scores.begin();
    line["slowest_score"] = rounded(*lowest);
    if (done.all_scores) {
      std::vector<double> all;
      for (double score : done.rank_scores) all.push_back(rounded(score));
      line["rank_scores"] = all;
    }
  }
  return line;
}

namespace {

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  return fmt::format("{:02d}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

class MetricsLog final : public StepHook {
 public:
  explicit MetricsLog(const HookParts& parts)
      : StepHook("log write", Activity::writing_state),
        config_(parts.config),
        membership_(parts.membership),
        trainer_(parts.trainer),
        store_(parts.store),
        files_(parts.files),
        injector_(parts.injector),
        domains_(parts.domains),
        progress_(parts.progress) {}

  void after_commit(const CommittedStep& done) override {
    // --inject-failure ...:log-write: dying here leaves a step agreed, copied and snapshotted
    // but not logged, which whoever restores it must log.
    injector_.at(trainer_.step(), Phase::log_write);
    const double step_s = std::max(1e-6, seconds_since(done.started));
    progress_.data_wait_total_s += done.data_wait_s;
    progress_.step_total_s += step_s;
    files_.keep_metrics_line(metrics_line(done, step_s, trainer_, progress_.last_snapshot_s,
                                          store_.take_snapshot_write_cpu_s(),
                                          domains_.job_world_size()));
    files_.write_audit_line();  // nothing without --audit-samples
    files_.write_metrics_line();
    const long step = trainer_.step();
    if (membership_.writes_run_files() &&
        (step % config_.log_every == 0 || step == config_.steps || step == 1)) {
      const double rate = progress_.samples_seen / seconds_since(progress_.job_start);
      const auto global_batch = static_cast<double>(trainer_.batch().samples.size());
      const double eta = static_cast<double>(config_.steps - step) * global_batch / rate;
      std::cout << fmt::format(
                       "step {:>6}/{} | epoch {:>3} | loss {:.4f} | lr {:.2e} | {:7.1f} "
                       "samples/s | {} rank(s) | ETA {}\n",
                       step, config_.steps, trainer_.batch().epochs.front(), trainer_.last_loss(),
                       done.lr, rate, domains_.job_world_size(), format_duration(eta))
                << std::flush;
    }
    if (config_.sync_every() > 1 && config_.domains_meet_at(step)) files_.mark_synced();
  }

 private:
  const TrainingConfig& config_;
  const Membership& membership_;
  const Trainer& trainer_;
  StateStore& store_;
  RunFiles& files_;
  FailureInjector& injector_;
  const FaultDomains& domains_;
  LoopProgress& progress_;
};

}  // namespace

std::unique_ptr<StepHook> metrics_hook(const HookParts& parts) {
  return std::make_unique<MetricsLog>(parts);
}

}  // namespace hardy::resilience
