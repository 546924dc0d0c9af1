#include <catch2/catch.hpp>

#include "../scheduler_fixtures.hpp"
#include "hardy/lsf/lsf_scheduler.hpp"

using hardy::lsf::LsfScheduler;
using namespace hardy::testing;

TEST_CASE("the built-in LSF script for jsrun (Summit-like)", "[lsf]") {
  auto request = example_request();
  request.ranks_per_node = 6;
  request.gpus_per_node = 6;
  request.launcher = "jsrun";
  const auto script = render_builtin(LsfScheduler(), request);
  check_golden("lsf/golden/job-jsrun.bsub", script);
  check_shell_syntax(script);
}

TEST_CASE("the built-in LSF script for mpirun", "[lsf]") {
  auto request = example_request();
  request.launcher = "mpirun";
  request.account.reset();
  const auto script = render_builtin(LsfScheduler(), request);
  check_golden("lsf/golden/job-mpirun.bsub", script);
  check_shell_syntax(script);
  CHECK(script.find("#BSUB -P") == std::string::npos);
}

TEST_CASE("LSF launchers are jsrun or mpirun", "[lsf]") {
  auto request = example_request();
  request.launcher = "srun";
  CHECK_THROWS_WITH(LsfScheduler().template_values(request), Catch::Contains("--lsf-launcher"));
}

TEST_CASE("the Summit example template renders", "[lsf]") {
  auto request = example_request();
  request.ranks_per_node = 6;
  request.gpus_per_node = 6;
  request.launcher = "jsrun";
  const auto script = render_example(LsfScheduler(), "examples/lsf/summit.bsub", request);
  check_golden("lsf/golden/summit.bsub", script);
  check_shell_syntax(script);
}
