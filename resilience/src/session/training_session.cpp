#include "hardy/resilience/training_session.hpp"

#include <fmt/format.h>
#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <thread>

#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/comm/agreement.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/comm/mpi_segments.hpp"
#include "hardy/comm/network_interface.hpp"
#include "hardy/core/nn/evaluation.hpp"
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/core/version.hpp"
#include "hardy/resilience/recovery_protocol.hpp"
#include "session/session_state.hpp"

namespace hardy::resilience {

namespace {

std::atomic<bool> preemption_requested{false};

void on_preemption_signal(int) { preemption_requested.store(true); }

std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  return fmt::format("{:02d}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

// This rank's cores (rank_cores): the CPUs it may run on, or its share of its host's. Collective
// over the world (every rank says which set it was allowed).
int cores_of_rank(Membership& membership) {
  const core::AllowedCpus allowed = core::allowed_cpus();
  const auto fingerprints =
      membership.comm().allgather(static_cast<std::int64_t>(allowed.fingerprint));
  const auto& hosts = membership.original_hosts();
  const auto me = static_cast<std::size_t>(membership.world_rank());
  int on_host = 0, sharing = 0;
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    if (hosts[r] != hosts[me]) continue;
    ++on_host;
    if (fingerprints[r] == fingerprints[me]) ++sharing;
  }
  const int online = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return rank_cores(online, allowed.count, sharing, on_host);
}

// The options' checks (InvalidArgument) and the values they imply (steps from epochs, the
// schedule's length).
void check_and_complete(TrainingConfig& config, int world_size, const core::SampleSource& train) {
  if (config.global_batch < world_size)
    throw InvalidArgument(
        fmt::format("--global-batch {} is smaller than the {} ranks of the job; every rank needs "
                    "at least one sample per step",
                    config.global_batch, world_size));
  if (config.prefetch_batches < 0)
    throw InvalidArgument(
        fmt::format("--prefetch-batches {} is negative", config.prefetch_batches));
  if (const auto shape = train.shape(); shape.height % config.model.input_multiple() != 0 ||
                                        shape.width % config.model.input_multiple() != 0)
    throw InvalidArgument(
        fmt::format("{} has samples of {}x{}; the {} model needs multiples of {} (choose --crop or "
                    "--downsample to get them)",
                    train.describe(), shape.height, shape.width,
                    core::to_string(config.model.architecture), config.model.input_multiple()));
  if (config.ranks_per_node > 1 && world_size % config.ranks_per_node != 0)
    throw InvalidArgument(fmt::format("{} ranks do not make whole nodes of --ranks-per-node {}",
                                      world_size, config.ranks_per_node));
  if (config.steps == 0) {
    const long per_epoch =
        static_cast<long>((train.size() + config.global_batch - 1) / config.global_batch);
    config.steps = per_epoch * config.epochs;
  }
  config.schedule.total_steps = config.steps;
  config.schedule.validate();
  if (config.domain >= 0) {
    // What the cross-domain exchange does not carry yet, refused before anything starts.
    if (config.gradient_lag != 0 && config.sync_every() > 1)
      // At a meeting the domains average their batch statistics, which the lagged step computed
      // ahead has already moved; a joiner would heal from statistics before it.
      throw InvalidArgument(
          "--gradient-lag 1 with --domain-sync-every above 1 is not supported yet: domains that "
          "train alone between meetings take --gradient-lag 0");
    // Each rank resolves its own node's address (only the leader's is used): a node without
    // that network is a misconfiguration to report before anything starts.
    if (config.domain_address.empty() && !config.domain_interface.empty()) {
      try {
        config.domain_address = comm::interface_address(config.domain_interface);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("--domain-interface {}", e.what()));
      }
    }
    if (!config.memory_snapshots || config.rebalance != RebalancePolicy::constant_global_batch)
      throw InvalidArgument(
          "fault domains need --memory-snapshots and --rebalance constant-global-batch: a step "
          "abandoned across domains rolls back from memory");
  }
}

}  // namespace

void install_preemption_handler() {
  struct sigaction action {};
  action.sa_handler = on_preemption_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
}

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
    : config(std::move(config_in)),
      membership(std::move(world), config.ranks_per_node),
      data(std::move(data_in)),
      trainer(config, membership.comm(), *data.train,
              split_host_threads(config, cores_of_rank(membership))),
      transport(make_state_transport(trainer)),
      store(config, membership, events, *this, injector, identity),
      watchdog(
          // The watchdog's action ends the whole job (MPI_Abort), so the other ranks give the
          // lead a second timeout to write its checkpoint first; a stuck lead still ends it.
          [this](const Watchdog::Committed& committed) {
            return committed.rank == 0 ? config.collective_timeout_s
                                       : 2 * config.collective_timeout_s;
          },
          [this](const Watchdog::Stuck& stuck) { end_stuck_job(stuck); }) {
  injector = FailureInjector(parse_injected_failures(config.inject_failures, config.ranks_per_node),
                             membership.world_rank(), config.run_dir / "checkpoints");
  if (config.domain >= 0) {
    // Domains may share a host (and its node-local snapshot and staging directories) on a small
    // cluster; each domain stages the whole dataset over its own nodes (session_staging.cpp),
    // and two copiers must never write one file.
    config.snapshot_dir /= fmt::format("domain-{}", config.domain);
    if (!config.stage_to.empty()) config.stage_to /= fmt::format("domain-{}", config.domain);
    // Until the domains have met, the first domain writes the run directory's files (a
    // relaunched one never does before it joins).
    membership.set_owns_run_files(config.domain == 0 && config.domain_join.empty());
  }
  domains = std::make_unique<FaultDomains>(DomainOptions{.index = config.domain,
                                                         .count = config.domain_count,
                                                         .store = config.domain_store,
                                                         .store_token = config.domain_store_token,
                                                         .address = config.domain_address,
                                                         .timeout_s = config.domain_timeout_s,
                                                         .join_token = config.domain_join},
                                           membership.communicator_slot(), events);
  // The lead alone writes the run directory: the others must not go on into the first
  // collective when it cannot (not writable, over quota).
  comm::agree_on_outcome(membership.comm(), lead(), [&] {
    std::error_code error;
    std::filesystem::create_directories(config.run_dir / "checkpoints", error);
    if (error)  // the user's choice of directory: relaunching would fail the same way
      throw InvalidArgument(
          fmt::format("--run-dir {}: cannot create {}: {}", config.run_dir.string(),
                      (config.run_dir / "checkpoints").string(), error.message()));
    if (!core::RunDirectoryLock::holds(config.run_dir, config.run_lock_token)) {
      run_lock = std::make_unique<core::RunDirectoryLock>(config.run_dir, "hardy train");
      if (run_lock->caveat()) std::cerr << "hardy train: warning: " << *run_lock->caveat() << "\n";
    }
    open_lead_logs();
    if (writes_run_files())
      core::write_atomically(config.run_dir / "config.ini",
                             [&](const std::filesystem::path& temporary) {
                               std::ofstream file(temporary);
                               file << config.config_ini;
                               file.close();
                               if (!file)
                                 throw IoError(fmt::format("cannot write {}", temporary.string()));
                             });
  });
  establish_run_identity();
  step_hooks = make_step_hooks();
}

