// The supervisor's command lines: which state a relaunch resumes from, and the launch agent split
// as Open MPI splits plm_ssh_agent.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

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
}
