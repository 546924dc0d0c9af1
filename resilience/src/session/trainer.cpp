#include "session/trainer.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <utility>

#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::resilience {

std::uint64_t plan_digest(const core::GlobalBatch& batch) {
  return core::xxhash64(std::as_bytes(std::span(batch.samples)));
}

void check_same_plan(comm::Communicator& comm, std::uint64_t digest, long at_step) {
  if (!comm::all_equal(comm, static_cast<std::int64_t>(digest)))
    throw Error(fmt::format(
        "step {}: the ranks planned different global batches (sampler states diverged)", at_step));
}

Trainer::Trainer(const TrainingConfig& config, comm::Communicator& comm,
                 const core::SampleSource& train, ThreadSplit threads)
    : config_(config),
      kernel_threads_(threads.kernel_threads),
      backend_(core::make_backend(config.backend, config.precision)),
      model_(*backend_, config.model),
      optimizer_(core::make_optimizer(config.optimizer, *backend_)),
      sampler_(train.size(), config.seed),
      assembler_(*backend_, train.shape()),
      // A staged batch goes to the device from the loaders' buffers: page-locked on a GPU.
      prefetcher_(train, config.prefetch_batches > 0 ? threads.loader_threads : 0, 0,
                  [backend = backend_.get(), pinned = stages_input(config, *backend_)](
                      std::vector<std::int64_t> dims, core::DType dtype, core::Layout layout) {
                    return pinned ? backend->empty_host(std::move(dims), dtype, layout)
                                  : core::Tensor::host(std::move(dims), dtype, layout);
                  }),
      scaler_(core::LossScalerConfig::for_activations(backend_->activation_dtype())),
      cross_rank_(comm),
      slots_(static_cast<std::size_t>(1 + config.gradient_lag)),
      exchange_mirror_(*backend_) {
  omp_set_num_threads(threads.kernel_threads);
  if (!config.model.regression())
    class_weights_ = core::resolve_class_weights(
        config.class_weights, train, config.model.num_classes, config.class_weight_power);
  committed_sampler_ = sampler_.state();
  model_.initialize(config.seed);
  optimizer_->initialize_state(model_.parameters());
  // Gradients become ready from the classifier back to the stem: buckets in that order let the
  // first allreduces start while the encoder's backward pass still runs.
  const auto& params = model_.parameters();
  const std::vector<core::Parameter*> ready_order(params.rbegin(), params.rend());
  const auto bucket_bytes = static_cast<std::size_t>(config.bucket_mib * (1 << 20));
  // A step's buckets stay in flight while the next step's backward fills the other slot's.
  auto reducers =
      comm::make_gradient_reducers(comm, *backend_, ready_order, bucket_bytes, slots_.size());
  for (std::size_t i = 0; i < slots_.size(); ++i) slots_[i].reducer = std::move(reducers[i]);
}

const core::GlobalBatch& Trainer::draw_batch(std::size_t global_batch) {
  StepSlot& slot = slots_[slot_after(computed_)];
  slot.sampler_before = sampler_.state();
  slot.batch = sampler_.next(global_batch);
  slot.computed.plan_digest = plan_digest(slot.batch);
  return slot.batch;
}

Trainer::~Trainer() {
  // A staged batch's loads read from the prefetcher, which is destroyed first.
  assembler_.drop_staged();
}

const core::BatchLoad& Trainer::load_batch(const Placement& placement) {
  StepSlot& slot = slots_[slot_after(computed_)];
  const std::vector<std::size_t> mine = placement(slot.batch);
  const std::size_t global_batch = slot.batch.samples.size();
  if (assembler_.is_staged(mine)) {
    // Loaded and copied while the previous step computed; the loaders go on after it.
    slot.computed.load =
        assembler_.load(prefetcher_, mine, fields_, labels_, core::BadSamplePolicy::skip);
    stage(announce_ahead(placement, {}, global_batch));
  } else {
    const auto next = announce_ahead(placement, mine, global_batch);
    slot.computed.load =
        assembler_.load(prefetcher_, mine, fields_, labels_, core::BadSamplePolicy::skip);
    stage(next);
  }
  slot.computed.samples = mine.size() - slot.computed.load.skipped.size();
  slot.sample_keys.assign(mine.begin(), mine.end());  // a skipped sample keeps its row
  return slot.computed.load;
}

bool Trainer::stages_input(const TrainingConfig& config, const core::Backend& backend) {
  // Without prefetching every load is the caller's own (--prefetch-batches 0).
  return config.prefetch_batches > 0 &&
         config.overlap_input.value_or(backend.device() != core::Device::host);
}

void Trainer::stage(std::vector<std::size_t> next) {
  if (!stages_input(config_, *backend_) || next.empty()) return;
  assembler_.stage(prefetcher_, std::move(next), core::BadSamplePolicy::skip);
}

