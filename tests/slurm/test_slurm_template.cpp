#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "../scheduler_fixtures.hpp"
#include "hardy/slurm/slurm_scheduler.hpp"

using hardy::slurm::SlurmScheduler;
using namespace hardy::testing;

TEST_CASE("the built-in Slurm script, every option given", "[slurm]") {
  const auto script = render_builtin(SlurmScheduler(), example_request());
  check_golden("slurm/golden/job.sbatch", script);
  check_shell_syntax(script);
}

TEST_CASE("the built-in Slurm script leaves out what was not asked for", "[slurm]") {
  auto request = example_request();
  request.gpus_per_node = 0;
  request.account.reset();
  request.queue.reset();
  request.job_name = "plain";
  request.run_dir = "/runs/plain";
  const auto script = render_builtin(SlurmScheduler(), request);
  check_golden("slurm/golden/job-minimal.sbatch", script);
  CHECK(script.find("--gpus-per-node") == std::string::npos);
  CHECK(script.find("--account") == std::string::npos);
  CHECK(script.find("--partition") == std::string::npos);
}

TEST_CASE("Slurm has no --lsf-launcher", "[slurm]") {
  auto request = example_request();
  request.launcher = "jsrun";
  CHECK_THROWS_WITH(SlurmScheduler().template_values(request), Catch::Contains("--lsf-launcher"));
}

TEST_CASE("the Perlmutter example template renders", "[slurm]") {
  std::ifstream file(std::string(HARDY_SOURCE_DIR) + "/examples/slurm/perlmutter.sbatch");
  REQUIRE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  const SlurmScheduler slurm;
  const auto script =
      hardy::batch::render_script(text.str(), slurm.template_values(example_request()),
                                  slurm.directive_prefix(), "perlmutter.sbatch");
  check_golden("slurm/golden/perlmutter.sbatch", script);
  check_shell_syntax(script);
}
