#include "hardy/jobs/launchers.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <regex>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::jobs {

namespace {

using resilience::LauncherSettings;
using Args = std::vector<std::string>;

bool all_local(const Args& nodes) {
  const std::string host = core::host_name();
  return std::all_of(nodes.begin(), nodes.end(),
                     [&](const auto& n) { return n == "localhost" || n == host; });
}

std::string comma_separated(const Args& items) {
  std::string list;
  for (const auto& item : items) list += (list.empty() ? "" : ",") + item;
  return list;
}

// The hosts named lost by the runtime messages hardy knows, in order of first mention: Open MPI's
// runtime ("PRTE has lost communication with a remote daemon" ... "Remote daemon: [...] on node
// NAME"; "A daemon failed to report back" ... "Remote host: NAME") and Slurm's srun ("srun:
// error: Node failure on NAME", "srun: error: NAME: task N:"). Every launcher reads all of them:
// the messages come from whatever started the processes, which need not be the launcher itself
// (in a Slurm allocation Open MPI's runtime and MPICH's hydra start their daemons with srun).
Args runtime_reported_lost(std::string_view launcher_output, bool unstarted_only = false) {
  // PRRTE: "Remote daemon: [prterun-host-123@0,2] on node hdy-node1" after "lost communication".
  static const std::regex prrte(R"(Remote daemon:\s*\S+\s+on node\s+([A-Za-z0-9._-]+))");
  // srun: "srun: error: Node failure on node3", "srun: error: node3: task 2: Killed".
  static const std::regex srun_node(R"(srun: error: Node failure on ([A-Za-z0-9._-]+))");
  static const std::regex srun_task(R"(srun: error: ([A-Za-z0-9._-]+): tasks? [0-9,-]+: )");
  // PRRTE, a daemon that could not start: "A daemon failed to report back ..." then "Remote
  // host: NAME".
  static const std::regex prrte_start(R"(Remote host:\s+([A-Za-z0-9._-]+))");
  Args hosts;
  const std::string text(launcher_output);
  const bool prrte_lost = text.find("lost communication with a remote daemon") != std::string::npos;
  const bool prrte_unstarted = text.find("daemon failed to report back") != std::string::npos;
  for (const auto* pattern : {&prrte, &prrte_start, &srun_node, &srun_task}) {
    if ((pattern == &prrte && !prrte_lost) || (pattern == &prrte_start && !prrte_unstarted))
      continue;
    if (unstarted_only && pattern != &prrte_start) continue;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), *pattern);
         it != std::sregex_iterator(); ++it) {
      const std::string host = (*it)[1].str();
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    }
  }
  return hosts;
}

// Inside a Slurm allocation the launch path is srun (Open MPI starts its daemons with it too) and
// the nodes need not run sshd; --overlap as in OpenMpiLauncher.
Args srun_on_one_node(const std::string& srun) {
  return {srun, "--overlap", "--nodes=1", "--ntasks=1", "--nodelist={host}"};
}

// What hardy's launchers share: the name they are known by (kKnownLaunchers); the command is the
// executable, its options, the extra arguments and the program; a command on one node goes through
// the launch agent when there is one, else ssh or srun unless the launcher knows better; and every
// launcher reads every runtime message hardy knows (runtime_reported_lost).
class BuiltInLauncher : public resilience::Launcher {
 public:
  BuiltInLauncher(std::string name, LauncherSettings settings, bool in_slurm_allocation)
      : Launcher(std::move(settings)),
        name_(std::move(name)),
        in_slurm_allocation_(in_slurm_allocation) {}

  std::string name() const final { return name_; }

  Args command(const Args& nodes, int ranks_per_node, const Args& program) const final {
    Args command{settings().executable.string()};
    const Args own = options(nodes, ranks_per_node);
    command.insert(command.end(), own.begin(), own.end());
    command.insert(command.end(), settings().extra_args.begin(), settings().extra_args.end());
    command.insert(command.end(), program.begin(), program.end());
    return command;
  }

  Args node_command(const Args& nodes, double timeout_s, const Args& program) const final {
    if (all_local(nodes)) return program;
    Args command = launch_agent_argv(settings().launch_agent);
    if (!command.empty())
      command.push_back("{host}");
    else if ((command = remote_command(timeout_s)).empty())
      return {};
    command.insert(command.end(), program.begin(), program.end());
    return command;
  }

  Args hosts_reported_lost(std::string_view output) const final {
    return runtime_reported_lost(output);
  }
  Args hosts_not_started(std::string_view output) const final {
    return runtime_reported_lost(output, /*unstarted_only=*/true);
  }