void TrainingSession::State::establish_run_identity() {
  // A fixed-size message: the run id's 32 digits, the hash's 16 and this launch's token's 16, or
  // zeros when rank 0 failed.
  std::string message(64, '\0');
  std::exception_ptr failure;
  if (lead()) {
    try {
      const std::string run_id = ensure_run_id(config.run_dir);
      const std::string hash =
          config_hash(resume_identity(config, data.train->shape(), data.train->size()));
      message = run_id + hash + random_launch_token();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  comm().broadcast(std::as_writable_bytes(std::span(message.data(), message.size())), 0);
  if (failure) std::rethrow_exception(failure);
  if (message.front() == '\0')
    throw Error(
        fmt::format("rank 0 could not read or create the run id of {}", config.run_dir.string()));
  identity = {message.substr(0, 32), message.substr(32, 16), message.substr(48),
              core::to_string(config.model.architecture)};
}

TrainingSession::State::~State() { watchdog.stop(); }

void TrainingSession::State::open_lead_logs() {
  if (!lead()) return;
  if (!events.enabled()) {
    events = core::EventLog(config.run_dir / "events.jsonl");
    // Every domain's leader writes events: each record says whose it is.
    if (config.domain >= 0) events.add_context("domain", config.domain);
  }
  if (lead_logs_open || !writes_run_files()) return;
  metrics = core::JsonLines(config.run_dir / "metrics.jsonl");
  if (config.audit_samples) audit = core::JsonLines(config.run_dir / "samples.jsonl");
  store.open_checkpoint_writer();
  lead_logs_open = true;
}

std::size_t TrainingSession::State::current_global_batch() const {
  if (config.rebalance == RebalancePolicy::constant_global_batch)
    return static_cast<std::size_t>(config.global_batch);
  // Each surviving rank keeps the share it had in the original world.
  const auto per_rank = static_cast<std::size_t>(config.global_batch / membership.original_size());
  return std::max<std::size_t>(1, per_rank) * static_cast<std::size_t>(membership.size());
}

float TrainingSession::State::current_lr(long at_step) const {
  const float lr = config.schedule.at(at_step);
  if (config.rebalance == RebalancePolicy::constant_global_batch) return lr;
  return lr * static_cast<float>(current_global_batch()) /
         static_cast<float>(config.global_batch);  // linear scaling
}

void TrainingSession::State::capture_into(checkpoint::TrainingState& state) const {
  trainer.capture_into(state);
  capture_job_into(state);
}

checkpoint::StateSources TrainingSession::State::committed_sources(
    checkpoint::TrainingState& scalars) const {
  trainer.capture_scalars_into(scalars);
  capture_job_into(scalars);
  return trainer.committed_sources();
}

void TrainingSession::State::capture_job_into(checkpoint::TrainingState& state) const {
  // A snapshot reuses its strings' and host list's memory: this allocates nothing per step.
  state.config_ini = config.config_ini;
  state.world_size = membership.size();
  state.hosts.resize(static_cast<std::size_t>(membership.size()));
  for (int r = 0; r < membership.size(); ++r)
    state.hosts[static_cast<std::size_t>(r)] = membership.host_of(r);
  state.run_id = identity.run_id;
  state.config_hash = identity.config_hash;
}

std::optional<checkpoint::ValidCheckpoint> TrainingSession::State::newest_valid_checkpoint() {
  std::vector<std::string> skipped;
  auto found = checkpoint::load_latest_valid(config.run_dir / "checkpoints", &skipped);
  for (const auto& reason : skipped) {
    std::cerr << "hardy: skipping checkpoint: " << reason << "\n";
    events.emit("checkpoint_rejected", {{"reason", reason}});
  }
  return found;
}

void TrainingSession::State::resume_if_asked() {
  if (config.resume.empty()) return;
  const auto started = Clock::now();
  checkpoint::TrainingState state;
  std::filesystem::path source;
  // Only the lead reads; whatever stops it (a damaged file the user named, an I/O error the
  // search does not expect) stops every rank, with the same message.
  comm::agree_on_outcome(comm(), lead(), [&] {
    if (config.resume == "latest") {
      if (auto found = newest_valid_checkpoint()) {
        source = std::move(found->path);
        state = std::move(found->state);
      }
    } else {
      try {
        state = checkpoint::read_checkpoint(config.resume);
        source = config.resume;
      } catch (const Error& e) {  // the file the user named is not a usable checkpoint
        throw InvalidArgument(fmt::format("--resume {}: {}", config.resume, e.what()));
      }
    }
    // A checkpoint may come from another run (a fork), but never from another configuration.
    if (!source.empty())
      if (const auto mismatch = config_mismatch(state, identity)) {
        const auto refusal = fmt::format(
            "cannot resume from {}: {}; start a new run directory, or resume with the "
            "configuration it was written for",
            source.string(), *mismatch);
        events.emit("checkpoint_rejected", {{"path", source.string()}, {"reason", refusal}});
        throw InvalidArgument(refusal);
      }
  });
  // A relaunch after the job died as a whole: the nodes' copies may be newer than any checkpoint.
  // Only with `latest`: a checkpoint the user names is what they asked for.
  if (config.resume == "latest" && config.snapshot_every != 0 &&
      resume_from_node_snapshot(!source.empty() ? state.step : -1, started))
    return;
  // Rank 0 tells the others whether there is anything to resume from.
  if (comm::allreduce(comm(), lead() && !source.empty() ? 1 : 0, comm::ReduceOp::max) == 0) {
    if (config.resume != "latest")  // every rank learned it from the reduction above
      throw comm::Agreed<InvalidArgument>(fmt::format("cannot resume from {}", config.resume));
    events.emit("resume_skipped",
                {{"reason", "no valid checkpoint in the run directory; starting at step 0"}});
    return;
  }
  restore_from(state);
  report_resumed("checkpoint", source, "", state, started);
  // Training goes on from this step: later checkpoints in the run directory are another timeline,
  // which retention would otherwise keep in place of this one's.
  if (lead())
    if (const auto discarded =
            checkpoint::discard_checkpoints_newer_than(config.run_dir / "checkpoints", step());
        !discarded.empty()) {
      std::vector<std::string> names;
      for (const auto& path : discarded) names.push_back(path.filename().string());
      events.emit("checkpoints_discarded", {{"newer_than_step", step()}, {"files", names}});
    }
}

bool TrainingSession::State::resume_from_node_snapshot(long checkpoint_step,
                                                       Clock::time_point started) {
  std::optional<checkpoint::ValidCheckpoint> mine;
  // Whatever goes wrong here must not leave the other ranks waiting below: it only means that
  // this host has nothing to offer.
  try {
    mine = store.load_node_snapshot();
    // It must fit this job's model and optimizer (checked before anything is copied); the
    // restore below overwrites all of it, whichever source wins.
    if (mine) trainer.apply(mine->state);
  } catch (const std::exception& e) {
    std::cerr << "hardy: skipping node-local snapshots of " << membership.host() << ": " << e.what()
              << "\n";
    events.emit("snapshot_rejected", {{"host", membership.host()}, {"reason", e.what()}});
    mine.reset();
  }
  // Every rank's snapshot step (-1: none) and rank 0's checkpoint step.
  const auto steps = comm().allgather(mine ? mine->state.step : -1);
  const long checkpoint_at =
      comm::allreduce(comm(), lead() ? checkpoint_step : -1, comm::ReduceOp::max);
  int root = -1;
  long newest = -1;
  for (std::size_t r = 0; r < steps.size(); ++r)  // strictly newer: the lowest rank wins a tie
    if (steps[r] > newest) {
      newest = steps[r];
      root = static_cast<int>(r);
    }
  // At equal steps the checkpoint wins: it is on shared storage and was validated by rank 0.
  if (root < 0 || newest <= checkpoint_at) return false;

  checkpoint::TrainingState state;
  std::string path;  // the file read, whatever step its name says
  if (comm().rank() == root) {
    state = std::move(mine->state);
    path = mine->path.string();
  }
  restore_from(state, root);
  path = comm::broadcast_text(comm(), path, root);
  report_resumed("node-local", path, membership.host_of(root), state, started);
  return true;
}

void TrainingSession::State::report_resumed(const std::string& source,
                                            const std::filesystem::path& path,
                                            const std::string& host,
                                            const checkpoint::TrainingState& restored,
                                            Clock::time_point started) {
  const int saved_world_size = restored.world_size;
  const bool foreign = is_foreign(restored, identity);
  nlohmann::json fields = {{"source", source},
                           {"path", path.string()},
                           {"step", step()},
                           {"saved_world_size", saved_world_size},
                           {"world_size", comm().size()},
                           {"foreign", foreign},
                           {"seconds", seconds_since(started)}};
  if (!host.empty()) fields["host"] = host;
  // Another run's state (a fork) or one written before run ids: say whose it was.
  if (foreign) fields["saved_run_id"] = restored.run_id;
  events.emit("state_restored", fields);
  if (lead())
    std::cout << fmt::format(
        "hardy: resumed from {} at step {} (saved by {} ranks, now {}){}\n",
        host.empty() ? path.string()
                     : fmt::format("the node-local snapshot {} of {}", path.string(), host),
        step(), saved_world_size, comm().size(),
        foreign ? fmt::format("; it is another run's ({})",
                              restored.run_id.empty() ? "no run id" : restored.run_id)
                : "");
}

void TrainingSession::State::check_same_plan(std::uint64_t digest, long at_step) {
  if (!comm::all_equal(comm(), static_cast<std::int64_t>(digest)))
    throw Error(fmt::format(
        "step {}: the ranks planned different global batches (sampler states diverged)", at_step));
}

void TrainingSession::State::check_samples_covered(long computed, long skipped, long at_step) {
  // Every sample of the job's (with domains, the domain's) share of the global batch is computed
  // or skipped by exactly one rank. A step computed over one split of the batch and committed
  // under another would count some twice or not at all: never commit it.
  const auto share = static_cast<long>(domains->my_domain_slice(current_global_batch()).size());
  if (computed + skipped != share)
    throw comm::Agreed<Error>(  // every rank summed the same counts
        fmt::format("step {}: the ranks computed {} and skipped {} samples of the {} in their "
                    "share of the global batch",
                    at_step, computed, skipped, share));
}

std::vector<nlohmann::json> TrainingSession::State::gather_bad_samples(
    const std::vector<core::SkippedSample>& mine, long this_step) {
  nlohmann::json records = nlohmann::json::array();
  for (const auto& s : mine)
    records.push_back({{"sample", s.index},
                       {"file", s.file},
                       {"reason", s.reason},
                       {"rank", comm().rank()},
                       {"step", this_step}});
  std::string text = mine.empty() ? std::string() : records.dump();
  const auto lengths = comm().allgather(static_cast<std::int64_t>(text.size()));
  std::vector<nlohmann::json> all;
  for (int r = 0; r < comm().size(); ++r) {
    const auto length = static_cast<std::size_t>(lengths[static_cast<std::size_t>(r)]);
    if (length == 0) continue;
    std::string theirs = r == comm().rank() ? text : std::string(length, '\0');
    comm().broadcast(std::as_writable_bytes(std::span(theirs.data(), theirs.size())), r);
    for (auto& record : nlohmann::json::parse(theirs)) all.push_back(std::move(record));
  }
  return all;
}

void TrainingSession::State::train_step() {
  const long this_step = step() + 1;  // the step this iteration commits
  CommittedStep done{.started = Clock::now()};
  double reduce_s = 0;  // the waits for the step's sums, in the domain and across domains
  // With --gradient-lag 1 the step after it is computed first, while this one's gradients are
  // still being reduced (docs/resilience.md); its update waits for the next iteration. Across
  // fault domains the next step computes while this one's sums travel between the domains:
  // the step computed in the last iteration is summed in its domain and sent first.
  const bool sums_travel_while_computing =
      domains->enabled() && config.gradient_lag != 0 && trainer.computed_steps() > 0;
  std::vector<double> loss;
  const std::size_t global_batch = current_global_batch();
  if (sums_travel_while_computing) {
    const auto started = Clock::now();
    loss = reduce_in_domain(this_step);
    start_domain_exchange(this_step, global_batch, loss, /*in_background=*/true);
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
      if (!agree_on_step(comm(), /*finished=*/true, preemption_requested.load()).committed)
        recover(fmt::format("step {} did not finish on every rank (a peer failed)", computed_step));
      return;
    }
    const auto started = Clock::now();
    loss = reduce_in_domain(this_step);
    if (domains->enabled())
      start_domain_exchange(this_step, global_batch, loss, /*in_background=*/false);
    reduce_s += seconds_since(started);
  }
  const double grad_scale = trainer.oldest_computed().grad_scale;
  const float loss_scale = trainer.loss_scale();
  bool admit_after_commit = false;
  if (domains->enabled()) {
    const auto started = Clock::now();
    const bool commits = settle_domain_exchange(this_step, loss, done, admit_after_commit);
    reduce_s += seconds_since(started);
    if (!commits) return;
  }
  done.allreduce_s = reduce_s;
  done.lr = current_lr(step());
  const double step_loss = loss[0] * grad_scale;
  if (!std::isfinite(step_loss))
    throw comm::Agreed<Error>(  // the loss was summed over every rank
        fmt::format("the loss became {} at step {}; lower --lr or check the data", step_loss,
                    this_step));
  done.skipped_samples = std::lround(loss[1]);
  done.update = [this, this_step, loss_scale, step_loss, lr = done.lr] {
    if (!trainer.update(lr))
      events.emit("step_skipped", {{"step", this_step},
                                   {"reason", "non-finite gradients (loss-scale overflow)"},
                                   {"loss_scale", loss_scale},
                                   {"new_loss_scale", trainer.loss_scale()}});
    trainer.set_last_loss(step_loss);
  };
  commit_step(std::move(done));
  if (admit_after_commit) {
    Watchdog::Scope scope(watchdog, "domain admission");
    domains->admit_if_pending(domain_state_access());
    follow_domain_ownership();
  }
  // With --gradient-lag 1 the next step is computed already, over the split of the batch in
  // force when it was loaded. Where the vote, a regroup or an admission changed the split since
  // (a domain lost or let in, one that shrank inside), its samples would be covered twice or not
  // at all: every domain with that step in flight computes it again over the new split (a
  // domain that recovered or joined has none in flight, and computes it over the new one).
  if (trainer.computed_steps() > 0 && domains->split_digest() != split_of_newest_computed)
    trainer.drop_uncommitted();
}

std::vector<double> TrainingSession::State::reduce_in_domain(long this_step) {
  const ComputedStep& computed = trainer.oldest_computed();
  // The loss, the samples every rank skipped and those it computed (summed with it: no
  // collective of its own).
  std::vector<double> loss{computed.loss_sum, static_cast<double>(computed.load.skipped.size()),
                           static_cast<double>(computed.samples)};
  Watchdog::Scope scope(watchdog, "gradient allreduce");
  // grad_scale already divides by the global batch, so the sum over ranks is the mean.
  trainer.finish_reduction();
  if (comm().size() > 1 && config.gradient_lag != 0)  // before it is committed
    check_same_plan(computed.plan_digest, this_step);
  comm().allreduce_sum(loss);
  check_samples_covered(std::lround(loss[2]), std::lround(loss[1]), this_step);
  if (loss[1] > 0) {
    // Every rank learns of every bad sample of the step, so that under fail all of them end
    // the job together (one rank ending alone would look like a process failure to recover
    // from), and under skip the lead logs each sample once.
    const auto bad = gather_bad_samples(computed.load.skipped, this_step);
    if (config.bad_samples == core::BadSamplePolicy::fail && !bad.empty())
      throw comm::Agreed<InvalidArgument>(  // every rank learned of the sample above
          fmt::format("{}: {} (step {}; --bad-samples skip would leave such samples out)",
                      bad.front()["file"].get<std::string>(),
                      bad.front()["reason"].get<std::string>(), this_step));
    for (auto record : bad)
      if (skipped_samples.insert(record["sample"].get<std::size_t>()).second)
        events.emit("sample_skipped", std::move(record));
  }
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
    check_same_plan(trainer.drawn_plan_digest(), computed_step);
  }
  const core::BatchLoad& input = [&]() -> const core::BatchLoad& {
    Watchdog::Scope scope(watchdog, "data wait", Activity::loading_data);
    return trainer.load_batch([this](const core::GlobalBatch& b) { return local_samples(b); });
  }();
  split_of_newest_computed = domains->split_digest();
  // Where the domains meet, only the leader needs the domain's sums: it exchanges them with the
  // other domains and broadcasts the result to its members (FaultDomains::exchange).
  if (domains->enabled() && domains_meet_at(computed_step))
    trainer.reducer().reduce_next_step_to(0);
  trainer.compute(grad_scale, [&](std::size_t ready, std::size_t count) {
    // Dying here leaves some buckets' allreduces in flight: the hardest moment to fail.
    if (ready == count / 2) injector.at(computed_step, Phase::allreduce);
  });
  done.compute_s = seconds_since(started);
  done.data_wait_s = input.data_wait_s;
  done.input_copy_s = input.input_copy_s;
  done.input_device_s = input.input_device_s;
  done.input_staged = input.staged;
}

