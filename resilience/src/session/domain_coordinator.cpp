#include "session/domain_coordinator.hpp"

#include <fmt/format.h>

#include <cmath>

#include "hardy/comm/agreement.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/core/support/error.hpp"
#include "session/hooks/step_hook.hpp"

namespace hardy::resilience {

DomainCoordinator::DomainCoordinator(const TrainingConfig& config, Membership& membership,
                                     Trainer& trainer, StateStore& store, RunFiles& files,
                                     Watchdog& watchdog, std::size_t label_elements)
    : config_(config),
      membership_(membership),
      trainer_(trainer),
      store_(store),
      files_(files),
      watchdog_(watchdog),
      label_elements_(label_elements),
      domains_(
          std::make_unique<FaultDomains>(DomainOptions{.index = config.domain,
                                                       .count = config.domain_count,
                                                       .store = config.domain_store,
                                                       .store_token = config.domain_store_token,
                                                       .address = config.domain_address,
                                                       .timeout_s = config.domain_timeout_s,
                                                       .join_token = config.domain_join,
                                                       .exchange = config.domain_exchange,
                                                       .balance = config.stragglers},
                                         membership.communicator_slot(), files.events())) {}

DomainCoordinator::~DomainCoordinator() = default;

void DomainCoordinator::start() {
  domains_->start(state_access());
  if (config_.sync_every() > 1) store_.keep_synced();
  follow_ownership();
}

void DomainCoordinator::check_samples_covered(long computed, long skipped, long at_step) const {
  // Every sample of the job's (with domains, the domain's) share of the global batch is computed
  // or skipped by exactly one rank. A step computed over one split of the batch and committed
  // under another would count some twice or not at all: never commit it.
  const auto share = static_cast<long>(domains_
                                           ->my_domain_slice(config_.global_batch_with(
                                               membership_.size(), membership_.original_size()))
                                           .size());
  if (computed + skipped != share)
    throw comm::Agreed<Error>(  // every rank summed the same counts
        fmt::format("step {}: the ranks computed {} and skipped {} samples of the {} in their "
                    "share of the global batch",
                    at_step, computed, skipped, share));
}

void DomainCoordinator::admit_pending() {
  domains_->admit_if_pending(state_access());
  follow_ownership();
}

std::optional<CommittedStep> DomainCoordinator::after_local_recovery(const std::string& what) {
  // The leader alone talks to the other domains; a domain that lost it cannot rejoin them and
  // ends (every survivor sees the same membership, so all of them stop here together).
  if (membership_.world_rank_of(0) != 0)
    throw comm::Agreed<Error>(fmt::format(
        "domain {} lost its leader ({}); the domain ends and is relaunched", config_.domain, what));
  // Sharded, every rank sums a shard with the other domains' ranks of its index, and its peers
  // there cannot go on without it: the domain ends too, and comes back whole (relaunched on
  // healthy nodes or spares, healed from a live domain).
  if (domains_->sharded())
    throw comm::Agreed<Error>(fmt::format(
        "domain {} lost a rank ({}); with --domain-exchange sharded the domain ends and is "
        "relaunched",
        config_.domain, what));
  const auto started = Clock::now();
  const long next = trainer_.step() + 1;
  const DomainStep across = domains_->after_local_recovery(
      next, config_.domains_meet_at(next), trainer_.exchanged_tensors(config_.sync_every() > 1),
      state_access());
  if (across.verdict == StepVerdict::rewind) rewind_to_synced(next);
  follow_ownership();
  if (across.verdict != StepVerdict::commit) return std::nullopt;
  trainer_.take_exchanged();
  // The other domains committed the step in flight: apply the same sums (the gradients, and the
  // averaged state when the domains train alone between meetings) and commit it here too.
  const std::size_t global_batch =
      config_.global_batch_with(membership_.size(), membership_.original_size());
  // The loss is a mean over the global batch's pixels (segmentation) or targets (regression).
  const float grad_scale = 1.0f / static_cast<float>(global_batch * label_elements_);
  trainer_.draw_batch(global_batch);
  CommittedStep done{
      .started = started,
      .lr = config_.lr_with(trainer_.step(), membership_.size(), membership_.original_size()),
      .skipped_samples = std::lround(across.skipped)};
  done.update = [this, lr = done.lr, loss = across.loss * grad_scale] {
    trainer_.apply_update(lr);
    trainer_.set_last_loss(loss);
  };
  files_.events().emit("step_rolled_forward", {{"step", next}, {"reason", what}});
  return done;
}

void DomainCoordinator::prepare_reduction(long computed_step) {
  if (!domains_->enabled() || !config_.domains_meet_at(computed_step)) return;
  if (!domains_->sharded()) {
    trainer_.reducer().reduce_next_step_to(0);  // the leader exchanges them and broadcasts
    return;
  }
  // A bucket's sums are what the domains exchange only when they exchange this step's
  // gradients alone (no weighted state at a meeting, no step computed ahead in between).
  if (config_.sync_every() > 1 || config_.gradient_lag != 0) return;
  if (exchanged_offset_.empty()) {
    for (const core::Parameter* param : trainer_.model().parameters()) {
      exchanged_offset_[param] = exchanged_values_;
      exchanged_values_ += static_cast<std::size_t>(param->value.numel());
    }
  }
  const bool relayed = trainer_.reducer().listen_next_step([this](const comm::ReducedBucket& b) {
    relayed_parts_.clear();
    for (const comm::ReducedBucket::Part& part : b.parts)
      relayed_parts_.push_back({.offset = exchanged_offset_.at(part.param), .sums = part.sums});
    domains_->relay_bucket(relayed_parts_);
  });
  // finish_reduction() divides the sums by the loss scale the step is computed with.
  if (relayed)
    domains_->start_relay(computed_step, exchanged_values_, 1.0f / trainer_.loss_scale());
}

void DomainCoordinator::start_exchange(long this_step, std::size_t global_batch,
                                       std::vector<double>& loss, bool in_background) {
  if (!config_.domains_meet_at(this_step)) {
    // Alone until the domains meet: the domain's gradient sum (over the global batch) becomes
    // the mean of its own share of it.
    const double share = domains_->share(global_batch);
    trainer_.divide_gradients(share);
    loss[0] /= share;
    return;
  }
  // The other domains' sums and the step's vote (the commit point across domains).
  exchanging_ = trainer_.exchanged_tensors(config_.sync_every() > 1);
  std::vector<float> weights;
  if (config_.sync_every() > 1) {
    // Each domain's state, weighted by its share of the batch: their sum is the average. The
    // weight goes on what is sent only: a step dropped here leaves the state as it was.
    weights.assign(exchanging_.size(), static_cast<float>(domains_->share(global_batch)));
    std::fill_n(weights.begin(), trainer_.model().parameters().size(), 1.0f);
  }
  // The step's batch, for its audit line should a heal commit the step here: a heal forgets the
  // computed steps, and with --gradient-lag 1 the batch committed last is the step's before.
  batch_in_exchange_.reset();
  if (config_.audit_samples) batch_in_exchange_ = trainer_.oldest_batch();
  Watchdog::Scope scope(watchdog_, "cross-domain exchange");
  if (in_background)
    domains_->start_exchange(this_step, exchanging_, loss[0], loss[1], weights);
  else
    exchanged_now_ =
        domains_->exchange(this_step, exchanging_, loss[0], loss[1], state_access(), weights);
}

bool DomainCoordinator::settle_exchange(long this_step, std::vector<double>& loss,
                                        const CommittedStep& done, bool& admit_after_commit) {
  if (!config_.domains_meet_at(this_step)) return true;
  DomainStep across;
  if (domains_->exchange_in_flight()) {
    Watchdog::Scope scope(watchdog_, "cross-domain exchange");
    across = domains_->settle_exchange(exchanging_, state_access());
  } else {
    across = std::exchange(exchanged_now_, std::nullopt).value();
  }
  // A rewind first: a domain that takes over the run files logs the step it went back to (the
  // last meeting), not a step it took alone, which will be redone.
  if (across.verdict == StepVerdict::rewind) rewind_to_synced(this_step);
  follow_ownership();
  switch (across.verdict) {
    case StepVerdict::abandon:
      // Not committed anywhere, and not applied here (the update waits for the commit): the
      // loop redoes the step over the new split of the batch.
      trainer_.drop_uncommitted();
      return false;
    case StepVerdict::rewind:
      return false;
    case StepVerdict::healed:
      // The domains whose vote completed committed this step, and this one took their state. If
      // it now writes the run directory's files because the writer died before logging the step,
      // the lines are its to write: the step's global batch is the one it drew, the loss came
      // with the state.
      if (trainer_.step() == this_step) {
        if (config_.audit_samples) files_.keep_audit_line(trainer_.step(), *batch_in_exchange_);
        CommittedStep healed = done;  // its update came with the state
        healed.allreduce_s = 0;
        healed.lr = config_.lr_with(this_step - 1, membership_.size(), membership_.original_size());
        healed.skipped_samples = 0;
        // No node snapshot was written in this step (the hooks run after a commit only), so
        // it stalled on none (LoopProgress::last_snapshot_s is still an earlier step's).
        files_.keep_metrics_line(metrics_line(healed, seconds_since(done.started), trainer_,
                                              /*snapshot_stall_s=*/0,
                                              store_.take_snapshot_write_cpu_s(),
                                              domains_->job_world_size()));
        if (membership_.writes_run_files()) files_.log_committed_step_if_missing(trainer_.step());
      }
      return false;
    case StepVerdict::commit:
      trainer_.take_exchanged();
      break;
  }
  loss[0] = across.loss;
  loss[1] = across.skipped;
  admit_after_commit = across.admit_pending;
  return true;
}

DomainStateAccess DomainCoordinator::state_access() {
  // What the domains commit together: every step, or every --domain-sync-every steps.
  return {
      .committed = [this]() -> const checkpoint::TrainingState& { return store_.shared(); },
      .restore_in_domain =
          [this](checkpoint::TrainingState& state) {
            store_.restore(state, 0);
            store_.keep_in_memory();  // another state at a step the copy may hold already
            store_.keep_synced();
          },
      .committed_step =
          [this] {
            // Every step is shared with --domain-sync-every 1 (the copy in memory may be
            // stale there: --memory-snapshots false).
            return config_.sync_every() > 1 && store_.synced() ? store_.synced()->step
                                                               : trainer_.step();
          },
      .persisted = [this]() -> std::optional<DomainStateAccess::Persisted> {
        const auto started = Clock::now();
        auto newest = store_.newest_persisted();
        if (!newest) return std::nullopt;
        return DomainStateAccess::Persisted{std::move(newest->found.state), newest->source,
                                            newest->found.path.string(), seconds_since(started)};
      },
      .committed_lines =
          [this] { return files_.committed_lines(config_.sync_every() > 1 && store_.synced()); },
      .adopt_lines = [this](const std::string& text) { files_.adopt_lines(text); }};
}

void DomainCoordinator::rewind_to_synced(long at_step) {
  // A domain was lost since the domains last met: its share of the steps since then is lost with
  // it, so every survivor goes back to that meeting and redoes them over the new split. Meeting
  // every step, that is the committed step: the live state, less the step in flight.
  if (config_.sync_every() <= 1) {
    trainer_.drop_uncommitted();
    return;
  }
  const checkpoint::TrainingState& synced = *store_.synced();
  const long from = trainer_.step();
  trainer_.apply(synced);
  store_.keep_in_memory();
  // The lines of the step gone back to, for a new owner of the run files to log if missing.
  files_.back_to_synced(synced.step);
  if (from > synced.step)
    files_.events().emit(
        "domain_rewound",
        {{"step", at_step}, {"to_step", synced.step}, {"steps_redone", from - synced.step}});
}

void DomainCoordinator::follow_ownership() {
  if (!domains_->enabled()) return;
  const bool owned_before = membership_.writes_run_files();
  membership_.set_owns_run_files(domains_->owns_run_files());
  if (owned_before && !membership_.writes_run_files()) {
    // A lower domain came back and writes them from the next step on.
    files_.close_shared();
  }
  if (!owned_before && membership_.writes_run_files()) {
    // The domain that wrote the run directory's files is gone: this one takes over, logging
    // the last committed step if its predecessor died before it did.
    if (files_.open_if_lead()) store_.open_checkpoint_writer();
    files_.log_committed_step_if_missing(trainer_.step());
  }
}

}  // namespace hardy::resilience
