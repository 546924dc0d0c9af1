#pragma once
// The model and what trains it on this rank: the kernels' backend, the model, the optimizer, the
// sampler of global batches, their assembly and prefetching, the loss scaler and the gradient
// reducer, and the committed step they stand at.
//
// A step is a short sequence of calls that the session makes in order (draw_batch, load_batch,
// compute, finish_reduction, update, advance) so that it can watch each one, and fail or stop
// between them. With lagged gradients (--gradient-lag 1) the next step's draw_batch, load_batch
// and compute come between a step's compute and its finish_reduction: the trainer then holds two
// computed steps, each with its own batch and reducer, and the oldest is the one finished,
// updated and committed (computed_steps). The trainer knows nothing of failures, events or the run
// directory: the session (training_session.cpp), recovery, the state store, the domain
// coordinator and the step hooks reach it only through this interface. Its state is what a
// checkpoint holds of it (capture_into, apply).
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "hardy/checkpoint/training_state.hpp"
#include "hardy/comm/communicator.hpp"
#include "hardy/comm/cross_rank_sum.hpp"
#include "hardy/comm/gradient_reducer.hpp"
#include "hardy/core/compute/host_mirror.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/prefetcher.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/nn/loss_scaler.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/nn/optimizer.hpp"
#include "hardy/resilience/training_config.hpp"

namespace hardy::resilience {

// What identifies a global batch across ranks (their samplers must agree on it).
std::uint64_t plan_digest(const core::GlobalBatch& batch);
// Collective: every rank drew the global batch of `digest` for `at_step` (Error otherwise: the
// samplers' states diverged).
void check_same_plan(comm::Communicator& comm, std::uint64_t digest, long at_step);

// What computing a step gave, kept until the step is committed.
struct ComputedStep {
  long step = 0;
  float grad_scale = 0;     // what divided its loss gradient (the global batch's pixels or targets)
  std::size_t samples = 0;  // the samples it covers here (loaded, less the skipped)
  std::uint64_t plan_digest = 0;  // of its global batch's sample indices (equal on every rank)
  core::BatchLoad load;           // its wait for data and the samples it skipped
};

class Trainer {
 public:
  // Which of a global batch's samples this rank loads, in the order it loads them.
  using Placement = std::function<std::vector<std::size_t>(const core::GlobalBatch&)>;
  // Called as each parameter's gradient is handed to the reducer (`ready` of `count` so far).
  using GradientReady = std::function<void(std::size_t ready, std::size_t count)>;

  // `config` is read, never copied: the session completes it (steps from epochs) before the first
  // step. Initialises the model and the optimizer from config.seed; `threads` says how many
  // threads the kernels and the loaders use.
  Trainer(const TrainingConfig& config, comm::Communicator& comm, const core::SampleSource& train,
          ThreadSplit threads);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // ---- one step ----
  // The next global batch of `global_batch` samples (the sampler moves on).
  const core::GlobalBatch& draw_batch(std::size_t global_batch);
  // plan_digest() of the batch drawn last.
  std::uint64_t drawn_plan_digest() const {
    return slots_[slot_after(computed_)].computed.plan_digest;
  }
  // The batch of the step committed last (without lag, before it is committed, also of the step
  // being finished).
  const core::GlobalBatch& batch() const { return slots_[committed_slot_].batch; }
  // The batch of the oldest computed step, the one being finished (with lag, not batch()).
  const core::GlobalBatch& oldest_batch() const { return slots_[oldest_slot_].batch; }
  // This rank's share of the drawn batch into the input tensors. The prefetcher is told this step's
  // samples and those of the next --prefetch-batches steps, read from a copy of the sampler, and
  // the next step's share starts loading into a second pair of input tensors, with its copy to
  // the device, while this step computes; the next call takes it if its share is the same (after
  // a rollback, a restore or a shrink it is not, and it loads afresh: a sample's content depends
  // on its index alone). Bad samples are always skipped here: whether one ends the job is
  // decided by every rank.
  const core::BatchLoad& load_batch(const Placement& placement);
  // Forward pass, loss and backward pass, each gradient handed to the reducer as soon as it is
  // ready. `grad_scale` divides the loss gradient (by the global batch's pixels, or targets for
  // regression: the MSE); the loss scale multiplies it. Returns this rank's loss sum. The step is
  // computed until advance(). Its loss is read later (oldest_loss_sum), so that the step's
  // kernels are all queued before the host waits for any of them.
  void compute(float grad_scale, const GradientReady& on_ready);
  // Steps computed and not yet committed: at most 1, or 2 with --gradient-lag 1 between a compute
  // and the older step's advance().
  int computed_steps() const { return computed_; }
  // The oldest of them: the one finish_reduction(), update() and advance() act on.
  const ComputedStep& oldest_computed() const { return slots_[oldest_slot_].computed; }
  // The samples this rank loaded for the step computed last (none computed: 0).
  std::size_t newest_computed_samples() const {
    return computed_ > 0 ? slots_[slot_after(computed_ - 1)].computed.samples : 0;
  }
  // This rank's loss sum of the oldest computed step: waits for its forward pass on the device.
  // Throws what the loss found (a label out of range), every time it is asked.
  double oldest_loss_sum();
  // Waits for the oldest computed step's gradient allreduce and takes its loss scale off.
  void finish_reduction();
  // The optimizer step, unless the loss scaler skips it (non-finite gradients): whether it ran.
  bool update(float lr);
  // The optimizer step regardless of the gradients (the other domains' committed sums).
  void apply_update(float lr);
  void divide_gradients(double divisor);
  // The oldest computed step is committed: the trainer stands at the next one.
  void advance();