std::vector<std::size_t> Trainer::announce_ahead(const Placement& placement,
                                                 const std::vector<std::size_t>& mine,
                                                 std::size_t global_batch) {
  if (config_.prefetch_batches == 0) return {};
  std::vector<std::size_t> plan = mine;
  std::vector<std::size_t> next;
  core::EpochSampler ahead = sampler_;
  for (long k = 0; k < config_.prefetch_batches; ++k) {
    const auto share = placement(ahead.next(global_batch));
    if (k == 0) next = share;
    plan.insert(plan.end(), share.begin(), share.end());
  }
  // A shrink makes this rank's share larger; the depth follows, in whole steps. A staged batch
  // holds one step's buffers (leased) until its copy is done: one step more for the loaders.
  const long steps = config_.prefetch_batches + (stages_input(config_, *backend_) ? 1 : 0);
  prefetcher_.set_depth(static_cast<std::size_t>(steps) * next.size());
  prefetcher_.announce(plan);
  return next;
}

void Trainer::compute(float grad_scale, const GradientReady& on_ready) {
  if (computed_ == static_cast<int>(slots_.size()))
    throw Error(fmt::format("Trainer: {} steps computed and none committed", computed_));
  StepSlot& slot = slots_[slot_after(computed_)];
  slot.computed.step = step_ + computed_ + 1;
  slot.computed.grad_scale = grad_scale;
  slot.loss_scale = scaler_.scale();
  {  // a rollback, or a state captured with this step computed, wants them (batch norm only)
    const auto buffers = model_.buffers();
    slot.buffers_before.resize(buffers.size());
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      core::ensure_tensor(*backend_, slot.buffers_before[b], buffers[b].second->dims());
      backend_->copy(*buffers[b].second, slot.buffers_before[b]);
    }
  }
  comm::GradientReducer& reducer = *slot.reducer;
  const core::Tensor& logits =
      model_.forward(fields_, /*training=*/true, &cross_rank_,
                     {.seed = core::mix_seed(config_.seed, 0xd20, slot.computed.step),
                      .samples = slot.sample_keys});
  core::ensure_tensor(*backend_, dlogits_, logits.dims(), logits.dtype());
  // fp16 scales the loss gradient up so that small gradients survive; finish_reduction() takes
  // the scale off again.
  const float loss_gradient_scale = grad_scale * slot.loss_scale;
  core::PendingSum loss =
      config_.model.regression()
          ? backend_->queue_mse_loss(
                {.prediction = logits, .target = labels_, .grad_scale = loss_gradient_scale},
                dlogits_)
          : backend_->queue_softmax_cross_entropy({.logits = logits,
                                                   .labels = labels_,
                                                   .class_weights = class_weights_,
                                                   .grad_scale = loss_gradient_scale},
                                                  dlogits_);
  const std::size_t count = model_.parameters().size();
  std::size_t ready = 0;
  model_.backward(
      dlogits_,
      [&](std::size_t i) {
        reducer.mark_ready(count - 1 - i);
        on_ready(++ready, count);
      },
      &cross_rank_);
  ++computed_;
  gradients_in_place_ = false;  // this step's own, not yet reduced
  slot.loss_sum = std::move(loss);
}

double Trainer::oldest_loss_sum() {
  if (computed_ == 0) throw Error("Trainer: the loss of a step asked for with none computed");
  return slots_[oldest_slot_].loss_sum.value();
}

void Trainer::finish_reduction() {
  const StepSlot& oldest = slots_[oldest_slot_];
  oldest.reducer->finish(1.0f / oldest.loss_scale);
  gradients_in_place_ = true;
}

void Trainer::require_gradients_in_place() {
  // The parameters' gradients are one buffer that every backward pass writes: a step computed
  // between a reduction and its update would have the update apply its own raw gradients, which
  // Adam's scale invariance and the averaging at the domains' meetings would hide.
  if (!gradients_in_place_)
    throw Error(fmt::format(
        "internal error: step {}'s update found the gradients of a step computed after its "
        "reduction in place",
        step_ + 1));
  gradients_in_place_ = false;
}

void Trainer::advance() {
  ++step_;
  committed_slot_ = oldest_slot_;
  if (computed_ > 0) {
    oldest_slot_ = (oldest_slot_ + 1) % slots_.size();
    --computed_;
  }
  // Where the next uncommitted draw starts: before the step still in flight (lag), if any.
  committed_sampler_ = computed_ > 0 ? slots_[oldest_slot_].sampler_before : sampler_.state();
}

bool Trainer::update(float lr) {
  require_gradients_in_place();
  // Every rank holds the same reduced gradients, so every rank takes the same decision.
  bool non_finite = false;
  if (std::exchange(gradients_exchanged_, false)) {
    std::vector<const core::Tensor*> grads;
    for (const core::Parameter* p : model_.parameters()) grads.push_back(&p->grad);
    non_finite = backend_->has_non_finite(grads);
  } else {
    non_finite = slots_[oldest_slot_].reducer->has_non_finite();
  }
  const bool finite = scaler_.update(non_finite);
  if (finite) optimizer_->step(model_.parameters(), lr);
  backend_->synchronize();
  return finite;
}

