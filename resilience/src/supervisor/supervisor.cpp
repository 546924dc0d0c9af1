#include "hardy/resilience/supervisor.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/json_fields.hpp"
#include "hardy/resilience/events.hpp"
#include "hardy/resilience/relaunch_plan.hpp"
#include "hardy/resilience/stall_watch.hpp"
#include "hardy/resilience/training_session.hpp"
#include "supervisor/launch_event_reader.hpp"
#include "supervisor/launched_job.hpp"
#include "supervisor/node_cleanup.hpp"
#include "supervisor/supervisor_started.hpp"
#include "supervisor/supervisor_steps.hpp"

namespace hardy::resilience {

namespace {

using std::chrono::milliseconds;

milliseconds to_ms(double seconds) { return milliseconds(static_cast<long>(seconds * 1000.0)); }

std::uintmax_t file_size_or_zero(const std::filesystem::path& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return error ? 0 : size;
}

int status_of(LaunchVerdict verdict) {
  switch (verdict) {
    case LaunchVerdict::completed:
      return kCompleted;
    case LaunchVerdict::bad_input:
      return kBadInput;
    case LaunchVerdict::stopped:
      return kStopped;
    case LaunchVerdict::preempted:
      return kPreempted;
    case LaunchVerdict::planned:
      return kPlannedRelaunch;
    case LaunchVerdict::failed:
      return kFailed;
  }
  return kFailed;
}

// One launch from start to end: relays its output; ends it when the job has not started within
// the start timeout; once the job has logged job_finished (or its watchdog ended it), gives the
// launcher finish_grace_s to return before ending it (it may wait for ranks the job already left
// behind: a frozen node's, a stopped rank's). `on_started` hears how long the start took, once.
struct LaunchOutcome {
  int exit_status = 0;
  std::string how;
  std::string output;
  LaunchEvents events;
  double ended_unix = 0;
  // The supervisor ended the launch for them, on a probe of every active node: the decision asks
  // only the spares.
  SilentNodes silent;
};

// Hears each probe the stall watch made: the quiet time, the threshold, the silent nodes, whether
// the launch was ended for them, and how long the probe took.
using OnStallProbe = std::function<void(double, double, const SilentNodes&, bool, double)>;

LaunchOutcome run_launch(const SupervisorConfig& config, const std::vector<std::string>& command,
                         const std::vector<std::string>& nodes,
                         const std::filesystem::path& log_file, double start_timeout_s,
                         const std::function<void(double)>& on_started,
                         const OnStallProbe& on_stall_probe) {
  const auto events_file = config.run_dir / "events.jsonl";
  const double started = core::unix_time();
  LaunchEventReader launch_events(config.run_dir, file_size_or_zero(events_file), started,
                                  config.ranks_per_node);
  LaunchedJob job(command, log_file);
  StallWatch stall(config.stall_probe_after_s);
  SilentNodes silent;
  std::optional<int> status;
  double finished_seen = 0;
  bool job_started = false;
  std::string ended_how, ended_by_supervisor;
  while (!(status = job.wait_for(milliseconds(250)))) {
    if (finished_seen == 0) {
      const LaunchEvents& seen = launch_events.read();
      // From job_started on the ranks handle SIGUSR1 (a final checkpoint): now a time-limit
      // warning that came during the probes or the backoff can reach them.
      if (!job_started && seen.total_steps) {
        job.deliver_pending_signals();
        job_started = true;
        on_started(seen.started_unix.value_or(core::unix_time()) - started);
      }
      // Only this launch's commits: the last line may be an earlier launch's.
      if (job_started && seen.last_committed_step &&
          seen.last_committed_unix.value_or(0) >= started)
        stall.saw(*seen.last_committed_step, *seen.last_committed_unix);
      if (seen.finished_status || seen.ended_by_watchdog) {
        finished_seen = core::unix_time();
        ended_how = seen.finished_status ? "logged job_finished" : "was ended by its watchdog";
      } else if (!job_started && core::unix_time() - started > start_timeout_s) {
        std::cerr << fmt::format(
            "hardy run: the job has not started {:.0f} s after its launch (no job_started; "
            "--start-timeout); ending the launch\n",
            start_timeout_s);
        status = job.terminate(milliseconds(3000));
        ended_by_supervisor = StartTimeout::ended_how(start_timeout_s, job.how());
        break;
      } else if (const double now = core::unix_time(); stall.due(now)) {
        const double quiet = stall.quiet_s(now), threshold = stall.threshold_s().value_or(0);
        silent = probe_silent_nodes(config, nodes, quiet, seen.last_committed_step.value_or(0));
        const bool ends = silence_ends_launch(silent, nodes.size());
        on_stall_probe(quiet, threshold, silent, ends, core::unix_time() - now);
        if (ends) {
          const auto hosts = silent_hosts(silent, nodes);
          std::cerr << fmt::format(
              "hardy run: no step committed for {:.1f} s and {} did not answer; ending the "
              "launch\n",
              quiet, fmt::join(hosts, ","));
          status = job.terminate(kStalledTeardown);
          ended_by_supervisor = stalled_how(quiet, hosts, job.how());
          break;
        }
        silent.clear();
        stall.all_answered(core::unix_time());
      }
    } else if (core::unix_time() - finished_seen > config.finish_grace_s) {
      std::cerr << fmt::format(
          "hardy run: the job {} {:.0f} s ago but the launcher still waits; ending it\n", ended_how,
          config.finish_grace_s);
      status = job.terminate(milliseconds(3000));
      ended_by_supervisor = fmt::format("ended by the supervisor {:.0f} s after the job {} ({})",
                                        config.finish_grace_s, ended_how, job.how());
      break;
    }
  }
  LaunchOutcome outcome;
  outcome.exit_status = *status;
  outcome.how = ended_by_supervisor.empty() ? job.how() : ended_by_supervisor;
  outcome.output = job.output();
  outcome.events = launch_events.read();
  outcome.ended_unix = core::unix_time();
  outcome.silent = std::move(silent);
  if (!job_started && outcome.events.total_steps)  // it started, and ended, between two looks
    on_started(outcome.events.started_unix.value_or(outcome.ended_unix) - started);
  return outcome;
}

// How many requeues this job asked for while its last committed step was `step`: requests that
// made no progress since (an earlier request at the same step, or none committed at all).
long requeues_without_progress(const std::filesystem::path& events_file, long step) {
  std::ifstream file(events_file);
  long count = 0;
  for (std::string line; std::getline(file, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    if (core::read_field<std::string>(record, "event") == "requeue_requested" &&
        core::read_field<long>(record, "step") == step)
      ++count;
  }
  return count;
}

// Adds `lost` to the run directory's exclusion list (keeping what earlier runs of the job put
// there) and returns the whole list.
std::vector<std::string> record_excluded_nodes(const std::filesystem::path& run_dir,
                                               const std::vector<std::string>& lost) {
  std::vector<std::string> all;
  {
    std::ifstream file(exclude_nodes_file(run_dir));
    for (std::string host; file >> host;)
      if (std::find(all.begin(), all.end(), host) == all.end()) all.push_back(host);
  }
  for (const auto& host : lost)
    if (std::find(all.begin(), all.end(), host) == all.end()) all.push_back(host);
  core::write_atomically(exclude_nodes_file(run_dir), [&](const std::filesystem::path& temporary) {
    std::ofstream file(temporary);
    for (const auto& host : all) file << host << "\n";
    if (!file) throw IoError(fmt::format("cannot write {}", temporary.string()));
  });
  return all;
}

}  // namespace

nlohmann::json supervisor_started_fields(const SupervisorConfig& config) {
  return {{"nodes", config.nodes},
          {"spare_nodes", config.spare_nodes},
          {"ranks_per_node", config.ranks_per_node},
          {"launcher", config.launcher->name()},
          {"launch_agent", config.launcher->settings().launch_agent},
          {"ulfm", config.launcher->settings().ulfm},
          {"heartbeat_timeout_s", config.launcher->settings().detection.heartbeat_timeout_s},
          {"keepalive_time_s", config.launcher->settings().detection.keepalive_time_s},
          {"scheduler", config.scheduler},
          {"scheduler_job_id", config.scheduler_job_id},
          {"scheduler_restart_count", config.scheduler_restart_count},
          {"pid", ::getpid()}};
}

std::filesystem::path exclude_nodes_file(const std::filesystem::path& run_dir) {
  return run_dir / kExcludeNodesFile;
}

std::vector<std::string> launch_command(const SupervisorConfig& config,
                                        const std::vector<std::string>& nodes, bool relaunch,
                                        bool newest_state, std::size_t spares_left) {
  const std::string per_node = std::to_string(config.ranks_per_node);
  std::vector<std::string> program{config.hardy.string(), "train"};
  // Injected failures belong to the first launch: a relaunch must not kill itself again.
  const auto dropped = [&](const std::string& arg, const std::string& option) {
    return arg == option || arg.starts_with(option + "=");
  };
  bool asked_resume = false;
  for (std::size_t i = 0; i < config.train_args.size(); ++i) {
    const auto& arg = config.train_args[i];
    const bool resume_option = dropped(arg, "--resume");
    asked_resume = asked_resume || resume_option;
    if ((relaunch && dropped(arg, "--inject-failure")) || (newest_state && resume_option)) {
      if (arg.find('=') == std::string::npos) ++i;  // its value is the next argument
      continue;
    }
    program.push_back(arg);
  }
  program.insert(program.end(),
                 {"--run-dir", config.run_dir.string(), "--ranks-per-node", per_node});
  // What a slow node could be swapped for (--straggler evict).
  if (spares_left > 0)
    program.insert(program.end(), {"--spare-nodes-left", std::to_string(spares_left)});
  if (!config.run_lock_token.empty())
    program.insert(program.end(), {"--run-lock-token", config.run_lock_token});
  if (newest_state || (relaunch && !asked_resume))
    program.insert(program.end(), {"--resume", "latest"});
  return config.launcher->command(nodes, config.ranks_per_node, program);
}

namespace {

// Probes spares [from, from + count) and notes those that fail against them.
void probe_spares(const SupervisorConfig& config, const NodeSet& nodes,
                  const std::vector<std::string>& probe, std::size_t from, std::size_t count,
                  NodeEvidence& evidence) {
  const std::vector<std::string> asked(
      nodes.spares.begin() + static_cast<std::ptrdiff_t>(from),
      nodes.spares.begin() + static_cast<std::ptrdiff_t>(from + count));
  const auto answers = run_on_hosts(probe, asked, to_ms(config.probe_timeout_s));
  for (std::size_t i = 0; i < asked.size(); ++i)
    if (answers[i]) evidence.spares[from + i].push_back("probe: " + *answers[i]);
  evidence.spares_asked = from + count;
}

}  // namespace

NodeEvidence gather_node_evidence(const SupervisorConfig& config, const NodeSet& nodes,
                                  const std::string& launcher_output,
                                  std::set<std::string>& start_failures,
                                  std::map<std::size_t, std::vector<std::string>> known,
                                  const SilentNodes* active_probed) {
  NodeEvidence evidence{std::move(known), {}, {}};
  std::vector<bool> settled(nodes.active.size(), false);
  // Conclusive evidence settles a node as the launcher's word does: its probe decides nothing.
  for (const auto& [i, reports] : evidence.active)
    if (i < nodes.active.size()) settled[i] = true;
  const auto lost = config.launcher->hosts_reported_lost(launcher_output);
  const auto not_started = config.launcher->hosts_not_started(launcher_output);
  std::set<std::size_t> only_unstarted;  // the launcher says no more than that
  for (const auto& host : lost) {
    const bool unstarted =
        std::find(not_started.begin(), not_started.end(), host) != not_started.end();
    for (std::size_t i : indices_of(nodes.active, host)) {
      // A node the launcher lost is left out whatever its probe says (weigh_evidence): the probe
      // need not wait for it. A frozen or cut-off node answers nothing, and waiting out its
      // probe's timeout (5 s by default) added that much to every silent node's loss.
      settled[i] = !unstarted;
      evidence.active[i].push_back(
          unstarted ? fmt::format("launcher: {}'s daemon on the node never reported back",
                                  config.launcher->name())
                    : fmt::format("launcher: {} reported the node lost", config.launcher->name()));
      if (unstarted && evidence.active[i].size() == 1) only_unstarted.insert(i);
    }
  }
  if (active_probed)
    for (const auto& [i, reports] : *active_probed)
      for (const auto& report : reports) evidence.active[i].push_back(report);
  // The spares asked beside the active nodes: one for each node already named, and one more.
  const std::size_t first_spares = std::min(nodes.spares.size(), named_nodes(evidence.active) + 1);
  const auto probe = config.launcher->probe_command(nodes.active, config.probe_timeout_s);
  if (probe.empty()) {
    evidence.spares_asked = nodes.spares.size();  // nothing to ask them with: all count as asked
  } else if (active_probed) {
    // The active nodes answered (or not) a moment ago: only spares are asked.
    if (first_spares > 0) probe_spares(config, nodes, probe, 0, first_spares, evidence);
  } else {
    std::vector<std::string> all = nodes.active;
    all.insert(all.end(), nodes.spares.begin(),
               nodes.spares.begin() + static_cast<std::ptrdiff_t>(first_spares));
    settled.resize(all.size(), false);
    const auto answers = run_on_hosts(probe, all, to_ms(config.probe_timeout_s), settled);
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!answers[i]) continue;
      auto& against =
          i < nodes.active.size() ? evidence.active[i] : evidence.spares[i - nodes.active.size()];
      against.push_back("probe: " + *answers[i]);
    }
    evidence.spares_asked = first_spares;
  }
  for (std::size_t i : only_unstarted) {
    const std::string& host = nodes.active[i];
    if (evidence.active[i].size() != 1 || !start_failures.insert(host).second) continue;
    evidence.forgiven[i] = evidence.active[i].front();
    evidence.active.erase(i);
  }
  return evidence;
}

