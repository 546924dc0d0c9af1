#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "data_sources.hpp"
#include "hardy/checkpoint/model_file.hpp"
#include "hardy/core/batch.hpp"
#include "hardy/core/error.hpp"
#include "hardy/core/evaluation.hpp"
#include "hardy/core/event_log.hpp"
#include "hardy/core/sampler.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/run_directory.hpp"
#include "hardy/jobs/train_spec.hpp"

namespace hardy::jobs {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  return fmt::format("{:02d}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

class TrainingJob {
 public:
  explicit TrainingJob(TrainSpec spec)
      : spec_(std::move(spec)),
        run_dir_(spec_.run_dir),
        events_(run_dir_.events()),
        metrics_(run_dir_.metrics()),
        backend_(core::make_backend(spec_.backend)),
        data_(open_data(spec_)),
        model_(*backend_, spec_.model),
        optimizer_(core::make_optimizer(spec_.optimizer, *backend_)),
        sampler_(data_.train->size(), spec_.seed),
        assembler_(*backend_, data_.train->shape()) {
    if (spec_.steps == 0) {
      const long per_epoch = static_cast<long>((data_.train->size() + spec_.global_batch - 1) / spec_.global_batch);
      spec_.steps = per_epoch * spec_.epochs;
    }
    spec_.schedule.total_steps = spec_.steps;
    spec_.schedule.validate();
    class_weights_ = resolve_class_weights(spec_.class_weights, *data_.train, spec_.model.num_classes);
    model_.initialize(spec_.seed);
    run_dir_.write_file("config.ini", spec_.config_ini);
  }

  int run() {
    events_.emit("job_started", {{"hardy_version", HARDY_VERSION},
                                 {"host", hostname()},
                                 {"pid", ::getpid()},
                                 {"world_size", 1},
                                 {"backend", backend_->name()},
                                 {"threads", omp_get_max_threads()},
                                 {"steps", spec_.steps},
                                 {"global_batch", spec_.global_batch},
                                 {"parameters", model_.parameter_count()},
                                 {"data", data_.train->describe()},
                                 {"run_dir", run_dir_.path().string()}});
    std::cout << fmt::format("hardy: training {} parameters on {} ({} threads), {} steps of {} samples\n",
                             model_.parameter_count(), data_.train->describe(), omp_get_max_threads(), spec_.steps,
                             spec_.global_batch);
    try {
      train_loop();
      model_path_ = run_dir_.final_model();
      checkpoint::save_model(model_, model_path_);
      nlohmann::json finished = {{"status", "completed"}, {"steps", step_}, {"final_loss", last_loss_},
                                 {"model", model_path_.string()}};
      if (data_.held_out) {
        const auto confusion = core::evaluate(model_, *data_.held_out, static_cast<std::size_t>(spec_.global_batch));
        finished["mean_iou"] = confusion.mean_iou();
        finished["iou"] = confusion.iou();
        std::cout << fmt::format("hardy: held-out mean IoU {:.3f} (IoU per class: {:.3f}) on {}\n",
                                 confusion.mean_iou(), fmt::join(confusion.iou(), ", "), data_.held_out->describe());
      }
      events_.emit("job_finished", finished);
    } catch (const std::exception& e) {
      events_.emit("job_finished", {{"status", "failed"}, {"steps", step_}, {"error", e.what()}});
      throw;
    }
    std::cout << "hardy: run directory " << run_dir_.path().string() << "\n";
    return 0;
  }

 private:
  void train_loop() {
    const auto shape = data_.train->shape();
    const float grad_scale = 1.0f / static_cast<float>(spec_.global_batch * shape.height * shape.width);
    const auto& params = model_.parameters();
    Tensor fields, labels, dlogits;
    const auto job_start = Clock::now();
    double samples_seen = 0;
    for (; step_ < spec_.steps; ++step_) {
      const auto step_start = Clock::now();
      const auto batch = sampler_.next(static_cast<std::size_t>(spec_.global_batch));
      assembler_.load(*data_.train, batch.samples, fields, labels);
      const Tensor& logits = model_.forward(fields, /*training=*/true);
      core::ensure_tensor(*backend_, dlogits, logits.dims());
      const double loss_sum = backend_->softmax_cross_entropy(logits, labels, class_weights_, grad_scale, dlogits);
      model_.backward(dlogits);
      const float lr = spec_.schedule.at(step_);
      optimizer_->step(params, lr);
      backend_->synchronize();

      last_loss_ = loss_sum * grad_scale;
      if (!std::isfinite(last_loss_))
        throw Error(fmt::format("the loss became {} at step {}; lower --lr or check the data", last_loss_, step_ + 1));
      const double step_s = seconds_since(step_start);
      samples_seen += static_cast<double>(spec_.global_batch);
      const double rate = static_cast<double>(spec_.global_batch) / step_s;
      metrics_.write({{"step", step_ + 1},
                      {"epoch", batch.epochs.front()},
                      {"loss", last_loss_},
                      {"lr", lr},
                      {"samples_per_s", rate},
                      {"step_s", step_s},
                      {"compute_s", step_s},
                      {"world_size", 1}});
      if ((step_ + 1) % spec_.log_every == 0 || step_ + 1 == spec_.steps || step_ == 0) {
        const double elapsed = seconds_since(job_start);
        const double average_rate = samples_seen / elapsed;
        const double eta = static_cast<double>(spec_.steps - step_ - 1) * spec_.global_batch / average_rate;
        std::cout << fmt::format("step {:>6}/{} | epoch {:>3} | loss {:.4f} | lr {:.2e} | {:7.1f} samples/s | ETA {}\n",
                                 step_ + 1, spec_.steps, batch.epochs.front(), last_loss_, lr, average_rate,
                                 format_duration(eta))
                  << std::flush;
      }
    }
  }

  using Tensor = core::Tensor;
  TrainSpec spec_;
  RunDirectory run_dir_;
  core::EventLog events_;
  core::JsonLines metrics_;
  std::unique_ptr<core::Backend> backend_;
  DataSources data_;
  core::DeepLabV3Plus model_;
  std::unique_ptr<core::Optimizer> optimizer_;
  core::EpochSampler sampler_;
  core::BatchAssembler assembler_;
  std::vector<float> class_weights_;
  long step_ = 0;
  double last_loss_ = 0;
  std::filesystem::path model_path_;
};

}  // namespace

int train_command(const std::vector<std::string>& args) {
  auto spec = parse_train_spec(args);
  if (!spec) return 0;
  if (spec->threads > 0) omp_set_num_threads(spec->threads);
  TrainingJob job(std::move(*spec));
  return job.run();
}

}  // namespace hardy::jobs