  // ---- state ----
  long step() const { return step_; }
  double last_loss() const { return last_loss_; }
  void set_last_loss(double loss) { last_loss_ = loss; }
  float loss_scale() const { return scaler_.scale(); }
  // The model, the optimizer and the loop's scalars (step, sampler, loss, loss scale). Reuses the
  // state's memory, so that a copy per step allocates nothing.
  void capture_into(checkpoint::TrainingState& state) const;
  // The same without copying the tensors: the committed state's tensors where they live (the
  // model's normalization buffers as they were before an uncommitted step), and the scalars into
  // `state` (its tensor lists left as they are). Valid until the trainer next changes them.
  checkpoint::StateSources committed_sources() const;
  void capture_scalars_into(checkpoint::TrainingState& state) const;
  // Forgets the computed steps that were not committed (a rollback): the sampler and the batch
  // norm's statistics go back to where the oldest of them found them, and their reductions are
  // dropped. Parameters and optimizer state need nothing: only a committed step's update
  // changes them.
  void drop_uncommitted();
  // The other way; throws InvalidArgument when the tensors do not fit this model. Forgets the
  // computed steps: the next compute starts from the restored step.
  void apply(const checkpoint::TrainingState& state);
  // The loop's scalars alone (when the tensors arrive by another way).
  void restore_scalars(const checkpoint::TrainingState& state);
  // Every tensor of the state: parameters, buffers (batch statistics), optimizer state, created
  // where the optimizer makes them lazily.
  std::vector<core::Tensor*> state_tensors();
  // What the fault domains sum when they meet: the gradients, and with `whole_state` the state
  // tensors too (domains that trained alone hold different ones). Host tensors, which the
  // domains' gloo group carries: the live ones on the CPU backend; on a GPU, page-locked copies
  // of the device tensors, filled here, which take_exchanged() writes back.
  std::span<core::Tensor* const> exchanged_tensors(bool whole_state);
  // After the domains' sums were put into exchanged_tensors(): the live tensors take them (a
  // no-op on the CPU backend, where they are the live ones). With the whole state, the batch
  // norm's statistics are the domains' average from here on, also for a step computed ahead
  // (--gradient-lag 1): a state captured, or a rollback, while it is in flight holds the
  // average, which its own forward pass would have moved (that move is dropped: every domain
  // goes on from the same statistics).
  void take_exchanged();
  // After a shrink: the reducer and the batch norm's sums go over the survivors' communicator.
  // Says how the device transport followed, if the reducers have one (NCCL).
  comm::TransportRebuild rebind(comm::Communicator& comm, std::span<const int> lost);

