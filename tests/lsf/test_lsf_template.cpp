#include <catch2/catch.hpp>

#include "../scheduler_fixtures.hpp"
#include "hardy/lsf/lsf_scheduler.hpp"

using hardy::lsf::LsfScheduler;
using namespace hardy::testing;

namespace {

// A Summit node: 6 GPUs, one rank on each, placed by jsrun.
hardy::batch::JobRequest summit_request() {
  auto request = example_request();
  request.ranks_per_node = 6;
  request.gpus_per_node = 6;
  request.launcher = "jsrun";
  return request;
}

}  // namespace

TEST_CASE("the built-in LSF script for jsrun (Summit-like)", "[lsf]") {
  const auto script = render_builtin(LsfScheduler(), summit_request());
  check_script("lsf/golden/job-jsrun.bsub", script);
}

TEST_CASE("the built-in LSF script for mpirun", "[lsf]") {
  auto request = example_request();
  request.launcher = "mpirun";
  request.account.reset();
  const auto script = render_builtin(LsfScheduler(), request);
  check_script("lsf/golden/job-mpirun.bsub", script);
  CHECK(script.find("#BSUB -P") == std::string::npos);
}

TEST_CASE("LSF launchers are jsrun or mpirun", "[lsf]") {
  check_launcher_refused(LsfScheduler(), "srun");
}

TEST_CASE("the Summit example template renders", "[lsf]") {
  const auto script = render_example(LsfScheduler(), "examples/lsf/summit.bsub", summit_request());
  check_script("lsf/golden/summit.bsub", script);
}
