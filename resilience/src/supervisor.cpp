#include "hardy/resilience/supervisor.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hardy/core/error.hpp"
#include "hardy/core/event_log.hpp"
#include "hardy/resilience/training_session.hpp"

namespace hardy::resilience {

namespace {

std::atomic<pid_t> running_child{0};

// Signals for the job (a scheduler's time-limit warning, a cancel) go to the whole launch.
void forward_signal(int signal) {
  if (const pid_t child = running_child.load(); child > 0) ::kill(-child, signal);
}

void install_forwarding() {
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT}) sigaction(signal, &action, nullptr);
}

struct LaunchResult {
  int status = 0;   // exit status, or 128 + signal
  std::string how;  // for events
};

LaunchResult launch(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const auto& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0) throw Error(fmt::format("cannot start {}: {}", command.front(), std::strerror(errno)));
  if (child == 0) {
    ::setpgid(0, 0);  // its own process group, so that a forwarded signal reaches every rank
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "hardy run: cannot execute %s: %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::setpgid(child, child);
  running_child.store(child);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  running_child.store(0);
  if (WIFEXITED(status)) return {WEXITSTATUS(status), fmt::format("exit status {}", WEXITSTATUS(status))};
  const int signal = WTERMSIG(status);
  return {128 + signal, fmt::format("killed by signal {} ({})", signal, strsignal(signal))};
}

// Nodes that this launch lost, by their index in the launch: from the job's own failure events,
// and from injected kills (whose victims record themselves).
std::set<int> failed_nodes_since(const std::filesystem::path& run_dir, double since, int ranks_per_node) {
  std::set<int> failed;
  std::ifstream events(run_dir / "events.jsonl");
  std::string line;
  while (std::getline(events, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || record.value("unix_time", 0.0) < since) continue;
    if (record.value("event", "") == "failure_detected" && record.contains("failed_nodes"))
      for (int node : record["failed_nodes"]) failed.insert(node);
  }
  const auto checkpoints = run_dir / "checkpoints";
  if (std::filesystem::is_directory(checkpoints))
    for (const auto& entry : std::filesystem::directory_iterator(checkpoints)) {
      const auto name = entry.path().filename().string();
      if (!name.starts_with("injected-kill-")) continue;
      double time = 0;
      if (!(std::ifstream(entry.path()) >> time) || time < since) continue;
      failed.insert(std::stoi(name.substr(std::strlen("injected-kill-"))) / ranks_per_node);
    }
  return failed;
}

}  // namespace

Launcher parse_launcher(const std::string& name) {
  if (name == "mpirun") return Launcher::mpirun;
  if (name == "mpiexec") return Launcher::mpiexec;
  if (name == "srun") return Launcher::srun;
  if (name == "jsrun") return Launcher::jsrun;
  throw InvalidArgument(fmt::format("unknown launcher '{}' (choose mpirun, mpiexec, srun or jsrun)", name));
}

std::string to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::mpirun: return "mpirun";
    case Launcher::mpiexec: return "mpiexec";
    case Launcher::srun: return "srun";
    case Launcher::jsrun: return "jsrun";
  }
  return "?";
}

