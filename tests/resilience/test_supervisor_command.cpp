// The supervisor's part of a launch's command line (which state a relaunch resumes from), its
// start timeout, and the launcher's tidying before every launch. The launchers' own parts are
// tested with them (tests/jobs/test_launchers.cpp).
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/resilience/supervisor.hpp"
#include "scratch_directory.hpp"
#include "supervisor/supervisor_steps.hpp"

using namespace hardy::resilience;

namespace {

// Puts its name before the program. Reads the runtime's messages as the real launchers do: a
// host after "lost:" was lost while running, after "unstarted:" its daemon never reported back.
// Its nodes are this host, so nothing is probed.
class PrefixLauncher : public Launcher {
 public:
  PrefixLauncher() : Launcher({}) {}
  std::string name() const override { return "prefix"; }
  std::vector<std::string> command(const std::vector<std::string>&, int,
                                   const std::vector<std::string>& program) const override {
    std::vector<std::string> command{name()};
    command.insert(command.end(), program.begin(), program.end());
    return command;
  }
  // Every node is this host.
  std::vector<std::string> node_command(const std::vector<std::string>&, double,
                                        const std::vector<std::string>& program) const override {
    return program;
  }
  std::vector<std::string> hosts_reported_lost(std::string_view output) const override {
    std::vector<std::string> hosts = named(output, "lost:");
    for (auto& host : named(output, "unstarted:")) hosts.push_back(host);
    return hosts;
  }
  std::vector<std::string> hosts_not_started(std::string_view output) const override {
    return named(output, "unstarted:");
  }

 private:
  static std::vector<std::string> named(std::string_view output, std::string_view tag) {
    std::vector<std::string> hosts;
    for (auto at = output.find(tag); at != std::string_view::npos; at = output.find(tag, at + 1)) {
      const auto start = at + tag.size();
      hosts.emplace_back(output.substr(start, output.find('\n', start) - start));
    }
    return hosts;
  }
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

TEST_CASE("supervisor: a node whose daemon failed to start once is kept; a second time, left out") {
  SupervisorConfig config;
  config.nodes = {"n0", "n1", "n2"};
  config.launcher = std::make_shared<PrefixLauncher>();
  const NodeSet nodes{config.nodes, {}};
  std::set<std::string> start_failures;

  // A daemon that never reported back, from a node that answers: kept (a start can fail for a
  // moment), and remembered.
  auto first = gather_node_evidence(config, nodes, "unstarted:n1\n", start_failures);
  CHECK(first.active.empty());
  REQUIRE(first.forgiven.count(1) == 1);
  CHECK_THAT(first.forgiven.at(1), Catch::Contains("never reported back"));
  // The same node again: left out.
  auto second = gather_node_evidence(config, nodes, "unstarted:n1\n", start_failures);
  CHECK(second.forgiven.empty());
  REQUIRE(second.active.count(1) == 1);
  // A node lost while running is left out the first time; so is one with other evidence.
  auto lost = gather_node_evidence(config, nodes, "lost:n2\n", start_failures);
  CHECK(lost.active.count(2) == 1);
  CHECK(lost.forgiven.empty());
  auto killed = gather_node_evidence(config, nodes, "unstarted:n0\n", start_failures,
                                     {{0, {"fault injection killed the node"}}});
  CHECK(killed.active.at(0).size() == 2);
  CHECK(killed.forgiven.empty());
}

TEST_CASE("supervisor: the start timeout is learned from the run's earlier starts") {
  hardy::testing::ScratchDirectory run("start-timeout");
  const auto events = run / "events.jsonl";
  CHECK(StartTimeout(0, events).seconds() == kStartTimeoutUnlearnedS);  // no log yet
  CHECK(StartTimeout(45, events).seconds() == 45);

  {
    std::ofstream log(events);
    log << R"({"event":"launch_started","launch":1,"start_s":3.5,"unix_time":1})"
        << "\n"
        << R"({"event":"job_started","steps":10,"unix_time":2})"
        << "\n"
        << R"({"event":"launch_started","domain":1,"launch":2,"start_s":12.5,"unix_time":3})"
        << "\n"
        << R"({"event":"launch_st)"  // cut short by a crash
        << "\n";
  }
  StartTimeout learned(0, events);
  CHECK(learned.seconds() == 10 * 12.5);  // an earlier run's longest start, any domain's
  learned.seen(20);
  CHECK(learned.seconds() == 200);
  CHECK(StartTimeout(30, events).seconds() == 30);  // --start-timeout wins

  std::ofstream(events) << R"({"event":"launch_started","launch":1,"start_s":0.8})"
                        << "\n";
  CHECK(StartTimeout(0, events).seconds() == kStartTimeoutFloorS);  // quick starts: the floor
}

namespace {

// Runs `/bin/true` as its launch (which ends at once without the job having run, and reports no
// host) and counts the supervisor's calls to before_launch, in order with the launches it makes.
class CountingLauncher final : public PrefixLauncher {
 public:
  std::string name() const override { return "counting"; }
  std::vector<std::string> command(const std::vector<std::string>&, int,
                                   const std::vector<std::string>&) const override {
    ++commands;
    return {"/bin/true"};
  }
  void before_launch() const override {
    calls.push_back(commands);  // how many launches had been made when it was called
  }
  mutable int commands = 0;
  mutable std::vector<int> calls;
};

}  // namespace

TEST_CASE("supervisor: the launcher tidies its node before every launch") {
  hardy::testing::ScratchDirectory run("before-launch");
  SupervisorConfig config;
  config.nodes = {"localhost"};
  auto launcher = std::make_shared<CountingLauncher>();
  config.launcher = launcher;
  config.hardy = "/bin/hardy";
  config.run_dir = run.path();
  config.train_args = {"--steps", "3"};
  config.max_restarts = 2;
  config.backoff_s = 0;
  // Three launches that each end without a job_finished: a failed job, after 2 restarts.
  CHECK(supervise(config) != 0);
  CHECK(launcher->commands == 3);
  CHECK(launcher->calls == std::vector<int>{0, 1, 2});
}