 protected:
  // The launcher's options for `ranks_per_node` ranks on each of `nodes`.
  virtual Args options(const Args& nodes, int ranks_per_node) const = 0;
  // How a command reaches a remote node without a launch agent (by default ssh, or srun inside a
  // Slurm allocation), up to the program; empty when it cannot.
  virtual Args remote_command(double timeout_s) const { return ssh_or_srun(timeout_s); }

  bool in_slurm_allocation() const { return in_slurm_allocation_; }

  Args ssh_or_srun(double timeout_s) const {
    if (in_slurm_allocation_) return srun_on_one_node("srun");
    const auto timeout = fmt::format("{}", std::max(1, static_cast<int>(timeout_s)));
    return {"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=" + timeout, "{host}"};
  }

 private:
  std::string name_;
  bool in_slurm_allocation_;
};

class OpenMpiLauncher final : public BuiltInLauncher {
 public:
  using BuiltInLauncher::BuiltInLauncher;
  static constexpr int kPreconnectRanks = 1024;

 protected:
  Args options(const Args& nodes, int ranks_per_node) const override {
    const auto& detection = settings().detection;
    const std::string per_node = std::to_string(ranks_per_node);
    const int ranks = static_cast<int>(nodes.size()) * ranks_per_node;
    Args options{"-n", std::to_string(ranks)};
    if (settings().ulfm) {
      options.insert(options.end(), {"--with-ft", "ulfm"});
      // Every rank's connections made in MPI_Init. Made lazily, a revoke that had to open one to
      // pass itself on (Open MPI 5.0's reliable broadcast: mca_btl_tcp_proc_create) blocked in
      // PMIx_Get after a peer's death, and the ranks it had not reached waited in their
      // gradient allreduce for ever, the others in the recovery's agreement: 4 of 6 jobs of 8
      // emulated nodes with a rank killed in its first 50 steps hung so, none of 15 with this
      // (2026-11-30). A rank then holds a connection to every other from its start, which is
      // kept to jobs of at most kPreconnectRanks ranks; the user's own
      // OMPI_MCA_mpi_preconnect_mpi is left alone.
      if (ranks <= kPreconnectRanks && std::getenv("OMPI_MCA_mpi_preconnect_mpi") == nullptr)
        options.insert(options.end(), {"--mca", "mpi_preconnect_mpi", "1"});
      if (detection.heartbeat_timeout_s > 0)
        options.insert(
            options.end(),
            {"--mca", "mpi_ft_detector", "true", "--mca", "mpi_ft_detector_thread", "true", "--mca",
             "mpi_ft_detector_period", fmt::format("{}", detection.heartbeat_period_s), "--mca",
             "mpi_ft_detector_timeout", fmt::format("{}", detection.heartbeat_timeout_s)});
    }
    if (all_local(nodes)) {
      options.insert(options.end(), {"--oversubscribe", "--bind-to", "none"});
    } else {
      Args slots;
      for (const auto& node : nodes) slots.push_back(node + ":" + per_node);
      options.insert(options.end(), {"--host", comma_separated(slots)});
      if (detection.keepalive_time_s > 0)
        options.insert(
            options.end(),
            {"--prtemca", "oob_tcp_keepalive_time", std::to_string(detection.keepalive_time_s),
             "--prtemca", "oob_tcp_keepalive_intvl", std::to_string(detection.keepalive_interval_s),
             "--prtemca", "oob_tcp_keepalive_probes", std::to_string(detection.keepalive_probes)});
      if (!settings().launch_agent.empty())
        options.insert(options.end(), {"--prtemca", "plm_ssh_agent", settings().launch_agent});
      // Slurm keeps a dead node's step of daemons RUNNING (the node never reports its end),
      // which holds the job's CPUs on the surviving nodes too: without --overlap the daemons of
      // a relaunch wait for them forever. (PRTE_MCA_plm_slurm_args in the environment is not
      // read; the option is.)
      if (in_slurm_allocation())
        options.insert(options.end(), {"--prtemca", "plm_slurm_args", "--overlap"});
    }
    if (!settings().runtime_dir.empty())
      options.insert(options.end(),
                     {"--prtemca", "prte_tmpdir_base", settings().runtime_dir.string()});
    if (::geteuid() == 0) options.push_back("--allow-run-as-root");
    return options;
  }

 public:
  void before_launch() const override {
    if (settings().runtime_dir.empty()) return;
    const auto removed = remove_dead_session_dirs(settings().runtime_dir);
    if (!removed.empty())
      std::cerr << fmt::format(
          "hardy run: removed {} Open MPI session director{} of killed launches from {}: {}\n",
          removed.size(), removed.size() == 1 ? "y" : "ies", settings().runtime_dir.string(),
          fmt::join(removed, " "));
  }
};

