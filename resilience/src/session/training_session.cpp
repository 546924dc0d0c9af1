#include "hardy/resilience/training_session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <thread>

#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/comm/agreement.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/comm/mpi/communicator.hpp"
#include "hardy/comm/mpi/segments.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/error.hpp"
#include "session/job_report.hpp"
#include "session/preemption_signal.hpp"
#include "session/resume.hpp"
#include "session/session_state.hpp"

namespace hardy::resilience {

namespace {

// With fault domains, the directories a host's domains would share on a small cluster (the
// node-local snapshots, the staged data) are each domain's own: two copiers must never write one
// file.
TrainingConfig with_domain_directories(TrainingConfig config) {
  if (config.domain < 0) return config;
  config.snapshot_dir = checkpoint::domain_snapshot_root(config.snapshot_dir, config.domain);
  if (!config.stage_to.empty()) config.stage_to /= fmt::format("domain-{}", config.domain);
  return config;
}

}  // namespace

TrainingSession::TrainingSession(TrainingConfig config, std::unique_ptr<comm::Communicator> world)
    : TrainingSession(config, std::move(world), core::open_data(config.data)) {}
TrainingSession::TrainingSession(TrainingConfig config, std::unique_ptr<comm::Communicator> world,
                                 core::DataSources data) {
  // Every rank checks the same input; agreeing on it says so (an agreed error ends each process
  // normally, with its message on every rank, where any other would abort the job).
  comm::agree_on_outcome(*world, true,
                         [&] { check_and_complete(config, world->size(), *data.train); });
  state_ = std::make_unique<State>(std::move(config), std::move(world), std::move(data));
}
TrainingSession::~TrainingSession() = default;
int TrainingSession::run() { return state_->run(); }

TrainingSession::State::State(TrainingConfig config_in, std::unique_ptr<comm::Communicator> world,
                              core::DataSources data_in)
    : config(with_domain_directories(std::move(config_in))),
      membership(std::move(world), config.ranks_per_node),
      data(std::move(data_in)),
      trainer(config, membership.comm(), *data.train,
              split_host_threads(config, membership.cores_of_rank())),
      transport(make_state_transport(trainer)),
      injector(parse_injected_failures(config.inject_failures, config.ranks_per_node),
               membership.world_rank(), config.run_dir / "checkpoints"),
      files(config, membership),
      store(config, membership, files.events(), trainer, *transport, injector, identity, files),
      domains(config, membership, trainer, store, files, watchdog,
              data.train->shape().label_elements()),
      staging(config, membership, domains.domains(), files.events()),
      watchdog(
          // The watchdog's action ends the whole job (MPI_Abort), so the other ranks give the
          // lead a second timeout to write its checkpoint first; a stuck lead still ends it.
          [this](const Watchdog::Committed& committed) {
            return committed.rank == 0 ? config.collective_timeout_s
                                       : 2 * config.collective_timeout_s;
          },
          [this](const Watchdog::Stuck& stuck) { recovery.end_stuck_job(stuck); }),
      recovery(config, membership, trainer, store, files, staging, injector, progress,
               hang_monitor),
      bad_samples(config.bad_samples, files.events()),
      slow_ranks(config.stragglers, membership, staging, files.events(),
                 /*host_timed=*/config.backend == "cpu", trainer.kernel_threads(),
                 /*may_evict=*/config.spare_nodes_left > 0,
                 /*in_domain=*/config.domain >= 0),
      // A run lock token says hardy run launched the job: it relaunches it after a planned stop,
      // on the same nodes or, for one its failure took (the job's report counts against it), a
      // spare.
      regrowth(config.regrow_cost_s, membership,
               /*relaunched=*/!config.run_lock_token.empty() && config.spare_nodes_left > 0,
               /*last_step=*/config.steps, /*earlier_steps=*/config.run_dir / "metrics.jsonl",
               /*logged_world=*/membership.original_size() * std::max(1, config.domain_count)) {
  // Until the domains have met, the first domain writes the run directory's files (a relaunched
  // one never does before it joins).
  if (config.domain >= 0)
    membership.set_owns_run_files(config.domain == 0 && config.domain_join.empty());
  // The lead alone writes the run directory: the others must not go on into the first
  // collective when it cannot (not writable, over quota).
  comm::agree_on_outcome(membership.comm(), lead(), [&] {
    files.prepare();
    if (membership.writes_run_files()) store.open_checkpoint_writer();
  });
  identity = establish_run_identity(comm(), config, *data.train);
  step_hooks = make_step_hooks({.config = config,
                                .membership = membership,
                                .trainer = trainer,
                                .store = store,
                                .files = files,
                                .injector = injector,
                                .watchdog = watchdog,
                                .domains = domains.domains(),
                                .progress = progress});
}

TrainingSession::State::~State() { watchdog.stop(); }

void TrainingSession::State::train_step() {
  const long this_step = step() + 1;  // the step this iteration commits
  CommittedStep done{.started = Clock::now()};
  double reduce_s = 0;  // the waits for the step's sums, in the domain and across domains
  // With --gradient-lag 1 the step after it is computed first, while this one's gradients are
  // still being reduced (docs/resilience.md); its update waits for the next iteration. Where
  // fault domains meet, the next step computes while this one's sums travel between the
  // domains: the step computed in the last iteration is summed in its domain and sent first
  // (the leader packs what it sends, so the next backward may overwrite the gradients). Between
  // meetings nothing leaves the domain and the order is the plain lagged one: the next step's
  // backward would overwrite this one's sums, which no exchange holds.
  const bool sums_travel_while_computing = domains.enabled() && config.gradient_lag != 0 &&
                                           trainer.computed_steps() > 0 &&
                                           config.domains_meet_at(this_step);
  std::vector<double> loss;
  const std::size_t global_batch = current_global_batch();
  if (sums_travel_while_computing) {
    const auto started = Clock::now();
    loss = reduce_in_domain(this_step);
    domains.start_exchange(this_step, global_batch, loss, /*in_background=*/true);
    reduce_s += seconds_since(started);
  }
  const long computed_step = this_step + trainer.computed_steps();
  if (computed_step <= config.steps) compute_step(computed_step, done);
  if (!sums_travel_while_computing) {
    if (trainer.computed_steps() <= config.gradient_lag && computed_step < config.steps) {
      // The first step after a start or a rollback: nothing to commit yet. The agreement still
      // ends the iteration, so that a peer's failure here reaches every rank where it would in
      // any other step.
      Watchdog::Scope scope(watchdog, "step agreement");
      if (!agree_on_step(comm(), /*finished=*/true, preemption_requested()).committed)
        recover(fmt::format("step {} did not finish on every rank (a peer failed)", computed_step));
      return;
    }
    const auto started = Clock::now();
    loss = reduce_in_domain(this_step);
    if (domains.enabled())
      domains.start_exchange(this_step, global_batch, loss, /*in_background=*/false);
    reduce_s += seconds_since(started);
  }
  const double grad_scale = trainer.oldest_computed().grad_scale;
  const float loss_scale = trainer.loss_scale();
  bool admit_after_commit = false;
  if (domains.enabled()) {
    const auto started = Clock::now();
    const bool commits = domains.settle_exchange(this_step, loss, done, admit_after_commit);
    reduce_s += seconds_since(started);
    if (!commits) return;
  }
  done.allreduce_s = reduce_s;
  done.rank_scores = slow_ranks.scores();
  done.all_scores = this_step % config.stragglers.window == 0;
  done.lr = config.lr_with(step(), membership.size(), membership.original_size());
  const double step_loss = loss[0] * grad_scale;
  if (!std::isfinite(step_loss))
    throw comm::Agreed<Error>(  // the loss was summed over every rank
        fmt::format("the loss became {} at step {}; lower --lr or check the data", step_loss,
                    this_step));
  done.skipped_samples = std::lround(loss[1]);
  done.update = [this, this_step, loss_scale, step_loss, lr = done.lr] {
    if (!trainer.update(lr))
      events().emit("step_skipped", {{"step", this_step},
                                     {"reason", "non-finite gradients (loss-scale overflow)"},
                                     {"loss_scale", loss_scale},
                                     {"new_loss_scale", trainer.loss_scale()}});
    trainer.set_last_loss(step_loss);
  };
  commit_step(std::move(done));
  if (slow_ranks.eviction_due()) {
    // With fault domains another domain's relaunch may have taken the spare this domain was
    // told of at its launch: evicting then would leave the domain with no node to come back on.
    if (domains.enabled() && !domains.domains().spare_left())
      slow_ranks.no_spare_left(step());
    else
      evict_slow_node(*slow_ranks.eviction_due());
  }
  if (regrowth.due()) regrow(*regrowth.due());
  if (admit_after_commit) {
    Watchdog::Scope scope(watchdog, "domain admission");
    domains.admit_pending();
  }
  // With --gradient-lag 1 the next step is computed already, over the split of the batch in
  // force when it was loaded. Where the vote, a regroup or an admission changed the split since
  // (a domain lost or let in, one that shrank inside), its samples would be covered twice or not
  // at all: every domain with that step in flight computes it again over the new split (a
  // domain that recovered or joined has none in flight, and computes it over the new one).
  if (trainer.computed_steps() > 0 && domains.split_changed_since_computed())
    trainer.drop_uncommitted();
}

std::vector<double> TrainingSession::State::reduce_in_domain(long this_step) {
  const ComputedStep& computed = trainer.oldest_computed();
  // The loss, the samples every rank skipped and those it computed (summed with it: no
  // collective of its own).
  std::vector<double> loss{trainer.oldest_loss_sum(),
                           static_cast<double>(computed.load.skipped.size()),
                           static_cast<double>(computed.samples)};
  Watchdog::Scope scope(watchdog, "gradient allreduce");
  // grad_scale already divides by the global batch, so the sum over ranks is the mean.
  const auto exchange_started = Clock::now();
  trainer.finish_reduction();
  slow_ranks.measured_exchange(seconds_since(exchange_started));
  if (comm().size() > 1 && config.gradient_lag != 0)  // before it is committed
    check_same_plan(comm(), computed.plan_digest, this_step);
  const std::size_t kept = loss.size();
  slow_ranks.append_slots(loss);  // every rank's own work per sample, in the same sum
  const std::size_t kept_for_slow_ranks = loss.size();
  regrowth.append_slot(loss);  // while shrunk: whether the lead would relaunch at full strength
  comm().allreduce_sum(loss);
  regrowth.decide(loss, kept_for_slow_ranks);
  slow_ranks.decide(this_step, loss, kept,
                    domains.domains().my_domain_slice(current_global_batch()).size());
  domains.domains().note_own_work(slow_ranks.domain_own_s(), slow_ranks.domain_samples());
  if (slow_ranks.probe_due()) {  // every rank: the decision is the same everywhere
    Watchdog::Scope probe(watchdog, "link probe");
    slow_ranks.probe_links(this_step, trainer.model().parameter_count() * sizeof(float));
  }
  domains.check_samples_covered(std::lround(loss[2]), std::lround(loss[1]), this_step);
  // Every rank learns of every bad sample of the step (bad_samples.hpp).
  if (loss[1] > 0) bad_samples.report(comm(), computed.load.skipped, this_step);
  return loss;
}

void TrainingSession::State::compute_step(long computed_step, CommittedStep& done) {
  const auto started = Clock::now();
  const auto shape = data.train->shape();
  const std::size_t global_batch = current_global_batch();
  // The loss is a mean over the global batch's pixels (segmentation) or targets (regression).
  const float grad_scale = 1.0f / static_cast<float>(global_batch * shape.label_elements());
  injector.at(computed_step, Phase::forward);
  trainer.draw_batch(global_batch);
  // With a step in flight, a collective here would wait behind its allreduce on the network
  // (one link, first come first served); the plan is checked after that step's reduction.
  if (comm().size() > 1 && config.gradient_lag == 0) {
    Watchdog::Scope scope(watchdog, "sample plan check");
    check_same_plan(comm(), trainer.drawn_plan_digest(), computed_step);
  }
  // This rank's own work from here: its data wait, forward and backward, not the collectives'
  // waits for its peers (the slow-rank watch compares it across ranks). A write that started
  // at an earlier commit may still run beside it; one that ends within it is caught here.
  const bool beside_writer = store.writing_in_background();
  const auto own_started = Clock::now();
  const core::BatchLoad& input = [&]() -> const core::BatchLoad& {
    Watchdog::Scope scope(watchdog, "data wait", Activity::loading_data);
    return trainer.load_batch(
        [this](const core::GlobalBatch& b) { return staging.local_samples(b); });
  }();
  const double waited_for_data_s = seconds_since(own_started);
  domains.note_split_of_computed();
  // Where the domains meet: the domain's sums go to its leader alone, or bucket by bucket to the
  // other domains (sharded).
  domains.prepare_reduction(computed_step);
  std::shared_ptr<core::DeviceSpan> span = trainer.backend().start_device_span();
  trainer.compute(grad_scale, [&](std::size_t ready, std::size_t count) {
    // Dying here leaves some buckets' allreduces in flight: the hardest moment to fail.
    if (ready == count / 2) injector.at(computed_step, Phase::allreduce);
  });
  if (span) span->end();
  // --inject-failure ...:slow=F: this rank's own work takes F times as long (on a GPU, its data
  // wait and device time: the span is waited for, in a test only).
  double injected_s = 0;
  if (const double slowdown = injector.slowdown(computed_step); slowdown > 1) {
    injected_s =
        (slowdown - 1) * (span ? waited_for_data_s + span->seconds() : seconds_since(own_started));
    std::this_thread::sleep_for(std::chrono::duration<double>(injected_s));
  }
  // On a GPU the host only queued the kernels: the step's own work is its data wait and the
  // device's time, read once the step's sums are in (no wait for the device here).
  if (span)
    slow_ranks.measured_on_device(waited_for_data_s + injected_s, span,
                                  trainer.newest_computed_samples());
  else
    slow_ranks.measured(seconds_since(own_started), trainer.newest_computed_samples(),
                        beside_writer || store.writing_in_background());
  done.compute_span = std::move(span);
  done.compute_s = seconds_since(started);
  done.data_wait_s = input.data_wait_s;
  done.input_copy_s = input.input_copy_s;
  done.input_device_s = input.input_device_s;
  done.input_staged = input.staged;
}

void TrainingSession::State::commit_step(CommittedStep done) {
  {
    Watchdog::Scope scope(watchdog, "step agreement");
    // Fault tolerant: every survivor gets the same answer, so all of them commit the step or
    // none does. Without ULFM this is an allreduce, and a failure ends the job.
    done.outcome = agree_on_step(comm(), /*finished=*/true, preemption_requested(),
                                 store.node_snapshot_wanted());
  }
  if (!done.outcome.committed) {
    // A survivor's step failed under it: nobody commits, everybody recovers.
    recover(fmt::format("step {} did not finish on every rank (a peer failed)", step() + 1));
    return;
  }
  // Local and deterministic from here (no collective): every survivor applies the same update.
  if (done.update) done.update();
  trainer.advance();
  const auto now = Clock::now();
  // The time between two commits: what one step takes here, waits and writes included.
  ++progress.steps_since_restart;
  if (hang_monitor)
    hang_monitor->step_took(std::chrono::duration<double>(now - progress.step_clock).count());
  regrowth.step_committed(step(), std::chrono::duration<double>(now - progress.step_clock).count());
  progress.step_clock = now;
  progress.last_commit_unix = core::unix_time();
  progress.samples_seen += static_cast<double>(trainer.batch().samples.size());
  if (!progress.launch_s) {
    // From the process's start where the OS tells it (MPI_Init and the libraries' loading
    // included: a relaunch pays them too), else from this session's.
    const double process_started = comm::startup_times().process_started;
    progress.launch_s =
        process_started > 0 ? core::unix_time() - process_started : seconds_since(launched);
    slow_ranks.first_step_committed(*progress.launch_s);
    regrowth.first_step_committed(*progress.launch_s);
  }
  for (const auto& hook : step_hooks) {
    std::optional<Watchdog::Scope> scope;
    if (hook->watched()) scope.emplace(watchdog, hook->name(), *hook->watched());
    hook->after_commit(done);
  }
}

void TrainingSession::State::evict_slow_node(const StragglerVerdict& verdict) {
  const RankSlowness& slow = *verdict.evict;
  const int world_rank = membership.world_rank_of(slow.rank);
  const bool link = slow_ranks.eviction_cause() == "link";
  const std::string evidence =
      link ? fmt::format(
                 "its link slow since step {}: its pairs' exchanges took {:.3g} s against {:.3g} s "
                 "for the other pairs; {:.1f} s lost to it, a relaunch costs about {:.1f} s",
                 slow.since_step, slow.own_s, slow.peers_s, verdict.lost_s, verdict.evict_cost_s)
           : fmt::format(
                 "slow since step {}: {:.2f} of its peers' speed ({:.3g} s a sample against "
                 "{:.3g} s, its own best before {:.3g} s); {:.1f} s lost to it, a relaunch costs "
                 "about {:.1f} s",
                 slow.since_step, slow.score, slow.own_s, slow.peers_s, slow.own_best_s,
                 verdict.lost_s, verdict.evict_cost_s);
  // The committed state first, so that the relaunch on the spare loses no step.
  store.write_final_checkpoint("evicting a slow node");
  events().emit("node_evicted", {{"step", step()},
                                 {"rank", slow.rank},
                                 {"world_rank", world_rank},
                                 {"node", world_rank / config.ranks_per_node},
                                 {"host", membership.host_of(slow.rank)},
                                 {"score", slow.score},
                                 {"lost_s", verdict.lost_s},
                                 {"cost_s", verdict.evict_cost_s},
                                 {"cause", slow_ranks.eviction_cause()},
                                 {"evidence", evidence}});
  // With fault domains only this domain stops: the others regroup without it and go on, and
  // hardy run relaunches it on a spare, healed from them as after a loss.
  throw SessionStop{
      kPlannedRelaunch,
      fmt::format("leaving out node {} ({}), {}; hardy run relaunches {} on a spare",
                  world_rank / config.ranks_per_node, membership.host_of(slow.rank), evidence,
                  domains.enabled() ? fmt::format("domain {}", config.domain) : "the job"),
      "evicting"};
}

void TrainingSession::State::regrow(const RegrowVerdict& verdict) {
  const std::string evidence = fmt::format(
      "{} of {} ranks since step {}: {:.3g} s lost to it ({}){}, a relaunch costs about {:.3g} s",
      verdict.world_size, verdict.full_world_size, verdict.shrunk_since_step, verdict.lost_s,
      verdict.healthy_step_s
          ? fmt::format("its steps against the healthy {:.3g} ms{}", *verdict.healthy_step_s * 1e3,
                        verdict.healthy_from_before ? " of the launch before" : "")
          : std::string("estimated from the world sizes: no healthy step was measured"),
      verdict.projected_s > 0 ? fmt::format(" and the {} steps left would lose about {:.3g} s more",
                                            verdict.steps_left, verdict.projected_s)
                              : std::string(),
      verdict.cost_s);
  // The committed state first, so that the relaunch loses no step.
  store.write_final_checkpoint("relaunching at the full world");
  nlohmann::json fields = {{"step", step()},
                           {"world_size", comm().size()},
                           {"full_world_size", membership.original_size()},
                           {"shrunk_since_step", verdict.shrunk_since_step},
                           {"lost_s", verdict.lost_s},
                           {"cost_s", verdict.cost_s},
                           {"basis", !verdict.healthy_step_s       ? "estimated"
                                     : verdict.healthy_from_before ? "earlier launch"
                                                                   : "measured"},
                           {"evidence", evidence}};
  if (verdict.healthy_step_s) fields["healthy_step_s"] = *verdict.healthy_step_s;
  if (verdict.projected_s > 0) {
    fields["projected_s"] = verdict.projected_s;
    fields["steps_left"] = verdict.steps_left;
  }
  events().emit("regrow_planned", std::move(fields));
  // With fault domains only this domain stops: the others regroup without it and go on, and
  // hardy run relaunches it, healed from them as after a loss.
  throw SessionStop{
      kPlannedRelaunch,
      fmt::format(
          "running shrunk, {}; hardy run relaunches {} at its full world", evidence,
          domains.enabled() ? fmt::format("domain {}", config.domain) : std::string("the job")),
      "regrowing"};
}

void TrainingSession::State::recover(const std::string& what) {
  comm::note_peer_failure();         // mpi_check did already; an NCCL failure reaches here too
  progress.steps_since_restart = 0;  // the hang monitor waits for the first step after it
  publish_to_watchdog();
  Watchdog::Scope scope(watchdog, "recovery", Activity::recovering);
  const Recovery::FailureClock clock = recovery.failure_clock();
  const auto started = Clock::now();
  const int attempts = recovery.recover(what, clock);
  slow_ranks.reset();  // the survivors are renumbered: even shares, the watch starts afresh
  if (domains.enabled())
    if (auto rolled_forward = domains.after_local_recovery(what))
      commit_step(std::move(*rolled_forward));
  progress.step_clock = Clock::now();
  publish_to_watchdog();
  events().emit("recovery_finished",
                {{"step", step()}, {"seconds", seconds_since(started)}, {"attempts", attempts}});
}

int TrainingSession::State::run() {
  announce_start();
  try {
    prepare_to_train();
    train_to_last_step();
    return finish();
  } catch (const SessionStop& stop) {
    return stop_early(stop);
  } catch (const std::exception& e) {
    watchdog.stop();
    events().emit("job_finished", {{"status", "failed"}, {"steps", step()}, {"error", e.what()}});
    throw;
  }
}

void TrainingSession::State::announce_start() {
  events().emit(membership.writes_run_files() ? "job_started" : "domain_started",
                job_started_fields(config, membership, trainer, data, domains.enabled()));
  membership.announce(events());
  if (membership.first_on_host()) {
    // Killed ranks' shared memory, this run's earlier launches' or other jobs' of this user.
    std::uintmax_t bytes = 0;
    const auto removed = comm::remove_orphaned_mpi_segments();
    for (const auto& segment : removed) bytes += segment.bytes;
    if (!removed.empty())
      events().emit("mpi_segments_removed",
                    {{"host", membership.host()}, {"files", removed.size()}, {"bytes", bytes}});
  }
  staging.start(*data.storage, identity.launch);
  if (membership.writes_run_files()) print_training_line(config, membership, trainer, data);
}

void TrainingSession::State::prepare_to_train() {
  if (config.domain_join.empty())  // a relaunched domain heals from a peer
    if (const auto resumed =
            resume_if_asked(config, membership, trainer, store, events(), identity);
        resumed && !resumed->committed_lines.empty()) {
      // The launch before may have died between this step's copies and its log lines: they came
      // with the state, for the writer to log where they are missing.
      files.adopt_lines(resumed->committed_lines, resumed->source);
      if (membership.writes_run_files()) files.log_committed_step_if_missing(step());
    }
  domains.start();
  if (!hang_monitor) {
    hang_monitor = make_hang_monitor(config, membership, identity.launch);
    if (hang_monitor)
      watchdog.on_tick([this](const Watchdog::Progress& p) { hang_monitor->tick(p); });
  }
  progress.steps_since_restart = 0;
  progress.step_clock = Clock::now();
  publish_to_watchdog();
  watchdog.start();
}

void TrainingSession::State::train_to_last_step() {
  while (step() < config.steps) {
    try {
      train_step();
    } catch (const comm::ProcessFailure& failure) {
      if (!comm().fault_tolerant()) throw;
      // The other survivors may have finished this step and wait in its agreement: meet them
      // there (after the revoke has freed those still inside a collective), then recover.
      progress.steps_since_restart = 0;  // no hang watch until the recovery has committed a step
      publish_to_watchdog();
      Watchdog::Scope scope(watchdog, "recovery", Activity::recovering);
      comm().revoke();
      agree_on_step(comm(), /*finished=*/false, preemption_requested());
      recover(failure.what());
    }
  }
}

int TrainingSession::State::finish() {
  watchdog.stop();
  // The job's last state is worth keeping when checkpoints are on: a later job can go on from it.
  const bool checkpointing = config.checkpoint_every > 0 || config.checkpoint_every_seconds > 0;
  // Agreed: a lead that cannot write it fails every rank, and no host removes its snapshots.
  // Only the lead knows whether the last step has its checkpoint already (it alone writes
  // them), so it tells the others: a test of its own would send ranks down different paths.
  if (checkpointing && comm::allreduce(comm(), lead() && store.last_checkpoint_step() != step(),
                                       comm::ReduceOp::max) != 0)
    comm::agree_on_outcome(comm(), lead(), [&] { store.checkpoint_if_due(true); });
  store.flush();
  store.remove_node_snapshots();  // after the final checkpoint: nothing needs them any more
  // Every rank's watchdog stopped before the collectives above: no heartbeat comes any more.
  if (hang_monitor) hang_monitor->finish();
  // The lead's share of its steps' time spent waiting for data (its steps since it started).
  const double wait_fraction =
      progress.step_total_s > 0 ? progress.data_wait_total_s / progress.step_total_s : 0;
  nlohmann::json finished = {{"status", "completed"},
                             {"steps", step()},
                             {"final_loss", trainer.last_loss()},
                             {"world_size", comm().size()},
                             {"failures", progress.failures},
                             {"data_wait_s", progress.data_wait_total_s},
                             {"data_wait_fraction", wait_fraction},
                             {"skipped_samples", bad_samples.count()}};
  // Equal on every rank of every domain, or their replicas differ (the fault-domain tests
  // compare the domains' digests).
  finished["parameter_digest"] = fmt::format(
      "{:016x}", core::parameter_digest(trainer.backend(), trainer.model().parameters()));
  if (membership.writes_run_files())
    save_and_evaluate(config, trainer, data, progress, bad_samples.count(), finished);
  // In a job of several domains the others' leaders log that their domain is done.
  events().emit(membership.writes_run_files() ? "job_finished" : "domain_finished", finished);
  // After a peer failed, the survivors leave without MPI_Finalize (comm::MpiSession says why),
  // so nothing flushes what their last collective still had queued for others: a survivor that
  // left first took with it data a slower one still waited for, which then saw it fail (the
  // allreduce above: "failed ranks: 3,6", 3 of 25 runs of resilience/fault_allreduce). Once an
  // agreement returns, every rank has finished every collective before it (each joins only
  // after its own has completed, and the waiting ones progress their sends meanwhile), and the
  // agreement itself outlives those that leave first.
  if (comm().fault_tolerant()) {
    try {
      comm().agree(1);
    } catch (const comm::ProcessFailure&) {
      // A rank that died now changes nothing: the job is complete and logged.
    }
  }
  return kCompleted;
}

int TrainingSession::State::stop_early(const SessionStop& stop) {
  watchdog.stop();
  store.flush();
  // The final checkpoint holds the last committed step, so a later `--resume latest` (perhaps
  // on other nodes) starts from it; the node-local copies would only be left behind.
  store.remove_node_snapshots();
  const std::string status = !stop.finished_status.empty() ? stop.finished_status
                             : stop.status == kPreempted   ? "preempted"
                                                           : "stopped";
  events().emit("job_finished", {{"status", status},
                                 {"reason", stop.reason},
                                 {"steps", step()},
                                 {"world_size", comm().size()},
                                 {"failures", progress.failures}});
  if (lead()) std::cerr << "hardy: " << stop.reason << "\n";
  // A launcher kills the whole job once any rank exits non-zero, so nobody leaves before the
  // lead has written its final checkpoint and log lines.
  try {
    comm().barrier();
  } catch (const comm::ProcessFailure&) {
    // Another death now changes nothing: the final checkpoint is already on disk.
  }
  return stop.status;
}

}  // namespace hardy::resilience
