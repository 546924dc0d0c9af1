#include "trainer.hpp"

#include <omp.h>

#include "hardy/core/data/data_sources.hpp"

namespace hardy::resilience {

Trainer::Trainer(const TrainingConfig& config, comm::Communicator& comm,
                 const core::SampleSource& train, ThreadSplit threads)
    : config_(config),
      backend_(core::make_backend(config.backend)),
      model_(*backend_, config.model),
      optimizer_(core::make_optimizer(config.optimizer, *backend_)),
      sampler_(train.size(), config.seed),
      assembler_(*backend_, train.shape()),
      prefetcher_(train, config.prefetch_batches > 0 ? threads.loader_threads : 0, 0),
      scaler_(core::LossScalerConfig::for_activations(backend_->activation_dtype())),
      cross_rank_(comm) {
  omp_set_num_threads(threads.kernel_threads);
  class_weights_ =
      core::resolve_class_weights(config.class_weights, train, config.model.num_classes);
  model_.initialize(config.seed);
  optimizer_->initialize_state(model_.parameters());
  // Gradients become ready from the classifier back to the stem: buckets in that order let the
  // first allreduces start while the encoder's backward pass still runs.
  const auto& params = model_.parameters();
  const std::vector<core::Parameter*> ready_order(params.rbegin(), params.rend());
  const auto bucket_bytes = static_cast<std::size_t>(config.bucket_mib * (1 << 20));
  reducer_ = comm::make_gradient_reducer(comm, *backend_, ready_order, bucket_bytes);
}

const core::GlobalBatch& Trainer::draw_batch(std::size_t global_batch) {
  batch_ = sampler_.next(global_batch);
  return batch_;
}

core::BatchLoad Trainer::load_batch(const Placement& placement) {
  const std::vector<std::size_t> mine = placement(batch_);
  announce_ahead(placement, mine);
  return assembler_.load(prefetcher_, mine, fields_, labels_, core::BadSamplePolicy::skip);
}

void Trainer::announce_ahead(const Placement& placement, const std::vector<std::size_t>& mine) {
  if (config_.prefetch_batches == 0) return;
  // A shrink makes this rank's share larger; the depth follows, in whole steps.
  prefetcher_.set_depth(static_cast<std::size_t>(config_.prefetch_batches) * mine.size());
  std::vector<std::size_t> plan = mine;
  core::EpochSampler ahead = sampler_;
  for (long k = 0; k < config_.prefetch_batches; ++k) {
    const auto next = placement(ahead.next(batch_.samples.size()));
    plan.insert(plan.end(), next.begin(), next.end());
  }
  prefetcher_.announce(plan);
}

double Trainer::compute(float grad_scale, const GradientReady& on_ready) {
  const core::Tensor& logits = model_.forward(fields_, /*training=*/true, &cross_rank_);
  core::ensure_tensor(*backend_, dlogits_, logits.dims());
  // fp16 scales the loss gradient up so that small gradients survive; finish_reduction() takes
  // the scale off again.
  const double loss = backend_->softmax_cross_entropy({.logits = logits,
                                                       .labels = labels_,
                                                       .class_weights = class_weights_,
                                                       .grad_scale = grad_scale * scaler_.scale()},
                                                      dlogits_);
  const std::size_t count = model_.parameters().size();
  std::size_t ready = 0;
  model_.backward(
      dlogits_,
      [&](std::size_t i) {
        reducer_->mark_ready(count - 1 - i);
        on_ready(++ready, count);
      },
      &cross_rank_);
  return loss;
}

void Trainer::finish_reduction() { reducer_->finish(1.0f / scaler_.scale()); }

bool Trainer::update(float lr) {
  // Every rank holds the same reduced gradients, so every rank takes the same decision.
  const bool finite = scaler_.update(reducer_->has_non_finite());
  if (finite) optimizer_->step(model_.parameters(), lr);
  backend_->synchronize();
  return finite;
}

void Trainer::apply_update(float lr) {
  optimizer_->step(model_.parameters(), lr);
  backend_->synchronize();
}

void Trainer::divide_gradients(double divisor) {
  for (core::Parameter* p : model_.parameters())
    for (float& g : p->grad.f32()) g = static_cast<float>(g / divisor);
}

void Trainer::capture_into(checkpoint::TrainingState& state) const {
  checkpoint::capture_into(const_cast<core::DeepLabV3Plus&>(model_), *optimizer_, state);
  state.step = step_;
  state.epoch = sampler_.state().epoch;
  state.sampler = sampler_.state();
  state.rng_seed = config_.seed;
  state.lr_schedule = config_.schedule;
  state.loss_scale = scaler_.scale();
  state.loss_scale_good_steps = scaler_.state().good_steps;
  state.loss = last_loss_;
}

void Trainer::apply(const checkpoint::TrainingState& state) {
  checkpoint::apply(state, model_, *optimizer_);
  restore_scalars(state);
}

void Trainer::restore_scalars(const checkpoint::TrainingState& state) {
  step_ = state.step;
  sampler_.restore(state.sampler);
  last_loss_ = state.loss;
  if (scaler_.config().dynamic)
    scaler_.restore({state.loss_scale, state.loss_scale_good_steps, scaler_.state().skipped_steps});
}

std::vector<core::Tensor*> Trainer::state_tensors() {
  // A state created lazily must exist on every rank, or the tensors would not line up.
  optimizer_->initialize_state(model_.parameters());
  std::vector<core::Tensor*> tensors;
  for (core::Parameter* p : model_.parameters()) tensors.push_back(&p->value);
  for (const auto& [name, buffer] : model_.buffers()) tensors.push_back(buffer);
  for (const auto& [name, state] : optimizer_->state_tensors()) tensors.push_back(state);
  return tensors;
}

std::vector<core::Tensor*> Trainer::exchanged_tensors(bool whole_state) {
  std::vector<core::Tensor*> tensors;
  for (core::Parameter* p : model_.parameters()) tensors.push_back(&p->grad);
  if (whole_state) {
    const auto state = state_tensors();
    tensors.insert(tensors.end(), state.begin(), state.end());
  }
  return tensors;
}

void Trainer::rebind(comm::Communicator& comm, std::span<const int> lost) {
  reducer_->rebind(comm, lost);  // NCCL drops the same ranks
  cross_rank_.rebind(comm);
}

}  // namespace hardy::resilience