void TrainingSession::State::start_domain_exchange(long this_step, std::size_t global_batch,
                                                   std::vector<double>& loss, bool in_background) {
  if (!domains_meet_at(this_step)) {
    // Alone until the domains meet: the domain's gradient sum (over the global batch) becomes
    // the mean of its own share of it.
    const double share = domains->share(global_batch);
    trainer.divide_gradients(share);
    loss[0] /= share;
    return;
  }
  // The other domains' sums and the step's vote (the commit point across domains).
  exchanging = trainer.exchanged_tensors(config.sync_every() > 1);
  std::vector<float> weights;
  if (config.sync_every() > 1) {
    // Each domain's state, weighted by its share of the batch: their sum is the average. The
    // weight goes on what is sent only: a step dropped here leaves the state as it was.
    weights.assign(exchanging.size(), static_cast<float>(domains->share(global_batch)));
    std::fill_n(weights.begin(), trainer.model().parameters().size(), 1.0f);
  }
  // The step's batch, for its audit line should a heal commit the step here: a heal forgets the
  // computed steps, and with --gradient-lag 1 the batch committed last is the step's before.
  batch_in_exchange.reset();
  if (config.audit_samples) batch_in_exchange = trainer.oldest_batch();
  Watchdog::Scope scope(watchdog, "cross-domain exchange");
  if (in_background)
    domains->start_exchange(this_step, exchanging, loss[0], loss[1], weights);
  else
    exchanged_now =
        domains->exchange(this_step, exchanging, loss[0], loss[1], domain_state_access(), weights);
}