std::vector<std::string> launch_command(const SupervisorConfig& config, const std::vector<std::string>& nodes,
                                        bool resume) {
  const int world = static_cast<int>(nodes.size()) * config.ranks_per_node;
  const std::string ranks = std::to_string(world), per_node = std::to_string(config.ranks_per_node);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const bool local = std::all_of(nodes.begin(), nodes.end(), [&](const auto& n) { return n == "localhost" || n == host; });
  std::string host_list;
  for (const auto& node : nodes) host_list += (host_list.empty() ? "" : ",") + node;
  std::vector<std::string> command{config.launcher_path.string()};
  switch (config.launcher) {
    case Launcher::mpirun:  // Open MPI
      command.insert(command.end(), {"-n", ranks});
      if (config.ulfm) command.insert(command.end(), {"--with-ft", "ulfm"});
      if (local) {
        command.insert(command.end(), {"--oversubscribe", "--bind-to", "none"});
      } else {
        std::string slots;
        for (const auto& node : nodes) slots += (slots.empty() ? "" : ",") + node + ":" + per_node;
        command.insert(command.end(), {"--host", slots});
      }
      if (::geteuid() == 0) command.push_back("--allow-run-as-root");
      break;
    case Launcher::mpiexec:  // MPICH's hydra
      command.insert(command.end(), {"-n", ranks});
      if (!local) command.insert(command.end(), {"-hosts", host_list, "-ppn", per_node});
      break;
    case Launcher::srun:
      command.insert(command.end(), {"--ntasks", ranks, "--ntasks-per-node", per_node, "--kill-on-bad-exit=1"});
      if (!local) command.insert(command.end(), {"--nodelist", host_list, "--nodes", std::to_string(nodes.size())});
      break;
    case Launcher::jsrun:  // LSF on Summit-like machines: one resource set per rank
      command.insert(command.end(), {"--nrs", ranks, "--tasks_per_rs", "1", "--rs_per_host", per_node});
      break;
  }
  command.insert(command.end(), config.launcher_args.begin(), config.launcher_args.end());
  command.insert(command.end(), {config.hardy.string(), "train"});
  // Injected failures belong to the first launch: a relaunch must not kill itself again.
  for (std::size_t i = 0; i < config.train_args.size(); ++i) {
    const auto& arg = config.train_args[i];
    if (resume && arg == "--inject-failure") {
      ++i;
      continue;
    }
    if (resume && arg.starts_with("--inject-failure=")) continue;
    command.push_back(arg);
  }
  command.insert(command.end(), {"--run-dir", config.run_dir.string(), "--ranks-per-node", per_node});
  const bool asked = std::find(config.train_args.begin(), config.train_args.end(), "--resume") != config.train_args.end();
  if (resume && !asked) command.insert(command.end(), {"--resume", "latest"});
  return command;
}

int supervise(const SupervisorConfig& config) {
  if (config.nodes.empty()) throw InvalidArgument("the supervisor needs at least one node");
  std::filesystem::create_directories(config.run_dir);
  core::EventLog events(config.run_dir / "events.jsonl");
  install_forwarding();
  std::vector<std::string> nodes = config.nodes;
  events.emit("supervisor_started", {{"nodes", nodes},
                                     {"ranks_per_node", config.ranks_per_node},
                                     {"launcher", to_string(config.launcher)},
                                     {"ulfm", config.ulfm},
                                     {"scheduler", config.scheduler},
                                     {"scheduler_job_id", config.scheduler_job_id},
                                     {"scheduler_restart_count", config.scheduler_restart_count},
                                     {"pid", ::getpid()}});
  double backoff = config.backoff_s;
  for (int attempt = 0;; ++attempt) {
    const auto command = launch_command(config, nodes, attempt > 0);
    const double started = core::unix_time();
    std::cerr << fmt::format("hardy run: launch {} with {} ranks: {}\n", attempt + 1,
                             nodes.size() * static_cast<std::size_t>(config.ranks_per_node), fmt::join(command, " "));
    const LaunchResult result = launch(command);
    const double ended = core::unix_time();
    const bool final = result.status == kCompleted || result.status == kBadInput || result.status == kStopped ||
                       result.status == kPreempted;
    if (final || attempt >= config.max_restarts) {
      events.emit("supervisor_finished", {{"status", result.status},
                                          {"how", result.how},
                                          {"launches", attempt + 1},
                                          {"gave_up", !final}});
      if (!final) std::cerr << fmt::format("hardy run: giving up after {} relaunches\n", config.max_restarts);
      return final ? result.status : kFailed;
    }
    // Relaunch without the nodes that failed, from the newest valid checkpoint.
    const auto failed = failed_nodes_since(config.run_dir, started, config.ranks_per_node);
    std::vector<std::string> excluded, survivors;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      (failed.count(static_cast<int>(i)) ? excluded : survivors).push_back(nodes[i]);
    if (static_cast<int>(survivors.size()) * config.ranks_per_node < config.min_world_size) {
      events.emit("supervisor_finished", {{"status", kStopped}, {"how", result.how}, {"launches", attempt + 1},
                                          {"reason", "too few healthy nodes left"}});
      return kStopped;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
    events.emit("job_relaunched", {{"attempt", attempt + 1},
                                   {"previous_end", result.how},
                                   {"excluded_nodes", excluded},
                                   {"world_size", survivors.size() * static_cast<std::size_t>(config.ranks_per_node)},
                                   {"backoff_s", backoff},
                                   {"seconds_since_end", core::unix_time() - ended}});
    nodes = survivors;
    backoff = std::min(60.0, backoff * 2);
  }
}

}  // namespace hardy::resilience
