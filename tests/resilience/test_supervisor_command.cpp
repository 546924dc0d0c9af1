// The supervisor's part of a launch's command line: which state a relaunch resumes from. The
// launchers' own parts are tested with them (tests/jobs/test_launchers.cpp).
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/resilience/supervisor.hpp"

using namespace hardy::resilience;

namespace {

// Puts its name before the program, which is all the supervisor's tests need of a launcher.
class PrefixLauncher final : public Launcher {
 public:
  PrefixLauncher() : Launcher({}) {}
  std::string name() const override { return "prefix"; }
  std::vector<std::string> command(const std::vector<std::string>&, int,
                                   const std::vector<std::string>& program) const override {
    std::vector<std::string> command{name()};
    command.insert(command.end(), program.begin(), program.end());
    return command;
  }
  std::vector<std::string> probe_command(const std::vector<std::string>&, double) const override {
    return {};
  }
  std::vector<std::string> hosts_reported_lost(std::string_view) const override { return {}; }
};

SupervisorConfig config_with(std::vector<std::string> train_args) {
  SupervisorConfig config;
  config.nodes = {"localhost"};
  config.launcher = std::make_shared<PrefixLauncher>();
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