bool TrainingSession::State::settle_domain_exchange(long this_step, std::vector<double>& loss,
                                                    const CommittedStep& done,
                                                    bool& admit_after_commit) {
  if (!domains_meet_at(this_step)) return true;
  DomainStep across;
  if (domains->exchange_in_flight()) {
    Watchdog::Scope scope(watchdog, "cross-domain exchange");
    across = domains->settle_exchange(exchanging, domain_state_access());
  } else {
    across = std::exchange(exchanged_now, std::nullopt).value();
  }
  // A rewind first: a domain that takes over the run files logs the step it went back to (the
  // last meeting), not a step it took alone, which will be redone.
  if (across.verdict == StepVerdict::rewind) rewind_to_synced(this_step);
  follow_domain_ownership();
  switch (across.verdict) {
    case StepVerdict::abandon:
      // Not committed anywhere, and not applied here (the update waits for the commit): the
      // loop redoes the step over the new split of the batch.
      trainer.drop_uncommitted();
      return false;
    case StepVerdict::rewind:
      return false;
    case StepVerdict::healed:
      // The domains whose vote completed committed this step, and this one took their state. If
      // it now writes the run directory's files because the writer died before logging the step,
      // the lines are its to write: the step's global batch is the one it drew, the loss came
      // with the state.
      if (step() == this_step) {
        if (config.audit_samples) keep_audit_line(*batch_in_exchange);
        CommittedStep healed = done;  // its update came with the state
        healed.allreduce_s = 0;
        healed.lr = current_lr(this_step - 1);
        healed.skipped_samples = 0;
        keep_metrics_line(healed, seconds_since(done.started));
        if (writes_run_files()) log_committed_step_if_missing();
      }
      return false;
    case StepVerdict::commit:
      trainer.take_exchanged();
      break;
  }
  loss[0] = across.loss;
  loss[1] = across.skipped;
  admit_after_commit = across.admit_pending;
  return true;
}

