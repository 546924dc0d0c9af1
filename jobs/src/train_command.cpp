#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "data_sources.hpp"
#include "hardy/checkpoint/model_file.hpp"
#include "hardy/comm/cross_rank_sum.hpp"
#include "hardy/comm/gradient_buckets.hpp"
#include "hardy/comm/mpi_communicator.hpp"
#include "hardy/core/batch.hpp"
#include "hardy/core/digest.hpp"
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
using core::Tensor;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  return fmt::format("{:02d}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

// Ranks sharing a host split its cores, so that an oversubscribed node does not thrash.
int threads_per_rank(comm::Communicator& comm, const std::vector<std::string>& hosts) {
  const auto local = std::count(hosts.begin(), hosts.end(), hosts[static_cast<std::size_t>(comm.rank())]);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / static_cast<int>(local));
}

class TrainingJob {
 public:
  TrainingJob(TrainSpec spec, comm::Communicator& world)
      : spec_(std::move(spec)),
        comm_(world),
        cross_rank_(world),
        hosts_(world.hostnames()),
        backend_(core::make_backend(spec_.backend)),
        data_(open_data(spec_)),
        model_(*backend_, spec_.model),
        optimizer_(core::make_optimizer(spec_.optimizer, *backend_)),
        sampler_(data_.train->size(), spec_.seed),
        assembler_(*backend_, data_.train->shape()) {
    if (spec_.global_batch < comm_.size())
      throw InvalidArgument(fmt::format("--global-batch {} is smaller than the {} ranks of the job; every rank "
                                        "needs at least one sample per step",
                                        spec_.global_batch, comm_.size()));
    if (spec_.steps == 0) {
      const long per_epoch = static_cast<long>((data_.train->size() + spec_.global_batch - 1) / spec_.global_batch);
      spec_.steps = per_epoch * spec_.epochs;
    }
    spec_.schedule.total_steps = spec_.steps;
    spec_.schedule.validate();
    omp_set_num_threads(spec_.threads > 0 ? spec_.threads : threads_per_rank(comm_, hosts_));
    class_weights_ = resolve_class_weights(spec_.class_weights, *data_.train, spec_.model.num_classes);
    model_.initialize(spec_.seed);
    // Gradients become ready from the classifier back to the stem: buckets in that order let the
    // first allreduces start while the encoder's backward pass still runs.
    const auto& params = model_.parameters();
    std::vector<core::Parameter*> backward_order(params.rbegin(), params.rend());
    buckets_.emplace(comm_, std::move(backward_order), static_cast<std::size_t>(spec_.bucket_mib * (1 << 20)));
    if (comm_.rank() == 0) {
      run_dir_.emplace(spec_.run_dir);
      events_ = core::EventLog(run_dir_->events());
      metrics_ = core::JsonLines(run_dir_->metrics());
      if (spec_.audit_samples) audit_ = core::JsonLines(run_dir_->path() / "samples.jsonl");
      run_dir_->write_file("config.ini", spec_.config_ini);
    }
  }

