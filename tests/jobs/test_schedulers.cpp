#include <catch2/catch.hpp>

#include "hardy/core/support/error.hpp"
#include "hardy/jobs/schedulers.hpp"

using hardy::batch::Environment;
using hardy::jobs::detect_allocation;
using hardy::jobs::make_scheduler;

TEST_CASE("schedulers by name", "[jobs]") {
  CHECK(make_scheduler("slurm")->name() == "slurm");
  CHECK(make_scheduler("lsf")->name() == "lsf");
  CHECK_THROWS_WITH(make_scheduler("pbs"), Catch::Contains("pbs"));
}

TEST_CASE("detect_allocation finds Slurm, then LSF, else nothing", "[jobs]") {
  CHECK_FALSE(detect_allocation(Environment({{"HOME", "/root"}})).has_value());
  const auto slurm =
      detect_allocation(Environment({{"SLURM_JOB_ID", "12"}, {"SLURM_JOB_NODELIST", "n[1-2]"}}));
  REQUIRE(slurm);
  CHECK(slurm->scheduler == "slurm");
  CHECK(slurm->nodes == std::vector<std::string>{"n1", "n2"});
  const auto lsf =
      detect_allocation(Environment({{"LSB_JOBID", "34"}, {"LSB_MCPU_HOSTS", "a 6 b 6"}}));
  REQUIRE(lsf);
  CHECK(lsf->scheduler == "lsf");
  CHECK(lsf->tasks == 12);
}

TEST_CASE("detect_allocation reports malformed scheduler variables", "[jobs]") {
  CHECK_THROWS_AS(
      detect_allocation(Environment({{"SLURM_JOB_ID", "12"}, {"SLURM_JOB_NODELIST", "n[2-1]"}})),
      hardy::InvalidArgument);
}

TEST_CASE("a job id that is not one never reaches scancel or bkill", "[jobs]") {
  // bkill 0 kills every job of the user; scheduler.json may hold anything.
  for (const char* scheduler : {"slurm", "lsf"})
    for (const char* id : {"0", "", "-1", "12 13", "007", "12;rm", "1e3"}) {
      INFO(scheduler << " job id '" << id << "'");
      CHECK_THROWS_AS(make_scheduler(scheduler)->cancel(id), hardy::InvalidArgument);
    }
}
