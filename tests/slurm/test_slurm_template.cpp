#include <catch2/catch.hpp>

#include "../scheduler_fixtures.hpp"
#include "hardy/slurm/slurm_scheduler.hpp"

using hardy::slurm::SlurmScheduler;
using namespace hardy::testing;

TEST_CASE("the built-in Slurm script, every option given", "[slurm]") {
  const auto script = render_builtin(SlurmScheduler(), example_request());
  check_script("slurm/golden/job.sbatch", script);
}

TEST_CASE("the built-in Slurm script leaves out what was not asked for", "[slurm]") {
  auto request = example_request();
  request.gpus_per_node = 0;
  request.cpus_per_rank = 0;
  request.account.reset();
  request.queue.reset();
  request.job_name = "plain";
  request.run_dir = "/runs/plain";
  const auto script = render_builtin(SlurmScheduler(), request);
  check_golden("slurm/golden/job-minimal.sbatch", script);
  CHECK(script.find("--gpus-per-node") == std::string::npos);
  CHECK(script.find("--cpus-per-task") == std::string::npos);
  CHECK(script.find("--account") == std::string::npos);
  CHECK(script.find("--partition") == std::string::npos);
}

TEST_CASE("Slurm has no --lsf-launcher", "[slurm]") {
  check_launcher_refused(SlurmScheduler(), "jsrun");
}

TEST_CASE("the Perlmutter example template renders", "[slurm]") {
  const auto script =
      render_example(SlurmScheduler(), "examples/slurm/perlmutter.sbatch", example_request());
  check_script("slurm/golden/perlmutter.sbatch", script);
}

TEST_CASE("fault domains meeting in Redis reach hardy run through the Slurm script", "[slurm]") {
  auto request = example_request();
  request.nodes_per_domain = 1;
  request.rendezvous = "redis";
  const auto script = render_builtin(SlurmScheduler(), request);
  CHECK(script.find("--nodes-per-domain 1 --rendezvous redis \\") != std::string::npos);
}

TEST_CASE("the network fault domains exchange over reaches hardy run through the Slurm script",
          "[slurm]") {
  auto request = example_request();
  request.nodes_per_domain = 1;
  request.domain_interface = "10.100.0.0/16";
  const auto script = render_builtin(SlurmScheduler(), request);
  CHECK(script.find("--domain-interface 10.100.0.0/16 \\") != std::string::npos);
}