class MpichLauncher final : public BuiltInLauncher {  // MPICH's hydra
 public:
  using BuiltInLauncher::BuiltInLauncher;

 protected:
  Args options(const Args& nodes, int ranks_per_node) const override {
    Args options{"-n", std::to_string(static_cast<int>(nodes.size()) * ranks_per_node)};
    if (!all_local(nodes)) {
      options.insert(options.end(),
                     {"-hosts", comma_separated(nodes), "-ppn", std::to_string(ranks_per_node)});
      if (!settings().launch_agent.empty())
        options.insert(options.end(),
                       {"-launcher", "ssh", "-launcher-exec", settings().launch_agent});
    }
    return options;
  }
};

class SrunLauncher final : public BuiltInLauncher {
 public:
  using BuiltInLauncher::BuiltInLauncher;

 protected:
  Args options(const Args& nodes, int ranks_per_node) const override {
    // --overlap: beside a step Slurm may still count as running on a dead node (see
    // OpenMpiLauncher).
    Args options{"--ntasks",
                 std::to_string(static_cast<int>(nodes.size()) * ranks_per_node),
                 "--ntasks-per-node",
                 std::to_string(ranks_per_node),
                 "--kill-on-bad-exit=1",
                 "--overlap"};
    // srun no longer takes --cpus-per-task from the allocation (Slurm 22.05 and later).
    if (settings().cpus_per_rank > 0)
      options.push_back("--cpus-per-task=" + std::to_string(settings().cpus_per_rank));
    if (settings().gpus_per_rank > 0)
      options.push_back("--gpus-per-task=" + std::to_string(settings().gpus_per_rank));
    if (!all_local(nodes))
      options.insert(options.end(), {"--nodelist", comma_separated(nodes), "--nodes",
                                     std::to_string(nodes.size())});
    return options;
  }
  Args remote_command(double) const override {
    return srun_on_one_node(settings().executable.string());
  }
};

// LSF on Summit-like machines: one resource set per rank.
class JsrunLauncher final : public BuiltInLauncher {
 public:
  using BuiltInLauncher::BuiltInLauncher;

 protected:
  Args options(const Args& nodes, int ranks_per_node) const override {
    Args options{"--nrs",          std::to_string(static_cast<int>(nodes.size()) * ranks_per_node),
                 "--tasks_per_rs", "1",
                 "--rs_per_host",  std::to_string(ranks_per_node)};
    if (settings().cpus_per_rank > 0)
      options.insert(options.end(), {"--cpu_per_rs", std::to_string(settings().cpus_per_rank)});
    if (settings().gpus_per_rank > 0)
      options.insert(options.end(), {"--gpu_per_rs", std::to_string(settings().gpus_per_rank)});
    return options;
  }
  // LSF's CSM health checks decide; jsrun cannot target a host.
  Args remote_command(double) const override {
    return in_slurm_allocation() ? srun_on_one_node("srun") : Args{};
  }
};

struct KnownLauncher {
  std::string_view name;
  LauncherTraits traits;
  std::shared_ptr<const resilience::Launcher> (*make)(std::string_view name,
                                                      LauncherSettings settings,
                                                      bool in_slurm_allocation);
};

template <typename Kind>
std::shared_ptr<const resilience::Launcher> make_one(std::string_view name,
                                                     LauncherSettings settings,
                                                     bool in_slurm_allocation) {
  return std::make_shared<const Kind>(std::string(name), std::move(settings), in_slurm_allocation);
}

constexpr std::array kKnownLaunchers{
    KnownLauncher{"mpirun",
                  {.starts_mpi_runtime = true, .offers_ulfm = true, .keeps_session_dirs = true},
                  make_one<OpenMpiLauncher>},
    KnownLauncher{"mpiexec", {.starts_mpi_runtime = true}, make_one<MpichLauncher>},
    KnownLauncher{"srun", {}, make_one<SrunLauncher>},
    KnownLauncher{"jsrun", {}, make_one<JsrunLauncher>},
};

const KnownLauncher& known_launcher(std::string_view name) {
  for (const auto& known : kKnownLaunchers)
    if (known.name == name) return known;
  std::string choices;
  for (std::size_t i = 0; i < kKnownLaunchers.size(); ++i)
    choices += fmt::format("{}{}",
                           i == 0                            ? ""
                           : i + 1 == kKnownLaunchers.size() ? " or "
                                                             : ", ",
                           kKnownLaunchers[i].name);
  throw InvalidArgument(fmt::format("unknown launcher '{}' (choose {})", name, choices));
}

