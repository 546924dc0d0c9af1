// Once a run is over the supervisor has every node it used remove the run's node-local state,
// and, when the run did not complete, one node at a time keep its newest snapshot as a checkpoint
// first (resilience/src/supervisor/node_cleanup.hpp). A fake launch path runs a shell script per
// node that notes what it was asked and fails on demand for the nodes named.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hardy/resilience/events.hpp"
#include "hardy/resilience/supervisor.hpp"
#include "scratch_directory.hpp"
#include "supervisor/node_cleanup.hpp"

using namespace hardy::resilience;
namespace fs = std::filesystem;

namespace {

// Reaches a node by running SCRIPT with the node's name and the program: the script appends
// "HOST ARGS..." to its log, fails for the hosts in `unreachable`, and for the host `keeper`,
// asked to keep, writes the checkpoint file of `kept_step` as `hardy clean --keep-newest` would;
// asked to keep, the hosts in `keep_fails` fail (a full disk).
class ScriptLauncher final : public Launcher {
 public:
  ScriptLauncher(const fs::path& log, const fs::path& run_dir, std::string unreachable,
                 std::string keeper, long kept_step, std::string keep_fails)
      : Launcher({}),
        script_(fmt::format("echo \"$*\" >> '{}'; case \" {} \" in *\" $1 \"*) exit 1;; esac; "
                            "case \"$*\" in *--keep-newest*) [ \"$1\" = '{}' ] && "
                            "touch '{}/checkpoints/ckpt-{}.h5'; case \" {} \" in *\" $1 \"*) "
                            "exit 1;; esac;; esac; exit 0",
                            log.string(), unreachable, keeper, run_dir.string(), kept_step,
                            keep_fails)) {}
  std::string name() const override { return "script"; }
  std::vector<std::string> command(const std::vector<std::string>&, int,
                                   const std::vector<std::string>& program) const override {
    return program;
  }
  std::vector<std::string> node_command(const std::vector<std::string>&, double,
                                        const std::vector<std::string>& program) const override {
    std::vector<std::string> command{"/bin/sh", "-c", script_, "sh", "{host}"};
    command.insert(command.end(), program.begin(), program.end());
    return command;
  }
  std::vector<std::string> hosts_reported_lost(std::string_view) const override { return {}; }

 private:
  std::string script_;
};

std::vector<std::string> lines_of(const fs::path& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The cleanups the script was asked for, probes ("HOST true") left out.
std::vector<std::string> cleanups(const fs::path& log) {
  auto lines = lines_of(log);
  std::erase_if(lines, [](const std::string& line) { return line.ends_with(" true"); });
  return lines;
}

std::vector<nlohmann::json> removals(const fs::path& run_dir) {
  std::vector<nlohmann::json> found;
  for (const auto& line : lines_of(run_dir / "events.jsonl")) {
    auto record = nlohmann::json::parse(line);
    if (record["event"] == "node_state_removed") found.push_back(record);
  }
  return found;
}

struct Run {
  hardy::testing::ScratchDirectory scratch{"node-cleanup"};
  fs::path run_dir = scratch / "run", log = scratch / "asked.log";
  SupervisorConfig config;

  Run(std::string unreachable, std::string keeper, long kept_step, std::string keep_fails = "") {
    fs::create_directories(run_dir / "checkpoints");
    config.nodes = {"n0", "n1", "n2", "n2"};  // a node named twice is asked once
    config.spare_nodes = {"s0"};
    config.hardy = "/opt/hardy";
    config.run_dir = run_dir;
    config.run_lock_token = "token";
    config.snapshot_dir = "/dev/shm/mine";
    config.launcher =
        std::make_shared<ScriptLauncher>(log, run_dir, unreachable, keeper, kept_step, keep_fails);
  }
  void finish(bool completed) {
    hardy::core::EventLog events(run_dir / "events.jsonl", event_kinds());
    remove_node_state(config, completed, events);
  }
};

}  // namespace

TEST_CASE(
    "node cleanup: every node of the run is asked to remove the run's state, and those that "
    "cannot be reached are named") {
  Run run("n1", "", 0);
  run.finish(/*completed=*/true);
  // Every node is probed first; n1 does not answer, and is not asked to clean.
  CHECK(lines_of(run.log).size() == 4 + 3);
  const auto asked = cleanups(run.log);
  REQUIRE(asked.size() == 3);  // n0, n2, s0: at once, in any order
  const std::string expected_program = fmt::format(
      "/opt/hardy clean --node-local --run-dir {} --run-lock-token token --snapshot-dir "
      "/dev/shm/mine",
      fs::absolute(run.run_dir).lexically_normal().string());
  for (const char* host : {"n0", "n2", "s0"})
    CHECK(std::count(asked.begin(), asked.end(), fmt::format("{} {}", host, expected_program)) ==
          1);
  const auto events = removals(run.run_dir);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["nodes"] == nlohmann::json({"n0", "n2", "s0"}));
  REQUIRE(events[0]["unreachable"].size() == 1);
  CHECK(events[0]["unreachable"][0]["host"] == "n1");
  CHECK(events[0]["unreachable"][0]["why"].get<std::string>().starts_with("probe: "));
  CHECK(events[0]["kept"].is_null());  // a completed run's last checkpoint is its newest state
}

