#include <catch2/catch.hpp>

#include "hardy/core/support/error.hpp"
#include "hardy/slurm/allocation.hpp"

using hardy::InvalidArgument;
using hardy::batch::Environment;
using hardy::slurm::read_allocation;

TEST_CASE("outside Slurm there is no allocation", "[slurm]") {
  CHECK_FALSE(read_allocation(Environment({{"LSB_JOBID", "5"}, {"HOME", "/root"}})).has_value());
  CHECK_FALSE(read_allocation(Environment({{"SLURM_JOB_ID", ""}})).has_value());
}

TEST_CASE("a Slurm job's environment", "[slurm]") {
  const auto allocation =
      read_allocation(Environment({{"SLURM_JOB_ID", "4242"},
                                   {"SLURM_JOB_NODELIST", "nid[0001-0002,0007],login1"},
                                   {"SLURM_NTASKS", "16"},
                                   {"SLURM_RESTART_COUNT", "2"}}));
  REQUIRE(allocation);
  CHECK(allocation->scheduler == "slurm");
  CHECK(allocation->job_id == "4242");
  CHECK(allocation->nodes == std::vector<std::string>{"nid0001", "nid0002", "nid0007", "login1"});
  CHECK(allocation->tasks == 16);
  CHECK(allocation->restart_count == 2);
}

TEST_CASE("before the first requeue and without SLURM_NTASKS", "[slurm]") {
  const auto per_node = read_allocation(Environment(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-3]"}, {"SLURM_NTASKS_PER_NODE", "4"}}));
  CHECK(per_node->tasks == 12);
  CHECK(per_node->restart_count == 0);
  const auto bare =
      read_allocation(Environment({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-3]"}}));
  CHECK(bare->tasks == 3);
}

TEST_CASE("malformed Slurm variables are errors naming the variable", "[slurm]") {
  CHECK_THROWS_WITH(read_allocation(Environment({{"SLURM_JOB_ID", "7"}})),
                    Catch::Contains("SLURM_JOB_NODELIST"));
  CHECK_THROWS_WITH(
      read_allocation(Environment({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n[1-"}})),
      Catch::Contains("SLURM_JOB_NODELIST"));
  CHECK_THROWS_WITH(
      read_allocation(Environment(
          {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_NTASKS", "four"}})),
      Catch::Contains("SLURM_NTASKS") && Catch::Contains("four"));
  CHECK_THROWS_AS(
      read_allocation(Environment(
          {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "n1"}, {"SLURM_RESTART_COUNT", "-1"}})),
      InvalidArgument);
}