void TrainingSession::State::publish_to_watchdog() {
  std::vector<int> members;
  for (int r = 0; r < comm().size(); ++r) members.push_back(membership.world_rank_of(r));
  watchdog.publish({.step = step(),
                    .rank = membership.rank(),
                    .members = std::move(members),
                    .training = steps_since_restart > 0});
}

void TrainingSession::State::start_hang_monitor() {
  if (config.hang_timeout_s < 0 || hang_monitor) return;
  // It kills processes: ranks that share one (threads, in tests) have no process of their own.
  const auto pids = comm().allgather(static_cast<std::int64_t>(::getpid()));
  std::set<std::pair<std::string, std::int64_t>> processes;
  for (int r = 0; r < comm().size(); ++r)
    processes.emplace(membership.host_of(r), pids[static_cast<std::size_t>(r)]);
  if (processes.size() != pids.size()) return;
  auto shared = config.run_dir / "heartbeats";
  if (config.domain >= 0) shared /= fmt::format("domain-{}", config.domain);
  hang_monitor = std::make_unique<HangMonitor>(HangMonitor::Options{
      .board = {.node_root = config.snapshot_dir,
                .beats = std::filesystem::path(checkpoint::run_key(config.run_dir)) / ".heartbeats",
                .shared = shared},
      // a relaunch's ranks never read the last launch's beats
      .launch = identity.launch,
      .world_rank = membership.world_rank(),
      .hosts = membership.original_hosts(),
      .fixed_timeout_s = config.hang_timeout_s,
      .io_timeout_s = config.hang_io_timeout_s,
      .collective_timeout_s = config.collective_timeout_s,
      .keeps_longest_step = lead(),
      .first_on_host = membership.first_on_host()});
  watchdog.on_tick([this](const Watchdog::Progress& progress) { hang_monitor->tick(progress); });
}