void ask_spares_for(const SupervisorConfig& config, const NodeSet& nodes, NodeEvidence& evidence,
                    std::size_t replacements) {
  const auto probe = config.launcher->probe_command(nodes.spares, config.probe_timeout_s);
  if (probe.empty()) evidence.spares_asked = nodes.spares.size();
  while (evidence.spares_asked < nodes.spares.size()) {
    std::size_t healthy = 0;
    for (std::size_t i = 0; i < evidence.spares_asked; ++i)
      if (const auto found = evidence.spares.find(i);
          found == evidence.spares.end() || found->second.empty())
        ++healthy;
    if (healthy >= replacements) return;
    // As many as are missing, and one more: a second failed spare is as rare as the first.
    const std::size_t count =
        std::min(nodes.spares.size() - evidence.spares_asked, replacements - healthy + 1);
    probe_spares(config, nodes, probe, evidence.spares_asked, count, evidence);
  }
}

SupervisorConfig lock_run_directory(const SupervisorConfig& config,
                                    std::unique_ptr<RunDirectoryLock>& lock) {
  std::filesystem::create_directories(config.run_dir);
  lock = std::make_unique<RunDirectoryLock>(config.run_dir, "hardy run");
  if (lock->caveat()) std::cerr << "hardy run: warning: " << *lock->caveat() << "\n";
  SupervisorConfig locked = config;
  locked.run_lock_token = lock->token();
  return locked;
}

