#pragma once
// What the supervisor needs from the program that starts the job's ranks on its nodes: the command
// line of one launch, the command that asks a node whether it still answers through the launch
// path, and the hosts that a launch's output reports lost. The supervisor knows launchers only
// through this interface, so a launcher (and the batch scheduler it runs under) is added above
// resilience/ without touching the supervisor: jobs/'s launchers.hpp holds the implementations and
// `hardy run` picks one from its --launcher option and the allocation it runs in.
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hardy::resilience {

// Open MPI's failure detection. A process that dies is reported by its node's daemon at once,
// and ULFM shrinks the job around it. A node that is cut off or frozen is noticed only by the
// runtime's out-of-band keepalive, which ends the whole job (then the supervisor relaunches):
// short keepalives, on by default, make that seconds instead of about 8 minutes.
// Open MPI's MPI-level heartbeat detector would let ULFM shrink around a frozen node inside the
// job, but in Open MPI 5.0.x it declares ranks that are still inside MPI_Init dead on a multi-node
// launch (and then crashes there, or hangs in MPI_Finalize), so it is off unless asked for
// (docs/resilience.md has the measurements).
struct DetectionConfig {
  double heartbeat_timeout_s = 0;  // 0: Open MPI's heartbeat detector off
  double heartbeat_period_s = 0.25;
  int keepalive_time_s = 1;  // 0: the runtime's defaults (300 s + 9 x 20 s)
  int keepalive_interval_s = 1;
  int keepalive_probes = 3;
};

// What `hardy run` asks of whichever launcher it uses; each launcher applies what its runtime
// has, and the supervisor reports all of it (supervisor_started), so these are the same fields for
// every launcher.
struct LauncherSettings {
  std::filesystem::path executable;
  std::vector<std::string> extra_args;  // after the launcher's own options, before the program
  bool ulfm = false;                    // Open MPI's `--with-ft ulfm`
  // Starts the launcher's daemon on another node instead of ssh; called as
  // `AGENT [options] HOST COMMAND...`. Empty: ssh.
  std::string launch_agent;
  DetectionConfig detection;
  // Each rank's share of its node, for launchers that carve nodes into per-rank resource sets
  // (jsrun --cpu_per_rs/--gpu_per_rs, srun --cpus-per-task/--gpus-per-task); 0: the launcher's
  // default, which for jsrun is one core and no GPU.
  int cpus_per_rank = 0;
  int gpus_per_rank = 0;
  // A directory of this user's own where the launcher's runtime keeps its per-launch files on
  // every node (Open MPI's session directories, named after the pid of the process that made
  // them); empty: the runtime's default, which on a shared node other users write into too.
  std::filesystem::path runtime_dir;
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // What `hardy run --launcher` calls it; events and messages name it so.
  virtual std::string name() const = 0;
  const LauncherSettings& settings() const { return settings_; }

  // The command line that runs `program` (an executable and its arguments) as `ranks_per_node`
  // ranks on each of `nodes`, in rank order. A node list of "localhost" or this host's name alone
  // is a run on this host.
  virtual std::vector<std::string> command(const std::vector<std::string>& nodes,
                                           int ranks_per_node,
                                           const std::vector<std::string>& program) const = 0;

  // The command that runs `program` on one node ({host} in it stands for the node's name)
  // through the launch path, giving it up to `timeout_s` to connect: `program` itself when the
  // nodes are this host, empty when the launcher has no way to reach one node.
  virtual std::vector<std::string> node_command(const std::vector<std::string>& nodes,
                                                double timeout_s,
                                                const std::vector<std::string>& program) const = 0;

  // The command that asks one node ({host} in it stands for the node's name) whether it is alive
  // through the launch path, giving it up to `timeout_s` to answer; empty when the nodes are this
  // host or the launcher has no way to reach one node.
  std::vector<std::string> probe_command(const std::vector<std::string>& nodes,
                                         double timeout_s) const {
    const std::vector<std::string> program{"true"};
    auto command = node_command(nodes, timeout_s, program);
    return command == program ? std::vector<std::string>{} : command;
  }

  // Host names that the launcher's output (its runtime's messages, interleaved with the job's)
  // reports lost, in order of first mention.
  virtual std::vector<std::string> hosts_reported_lost(std::string_view output) const = 0;
  // Those among them whose runtime daemon never started (rather than being lost while running):
  // a start can fail for a moment on a node that is fine.
  virtual std::vector<std::string> hosts_not_started(std::string_view) const { return {}; }

  // Called before every launch, on the node the supervisor runs on: tidies what earlier launches
  // killed there left behind that would stop this one (never throws; reports what it removed).
  virtual void before_launch() const {}

 protected:
  explicit Launcher(LauncherSettings settings) : settings_(std::move(settings)) {}

 private:
  LauncherSettings settings_;
};

}  // namespace hardy::resilience
