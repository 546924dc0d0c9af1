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
#include <thread>

#include "domain_plan.hpp"
#include "hardy/comm/rendezvous_store.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/json_fields.hpp"
#include "hardy/resilience/relaunch_plan.hpp"
#include "hardy/resilience/supervisor.hpp"
#include "hardy/resilience/training_session.hpp"
#include "launched_job.hpp"
#include "supervisor_events.hpp"

namespace hardy::resilience {

namespace {

using std::chrono::milliseconds;

struct Domain {
  int index = 0;
  std::vector<std::string> nodes;
  std::unique_ptr<LaunchedJob> job;
  int launches = 0;
  double started_unix = 0;
  std::string join_token;  // of the current launch; empty for the first
  bool admitted = true;  // a relaunch is admitted once its leader asks and a generation lets it in
  bool finished = false;
  bool abandoned = false;  // lost more often than --max-restarts: the job trains on without it
};

// Whether domain `index` logged that it finished the job (its leader's job_finished or
// domain_finished, status completed) since `since`.
// Whether the domain logged a record that `matches` since `since` (its launch).
bool domain_logged(const std::filesystem::path& events_file, int index, double since,
                   const std::function<bool(const nlohmann::json&, const std::string&)>& matches) {
  std::ifstream file(events_file);
  for (std::string line; std::getline(file, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    const auto event = core::read_field<std::string>(record, "event");
    if (event && core::read_field<long>(record, "domain") == index &&
        core::read_field<double>(record, "unix_time").value_or(0) >= since &&
        matches(record, *event))
      return true;
  }
  return false;
}

bool domain_finished(const std::filesystem::path& events_file, int index, double since) {
  return domain_logged(events_file, index, since, [](const auto& record, const auto& event) {
    return (event == "job_finished" || event == "domain_finished") &&
           core::read_field<std::string>(record, "status") == "completed";
  });
}

bool domain_started(const std::filesystem::path& events_file, int index, double since) {
  return domain_logged(events_file, index, since, [](const auto&, const auto& event) {
    return event == "job_started" || event == "domain_started";
  });
}

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

  std::filesystem::create_directories(config.run_dir);
  const auto events_file = config.run_dir / "events.jsonl";
  core::EventLog events(events_file);
  // A store of its own for each `hardy run`: keys are written once, and an earlier run of the
  // same directory must not be mistaken for this one's generations.
  const auto store_dir = config.run_dir / "rendezvous" /
                         fmt::format("{}-{}", ::getpid(), static_cast<long>(core::unix_time()));
  std::unique_ptr<comm::RendezvousStore> store;
  try {
    store = comm::open_file_store(store_dir);
  } catch (const IoError& e) {
    throw InvalidArgument(
        fmt::format("the fault domains' rendezvous store cannot start: {}", e.what()));
  }
  const auto caveat = comm::file_store_caveat(store_dir);
  if (caveat)
    std::cerr << fmt::format("hardy run: warning: the rendezvous store {}: {}\n",
                             store_dir.string(), *caveat);
  std::vector<int> members;
  std::vector<Domain> domains(static_cast<std::size_t>(count));
  for (int d = 0; d < count; ++d) {
    auto& domain = domains[static_cast<std::size_t>(d)];
    domain.index = d;
    domain.nodes.assign(config.nodes.begin() + d * per, config.nodes.begin() + (d + 1) * per);
    members.push_back(d);
  }
  std::vector<std::string> spares = config.spare_nodes;
  std::size_t generation = 0;
  store->set("gen.0.members", format_members(members));
  nlohmann::json started = supervisor_started_fields(config);
  started.update(
      {{"domains", count}, {"nodes_per_domain", per}, {"rendezvous_store", store_dir.string()}});
  if (caveat) started["rendezvous_store_caveat"] = *caveat;
  events.emit("supervisor_started", std::move(started));

  const auto publish = [&](const std::string& reason) {
    ++generation;
    store->set(fmt::format("gen.{}.members", generation), format_members(members));
    events.emit("domain_generation_published",
                {{"generation", generation}, {"members", members}, {"reason", reason}});
  };
  const auto launch = [&](Domain& domain) {
    SupervisorConfig one = config;
    one.train_args = domain_train_args(config.train_args, domain.index, per, config.ranks_per_node);
    const bool relaunch = domain.launches > 0;
    auto command = launch_command(one, domain.nodes, relaunch, /*newest_state=*/relaunch);
    command.insert(command.end(), {"--domain", std::to_string(domain.index), "--domains",
                                   std::to_string(count), "--domain-store", store_dir.string(),
                                   "--domain-timeout", fmt::format("{}", config.domain_timeout_s)});
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
    domain.job = std::make_unique<LaunchedJob>(
        command, config.run_dir / fmt::format("launch-d{}-{}.log", domain.index, domain.launches));
  };
  for (auto& domain : domains) launch(domain);
  const auto total_launches = [&] {
    int total = 0;
    for (const auto& domain : domains) total += domain.launches;
    return total;
  };

  double report_seen = 0;  // when a leader's failure report was first seen (0: none waits)
  for (;;) {
    for (auto& domain : domains) {
      if (!domain.job) continue;
      const auto status = domain.job->wait_for(milliseconds(domain.index == 0 ? 50 : 1));
      if (!status) continue;
      const std::string how = domain.job->how(), output = domain.job->output();
      const double ended = core::unix_time();
      domain.job.reset();
      if (domain_finished(events_file, domain.index, domain.started_unix)) {
        // Its last step is every live domain's: no later generation may name it.
        domain.finished = true;
        std::erase(members, domain.index);
        continue;
      }
      if (*status == kBadInput && !domain_started(events_file, domain.index, domain.started_unix)) {
        // Every domain trains with the same options: one that refused them before starting is
        // not a lost node, and a relaunch would only be refused again.
        std::cerr << output;
        events.emit("supervisor_finished",
                    {{"status", kBadInput},
                     {"how", fmt::format("domain {} refused the job's options (exit status 2)",
                                         domain.index)},
                     {"launches", total_launches()},
                     {"domains", count}});
        for (auto& other : domains) other.job.reset();
        return kBadInput;
      }
      // The others finished the job: nothing to come back for.
      if (std::any_of(domains.begin(), domains.end(), [](const Domain& d) { return d.finished; }))
        continue;
      // Lost: the others go on without it, and it comes back on healthy nodes.
      const auto member = std::find(members.begin(), members.end(), domain.index);
      if (member != members.end()) {
        members.erase(member);
        if (!members.empty()) publish(fmt::format("domain {} ended: {}", domain.index, how));
      }
      std::map<std::size_t, std::vector<std::string>> evidence, spare_evidence;
      for (const auto& host : config.launcher->hosts_reported_lost(output))
        for (std::size_t i = 0; i < domain.nodes.size(); ++i)
          if (domain.nodes[i] == host)
            evidence[i].push_back(
                fmt::format("launcher: {} reported the node lost", config.launcher->name()));
      if (const auto probe = config.launcher->probe_command(domain.nodes, config.probe_timeout_s);
          !probe.empty()) {
        std::vector<std::string> all = domain.nodes;
        all.insert(all.end(), spares.begin(), spares.end());
        const auto answers =
            probe_hosts(probe, all, milliseconds(static_cast<long>(config.probe_timeout_s * 1000)));
        for (std::size_t i = 0; i < all.size(); ++i)
          if (answers[i])
            (i < domain.nodes.size() ? evidence[i] : spare_evidence[i - domain.nodes.size()])
                .push_back("probe: " + *answers[i]);
      }
      const RelaunchPlan plan = plan_relaunch({domain.nodes, spares}, evidence, spare_evidence);
      nlohmann::json excluded = nlohmann::json::array();
      for (const auto& node : plan.excluded) {
        nlohmann::json entry = {{"host", node.host}, {"evidence", node.evidence}};
        if (node.replaced_by) entry["replaced_by"] = *node.replaced_by;
        excluded.push_back(entry);
      }
      events.emit("domain_lost", {{"domain", domain.index},
                                  {"launch", domain.launches},
                                  {"how", how},
                                  {"exit_status", *status},
                                  {"nodes", domain.nodes},
                                  {"excluded", excluded},
                                  {"members", members}});
      std::cerr << fmt::format("hardy run: domain {} lost ({}); {} domain(s) train on\n",
                               domain.index, how, members.size());
      if (members.empty()) {
        events.emit("supervisor_finished", {{"status", kFailed},
                                            {"how", "every domain was lost"},
                                            {"launches", total_launches()},
                                            {"domains", count}});
        for (auto& other : domains) other.job.reset();
        return kFailed;
      }
      if (domain.launches > config.max_restarts || plan.nodes.active.size() < domain.nodes.size()) {
        domain.abandoned = true;
        events.emit("domain_abandoned",
                    {{"domain", domain.index},
                     {"reason", domain.launches > config.max_restarts
                                    ? fmt::format("lost {} times (--max-restarts {})",
                                                  domain.launches, config.max_restarts)
                                    : std::string("no healthy node or spare left for it")}});
        continue;
      }
      domain.nodes = plan.nodes.active;
      spares = plan.nodes.spares;
      launch(domain);
      events.emit("domain_relaunched", {{"domain", domain.index},
                                        {"launch", domain.launches},
                                        {"nodes", domain.nodes},
                                        {"spare_nodes", spares},
                                        {"seconds_since_end", core::unix_time() - ended}});
    }

    // A leader whose collective failed while every launcher still runs (a domain that stopped
    // answering, or a timeout): once no launcher has ended for a moment, the members are those
    // still running, and the leaders reconnect.
    bool reported = false;
    for (int m : members)
      reported = reported || store->try_get(fmt::format("fail.{}.{}", generation, m)).has_value();
    if (!reported) {
      report_seen = 0;
    } else if (report_seen == 0) {
      report_seen = core::unix_time();
    } else if (core::unix_time() - report_seen > 1.0) {
      std::erase_if(members, [&](int m) { return !domains[static_cast<std::size_t>(m)].job; });
      for (auto& domain : domains)
        if (domain.job && domain.admitted &&
            std::find(members.begin(), members.end(), domain.index) == members.end())
          members.push_back(domain.index);
      std::sort(members.begin(), members.end());
      publish("a leader reported a failed collective");
      report_seen = 0;
    }

    // A relaunched domain whose leader is ready: the next generation lets it in, unless the
    // others finished the job meanwhile (it would wait for members that are gone).
    const bool job_done =
        std::any_of(domains.begin(), domains.end(), [](const Domain& d) { return d.finished; });
    for (auto& domain : domains) {
      if (domain.admitted || !domain.job || job_done) continue;
      const auto token = fmt::format("{}.{}", domain.index, domain.join_token);
      if (!store->try_get("join." + token)) continue;
      members.push_back(domain.index);
      std::sort(members.begin(), members.end());
      publish(fmt::format("domain {} rejoins", domain.index));
      store->set("admit." + token, std::to_string(generation));
      domain.admitted = true;
    }

    if (job_done)
      for (auto& domain : domains)
        if (domain.job && domain.launches > 1 &&
            !domain_logged(
                events_file, domain.index, domain.started_unix,
                [](const auto&, const auto& event) { return event == "domain_joined"; })) {
          // Relaunched, not back in when the others finished (perhaps admitted while they
          // were past their last step): it would wait for them until its membership timeout.
          domain.job->terminate(milliseconds(3000));
          domain.job.reset();
        }
    const bool running = std::any_of(domains.begin(), domains.end(),
                                     [](const Domain& d) { return d.job && d.admitted; });
    if (!running && job_done) break;
    if (!running && !job_done &&
        std::none_of(domains.begin(), domains.end(), [](const Domain& d) { return bool(d.job); })) {
      events.emit("supervisor_finished", {{"status", kFailed},
                                          {"how", "no domain left running"},
                                          {"launches", total_launches()},
                                          {"domains", count}});
      return kFailed;
    }
  }
  // Relaunches that were never let in: the job is over.
  for (auto& domain : domains)
    if (domain.job) domain.job->terminate(milliseconds(3000));
  const auto finished = read_launch_events(config.run_dir, 0, 0, config.ranks_per_node);
  const bool completed =
      finished.finished_status == "completed" && finished.finished_steps == finished.total_steps;
  events.emit("supervisor_finished",
              {{"status", completed ? kCompleted : kFailed},
               {"how", completed ? "every live domain finished the job" : "the job did not finish"},
               {"launches", total_launches()},
               {"domains", count},
               {"generations", generation + 1}});
  std::filesystem::remove_all(store_dir);
  return completed ? kCompleted : kFailed;
}

}  // namespace hardy::resilience