StartTimeout::StartTimeout(double fixed_s, const std::filesystem::path& events_file)
    : fixed_s_(fixed_s) {
  std::ifstream file(events_file);
  for (std::string line; std::getline(file, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    if (core::read_field<std::string>(record, "event") == "launch_started")
      seen(core::read_field<double>(record, "start_s").value_or(-1));
  }
}

std::string StartTimeout::ended_how(double timeout_s, const std::string& launcher_how) {
  return fmt::format("ended by the supervisor: not started within {:.0f} s (--start-timeout; {})",
                     timeout_s, launcher_how);
}

double StartTimeout::seconds() const {
  if (fixed_s_ > 0) return fixed_s_;
  if (longest_ < 0) return kStartTimeoutUnlearnedS;
  return std::max(kStartTimeoutFloorS, kStartTimeoutStartMultiple * longest_);
}

namespace {
// How long a stall's probe waits for a node after the others answered, at least (run_on_hosts'
// answer_grace): the emulated cluster's nodes, an eighth of a CPU each, answered within 0.35 s.
constexpr milliseconds kSilentGrace{500};
}  // namespace

SilentNodes probe_silent_nodes(const SupervisorConfig& config,
                               const std::vector<std::string>& nodes, double quiet_s,
                               long last_step) {
  SilentNodes silent;
  const auto probe = config.launcher->probe_command(nodes, config.probe_timeout_s);
  if (probe.empty()) return silent;
  const auto answers = run_on_hosts(probe, nodes, to_ms(config.probe_timeout_s), {}, kSilentGrace);
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (answers[i])
      silent[i].push_back(fmt::format(
          "stall watch: no step committed for {:.1f} s after step {}, and the probe: {}", quiet_s,
          last_step, *answers[i]));
  return silent;
}

nlohmann::json silent_json(const SilentNodes& silent, const std::vector<std::string>& nodes) {
  auto list = nlohmann::json::array();
  for (const auto& [i, reports] : silent)
    list.push_back({{"host", nodes[i]}, {"evidence", reports}});
  return list;
}

std::vector<std::string> silent_hosts(const SilentNodes& silent,
                                      const std::vector<std::string>& nodes) {
  std::vector<std::string> hosts;
  for (const auto& [i, reports] : silent) hosts.push_back(nodes[i]);
  return hosts;
}

std::string stalled_how(double quiet_s, const std::vector<std::string>& hosts,
                        const std::string& launcher_how) {
  return fmt::format(
      "ended by the supervisor: no step committed for {:.1f} s and {} did not answer its probe "
      "({})",
      quiet_s, fmt::join(hosts, ","), launcher_how);
}

nlohmann::json excluded_json(const std::vector<ExcludedNode>& nodes) {
  auto list = nlohmann::json::array();
  for (const auto& node : nodes) {
    nlohmann::json entry = {{"host", node.host}, {"evidence", node.evidence}};
    if (node.replaced_by) entry["replaced_by"] = *node.replaced_by;
    list.push_back(entry);
  }
  return list;
}

namespace {

// Where the next launch runs, as decided after a failed one.
struct NextLaunch {
  double decide_start = 0;
  RelaunchPlan plan;
  nlohmann::json kept = nlohmann::json::array();  // nodes the job reported, kept all the same
  std::size_t world = 0;                          // ranks on plan.nodes.active
};

// One `hardy run` of a job in a single domain: its event log and the nodes the next launch runs
// on. `attempt` counts launches from 0.
class Supervision {
 public:
  explicit Supervision(const SupervisorConfig& config)
      : config_(config),
        events_(config.run_dir / "events.jsonl", event_kinds()),
        nodes_{config.nodes, config.spare_nodes},
        start_timeout_(config.start_timeout_s, config.run_dir / "events.jsonl"),
        backoff_(config.backoff_s) {
    events_.emit("supervisor_started", supervisor_started_fields(config));
  }

  LaunchOutcome launch(int attempt) {
    config_.launcher->before_launch();
    const auto command =
        launch_command(config_, nodes_.active, attempt > 0, run_wrote_state_, nodes_.spares.size());
    std::cerr << fmt::format(
        "hardy run: launch {} with {} ranks on {}: {}\n", attempt + 1,
        nodes_.active.size() * static_cast<std::size_t>(config_.ranks_per_node),
        fmt::join(nodes_.active, ","), fmt::join(command, " "));
    auto launch = run_launch(
        config_, command, nodes_.active,
        config_.run_dir / fmt::format("launch-{}.log", attempt + 1), start_timeout_.seconds(),
        [&](double start_s) {
          start_timeout_.seen(start_s);
          events_.emit("launch_started", {{"launch", attempt + 1}, {"start_s", start_s}});
        },
        [&](double quiet_s, double threshold_s, const SilentNodes& silent, bool ended,
            double probe_s) {
          events_.emit("launch_stalled", {{"launch", attempt + 1},
                                          {"quiet_s", quiet_s},
                                          {"threshold_s", threshold_s},
                                          {"silent", silent_json(silent, nodes_.active)},
                                          {"ended", ended},
                                          {"probe_s", probe_s}});
        });
    restrict_to_launch(launch.events, nodes_.active.size());
    run_wrote_state_ = run_wrote_state_ || launch.events.checkpoint_written;
    return launch;
  }

  Verdict judge(int attempt, const LaunchOutcome& launch) {
    const Verdict verdict = judge_launch(launch.exit_status, launch.events);
    events_.emit("launch_ended",
                 {{"launch", attempt + 1},
                  {"how", launch.how},
                  {"exit_status", launch.exit_status},
                  {"verdict", verdict.reason},
                  {"last_committed_step", launch.events.last_committed_step
                                              ? nlohmann::json(*launch.events.last_committed_step)
                                              : nlohmann::json(nullptr)}});
    return verdict;
  }

  core::EventLog& events() { return events_; }

  // The exit status when the launch ends the run: it did not fail, or it failed once too often.
  std::optional<int> finish_if_over(int attempt, const Verdict& verdict,
                                    const LaunchEvents& launch) {
    // A planned relaunch (a slow node left out, a shrunk job regrown) is no failure: it is not
    // counted against --max-restarts.
    if (verdict.kind == LaunchVerdict::planned) {
      ++planned_relaunches_;
      return std::nullopt;
    }
    const bool final = verdict.kind != LaunchVerdict::failed;
    if (verdict.kind == LaunchVerdict::preempted && !config_.scheduler.empty())
      return request_requeue(verdict.reason, {}, launch, attempt + 1);
    if (!final && attempt - planned_relaunches_ < config_.max_restarts) return std::nullopt;
    events_.emit("supervisor_finished", {{"status", status_of(verdict.kind)},
                                         {"how", verdict.reason},
                                         {"launches", attempt + 1},
                                         {"gave_up", !final}});
    if (!final)
      std::cerr << fmt::format("hardy run: giving up after {} relaunches: {}\n",
                               config_.max_restarts, verdict.reason);
    return status_of(verdict.kind);
  }

  // Which nodes are gone: the launcher's word, a probe of every node through the launch path,
  // injected kills, and (weighed against those) the job's own failure events.
  NextLaunch decide_next(const LaunchOutcome& launch) {
    NextLaunch next;
    next.decide_start = core::unix_time();
    // Conclusive: the test's injected kills, and the nodes the job itself evicted as slow.
    auto known = launch.events.killed_nodes;
    for (const auto& [node, reports] : launch.events.evicted_nodes)
      for (const auto& report : reports) known[node].push_back(report);
    // A launch the stall watch ended: its probe asked every active node a moment ago.
    NodeEvidence evidence =
        gather_node_evidence(config_, nodes_, launch.output, start_failures_, std::move(known),
                             launch.silent.empty() ? nullptr : &launch.silent);
    const WeighedEvidence weighed = weigh_evidence(evidence.active, launch.events.failed_nodes);
    ask_spares_for(config_, nodes_, evidence, named_nodes(weighed.against));
    for (const auto& [i, report] : evidence.forgiven) {
      next.kept.push_back({{"host", nodes_.active[i]}, {"evidence", {report}}});
      std::cerr << fmt::format(
          "hardy run: keeping {}: {}, but it answers its probe; a second time leaves it out\n",
          nodes_.active[i], report);
    }
    for (const auto& [i, reports] : weighed.doubted) {
      next.kept.push_back({{"host", nodes_.active[i]}, {"evidence", reports}});
      std::cerr << fmt::format(
          "hardy run: keeping {}: the job reported {}, but the node answers and the launcher "
          "did not lose it (the runtime's teardown after another node's loss)\n",
          nodes_.active[i], fmt::join(reports, "; "));
    }
    next.plan = plan_relaunch(nodes_, weighed.against, evidence.spares);
    next.world = next.plan.nodes.active.size() * static_cast<std::size_t>(config_.ranks_per_node);
    return next;
  }

  // The exit status when too few healthy ranks are left to go on with.
  std::optional<int> stop_if_too_few(int attempt, const Verdict& verdict,
                                     const LaunchEvents& launch, const NextLaunch& next) {
    if (static_cast<int>(next.world) >= config_.min_world_size && !next.plan.nodes.active.empty())
      return std::nullopt;
    if (!config_.scheduler.empty()) {
      std::vector<std::string> lost;
      for (const auto& node : next.plan.excluded) lost.push_back(node.host);
      return request_requeue(
          fmt::format("{}; {} healthy rank(s) left, fewer than --min-world-size {}", verdict.reason,
                      next.world, config_.min_world_size),
          lost, launch, attempt + 1, excluded_json(next.plan.excluded));
    }
    events_.emit("supervisor_finished", {{"status", kStopped},
                                         {"how", verdict.reason},
                                         {"launches", attempt + 1},
                                         {"excluded_nodes", excluded_json(next.plan.excluded)},
                                         {"reason", "too few healthy nodes left"}});
    std::cerr << fmt::format("hardy run: only {} healthy rank(s) left, fewer than {}; stopping\n",
                             next.world, config_.min_world_size);
    return kStopped;
  }

  // Waits out the backoff, and makes the plan's nodes those of the next launch.
  void move_to(int attempt, const Verdict& verdict, const LaunchOutcome& launch,
               const NextLaunch& next) {
    for (const auto& lost : next.plan.excluded)
      std::cerr << fmt::format("hardy run: leaving out {} ({}){}\n", lost.host,
                               fmt::join(lost.evidence, "; "),
                               lost.replaced_by ? " for spare " + *lost.replaced_by : "");
    const double decide_s = core::unix_time() - next.decide_start;
    // A planned relaunch waits for nothing: nothing failed.
    const bool planned = verdict.kind == LaunchVerdict::planned;
    // A launch that committed a step past every earlier launch's made progress: its failure is a
    // new one, not a crash loop, and waits the first backoff again. Without this a long job would
    // wait the longest backoff after every failure from its sixth on (a week-long run at one
    // interruption every few hours reaches that on its first day).
    bool made_progress = false;
    if (const long reached = launch.events.last_committed_step.value_or(0); reached > progress_) {
      progress_ = reached;
      backoff_ = config_.backoff_s;
      made_progress = true;
    }
    // Nor does a launch that made progress and whose loss the evidence pins on nodes now left
    // out: it is no crash loop, its cause is gone, and waiting would only add to the time lost
    // (a second each time a node crashed or went silent, about a point of goodput at one failure
    // every 90 s). A launch that fails again without progress waits, and doubles the wait.
    const bool waits = !planned && !(made_progress && !next.plan.excluded.empty());
    if (waits) std::this_thread::sleep_for(std::chrono::duration<double>(backoff_));
    std::vector<std::string> excluded_hosts;
    for (const auto& lost : next.plan.excluded) excluded_hosts.push_back(lost.host);
    events_.emit("job_relaunched", {{"attempt", attempt + 1},
                                    {"previous_end", launch.how},
                                    {"verdict", verdict.reason},
                                    {"excluded_nodes", excluded_hosts},
                                    {"excluded", excluded_json(next.plan.excluded)},
                                    {"kept_despite_reports", next.kept},
                                    {"spares_lost", excluded_json(next.plan.spares_lost)},
                                    {"nodes", next.plan.nodes.active},
                                    {"spare_nodes", next.plan.nodes.spares},
                                    {"world_size", next.world},
                                    {"decide_s", decide_s},
                                    {"backoff_s", waits ? backoff_ : 0.0},
                                    {"seconds_since_end", core::unix_time() - launch.ended_unix}});
    nodes_ = next.plan.nodes;
    for (const auto* list : {&next.plan.excluded, &next.plan.spares_lost})
      for (const auto& node : *list) left_out_.push_back(node.host);
    if (waits) backoff_ = std::min(60.0, backoff_ * 2);
  }

  // The nodes a relaunch left out, spares included: the cleanup does not wait for their answer.
  const std::vector<std::string>& left_out() const { return left_out_; }

 private:
  // Inside a batch job: hand the job back to the scheduler to run again (on other nodes, or
  // after its time limit), unless it has asked for that too often already.
  int request_requeue(const std::string& why, const std::vector<std::string>& lost,
                      const LaunchEvents& launch, int launches,
                      nlohmann::json excluded = nlohmann::json::array()) {
    const long step = launch.last_committed_step.value_or(0);
    const long stuck = requeues_without_progress(config_.run_dir / "events.jsonl", step);
    if (stuck >= config_.max_requeues) return stop_asking(why, stuck, step, launches, excluded);
    const auto exclude = record_excluded_nodes(config_.run_dir, lost);
    events_.emit("requeue_requested", {{"reason", why},
                                       {"step", step},
                                       {"scheduler", config_.scheduler},
                                       {"scheduler_job_id", config_.scheduler_job_id},
                                       {"scheduler_restart_count", config_.scheduler_restart_count},
                                       {"newly_lost", lost},
                                       {"exclude_nodes", exclude}});
    events_.emit("supervisor_finished", {{"status", kPreempted},
                                         {"how", why},
                                         {"launches", launches},
                                         {"excluded_nodes", excluded},
                                         {"reason", "asking the scheduler to requeue the job"}});
    std::cerr << fmt::format(
        "hardy run: {}; asking {} to requeue job {}{}\n", why, config_.scheduler,
        config_.scheduler_job_id,
        exclude.empty() ? std::string() : fmt::format(" without {}", fmt::join(exclude, ",")));
    return static_cast<int>(kPreempted);
  }

  // So that a job that cannot get going does not cycle through the queue for ever.
  int stop_asking(const std::string& why, long stuck, long step, int launches,
                  const nlohmann::json& excluded) {
    const auto reason = fmt::format(
        "{}; the job asked for {} requeue(s) already without committing a step past {} "
        "(--max-requeues {}): stopping instead of asking again",
        why, stuck, step, config_.max_requeues);
    events_.emit("supervisor_finished", {{"status", kStopped},
                                         {"how", why},
                                         {"launches", launches},
                                         {"excluded_nodes", excluded},
                                         {"reason", reason}});
    std::cerr << "hardy run: " << reason << "\n";
    return static_cast<int>(kStopped);
  }

  const SupervisorConfig& config_;
  core::EventLog events_;
  NodeSet nodes_;
  std::vector<std::string> left_out_;
  std::set<std::string> start_failures_;  // hosts whose runtime daemon failed to start once
  StartTimeout start_timeout_;
  double backoff_;
  long progress_ = 0;             // the furthest step any launch committed
  bool run_wrote_state_ = false;  // a launch wrote a checkpoint: relaunches go on from the newest
  int planned_relaunches_ = 0;    // so far: they are not restarts (--max-restarts)
};

}  // namespace

int supervise(const SupervisorConfig& config) {
  if (config.nodes.empty()) throw InvalidArgument("the supervisor needs at least one node");
  if (!config.launcher) throw InvalidArgument("the supervisor needs a launcher");
  std::unique_ptr<RunDirectoryLock> lock;
  const SupervisorConfig locked = lock_run_directory(config, lock);
  Supervision run(locked);
  const int status = [&] {
    for (int attempt = 0;; ++attempt) {
      const LaunchOutcome launch = run.launch(attempt);
      const Verdict verdict = run.judge(attempt, launch);
      if (const auto status = run.finish_if_over(attempt, verdict, launch.events)) return *status;
      std::cerr << fmt::format("hardy run: launch {} {}: {}\n", attempt + 1,
                               verdict.kind == LaunchVerdict::planned ? "ended" : "failed",
                               verdict.reason);
      const NextLaunch next = run.decide_next(launch);
      if (const auto status = run.stop_if_too_few(attempt, verdict, launch.events, next))
        return *status;
      run.move_to(attempt, verdict, launch, next);
    }
  }();
  remove_node_state(locked, status == kCompleted, run.events(), run.left_out());
  return status;
}

}  // namespace hardy::resilience
