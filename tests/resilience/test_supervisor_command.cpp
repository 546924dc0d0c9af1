// The supervisor's command lines: which state a relaunch resumes from, each launcher's options
// and its way to probe a node, and the launch agent split as Open MPI splits plm_ssh_agent.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "hardy/core/support/error.hpp"
#include "hardy/resilience/supervisor.hpp"

using namespace hardy::resilience;

namespace {

SupervisorConfig config_with(std::vector<std::string> train_args) {
  SupervisorConfig config;
  config.nodes = {"localhost"};
  config.launcher_path = "mpirun";
  config.hardy = "/bin/hardy";
  config.run_dir = "/runs/a";
  config.train_args = std::move(train_args);
  return config;
}

// The arguments after `hardy train`.
std::vector<std::string> train_part(const std::vector<std::string>& command) {
  for (std::size_t i = 0; i + 1 < command.size(); ++i)
    if (command[i] == "/bin/hardy" && command[i + 1] == "train")
      return {command.begin() + static_cast<std::ptrdiff_t>(i) + 2, command.end()};
  return {};
}

using Args = std::vector<std::string>;

}  // namespace

TEST_CASE("supervisor: the first launch resumes as asked, relaunches from the newest state") {
  const Args tail{"--run-dir", "/runs/a", "--ranks-per-node", "1"};
  for (const Args& resume : {Args{"--resume", "/old/ckpt-5.h5"}, Args{"--resume=/old/ckpt-5.h5"}}) {
    Args asked{"--steps", "9"};
    asked.insert(asked.end(), resume.begin(), resume.end());
    const auto config = config_with(asked);
    Args first = asked;
    first.insert(first.end(), tail.begin(), tail.end());
    CHECK(train_part(launch_command(config, config.nodes, false, false)) == first);
    // Before the run wrote a state of its own, the user's state is still the newest.
    CHECK(train_part(launch_command(config, config.nodes, true, false)) == first);
    // After, the user's --resume (either spelling) gives way to `latest`, once.
    Args newest{"--steps", "9"};
    newest.insert(newest.end(), tail.begin(), tail.end());
    newest.insert(newest.end(), {"--resume", "latest"});
    CHECK(train_part(launch_command(config, config.nodes, true, true)) == newest);
  }
}

TEST_CASE("supervisor: a relaunch drops injected failures and resumes when nothing was asked") {
  const auto config =
      config_with({"--inject-failure", "rank=1@step=3", "--inject-failure=rank=0@step=5", "-v"});
  CHECK(train_part(launch_command(config, config.nodes, true, false)) ==
        Args{"-v", "--run-dir", "/runs/a", "--ranks-per-node", "1", "--resume", "latest"});
  CHECK(train_part(launch_command(config, config.nodes, false, false)) ==
        Args{"--inject-failure", "rank=1@step=3", "--inject-failure=rank=0@step=5", "-v",
             "--run-dir", "/runs/a", "--ranks-per-node", "1"});
}

