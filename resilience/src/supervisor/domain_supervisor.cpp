// hardy run with fault domains: one launcher per domain, each watched on its own; the rendezvous
// store carries the generations of members that the domains' leaders follow (fault_domains.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "domains/domain_plan.hpp"
#include "domains/domain_store.hpp"
#include "hardy/comm/rendezvous/network_interface.hpp"
#include "hardy/comm/rendezvous/redis_server.hpp"
#include "hardy/comm/rendezvous/store.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/json_fields.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/resilience/events.hpp"
#include "hardy/resilience/relaunch_plan.hpp"
#include "hardy/resilience/run_identity.hpp"
#include "hardy/resilience/stall_watch.hpp"
#include "hardy/resilience/supervisor.hpp"
#include "hardy/resilience/training_session.hpp"
#include "supervisor/domain_log.hpp"
#include "supervisor/launched_job.hpp"
#include "supervisor/node_cleanup.hpp"
#include "supervisor/supervisor_started.hpp"
#include "supervisor/supervisor_steps.hpp"

namespace hardy::resilience {

namespace {

using std::chrono::milliseconds;

struct Domain {
  int index = 0;
  std::vector<std::string> nodes;
  std::unique_ptr<LaunchedJob> job;
  int launches = 0;
  int planned_relaunches = 0;  // launches that ended as planned (evicting, regrowing): not failures
  double started_unix = 0;
  bool start_seen = false;  // the current launch logged job_started or domain_started
  double start_checked = 0;
  std::string join_token;  // of the current launch; empty for the first
  bool admitted = true;  // a relaunch is admitted once its leader asks and a generation lets it in
  bool finished = false;
  bool abandoned = false;  // lost more often than --max-restarts: the job trains on without it
  // Its nodes (by index in `nodes`) that did not answer the stall watch's probe: the supervisor
  // ended its launch for them.
  SilentNodes silent;
};

}  // namespace

std::vector<std::string> domain_train_args(const std::vector<std::string>& train_args, int domain,
                                           int nodes_per_domain, int ranks_per_node) {
  static const std::regex injected(R"(^(node|rank)=(\d+)(@.*)$)");
  const long ranks_per_domain = static_cast<long>(nodes_per_domain) * ranks_per_node;
  std::vector<std::string> out;
  for (std::size_t i = 0; i < train_args.size(); ++i) {
    std::string spec;
    bool joined = false;
    if (train_args[i] == "--inject-failure" && i + 1 < train_args.size()) {
      spec = train_args[++i];
    } else if (train_args[i].starts_with("--inject-failure=")) {
      spec = train_args[i].substr(std::string_view("--inject-failure=").size());
      joined = true;
    } else {
      out.push_back(train_args[i]);
      continue;
    }
    std::smatch match;
    if (!std::regex_match(spec, match, injected)) {  // another form: every domain gets it
      out.insert(out.end(), {"--inject-failure", spec});
      continue;
    }
    const long number = std::stol(match[2]);
    const long per = match[1] == "node" ? nodes_per_domain : ranks_per_domain;
    if (number / per != domain) continue;
    const auto local = fmt::format("{}={}{}", match[1].str(), number % per, match[3].str());
    if (joined)
      out.push_back("--inject-failure=" + local);
    else
      out.insert(out.end(), {"--inject-failure", local});
  }
  return out;
}

namespace {

// A store of its own for each `hardy run`: keys are written once, and an earlier run of the
// same directory must not be mistaken for this one's generations.
std::filesystem::path own_store_dir(const std::filesystem::path& run_dir) {
  return run_dir / "rendezvous" /
         fmt::format("{}-{}", ::getpid(), static_cast<long>(core::unix_time()));
}

// The rendezvous store this run's domains meet in, and what they are told to open.
struct DomainRendezvous {
  std::unique_ptr<comm::RedisServer> server;  // with --rendezvous redis
  std::unique_ptr<comm::RendezvousStore> store;
  std::string address;                // --domain-store: the directory or redis://HOST:PORT
  std::filesystem::path token_file;   // --domain-store-token (redis)
  std::optional<std::string> caveat;  // what a file store costs on this file system
};

DomainRendezvous start_rendezvous(const SupervisorConfig& config,
                                  const std::filesystem::path& store_dir) {
  DomainRendezvous rendezvous;
  try {
    if (config.rendezvous == "file") {
      rendezvous.store = comm::open_file_store(store_dir);
      rendezvous.address = store_dir.string();
      rendezvous.caveat = comm::file_store_caveat(store_dir);
      return rendezvous;
    }
    if (config.rendezvous != "redis")
      throw InvalidArgument(
          fmt::format("--rendezvous {}: choose file or redis", config.rendezvous));
    // Where the leaders reach the store, decided before anything starts.
    std::string host = config.rendezvous_host;
    if (host.empty() && !config.domain_interface.empty()) {
      try {
        host = comm::interface_address(config.domain_interface);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("--domain-interface {} (on the batch host)", e.what()));
      }
    }
    std::filesystem::create_directories(store_dir);
    std::filesystem::permissions(store_dir, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::replace);
    // Bound to every address, so it must refuse whoever does not know the password.
    const std::string password = random_launch_token() + random_launch_token();
    rendezvous.server = std::make_unique<comm::RedisServer>(comm::RedisServer::Options{
        .directory = store_dir, .bind = "0.0.0.0", .password = password});
    rendezvous.token_file = store_dir / "redis.token";
    write_store_token(rendezvous.token_file, password);
    rendezvous.store = comm::open_redis_store("127.0.0.1", rendezvous.server->port(),
                                              std::chrono::milliseconds(30'000), password);
    rendezvous.address =
        format_redis_address({host.empty() ? core::host_name() : host, rendezvous.server->port()});
    return rendezvous;
  } catch (const InvalidArgument&) {
    throw;
  } catch (const std::exception& e) {
    std::error_code ignored;  // nothing of it stays behind, its password least of all
    rendezvous = {};
    std::filesystem::remove_all(store_dir, ignored);
    throw InvalidArgument(
        fmt::format("the fault domains' rendezvous store cannot start: {}", e.what()));
  }
}

// One `hardy run` of several fault domains: their launchers, the generations of members it
// publishes in the rendezvous store, and the spares left.
class DomainSupervision {
 public:
  DomainSupervision(const SupervisorConfig& config, int count)
      : config_(config),
        per_(config.nodes_per_domain),
        count_(count),
        events_file_(config.run_dir / "events.jsonl"),
        events_(events_file_, event_kinds()),
        logged_(events_file_, count),
        store_dir_(own_store_dir(config.run_dir)),
        rendezvous_(start_rendezvous(config, store_dir_)),
        store_(*rendezvous_.store),
        caveat_(rendezvous_.caveat),
        start_timeout_(config.start_timeout_s, events_file_) {
    if (caveat_)
      std::cerr << fmt::format("hardy run: warning: the rendezvous store {}: {}\n",
                               store_dir_.string(), *caveat_);
    domains_.resize(static_cast<std::size_t>(count_));
    for (int d = 0; d < count_; ++d) {
      auto& domain = domains_[static_cast<std::size_t>(d)];
      domain.index = d;
      domain.nodes.assign(config.nodes.begin() + d * per_, config.nodes.begin() + (d + 1) * per_);
      members_.push_back(d);
    }
    spares_ = config.spare_nodes;
    publish_spares();
    store_.set(rendezvous_keys::members(0), format_members(members_));
    nlohmann::json started = supervisor_started_fields(config);
    started.update({{"domains", count_},
                    {"nodes_per_domain", per_},
                    {"rendezvous_store", rendezvous_.address}});
    if (!config.domain_interface.empty()) started["domain_interface"] = config.domain_interface;
    if (caveat_) started["rendezvous_store_caveat"] = *caveat_;
    events_.emit("supervisor_started", std::move(started));
  }

  core::EventLog& events() { return events_; }
  // The nodes a relaunch left out, spares included: the cleanup does not wait for their answer.
  const std::vector<std::string>& left_out() const { return left_out_; }

  void launch_all() {
    for (auto& domain : domains_) launch(domain);
  }

  // Waits on each launcher in turn; the exit status when a domain's end ends the run.
  std::optional<int> watch_launchers() {
    for (auto& domain : domains_) {
      if (!domain.job) continue;
      const auto status = domain.job->wait_for(milliseconds(domain.index == 0 ? 50 : 1));
      if (status) {
        if (const auto exit_status = launcher_ended(domain, *status)) return exit_status;
      } else if (is_member(domain) && !job_done() &&
                 logged_.ending(domain.index, domain.started_unix)) {
        // Its job logged its end (it lost its leader, or stops to regrow or to leave a slow
        // node out): the others regroup now, not once its launcher has exited, 0.55 s later on
        // the goodput bench, while every other domain waited for it in the exchange.
        std::erase(members_, domain.index);
        if (!members_.empty()) publish(fmt::format("domain {} is ending", domain.index));
      } else if (!watch_start(domain)) {
        const double timeout_s = start_timeout_.seconds();
        std::cerr << fmt::format(
            "hardy run: domain {} has not started {:.0f} s after its launch (--start-timeout); "
            "ending the launch\n",
            domain.index, timeout_s);
        const int ended = domain.job->terminate(milliseconds(3000));
        if (const auto exit_status = launcher_ended(
                domain, ended, StartTimeout::ended_how(timeout_s, domain.job->how())))
          return exit_status;
      }
    }
    return std::nullopt;
  }

  // The job commits nothing (every domain waits in the exchange for one that went silent): the
  // stall watch probes the nodes of the domains in it, and ends the launch of each domain with a
  // node that did not answer while others did (hardy/resilience/stall_watch.hpp), which the
  // runtime's keepalive would end seconds later. The exit status when that ends the run.
  std::optional<int> watch_stall() {
    const double now = core::unix_time();
    if (now - stall_read_ < 0.25) return std::nullopt;  // as a one-job launch is read
    stall_read_ = now;
    long step = -1;
    double committed = -1;
    if (const auto last = core::last_json_record(config_.run_dir / "metrics.jsonl")) {
      step = core::read_field<long>(*last, "step").value_or(-1);
      committed = core::read_field<double>(*last, "unix_time").value_or(-1);
    }
    if (step >= 0 && committed >= run_started_) stall_.saw(step, committed);
    if (!stall_.due(now)) return std::nullopt;
    std::vector<std::string> nodes;
    std::vector<std::pair<Domain*, std::size_t>> owners;  // each node's domain and its index there
    auto probed = nlohmann::json::array();
    for (auto& domain : domains_) {
      if (!domain.job || !domain.admitted) continue;
      probed.push_back(domain.index);
      for (std::size_t i = 0; i < domain.nodes.size(); ++i) {
        nodes.push_back(domain.nodes[i]);
        owners.emplace_back(&domain, i);
      }
    }
    const double quiet = stall_.quiet_s(now), threshold = stall_.threshold_s().value_or(0);
    const SilentNodes silent = probe_silent_nodes(config_, nodes, quiet, step);
    const bool ends = silence_ends_launch(silent, nodes.size());
    events_.emit("launch_stalled", {{"domains", probed},
                                    {"quiet_s", quiet},
                                    {"threshold_s", threshold},
                                    {"silent", silent_json(silent, nodes)},
                                    {"ended", ends},
                                    {"probe_s", core::unix_time() - now}});
    if (!ends) {
      stall_.all_answered(core::unix_time());
      return std::nullopt;
    }
    for (const auto& [i, reports] : silent) owners[i].first->silent[owners[i].second] = reports;
    // The others regroup without the silent domains at once: their launchers' teardown waits
    // for daemons that never answer (0.7 s on the goodput bench, every other domain idle).
    std::vector<int> leaving;
    for (const auto& domain : domains_)
      if (!domain.silent.empty() && domain.job && is_member(domain))
        leaving.push_back(domain.index);
    if (!leaving.empty()) {
      std::erase_if(members_, [&](int m) {
        return std::find(leaving.begin(), leaving.end(), m) != leaving.end();
      });
      if (!members_.empty())
        publish(fmt::format("domain(s) {} went silent (stall watch)", fmt::join(leaving, ",")));
    }
    for (auto& domain : domains_) {
      if (domain.silent.empty() || !domain.job) continue;
      const auto hosts = silent_hosts(domain.silent, domain.nodes);
      std::cerr << fmt::format(
          "hardy run: no step committed for {:.1f} s and {} of domain {} did not answer; ending "
          "the domain's launch\n",
          quiet, fmt::join(hosts, ","), domain.index);
      const int status = domain.job->terminate(kStalledTeardown);
      if (const auto exit_status =
              launcher_ended(domain, status, stalled_how(quiet, hosts, domain.job->how())))
        return exit_status;
    }
    return std::nullopt;
  }

  // A leader whose collective failed while every launcher still runs (a domain that stopped
  // answering, or a timeout): once no launcher has ended for a moment, the members are those
  // still running, and the leaders reconnect.
  void regroup_after_failed_collective() {
    bool reported = false;
    for (int m : members_)
      reported = reported || store_.try_get(rendezvous_keys::failure(generation_, m)).has_value();
    if (!reported) {
      report_seen_ = 0;
    } else if (report_seen_ == 0) {
      report_seen_ = core::unix_time();
    } else if (core::unix_time() - report_seen_ > 1.0) {
      std::erase_if(members_, [&](int m) { return !domains_[static_cast<std::size_t>(m)].job; });
      for (auto& domain : domains_)
        if (domain.job && domain.admitted && !is_member(domain)) members_.push_back(domain.index);
      std::sort(members_.begin(), members_.end());
      publish("a leader reported a failed collective");
      report_seen_ = 0;
    }
  }

  bool job_done() const {
    return std::any_of(domains_.begin(), domains_.end(),
                       [](const Domain& d) { return d.finished; });
  }

  // A relaunched domain whose leader is ready: the next generation lets it in.
  void admit_rejoining() {
    for (auto& domain : domains_) {
      if (domain.admitted || !domain.job) continue;
      if (!store_.try_get(rendezvous_keys::join(domain.index, domain.join_token))) continue;
      members_.push_back(domain.index);
      std::sort(members_.begin(), members_.end());
      publish(fmt::format("domain {} rejoins", domain.index));
      store_.set(rendezvous_keys::admit(domain.index, domain.join_token),
                 std::to_string(generation_));
      domain.admitted = true;
    }
  }

  void end_relaunches_left_out() {
    for (auto& domain : domains_)
      if (domain.job && domain.launches > 1 && !logged_.joined(domain.index, domain.started_unix)) {
        // Relaunched, not back in when the others finished (perhaps admitted while they
        // were past their last step): it would wait for them until its membership timeout.
        domain.job->terminate(milliseconds(3000));
        domain.job.reset();
      }
  }

  // A relaunched domain whose leader has not been let in yet.
  bool relaunch_pending() const {
    return std::any_of(domains_.begin(), domains_.end(),
                       [](const Domain& d) { return d.job && !d.admitted; });
  }

  bool member_running() const {
    return std::any_of(domains_.begin(), domains_.end(),
                       [](const Domain& d) { return d.job && d.admitted; });
  }

  bool launcher_running() const {
    return std::any_of(domains_.begin(), domains_.end(),
                       [](const Domain& d) { return bool(d.job); });
  }

  // The run ends before the job does: ends every launcher left.
  int finish_early(int status, const std::string& how) {
    events_.emit(
        "supervisor_finished",
        {{"status", status}, {"how", how}, {"launches", total_launches()}, {"domains", count_}});
    for (auto& domain : domains_) domain.job.reset();
    return status;
  }

  int finish() {
    // Relaunches that were never let in: the job is over.
    for (auto& domain : domains_)
      if (domain.job) domain.job->terminate(milliseconds(3000));
    const auto finished = read_launch_events(config_.run_dir, 0, 0, config_.ranks_per_node);
    const bool completed =
        finished.finished_status == "completed" && finished.finished_steps == finished.total_steps;
    events_.emit("supervisor_finished", {{"status", completed ? kCompleted : kFailed},
                                         {"how", completed ? "every live domain finished the job"
                                                           : "the job did not finish"},
                                         {"launches", total_launches()},
                                         {"domains", count_},
                                         {"generations", generation_ + 1}});
    std::filesystem::remove_all(store_dir_);
    return completed ? kCompleted : kFailed;
  }

 private:
  void launch(Domain& domain) {
    SupervisorConfig one = config_;
    one.train_args =
        domain_train_args(config_.train_args, domain.index, per_, config_.ranks_per_node);
    const bool relaunch = domain.launches > 0;
    config_.launcher->before_launch();
    // The spares left (shared by every domain) let the domain evict a slow node of its own.
    auto command =
        launch_command(one, domain.nodes, relaunch, /*newest_state=*/relaunch, spares_.size());
    command.insert(command.end(),
                   {"--domain", std::to_string(domain.index), "--domains", std::to_string(count_),
                    "--domain-store", rendezvous_.address, "--domain-timeout",
                    fmt::format("{}", config_.domain_timeout_s)});
    if (!rendezvous_.token_file.empty())
      command.insert(command.end(), {"--domain-store-token", rendezvous_.token_file.string()});
    if (!config_.domain_interface.empty())
      command.insert(command.end(), {"--domain-interface", config_.domain_interface});
    ++domain.launches;
    domain.join_token.clear();
    if (relaunch) {
      domain.join_token = fmt::format("{}", domain.launches);
      command.insert(command.end(), {"--domain-join", domain.join_token});
      domain.admitted = false;
    }
    std::cerr << fmt::format("hardy run: domain {} launch {} on {}: {}\n", domain.index,
                             domain.launches, fmt::join(domain.nodes, ","),
                             fmt::join(command, " "));
    domain.started_unix = core::unix_time();
    domain.start_seen = false;
    domain.job = std::make_unique<LaunchedJob>(
        command, config_.run_dir / fmt::format("launch-d{}-{}.log", domain.index, domain.launches));
  }

  void publish(const std::string& reason) {
    ++generation_;
    store_.set(rendezvous_keys::members(generation_), format_members(members_));
    events_.emit("domain_generation_published",
                 {{"generation", generation_}, {"members", members_}, {"reason", reason}});
  }

  bool is_member(const Domain& domain) const {
    return std::find(members_.begin(), members_.end(), domain.index) != members_.end();
  }

  int total_launches() const {
    int total = 0;
    for (const auto& domain : domains_) total += domain.launches;
    return total;
  }

  // False once the domain's current launch has taken longer than the start timeout to start.
  bool watch_start(Domain& domain) {
    const double now = core::unix_time();
    if (domain.start_seen || now - domain.start_checked < 0.5) return true;
    domain.start_checked = now;
    if (const auto started = logged_.started(domain.index, domain.started_unix)) {
      domain.start_seen = true;
      const double start_s = *started - domain.started_unix;
      start_timeout_.seen(start_s);
      events_.emit("launch_started",
                   {{"domain", domain.index}, {"launch", domain.launches}, {"start_s", start_s}});
      return true;
    }
    return now - domain.started_unix <= start_timeout_.seconds();
  }

  // `ended_how`: how the supervisor ended the launcher, if it did.
  std::optional<int> launcher_ended(Domain& domain, int status, std::string ended_how = {}) {
    const std::string how = ended_how.empty() ? domain.job->how() : std::move(ended_how);
    const std::string output = domain.job->output();
    const double ended = core::unix_time();
    domain.job.reset();
    if (logged_.finished(domain.index, domain.started_unix)) {
      // Its last step is every live domain's: no later generation may name it.
      domain.finished = true;
      std::erase(members_, domain.index);
      return std::nullopt;
    }
    if (status == kBadInput && !logged_.started(domain.index, domain.started_unix)) {
      // Every domain trains with the same options: one that refused them before starting is
      // not a lost node, and a relaunch would only be refused again.
      std::cerr << output;
      return finish_early(
          kBadInput,
          fmt::format("domain {} refused the job's options (exit status 2)", domain.index));
    }
    // The others finished the job: nothing to come back for.
    if (job_done()) return std::nullopt;
    // Open MPI's launcher under ULFM can end with 0 when its ranks were killed: status 0 alone
    // would read as a success in the event log.
    if (status == 0)
      return domain_lost(domain, status,
                         "its launcher ended (exit status 0) before the domain finished the job",
                         output, ended);
    return domain_lost(domain, status, how, output, ended);
  }

  // Lost: the others go on without it, and it comes back on healthy nodes.
  std::optional<int> domain_lost(Domain& domain, int status, const std::string& how,
                                 const std::string& output, double ended) {
    const auto member = std::find(members_.begin(), members_.end(), domain.index);
    if (member != members_.end()) {
      members_.erase(member);
      if (!members_.empty()) publish(fmt::format("domain {} ended: {}", domain.index, how));
    }
    const NodeSet nodes{domain.nodes, spares_};
    // A domain that left out a slow node (node_evicted, exit status 5) ended as planned: the
    // node is excluded on that evidence and the relaunch is no restart. So did one that shrank
    // inside and stopped to come back whole (regrow_planned): nothing is excluded.
    auto evicted = status == kPlannedRelaunch ? logged_.evicted(domain.index, domain.started_unix)
                                              : std::map<std::size_t, std::vector<std::string>>{};
    const bool regrowing =
        status == kPlannedRelaunch && logged_.regrowing(domain.index, domain.started_unix);
    const bool evicting = !evicted.empty();
    const bool planned = evicting || regrowing;
    if (planned) ++domain.planned_relaunches;
    // The stall watch's word is as conclusive as an eviction's (the probe need not wait for
    // those nodes), but the launch it ended failed: no planned relaunch.
    auto known = std::move(evicted);
    for (auto& [i, reports] : domain.silent)
      for (auto& report : reports) known[i].push_back(std::move(report));
    domain.silent.clear();
    NodeEvidence evidence =
        gather_node_evidence(config_, nodes, output, start_failures_, std::move(known));
    ask_spares_for(config_, nodes, evidence, named_nodes(evidence.active));
    for (const auto& [i, report] : evidence.forgiven)
      std::cerr << fmt::format(
          "hardy run: keeping {}: {}, but it answers its probe; a second time leaves it out\n",
          nodes.active[i], report);
    const RelaunchPlan plan = plan_relaunch(nodes, evidence.active, evidence.spares);
    for (const auto* list : {&plan.excluded, &plan.spares_lost})
      for (const auto& node : *list) left_out_.push_back(node.host);
    events_.emit("domain_lost", {{"domain", domain.index},
                                 {"launch", domain.launches},
                                 {"how", how},
                                 {"exit_status", status},
                                 {"evicting", evicting},
                                 {"regrowing", regrowing},
                                 {"nodes", domain.nodes},
                                 {"excluded", excluded_json(plan.excluded)},
                                 {"members", members_}});
    std::cerr << fmt::format("hardy run: domain {} lost ({}); {} domain(s) train on\n",
                             domain.index, how, members_.size());
    abandon_or_relaunch(domain, plan, ended);
    // With no member left, a relaunched domain still carries the job: admitted alone, it goes on
    // from the run directory's newest checkpoint (FaultDomains::resume_persisted).
    if (members_.empty() && !relaunch_pending())
      return finish_early(kFailed, "every domain was lost");
    return std::nullopt;
  }

  // Before a launch: a domain about to evict a slow node looks whether the spares are gone.
  void publish_spares() {
    if (!spares_.empty() || spares_gone_published_) return;
    store_.set(rendezvous_keys::spares_gone(), "1");
    spares_gone_published_ = true;
  }

  void abandon_or_relaunch(Domain& domain, const RelaunchPlan& plan, double ended) {
    const int restarts = domain.launches - domain.planned_relaunches;
    if (restarts > config_.max_restarts || plan.nodes.active.size() < domain.nodes.size()) {
      domain.abandoned = true;
      events_.emit("domain_abandoned",
                   {{"domain", domain.index},
                    {"reason", restarts > config_.max_restarts
                                   ? fmt::format("lost {} times (--max-restarts {})", restarts,
                                                 config_.max_restarts)
                                   : std::string("no healthy node or spare left for it")}});
      return;
    }
    domain.nodes = plan.nodes.active;
    spares_ = plan.nodes.spares;
    publish_spares();
    launch(domain);
    events_.emit("domain_relaunched", {{"domain", domain.index},
                                       {"launch", domain.launches},
                                       {"nodes", domain.nodes},
                                       {"spare_nodes", spares_},
                                       {"seconds_since_end", core::unix_time() - ended}});
  }

  const SupervisorConfig& config_;
  std::vector<std::string> left_out_;  // nodes a relaunch left out, spares included
  StallWatch stall_{config_.stall_probe_after_s};
  double stall_read_ = 0;
  const double run_started_ = core::unix_time();
  const int per_, count_;
  const std::filesystem::path events_file_;
  core::EventLog events_;
  DomainLog logged_;  // what the domains logged, read as events.jsonl grows
  const std::filesystem::path store_dir_;
  DomainRendezvous rendezvous_;
  comm::RendezvousStore& store_;
  const std::optional<std::string> caveat_;
  std::vector<int> members_;
  std::vector<Domain> domains_;
  std::vector<std::string> spares_;
  bool spares_gone_published_ = false;
  std::set<std::string> start_failures_;  // hosts whose runtime daemon failed to start once
  StartTimeout start_timeout_;
  std::size_t generation_ = 0;
  double report_seen_ = 0;  // when a leader's failure report was first seen (0: none waits)
};

}  // namespace

int supervise_domains(const SupervisorConfig& config) {
  const int per = config.nodes_per_domain;
  const int node_count = static_cast<int>(config.nodes.size());
  if (per < 1 || node_count % per != 0)
    throw InvalidArgument(
        fmt::format("--nodes-per-domain {} does not divide the job's {} nodes into whole domains",
                    per, node_count));
  const int count = node_count / per;
  if (count < 2) return supervise(config);
  if (!config.launcher) throw InvalidArgument("the supervisor needs a launcher");

  std::unique_ptr<RunDirectoryLock> lock;
  const SupervisorConfig locked = lock_run_directory(config, lock);
  DomainSupervision run(locked, count);
  run.launch_all();
  const int status = [&] {
    for (;;) {
      if (const auto status = run.watch_launchers()) return *status;
      if (const auto status = run.watch_stall()) return *status;
      run.regroup_after_failed_collective();
      // Once the others finished the job a relaunched domain is not let in (it would wait for
      // members that are gone).
      const bool job_done = run.job_done();
      if (job_done)
        run.end_relaunches_left_out();
      else
        run.admit_rejoining();
      if (job_done && !run.member_running()) return run.finish();
      if (!run.launcher_running()) return run.finish_early(kFailed, "no domain left running");
    }
  }();
  remove_node_state(locked, status == kCompleted, run.events(), run.left_out());
  return status;
}

}  // namespace hardy::resilience
