#pragma once
// What the Slurm and LSF template tests share: a job request with every awkward value, golden
// files, and a shell syntax check.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "hardy/batch/command.hpp"
#include "hardy/batch/scheduler.hpp"

namespace hardy::testing {

// A name and a run directory that need quoting (a space, an apostrophe), every option given.
inline batch::JobRequest example_request() {
  batch::JobRequest request;
  request.job_name = "climate 01";
  request.nodes = 2;
  request.ranks_per_node = 4;
  request.gpus_per_node = 4;
  request.cpus_per_rank = 7;
  request.time = "02:00:00";
  request.account = "m4242";
  request.queue = "regular";
  request.run_dir = "/scratch/o'neil/runs/climate 01";
  request.hardy = "/opt/hardy/bin/hardy";
  request.signal_lead_seconds = 120;
  return request;
}

inline std::string render_builtin(const batch::Scheduler& scheduler,
                                  const batch::JobRequest& request) {
  batch::validate(request);
  return batch::render_script(scheduler.builtin_template(request),
                              scheduler.template_values(request), scheduler.directive_prefix(),
                              "built-in");
}

// The text of a file in the source tree (`relative_path` from its root).
inline std::string read_source_file(const std::string& relative_path) {
  const std::string path = std::string(HARDY_SOURCE_DIR) + "/" + relative_path;
  std::ifstream file(path);
  INFO("reading " << path);
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A template checked in under examples/ (`relative_path` from the source tree), rendered for
// `request` as `hardy submit --template` renders it.
inline std::string render_example(const batch::Scheduler& scheduler,
                                  const std::string& relative_path,
                                  const batch::JobRequest& request) {
  const std::string name = relative_path.substr(relative_path.rfind('/') + 1);
  return batch::render_script(read_source_file(relative_path), scheduler.template_values(request),
                              scheduler.directive_prefix(), name);
}

// The example request with `launcher`, which this scheduler cannot start: template_values refuses
// it, naming --lsf-launcher.
inline void check_launcher_refused(const batch::Scheduler& scheduler, const std::string& launcher) {
  auto request = example_request();
  request.launcher = launcher;
  CHECK_THROWS_WITH(scheduler.template_values(request), Catch::Contains("--lsf-launcher"));
}

// bash -n: the script parses (nothing runs).
inline void check_shell_syntax(const std::string& script) {
  const auto result = batch::run_command({"bash", "-n"}, script);
  INFO(result.err);
  CHECK(result.status == 0);
}

// Golden files: a test renders text and compares it with a file checked in under tests/. Run the
// test with HARDY_UPDATE_GOLDEN=1 to (re)write the files, then review the diff.
inline void check_golden(const std::string& relative_path, const std::string& actual) {
  if (std::getenv("HARDY_UPDATE_GOLDEN") != nullptr) {
    const std::string path = std::string(HARDY_SOURCE_DIR) + "/tests/" + relative_path;
    std::ofstream(path) << actual;
    WARN("rewrote " << path);
    return;
  }
  INFO("golden file tests/" << relative_path << " (HARDY_UPDATE_GOLDEN=1 rewrites it)");
  CHECK(actual == read_source_file("tests/" + relative_path));
}

// A rendered script: it is the golden file's text (check_golden) and bash parses it.
inline void check_script(const std::string& golden_path, const std::string& script) {
  check_golden(golden_path, script);
  check_shell_syntax(script);
}

}  // namespace hardy::testing