TEST_CASE(
    "node cleanup: a run that did not complete keeps its newest committed step first, "
    "asking one node at a time until a checkpoint of it exists") {
  // The last committed step is 9; the newest checkpoint is step 5. s0 cannot be reached, n0's
  // and n1's snapshots are older (they keep nothing), n2 keeps step 9.
  Run run("s0", "n2", 9);
  std::ofstream(run.run_dir / "metrics.jsonl") << "{\"step\":8}\n{\"step\":9}\n";
  std::ofstream(run.run_dir / "checkpoints" / "ckpt-5.h5") << "";
  run.finish(/*completed=*/false);
  std::vector<std::string> keeping;
  for (const auto& line : cleanups(run.log))
    if (line.find("--keep-newest") != std::string::npos) keeping.push_back(line.substr(0, 2));
  CHECK(keeping == std::vector<std::string>{"n0", "n1", "n2"});  // in order, and no further
  CHECK(cleanups(run.log).size() == 3);  // each removed its snapshots as it kept, or had none
  const auto events = removals(run.run_dir);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["kept"] == nlohmann::json({{"host", "n2"}, {"step", 9}}));
  CHECK(events[0]["nodes"] == nlohmann::json({"n0", "n1", "n2"}));
  CHECK(events[0]["unreachable"][0]["host"] == "s0");
  CHECK(events[0]["left"].empty());
}

TEST_CASE(
    "node cleanup: a node where keeping the newest snapshot fails keeps its snapshots, and the "
    "next node is asked") {
  // n0 answers but cannot write the checkpoint (a full disk); n1 keeps step 9.
  Run run("", "n1", 9, "n0");
  std::ofstream(run.run_dir / "metrics.jsonl") << "{\"step\":9}\n";
  run.finish(/*completed=*/false);
  std::vector<std::string> removing;
  for (const auto& line : cleanups(run.log))
    if (line.find("--keep-newest") == std::string::npos) removing.push_back(line.substr(0, 2));
  std::sort(removing.begin(), removing.end());
  CHECK(removing == std::vector<std::string>{"n2", "s0"});  // not n0: its copy may be the newest
  const auto events = removals(run.run_dir);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["kept"] == nlohmann::json({{"host", "n1"}, {"step", 9}}));
  REQUIRE(events[0]["left"].size() == 1);
  CHECK(events[0]["left"][0]["host"] == "n0");
  CHECK(events[0]["nodes"] == nlohmann::json({"n1", "n2", "s0"}));
}

TEST_CASE(
    "node cleanup: nothing to keep when the newest checkpoint holds the last step, and "
    "nothing to do when the run wrote no snapshots") {
  Run run("", "n0", 9);
  std::ofstream(run.run_dir / "metrics.jsonl") << "{\"step\":9}\n";
  std::ofstream(run.run_dir / "checkpoints" / "ckpt-9.h5") << "";
  run.finish(/*completed=*/false);
  CHECK(cleanups(run.log).size() == 4);  // removal only
  CHECK(removals(run.run_dir).at(0)["kept"].is_null());

  Run off("", "n0", 9);
  off.config.snapshot_dir.clear();  // --snapshot-every 0
  off.finish(/*completed=*/false);
  CHECK_FALSE(fs::exists(off.log));
  CHECK(removals(off.run_dir).empty());
}