namespace {

// Everything before the program: the launcher's part of a command.
Args launcher_part(const Args& command) {
  const auto program = std::find(command.begin(), command.end(), "/bin/hardy");
  return {command.begin(), program};
}

// A launch of `launcher` on `nodes` with 2 ranks each, inside `scheduler`'s allocation.
SupervisorConfig launch_config(Launcher launcher, std::vector<std::string> nodes,
                               std::string scheduler) {
  auto config = config_with({"--steps", "9"});
  config.launcher = launcher;
  config.launcher_path = "/opt/" + to_string(launcher);
  config.nodes = std::move(nodes);
  config.ranks_per_node = 2;
  config.scheduler = std::move(scheduler);
  return config;
}

Args launcher_part_of(const SupervisorConfig& config) {
  return launcher_part(launch_command(config, config.nodes, false, false));
}

const std::vector<std::string> kRemote{"n0", "n1", "n2"};

Args joined(Args head, const Args& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// Open MPI refuses to run as root without it; the tests may run as either.
Args as_root_if_root() { return ::geteuid() == 0 ? Args{"--allow-run-as-root"} : Args{}; }

}  // namespace

TEST_CASE("launchers by name", "[launcher]") {
  for (const char* name : {"mpirun", "mpiexec", "srun", "jsrun"})
    CHECK(to_string(parse_launcher(name)) == name);
  CHECK_THROWS_MATCHES(
      parse_launcher("pbs"), hardy::InvalidArgument,
      Catch::Message("unknown launcher 'pbs' (choose mpirun, mpiexec, srun or jsrun)"));
}

TEST_CASE("each launcher's command line on this host", "[launcher]") {
  const std::vector<std::string> local{"localhost", "localhost"};
  auto config = launch_config(Launcher::mpirun, local, "");
  config.launcher_args = {"--extra", "x"};
  CHECK(launcher_part_of(config) ==
        joined(joined({"/opt/mpirun", "-n", "4", "--oversubscribe", "--bind-to", "none"},
                      as_root_if_root()),
               {"--extra", "x"}));
  CHECK(launcher_part_of(launch_config(Launcher::mpiexec, local, "")) ==
        Args{"/opt/mpiexec", "-n", "4"});
  CHECK(launcher_part_of(launch_config(Launcher::srun, local, "slurm")) ==
        Args{"/opt/srun", "--ntasks", "4", "--ntasks-per-node", "2", "--kill-on-bad-exit=1",
             "--overlap"});
}

TEST_CASE("each launcher's command line on other nodes", "[launcher]") {
  SECTION("Open MPI: ULFM, its detectors, the launch agent, and srun's --overlap under Slurm") {
    auto config = launch_config(Launcher::mpirun, kRemote, "slurm");
    config.ulfm = true;
    config.detection.heartbeat_timeout_s = 2.5;
    config.launch_agent = "ssh -x";
    CHECK(launcher_part_of(config) == joined({"/opt/mpirun",
                                              "-n",
                                              "6",
                                              "--with-ft",
                                              "ulfm",
                                              "--mca",
                                              "mpi_ft_detector",
                                              "true",
                                              "--mca",
                                              "mpi_ft_detector_thread",
                                              "true",
                                              "--mca",
                                              "mpi_ft_detector_period",
                                              "0.25",
                                              "--mca",
                                              "mpi_ft_detector_timeout",
                                              "2.5",
                                              "--host",
                                              "n0:2,n1:2,n2:2",
                                              "--prtemca",
                                              "oob_tcp_keepalive_time",
                                              "1",
                                              "--prtemca",
                                              "oob_tcp_keepalive_intvl",
                                              "1",
                                              "--prtemca",
                                              "oob_tcp_keepalive_probes",
                                              "3",
                                              "--prtemca",
                                              "plm_ssh_agent",
                                              "ssh -x",
                                              "--prtemca",
                                              "plm_slurm_args",
                                              "--overlap"},
                                             as_root_if_root()));
    // Without ULFM its detector is not asked for; keepalive 0 leaves the runtime's own.
    config.ulfm = false;
    config.launch_agent.clear();
    config.detection.keepalive_time_s = 0;
    config.scheduler = "lsf";
    config.ranks_per_node = 1;
    CHECK(launcher_part_of(config) ==
          joined({"/opt/mpirun", "-n", "3", "--host", "n0:1,n1:1,n2:1"}, as_root_if_root()));
  }
  SECTION("MPICH's hydra") {
    auto config = launch_config(Launcher::mpiexec, kRemote, "");
    config.launch_agent = "ssh -x";
    CHECK(launcher_part_of(config) == Args{"/opt/mpiexec", "-n", "6", "-hosts", "n0,n1,n2", "-ppn",
                                           "2", "-launcher", "ssh", "-launcher-exec", "ssh -x"});
  }
  SECTION("srun") {
    CHECK(launcher_part_of(launch_config(Launcher::srun, kRemote, "slurm")) ==
          Args{"/opt/srun", "--ntasks", "6", "--ntasks-per-node", "2", "--kill-on-bad-exit=1",
               "--overlap", "--nodelist", "n0,n1,n2", "--nodes", "3"});
  }
  SECTION("jsrun: one resource set per rank") {
    CHECK(launcher_part_of(launch_config(Launcher::jsrun, kRemote, "lsf")) ==
          Args{"/opt/jsrun", "--nrs", "6", "--tasks_per_rs", "1", "--rs_per_host", "2"});
  }
}

TEST_CASE("each launcher's way to ask one node whether it answers", "[launcher]") {
  const Args ssh{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "{host}", "true"};
  const Args srun{"srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist={host}", "true"};
  const auto probe = [](Launcher launcher, const std::string& scheduler, double timeout_s) {
    auto config = launch_config(launcher, kRemote, scheduler);
    config.probe_timeout_s = timeout_s;
    return probe_command(config, config.nodes);
  };
  for (const auto launcher :
       {Launcher::mpirun, Launcher::mpiexec, Launcher::srun, Launcher::jsrun}) {
    INFO(to_string(launcher));
    // This host alone: nothing to ask.
    const auto config = launch_config(launcher, {"localhost", "localhost"}, "slurm");
    CHECK(probe_command(config, config.nodes).empty());
  }
  CHECK(probe(Launcher::mpirun, "", 5) == ssh);
  CHECK(probe(Launcher::mpiexec, "lsf", 5.9) == ssh);
  // ssh waits whole seconds, at least one.
  CHECK(probe(Launcher::mpirun, "", 0.5)[4] == "ConnectTimeout=1");
  // Inside a Slurm allocation the nodes need not run sshd: srun reaches them.
  CHECK(probe(Launcher::mpirun, "slurm", 5) == srun);
  CHECK(probe(Launcher::jsrun, "slurm", 5) == srun);
  // srun probes with itself, wherever it is.
  CHECK(probe(Launcher::srun, "", 5) ==
        Args{"/opt/srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist={host}", "true"});
  // jsrun cannot aim at one host: LSF's health checks decide.
  CHECK(probe(Launcher::jsrun, "lsf", 5).empty());
}

TEST_CASE("supervisor: a launch agent with arguments is a program and its arguments") {
  CHECK(launch_agent_argv("ssh -x") == Args{"ssh", "-x"});
  CHECK(launch_agent_argv("  ssh\t-x  -q ") == Args{"ssh", "-x", "-q"});
  CHECK(launch_agent_argv("").empty());
  CHECK(launch_agent_argv(" : ").empty());
  // Alternatives: the first found, as a path or on PATH; none found, the first.
  CHECK(launch_agent_argv("/nonexistent/agent -a : sh -c") == Args{"sh", "-c"});
  CHECK(launch_agent_argv("/nonexistent/agent -a : /also/missing") ==
        Args{"/nonexistent/agent", "-a"});

  auto config = config_with({});
  config.launch_agent = "/bin/sh -x";
  CHECK(probe_command(config, {"n0", "n1"}) == Args{"/bin/sh", "-x", "{host}", "true"});
  // The launch agent is the launch path, inside a Slurm allocation too.
  config.launcher = Launcher::mpiexec;
  config.scheduler = "slurm";
  CHECK(probe_command(config, {"n0", "n1"}) == Args{"/bin/sh", "-x", "{host}", "true"});
}