  core::Backend& backend() const { return *backend_; }
  core::Model& model() { return model_; }
  const core::Model& model() const { return model_; }
  core::Optimizer& optimizer() { return *optimizer_; }
  // The reducer of the next step to compute (every step's, without lag).
  comm::GradientReducer& reducer() { return *slots_[slot_after(computed_)].reducer; }
  const core::SamplePrefetcher& prefetcher() const { return prefetcher_; }
  int kernel_threads() const { return kernel_threads_; }
  const core::EpochSampler& sampler() const { return sampler_; }

 private:
  // What a computed step needs until it is committed. One slot, or two used in turn with lag.
  struct StepSlot {
    core::GlobalBatch batch;
    core::SamplerState sampler_before;  // where the sampler stood before drawing the batch
    ComputedStep computed;
    // The dataset indices of the batch's rows on this rank: with the step, they pick dropout's
    // masks, so that a step computed again (a rollback, a rebalance) draws the same ones.
    std::vector<std::uint64_t> sample_keys;
    std::unique_ptr<comm::GradientReducer> reducer;
    float loss_scale = 1;       // the one compute() multiplied the loss gradient by
    core::PendingSum loss_sum;  // this rank's
    // The batch norm's running statistics before this step's forward pass: a committed state
    // holds them as they were then when a later step is already computed.
    std::vector<core::Tensor> buffers_before;
  };
  std::size_t slot_after(int computed) const {
    return (oldest_slot_ + static_cast<std::size_t>(computed)) % slots_.size();
  }
  void forget_computed_steps();
  // Error unless the gradients in place are the step's to update with (gradients_in_place_).
  void require_gradients_in_place();
  // Tells the prefetcher this rank's samples: `mine` (empty when already taken) and those of the
  // next --prefetch-batches steps, read from a copy of the sampler. Returns the next step's.
  std::vector<std::size_t> announce_ahead(const Placement& placement,
                                          const std::vector<std::size_t>& mine,
                                          std::size_t global_batch);
  // Starts loading the next step's share and its copy to the backend while this step computes
  // (core::BatchAssembler::stage); taken by the next load_batch() if the plan still holds.
  void stage(std::vector<std::size_t> next);
  // Whether stage() runs (--overlap-input, prefetching on).
  static bool stages_input(const TrainingConfig& config, const core::Backend& backend);

  const TrainingConfig& config_;
  int kernel_threads_;
  std::unique_ptr<core::Backend> backend_;
  core::Model model_;
  std::unique_ptr<core::Optimizer> optimizer_;
  core::EpochSampler sampler_;
  core::BatchAssembler assembler_;
  // Reads the training samples only (never state that recovery changes), so recovery leaves it
  // alone: the next step's announcement follows the restored sampler and the new world size.
  core::SamplePrefetcher prefetcher_;
  // fp16: dynamic loss scaling; bf16 and f32: a static scale of 1 (still skips non-finite steps).
  core::LossScaler scaler_;
  comm::CommunicatorSum cross_rank_;  // the batch norm's sums over ranks
  // Each with its gradient allreduce: MPI buckets for host gradients, NCCL for device ones.
  std::vector<StepSlot> slots_;
  std::size_t oldest_slot_ = 0;     // the oldest computed step's, when there is one
  std::size_t committed_slot_ = 0;  // the last committed step's
  int computed_ = 0;
  // Where the sampler stood after the last committed step's batch: what a rollback or a
  // captured state goes back to.
  core::SamplerState committed_sampler_;
  std::vector<float> class_weights_;
  core::Tensor fields_, labels_, dlogits_;
  core::HostMirror exchange_mirror_;    // what the domains exchange, on the host
  bool exchanged_whole_state_ = false;  // exchanged_tensors(true): the state is exchanged too
  // The gradients hold a reduced step's sums (finish_reduction, take_exchanged) that no later
  // backward pass overwrote: what update() and apply_update() require, and consume.
  bool gradients_in_place_ = false;
  // The gradients are the domains' sums (take_exchanged), not the reducer's: update() checks
  // them, not the reducer's buckets, for non-finite values, so that every domain decides alike.
  bool gradients_exchanged_ = false;
  long step_ = 0;  // steps committed
  double last_loss_ = 0;
};

}  // namespace hardy::resilience