  int run() {
    announce_ranks();
    const bool lead = comm_.rank() == 0;
    events_.emit("job_started", {{"hardy_version", HARDY_VERSION},
                                 {"world_size", comm_.size()},
                                 {"fault_tolerant", comm_.fault_tolerant()},
                                 {"backend", backend_->name()},
                                 {"threads_per_rank", omp_get_max_threads()},
                                 {"steps", spec_.steps},
                                 {"global_batch", spec_.global_batch},
                                 {"parameters", model_.parameter_count()},
                                 {"gradient_buckets", buckets_->bucket_count()},
                                 {"data", data_.train->describe()},
                                 {"run_dir", spec_.run_dir.string()}});
    if (lead)
      std::cout << fmt::format(
          "hardy: training {} parameters on {} with {} rank(s) x {} thread(s), {} steps of {} samples\n",
          model_.parameter_count(), data_.train->describe(), comm_.size(), omp_get_max_threads(), spec_.steps,
          spec_.global_batch);
    try {
      train_loop();
      nlohmann::json finished = {{"status", "completed"}, {"steps", step_}, {"final_loss", last_loss_}};
      if (lead) {
        checkpoint::save_model(model_, run_dir_->final_model());
        finished["model"] = run_dir_->final_model().string();
        if (data_.held_out) {
          const auto confusion = core::evaluate(model_, *data_.held_out, static_cast<std::size_t>(spec_.global_batch));
          finished["mean_iou"] = confusion.mean_iou();
          finished["iou"] = confusion.iou();
          std::cout << fmt::format("hardy: held-out mean IoU {:.3f} (IoU per class: {:.3f}) on {}\n",
                                   confusion.mean_iou(), fmt::join(confusion.iou(), ", "), data_.held_out->describe());
        }
      }
      events_.emit("job_finished", finished);
    } catch (const std::exception& e) {
      events_.emit("job_finished", {{"status", "failed"}, {"steps", step_}, {"error", e.what()}});
      throw;
    }
    if (lead) std::cout << "hardy: run directory " << spec_.run_dir.string() << "\n";
    return 0;
  }

 private:
  // One rank_started event per rank, written by rank 0 from every rank's pid and host.
  void announce_ranks() {
    std::vector<double> pids(static_cast<std::size_t>(comm_.size()), 0.0);
    pids[static_cast<std::size_t>(comm_.rank())] = static_cast<double>(::getpid());
    comm_.allreduce_sum(pids);
    for (int r = 0; r < comm_.size(); ++r)
      events_.emit("rank_started", {{"rank", r},
                                    {"pid", static_cast<long>(pids[static_cast<std::size_t>(r)])},
                                    {"host", hosts_[static_cast<std::size_t>(r)]}});
  }

  // All ranks must draw the same global batch: a cheap cross-check of their sampler states.
  void check_same_plan(const core::GlobalBatch& batch) {
    std::uint64_t digest = core::xxhash64(std::as_bytes(std::span(batch.samples)));
    std::vector<double> check{static_cast<double>(digest & 0xffffffu), static_cast<double>((digest >> 24) & 0xffffffu)};
    const std::vector<double> mine = check;
    comm_.allreduce_sum(check);
    const int agree = check[0] == mine[0] * comm_.size() && check[1] == mine[1] * comm_.size();
    std::vector<double> all_agree{static_cast<double>(agree)};
    comm_.allreduce_sum(all_agree);
    if (all_agree[0] != comm_.size())
      throw Error(fmt::format("step {}: the ranks planned different global batches (sampler states diverged)", step_ + 1));
  }

  void verify_replicas(long step) {
    const std::uint64_t digest = core::parameter_digest(*backend_, model_.parameters());
    std::uint64_t reference = digest;
    comm_.broadcast(std::as_writable_bytes(std::span(&reference, 1)), 0);
    std::vector<double> mismatches{reference != digest ? 1.0 : 0.0};
    comm_.allreduce_sum(mismatches);
    if (mismatches[0] != 0)
      throw Error(fmt::format("step {}: {} rank(s) hold parameters that differ from rank 0's", step, mismatches[0]));
    events_.emit("replicas_verified", {{"step", step}, {"digest", fmt::format("{:016x}", digest)}});
  }

  void write_audit(const core::GlobalBatch& batch) {
    if (!audit_.enabled()) return;
    nlohmann::json line = {{"step", step_ + 1}, {"epoch", batch.epochs.front()}, {"samples", batch.samples}};
    const auto boundary = std::find_if(batch.epochs.begin(), batch.epochs.end(),
                                       [&](std::int64_t e) { return e != batch.epochs.front(); });
    if (boundary != batch.epochs.end()) line["next_epoch_from"] = boundary - batch.epochs.begin();
    audit_.write(line);
  }