void Trainer::apply_update(float lr) {
  require_gradients_in_place();
  gradients_exchanged_ = false;
  optimizer_->step(model_.parameters(), lr);
  backend_->synchronize();
}

void Trainer::divide_gradients(double divisor) {
  if (backend_->device() != core::Device::host) {
    for (core::Parameter* p : model_.parameters())
      backend_->scale(p->grad, static_cast<float>(1.0 / divisor));
    return;
  }
  for (core::Parameter* p : model_.parameters())
    for (float& g : p->grad.f32()) g = static_cast<float>(g / divisor);
}

checkpoint::StateSources Trainer::committed_sources() const {
  checkpoint::StateSources sources =
      checkpoint::state_sources(const_cast<core::Model&>(model_), *optimizer_);
  // A computed step that is not committed yet has moved, under batch norm, the running
  // statistics: the committed state holds them as they were before it.
  const StepSlot* uncommitted = computed_ > 0 ? &slots_[oldest_slot_] : nullptr;
  if (uncommitted && !uncommitted->buffers_before.empty()) {
    const std::size_t first_buffer = model_.parameters().size();
    for (std::size_t b = 0; b < uncommitted->buffers_before.size(); ++b)
      sources.model[first_buffer + b].tensor = &uncommitted->buffers_before[b];
  }
  return sources;
}

void Trainer::capture_scalars_into(checkpoint::TrainingState& state) const {
  checkpoint::capture_scalars_into(*optimizer_, state);
  state.step = step_;
  // The sampler too, as the uncommitted step found it.
  state.sampler = committed_sampler_;
  state.epoch = state.sampler.epoch;
  state.rng_seed = config_.seed;
  state.lr_schedule = config_.schedule;
  state.loss_scale = scaler_.scale();
  state.loss_scale_good_steps = scaler_.state().good_steps;
  state.loss = last_loss_;
}

void Trainer::capture_into(checkpoint::TrainingState& state) const {
  checkpoint::capture_tensors_into(committed_sources(), state);
  capture_scalars_into(state);
}

void Trainer::apply(const checkpoint::TrainingState& state) {
  checkpoint::apply(state, model_, *optimizer_);
  restore_scalars(state);
}

void Trainer::drop_uncommitted() {
  gradients_exchanged_ = false;
  sampler_.restore(committed_sampler_);  // a batch may have been drawn and not computed
  if (computed_ == 0) return;
  const StepSlot& oldest = slots_[oldest_slot_];
  std::size_t b = 0;
  for (const auto& [name, buffer] : model_.buffers())
    backend_->copy(oldest.buffers_before[b++], *buffer);
  backend_->synchronize();
  forget_computed_steps();
}

void Trainer::forget_computed_steps() {
  // After a failure their reducers were rebound already, which forgot them.
  for (; computed_ > 0; --computed_) {
    slots_[oldest_slot_].reducer->forget_step();
    oldest_slot_ = (oldest_slot_ + 1) % slots_.size();
  }
}

void Trainer::restore_scalars(const checkpoint::TrainingState& state) {
  forget_computed_steps();  // another timeline
  step_ = state.step;
  sampler_.restore(state.sampler);
  committed_sampler_ = state.sampler;
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

std::span<core::Tensor* const> Trainer::exchanged_tensors(bool whole_state) {
  exchanged_whole_state_ = whole_state;
  std::vector<core::Tensor*> tensors;
  for (core::Parameter* p : model_.parameters()) tensors.push_back(&p->grad);
  if (whole_state) {
    const auto state = state_tensors();
    tensors.insert(tensors.end(), state.begin(), state.end());
  }
  return exchange_mirror_.stage(tensors);
}

void Trainer::take_exchanged() {
  exchange_mirror_.write_back();
  gradients_exchanged_ = true;
  gradients_in_place_ = true;
  if (!exchanged_whole_state_) return;
  // The steps computed after the oldest one found the statistics before the domains averaged
  // them: what they go back to, or a state captured meanwhile holds, is the average now.
  for (int ahead = 1; ahead < computed_; ++ahead) {
    StepSlot& slot = slots_[slot_after(ahead)];
    std::size_t b = 0;
    for (const auto& [name, buffer] : model_.buffers())
      backend_->copy(*buffer, slot.buffers_before[b++]);
  }
  backend_->synchronize();
}

comm::TransportRebuild Trainer::rebind(comm::Communicator& comm, std::span<const int> lost) {
  comm::TransportRebuild rebuilt;
  for (StepSlot& slot : slots_) {  // NCCL drops the same ranks (once: the slots share it)
    comm::TransportRebuild report = slot.reducer->rebind(comm, lost);
    if (!report.path.empty()) rebuilt = std::move(report);
  }
  cross_rank_.rebind(comm);
  return rebuilt;
}

}  // namespace hardy::resilience