DomainStateAccess TrainingSession::State::domain_state_access() {
  // What the domains commit together: every step, or every --domain-sync-every steps.
  return {
      .committed = [this]() -> const checkpoint::TrainingState& { return store.shared(); },
      .restore_in_domain =
          [this](checkpoint::TrainingState& state) {
            restore_from(state, 0);
            store.keep_in_memory();  // another state at a step the copy may hold already
            store.keep_synced();
          },
      .committed_step =
          [this] {
            // Every step is shared with --domain-sync-every 1 (the copy in memory may be
            // stale there: --memory-snapshots false).
            return config.sync_every() > 1 && store.synced() ? store.synced()->step : step();
          },
      .persisted = [this]() -> std::optional<checkpoint::TrainingState> {
        const auto started = Clock::now();
        auto found = newest_valid_checkpoint();
        if (!found) return std::nullopt;
        // Written by this job's lead domain: never another configuration's.
        if (const auto mismatch = config_mismatch(found->state, identity))
          throw Error(fmt::format("{} does not fit this job: {}", found->path.string(), *mismatch));
        events.emit("state_restored", {{"source", "checkpoint"},
                                       {"step", found->state.step},
                                       {"seconds", seconds_since(started)},
                                       {"path", found->path.string()}});
        return std::move(found->state);
      },
      .committed_lines =
          [this] {
            const bool synced = config.sync_every() > 1 && store.synced();
            return nlohmann::json{
                {"metrics", synced ? synced_metrics_line : committed_metrics_line},
                {"audit", synced ? synced_audit_line : committed_audit_line}}
                .dump();
          },
      .adopt_lines =
          [this](const std::string& text) {
            // A peer's lines of a later step than this domain's own (a joiner has none).
            const auto lines = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
            if (!lines.is_object()) return;
            const auto step_of = [](const nlohmann::json& line) {
              return line.is_object() ? line.value("step", -1L) : -1L;
            };
            if (step_of(lines["metrics"]) > step_of(committed_metrics_line))
              committed_metrics_line = lines["metrics"];
            if (step_of(lines["audit"]) > step_of(committed_audit_line))
              committed_audit_line = lines["audit"];
          }};
}

bool TrainingSession::State::domains_meet_at(long at_step) const {
  return !domains->enabled() || synchronizes(at_step, config.sync_every(), config.steps);
}

void TrainingSession::State::rewind_to_synced(long at_step) {
  // A domain was lost since the domains last met: its share of the steps since then is lost with
  // it, so every survivor goes back to that meeting and redoes them over the new split. Meeting
  // every step, that is the committed step: the live state, less the step in flight.
  if (config.sync_every() <= 1) {
    trainer.drop_uncommitted();
    return;
  }
  const checkpoint::TrainingState& synced = *store.synced();
  const long from = step();
  trainer.apply(synced);
  store.keep_in_memory();
  // The lines of the step gone back to, for a new owner of the run files to log if missing.
  if (synced_metrics_line.value("step", -1L) == synced.step) {
    committed_metrics_line = synced_metrics_line;
    committed_audit_line = synced_audit_line;
  }
  if (from > synced.step)
    events.emit(
        "domain_rewound",
        {{"step", at_step}, {"to_step", synced.step}, {"steps_redone", from - synced.step}});
}

void TrainingSession::State::follow_domain_ownership() {
  if (!domains->enabled()) return;
  const bool owned_before = writes_run_files();
  membership.set_owns_run_files(domains->owns_run_files());
  if (owned_before && !writes_run_files()) {
    // A lower domain came back and writes them from the next step on.
    metrics = core::JsonLines();
    audit = core::JsonLines();
    lead_logs_open = false;
  }
  if (!owned_before && writes_run_files()) {
    // The domain that wrote the run directory's files is gone: this one takes over, logging
    // the last committed step if its predecessor died before it did.
    open_lead_logs();
    log_committed_step_if_missing();
  }
}