  void train_loop() {
    const auto shape = data_.train->shape();
    const float grad_scale = 1.0f / static_cast<float>(spec_.global_batch * shape.height * shape.width);
    const auto& params = model_.parameters();
    const std::size_t count = params.size();
    Tensor fields, labels, dlogits;
    const auto job_start = Clock::now();
    double samples_seen = 0;
    for (; step_ < spec_.steps; ++step_) {
      const auto step_start = Clock::now();
      const auto batch = sampler_.next(static_cast<std::size_t>(spec_.global_batch));
      if (comm_.size() > 1) check_same_plan(batch);
      const auto shard = core::shard_of(batch.samples.size(), comm_.rank(), comm_.size());
      const std::span<const std::size_t> mine(batch.samples.data() + shard.begin, shard.size());
      assembler_.load(*data_.train, mine, fields, labels);

      const Tensor& logits = model_.forward(fields, /*training=*/true, &cross_rank_);
      core::ensure_tensor(*backend_, dlogits, logits.dims());
      std::vector<double> loss{backend_->softmax_cross_entropy(logits, labels, class_weights_, grad_scale, dlogits)};
      model_.backward(dlogits, [&](std::size_t i) { buckets_->mark_ready(count - 1 - i); }, &cross_rank_);
      const double compute_s = seconds_since(step_start);
      // The loss scale already divides by the global batch, so the sum over ranks is the mean.
      const auto reduce_start = Clock::now();
      buckets_->finish(1.0f);
      comm_.allreduce_sum(loss);
      const double allreduce_s = seconds_since(reduce_start);
      const float lr = spec_.schedule.at(step_);
      optimizer_->step(params, lr);
      backend_->synchronize();

      last_loss_ = loss[0] * grad_scale;
      if (!std::isfinite(last_loss_))
        throw Error(fmt::format("the loss became {} at step {}; lower --lr or check the data", last_loss_, step_ + 1));
      write_audit(batch);
      if (spec_.verify_replicas_every > 0 && (step_ + 1) % spec_.verify_replicas_every == 0)
        verify_replicas(step_ + 1);
      const double step_s = seconds_since(step_start);
      samples_seen += static_cast<double>(spec_.global_batch);
      metrics_.write({{"step", step_ + 1},
                      {"epoch", batch.epochs.front()},
                      {"loss", last_loss_},
                      {"lr", lr},
                      {"samples_per_s", static_cast<double>(spec_.global_batch) / step_s},
                      {"step_s", step_s},
                      {"compute_s", compute_s},
                      {"allreduce_s", allreduce_s},
                      {"world_size", comm_.size()}});
      if (comm_.rank() == 0 && ((step_ + 1) % spec_.log_every == 0 || step_ + 1 == spec_.steps || step_ == 0)) {
        const double average_rate = samples_seen / seconds_since(job_start);
        const double eta = static_cast<double>(spec_.steps - step_ - 1) * spec_.global_batch / average_rate;
        std::cout << fmt::format("step {:>6}/{} | epoch {:>3} | loss {:.4f} | lr {:.2e} | {:7.1f} samples/s | ETA {}\n",
                                 step_ + 1, spec_.steps, batch.epochs.front(), last_loss_, lr, average_rate,
                                 format_duration(eta))
                  << std::flush;
      }
    }
  }

  TrainSpec spec_;
  comm::Communicator& comm_;
  comm::CommunicatorSum cross_rank_;
  std::vector<std::string> hosts_;
  std::optional<RunDirectory> run_dir_;  // rank 0 only: it alone writes the run directory
  core::EventLog events_;
  core::JsonLines metrics_, audit_;
  std::unique_ptr<core::Backend> backend_;
  DataSources data_;
  core::DeepLabV3Plus model_;
  std::unique_ptr<core::Optimizer> optimizer_;
  core::EpochSampler sampler_;
  core::BatchAssembler assembler_;
  std::optional<comm::GradientBuckets> buckets_;
  std::vector<float> class_weights_;
  long step_ = 0;
  double last_loss_ = 0;
};

}  // namespace

int train_command(const std::vector<std::string>& args) {
  auto spec = parse_train_spec(args);
  if (!spec) return 0;
  auto world = comm::MpiCommunicator::world();
  TrainingJob job(std::move(*spec), *world);
  return job.run();
}

}  // namespace hardy::jobs
