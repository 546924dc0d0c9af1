#include "session/job_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <iostream>

#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/core/nn/evaluation.hpp"
#include "hardy/core/version.hpp"

namespace hardy::resilience {

nlohmann::json job_started_fields(const TrainingConfig& config, const Membership& membership,
                                  Trainer& trainer, const core::DataSources& data, bool domains) {
  nlohmann::json started = {{"hardy_version", HARDY_VERSION},
                            {"world_size", membership.size()},
                            {"fault_tolerant", membership.comm().fault_tolerant()},
                            {"ranks_per_node", config.ranks_per_node},
                            {"backend", trainer.backend().name()},
                            {"precision", core::to_string(config.precision)},
                            {"threads_per_rank", omp_get_max_threads()},
                            {"steps", config.steps},
                            {"global_batch", config.global_batch},
                            {"parameters", trainer.model().parameter_count()},
                            {"model", core::to_string(config.model.architecture)},
                            {"gradient_buckets", trainer.reducer().bucket_count()},
                            {"data", data.train->describe()},
                            {"resume", config.resume},
                            {"run_dir", config.run_dir.string()},
                            {"domains", config.domain_count}};
  // Where this domain's leader listens for the others: which network the heals and the
  // gradient sums take (--domain-interface).
  if (domains)
    started["domain_address"] =
        config.domain_address.empty() ? membership.host() : config.domain_address;
  return started;
}

void print_training_line(const TrainingConfig& config, const Membership& membership,
                         Trainer& trainer, const core::DataSources& data) {
  std::cout << fmt::format(
      "hardy: training {} parameters in {} on {} with {} rank(s) x {} thread(s){}, {} steps of {} "
      "samples\n",
      trainer.model().parameter_count(), core::to_string(config.precision), data.train->describe(),
      membership.size(), omp_get_max_threads(),
      membership.comm().fault_tolerant() ? " (fault tolerant)" : "", config.steps,
      config.global_batch);
}

void save_and_evaluate(const TrainingConfig& config, Trainer& trainer,
                       const core::DataSources& data, const LoopProgress& progress,
                       std::size_t skipped_samples, nlohmann::json& finished) {
  checkpoint::save_model(trainer.model(), config.run_dir / "model.h5");
  finished["model"] = (config.run_dir / "model.h5").string();
  const auto batch = static_cast<std::size_t>(config.global_batch);
  if (data.held_out && config.model.regression()) {
    const auto errors = core::evaluate_regression(trainer.model(), *data.held_out, batch);
    finished["mae"] = errors.mean_absolute_error();
    finished["target_mae"] = errors.mean_absolute_errors();
    std::cout << fmt::format(
        "hardy: held-out mean absolute error {:.4f} (per target: {:.4f}) on {}\n",
        errors.mean_absolute_error(), fmt::join(errors.mean_absolute_errors(), ", "),
        data.held_out->describe());
  } else if (data.held_out) {
    const auto confusion = core::evaluate(trainer.model(), *data.held_out, batch);
    finished["mean_iou"] = confusion.mean_iou();
    finished["iou"] = confusion.iou();
    std::cout << fmt::format("hardy: held-out mean IoU {:.3f} (IoU per class: {:.3f}) on {}\n",
                             confusion.mean_iou(), fmt::join(confusion.iou(), ", "),
                             data.held_out->describe());
  }
  std::cout << fmt::format(
      "hardy: waited for data {:.2f} s, {:.1f}% of the step time ({} loader thread(s), {} "
      "steps ahead){}\n",
      progress.data_wait_total_s, 100 * finished.value("data_wait_fraction", 0.0),
      trainer.prefetcher().workers(), config.prefetch_batches,
      skipped_samples == 0 ? std::string()
                           : fmt::format("; {} bad sample(s) skipped", skipped_samples));
  std::cout << "hardy: run directory " << config.run_dir.string() << "\n";
}

}  // namespace hardy::resilience