void TrainingSession::State::commit_step(CommittedStep done) {
  {
    Watchdog::Scope scope(watchdog, "step agreement");
    // Fault tolerant: every survivor gets the same answer, so all of them commit the step or
    // none does. Without ULFM this is an allreduce, and a failure ends the job.
    done.outcome = agree_on_step(comm(), /*finished=*/true, preemption_requested.load(),
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
  ++steps_since_restart;
  if (hang_monitor)
    hang_monitor->step_took(std::chrono::duration<double>(now - step_clock).count());
  step_clock = now;
  last_commit_unix = core::unix_time();
  samples_seen += static_cast<double>(trainer.batch().samples.size());
  for (const StepHook& hook : step_hooks) {
    if (!hook.watched) {
      hook.run(done);
      continue;
    }
    Watchdog::Scope scope(watchdog, hook.name, *hook.watched);
    hook.run(done);
  }
}

std::vector<StepHook> TrainingSession::State::make_step_hooks() {
  std::vector<StepHook> hooks;
  if (config.sync_every() > 1)
    hooks.push_back({"synchronised copy", std::nullopt, [this](const CommittedStep&) {
                       if (domains_meet_at(step())) store.keep_synced();
                     }});
  hooks.push_back(
      {"node snapshot write", Activity::writing_state, [this](const CommittedStep& done) {
         injector.at(step(), Phase::snapshot_write);
         last_snapshot_s = store.write_node_snapshot(done.outcome.snapshot_wanted);
       }});
  hooks.push_back({"progress heartbeat", std::nullopt,
                   [this](const CommittedStep&) { publish_to_watchdog(); }});
  if (config.audit_samples)  // every rank keeps the line; rank 0 writes it
    hooks.push_back({"sample audit", std::nullopt, [this](const CommittedStep&) {
                       keep_audit_line(trainer.batch());
                       audit.write(committed_audit_line);
                     }});
  if (config.verify_replicas_every > 0)
    hooks.push_back({"replica verification", Activity::communicating, [this](const CommittedStep&) {
                       if (step() % config.verify_replicas_every == 0) verify_replicas(step());
                     }});
  // Before a checkpoint, so that a committed step is logged even if rank 0 dies writing one.
  hooks.push_back({"log write", Activity::writing_state, [this](const CommittedStep& done) {
                     const double step_s = std::max(1e-6, seconds_since(done.started));
                     data_wait_total_s += done.data_wait_s;
                     step_total_s += step_s;
                     write_metrics(done, step_s);
                     if (config.sync_every() > 1 && domains_meet_at(step())) {
                       synced_metrics_line = committed_metrics_line;
                       synced_audit_line = committed_audit_line;
                     }
                   }});
  hooks.push_back({"preemption", std::nullopt, [this](const CommittedStep& done) {
                     if (!done.outcome.preempt) return;
                     events.emit("preemption_requested", {{"step", step()}});
                     store.write_final_checkpoint("preempted by SIGUSR1 (scheduler time limit)");
                     throw SessionStop{
                         kPreempted, "preempted: checkpoint written; resume with --resume latest"};
                   }});
  hooks.push_back({"checkpoint", Activity::writing_state,
                   [this](const CommittedStep&) { store.checkpoint_if_due(false); }});
  return hooks;
}

void TrainingSession::State::verify_replicas(long at_step) {
  const std::uint64_t digest =
      core::parameter_digest(trainer.backend(), trainer.model().parameters());
  const auto all = comm().allgather(static_cast<std::int64_t>(digest));
  const auto differ = std::count_if(all.begin(), all.end(), [&](std::int64_t d) {
    return static_cast<std::uint64_t>(d) != static_cast<std::uint64_t>(all.front());
  });
  if (differ != 0)
    throw comm::Agreed<Error>(fmt::format(
        "step {}: {} rank(s) hold parameters that differ from rank 0's", at_step, differ));
  events.emit("replicas_verified", {{"step", at_step}, {"digest", fmt::format("{:016x}", digest)}});
}

void TrainingSession::State::keep_audit_line(const core::GlobalBatch& batch) {
  committed_audit_line = {
      {"step", step()}, {"epoch", batch.epochs.front()}, {"samples", batch.samples}};
  const auto boundary = std::find_if(batch.epochs.begin(), batch.epochs.end(),
                                     [&](std::int64_t e) { return e != batch.epochs.front(); });
  if (boundary != batch.epochs.end())
    committed_audit_line["next_epoch_from"] = boundary - batch.epochs.begin();
}

void TrainingSession::State::write_metrics(const CommittedStep& done, double step_s) {
  const float lr = done.lr;
  keep_metrics_line(done, step_s);
  metrics.write(committed_metrics_line);
  const auto global_batch = static_cast<double>(trainer.batch().samples.size());
  if (writes_run_files() &&
      (step() % config.log_every == 0 || step() == config.steps || step() == 1)) {
    const double rate = samples_seen / seconds_since(job_start);
    const double eta = static_cast<double>(config.steps - step()) * global_batch / rate;
    std::cout << fmt::format(
                     "step {:>6}/{} | epoch {:>3} | loss {:.4f} | lr {:.2e} | {:7.1f} samples/s | "
                     "{} rank(s) | ETA {}\n",
                     step(), config.steps, trainer.batch().epochs.front(), trainer.last_loss(), lr,
                     rate, domains->job_world_size(), format_duration(eta))
              << std::flush;
  }
}

void TrainingSession::State::keep_metrics_line(const CommittedStep& done, double step_s) {
  const auto global_batch = static_cast<double>(trainer.batch().samples.size());
  // The background writes that finished since the last line: with the stall, the whole cost.
  const double snapshot_write_cpu_s = store.take_snapshot_write_cpu_s();
  committed_metrics_line = {{"step", step()},
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
                            {"snapshot_s", last_snapshot_s + snapshot_write_cpu_s},
                            {"snapshot_stall_s", last_snapshot_s},
                            {"snapshot_write_cpu_s", snapshot_write_cpu_s},
                            {"skipped_samples", done.skipped_samples},
                            {"world_size", domains->job_world_size()},
                            {"unix_time", core::unix_time()}};
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
    events.emit("job_finished", {{"status", "failed"}, {"steps", step()}, {"error", e.what()}});
    throw;
  }
}

void TrainingSession::State::announce_start() {
  nlohmann::json started = {{"hardy_version", HARDY_VERSION},
                            {"world_size", comm().size()},
                            {"fault_tolerant", comm().fault_tolerant()},
                            {"ranks_per_node", config.ranks_per_node},
                            {"backend", trainer.backend().name()},
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
  if (domains->enabled())
    started["domain_address"] =
        config.domain_address.empty() ? membership.host() : config.domain_address;
  events.emit(writes_run_files() ? "job_started" : "domain_started", std::move(started));
  membership.announce(events);
  if (membership.first_on_host()) {
    // Killed ranks' shared memory, this run's earlier launches' or other jobs' of this user.
    std::uintmax_t bytes = 0;
    const auto removed = comm::remove_orphaned_mpi_segments();
    for (const auto& segment : removed) bytes += segment.bytes;
    if (!removed.empty())
      events.emit("mpi_segments_removed",
                  {{"host", membership.host()}, {"files", removed.size()}, {"bytes", bytes}});
  }
  start_staging();
  if (writes_run_files())
    std::cout << fmt::format(
        "hardy: training {} parameters on {} with {} rank(s) x {} thread(s){}, {} steps of {} "
        "samples\n",
        trainer.model().parameter_count(), data.train->describe(), comm().size(),
        omp_get_max_threads(), comm().fault_tolerant() ? " (fault tolerant)" : "", config.steps,
        config.global_batch);
}

void TrainingSession::State::prepare_to_train() {
  if (config.domain_join.empty()) resume_if_asked();  // a relaunched domain heals from a peer
  domains->start(domain_state_access());
  if (config.sync_every() > 1) store.keep_synced();
  follow_domain_ownership();
  start_hang_monitor();
  steps_since_restart = 0;
  step_clock = Clock::now();
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
      steps_since_restart = 0;  // no hang watch until the recovery has committed a step
      publish_to_watchdog();
      Watchdog::Scope scope(watchdog, "recovery", Activity::recovering);
      comm().revoke();
      agree_on_step(comm(), /*finished=*/false, preemption_requested.load());
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
  const double wait_fraction = step_total_s > 0 ? data_wait_total_s / step_total_s : 0;
  nlohmann::json finished = {{"status", "completed"},
                             {"steps", step()},
                             {"final_loss", trainer.last_loss()},
                             {"world_size", comm().size()},
                             {"failures", failures},
                             {"data_wait_s", data_wait_total_s},
                             {"data_wait_fraction", wait_fraction},
                             {"skipped_samples", skipped_samples.size()}};
  // Equal on every rank of every domain, or their replicas differ (the fault-domain tests
  // compare the domains' digests).
  finished["parameter_digest"] = fmt::format(
      "{:016x}", core::parameter_digest(trainer.backend(), trainer.model().parameters()));
  if (writes_run_files()) {
    checkpoint::save_model(trainer.model(), config.run_dir / "model.h5");
    finished["model"] = (config.run_dir / "model.h5").string();
    if (data.held_out && config.model.regression()) {
      const auto errors = core::evaluate_regression(trainer.model(), *data.held_out,
                                                    static_cast<std::size_t>(config.global_batch));
      finished["mae"] = errors.mean_absolute_error();
      finished["target_mae"] = errors.mean_absolute_errors();
      std::cout << fmt::format(
          "hardy: held-out mean absolute error {:.4f} (per target: {:.4f}) on {}\n",
          errors.mean_absolute_error(), fmt::join(errors.mean_absolute_errors(), ", "),
          data.held_out->describe());
    } else if (data.held_out) {
      const auto confusion = core::evaluate(trainer.model(), *data.held_out,
                                            static_cast<std::size_t>(config.global_batch));
      finished["mean_iou"] = confusion.mean_iou();
      finished["iou"] = confusion.iou();
      std::cout << fmt::format("hardy: held-out mean IoU {:.3f} (IoU per class: {:.3f}) on {}\n",
                               confusion.mean_iou(), fmt::join(confusion.iou(), ", "),
                               data.held_out->describe());
    }
    std::cout << fmt::format(
        "hardy: waited for data {:.2f} s, {:.1f}% of the step time ({} loader thread(s), {} "
        "steps ahead){}\n",
        data_wait_total_s, 100 * wait_fraction, trainer.prefetcher().workers(),
        config.prefetch_batches,
        skipped_samples.empty()
            ? std::string()
            : fmt::format("; {} bad sample(s) skipped", skipped_samples.size()));
    std::cout << "hardy: run directory " << config.run_dir.string() << "\n";
  }
  // In a job of several domains the others' leaders log that their domain is done.
  events.emit(writes_run_files() ? "job_finished" : "domain_finished", finished);
  return kCompleted;
}

int TrainingSession::State::stop_early(const SessionStop& stop) {
  watchdog.stop();
  store.flush();
  // The final checkpoint holds the last committed step, so a later `--resume latest` (perhaps
  // on other nodes) starts from it; the node-local copies would only be left behind.
  store.remove_node_snapshots();
  events.emit("job_finished", {{"status", stop.status == kPreempted ? "preempted" : "stopped"},
                               {"reason", stop.reason},
                               {"steps", step()},
                               {"world_size", comm().size()},
                               {"failures", failures}});
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