// The runtime directory's name, under $TMPDIR or /tmp.
std::string runtime_dir_name() { return fmt::format("hardy-openmpi-{}", ::geteuid()); }

}  // namespace

LauncherTraits launcher_traits(std::string_view name) { return known_launcher(name).traits; }

std::filesystem::path private_runtime_dir() {
  if (const char* chosen = std::getenv("PRTE_MCA_prte_tmpdir_base"); chosen && *chosen) return {};
  const char* tmpdir = std::getenv("TMPDIR");
  const std::filesystem::path root = tmpdir && *tmpdir ? tmpdir : "/tmp";
  // The directory is the tree's root: its ancestors (/tmp) may be shared if sticky.
  core::check_private_tree(root / runtime_dir_name(), {}, /*create=*/true);
  return root / runtime_dir_name();
}

void check_node_runtime_dir() {
  const char* server_dir = std::getenv("PMIX_SERVER_TMPDIR");
  if (server_dir == nullptr || *server_dir == '\0') return;
  std::filesystem::path session = server_dir;
  if (!session.has_filename()) session = session.parent_path();  // a trailing '/'
  const std::filesystem::path base = session.parent_path();
  // Open MPI's default, or a place the user or the scheduler's PMIx chose: not hardy's to judge.
  if (base.filename() != runtime_dir_name()) return;
  try {
    // Open MPI creates what is missing with mode 0700, but uses what it finds, whoever made it.
    core::check_private_tree(base, session.filename(), /*create=*/false);
  } catch (const core::UnsafeDirectory& e) {
    throw core::UnsafeDirectory(fmt::format(
        "on {}, Open MPI's session directory is not private to this user: {}. Another user could "
        "read or replace the runtime's sockets there; remove {} on that node (or give the job "
        "a TMPDIR of your own) and launch again",
        core::host_name(), e.what(), base.string()));
  }
}

std::vector<std::string> remove_dead_session_dirs(const std::filesystem::path& dir) {
  static const std::regex session(R"([a-z]+\.([0-9]+))");  // ompi.PID, prted.PID
  std::vector<std::string> removed;
  std::error_code error;
  // Tidying is best effort: a directory that cannot be read (or changes while it is read) is
  // left for Open MPI to report if it matters.
  std::filesystem::directory_iterator entries(dir, error), end;
  for (; !error && entries != end; entries.increment(error)) {
    const auto& entry = *entries;
    const std::string name = entry.path().filename().string();
    std::smatch match;
    if (!std::regex_match(name, match, session)) continue;
    struct stat info {};
    if (::lstat(entry.path().c_str(), &info) != 0 || !S_ISDIR(info.st_mode) ||
        info.st_uid != ::geteuid())
      continue;
    long pid = 0;
    const std::string digits = match[1].str();
    if (std::from_chars(digits.data(), digits.data() + digits.size(), pid).ec != std::errc{} ||
        pid <= 0 || pid > std::numeric_limits<pid_t>::max())
      continue;
    // Alive (or another user's, EPERM): its process may still use it.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    if (std::filesystem::remove_all(entry.path(), ignored) != static_cast<std::uintmax_t>(-1))
      removed.push_back(name);
  }
  return removed;
}

std::shared_ptr<const resilience::Launcher> make_launcher(std::string_view name,
                                                          LauncherSettings settings,
                                                          std::string_view scheduler) {
  const KnownLauncher& known = known_launcher(name);
  return known.make(known.name, std::move(settings), scheduler == "slurm");
}

std::vector<std::string> launch_agent_argv(const std::string& agent) {
  const auto split = [](const std::string& text, const char* separators) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    while (start <= text.size()) {
      const std::size_t end = std::min(text.find_first_of(separators, start), text.size());
      parts.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    return parts;
  };
  const auto found = [&](const std::string& program) {
    if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0;
    const char* path = std::getenv("PATH");
    for (const std::string& dir : split(path ? path : "", ":"))
      if (::access(((dir.empty() ? std::string(".") : dir) + "/" + program).c_str(), X_OK) == 0)
        return true;
    return false;
  };
  std::vector<std::vector<std::string>> alternatives;
  for (const std::string& alternative : split(agent, ":")) {
    std::vector<std::string> argv;
    for (std::string& word : split(alternative, " \t"))
      if (!word.empty()) argv.push_back(std::move(word));
    if (!argv.empty()) alternatives.push_back(std::move(argv));
  }
  if (alternatives.empty()) return {};
  for (const auto& argv : alternatives)
    if (found(argv.front())) return argv;
  return alternatives.front();
}

}  // namespace hardy::jobs
