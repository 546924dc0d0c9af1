#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "hardy/core/support/error.hpp"
#include "hardy/lsf/allocation.hpp"

using hardy::InvalidArgument;
using hardy::batch::Environment;
using hardy::lsf::parse_mcpu_hosts;
using hardy::lsf::read_allocation;
using Hosts = std::vector<std::string>;

namespace {

// A host file as LSF writes it: one line per slot.
std::string write_host_file(const std::string& text) {
  const auto path =
      std::filesystem::temp_directory_path() / ("hardy-hostfile-" + std::to_string(::getpid()));
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("outside LSF there is no allocation", "[lsf]") {
  CHECK_FALSE(read_allocation(Environment({{"SLURM_JOB_ID", "5"}})).has_value());
}

TEST_CASE("LSB_DJOB_HOSTFILE: one line per slot", "[lsf]") {
  const auto file = write_host_file("h41n01\nh41n01\nh41n01\nh41n02\nh41n02\nh41n02\n");
  const auto allocation = read_allocation(Environment(
      {{"LSB_JOBID", "99"}, {"LSB_DJOB_HOSTFILE", file}, {"LSB_MCPU_HOSTS", "ignored 1"}}));
  std::filesystem::remove(file);
  REQUIRE(allocation);
  CHECK(allocation->scheduler == "lsf");
  CHECK(allocation->job_id == "99");
  CHECK(allocation->nodes == Hosts{"h41n01", "h41n02"});
  CHECK(allocation->tasks == 6);
  CHECK(allocation->restart_count == 0);
}

TEST_CASE("LSB_MCPU_HOSTS when there is no host file; LSB_RESTART marks a rerun", "[lsf]") {
  const auto allocation = read_allocation(Environment(
      {{"LSB_JOBID", "99"}, {"LSB_MCPU_HOSTS", "hostA 4 hostB 4"}, {"LSB_RESTART", "Y"}}));
  CHECK(allocation->nodes == Hosts{"hostA", "hostB"});
  CHECK(allocation->tasks == 8);
  CHECK(allocation->restart_count == 1);
}

TEST_CASE("a Summit-style launch node is not a node of the job", "[lsf]") {
  // jsrun jobs list the launch node first with one slot, then 42 slots per compute node.
  std::string lines = "batch3\n";
  for (const char* host : {"a01n01", "a01n02"})
    for (int slot = 0; slot < 42; ++slot) lines += std::string(host) + "\n";
  const auto file = write_host_file(lines);
  const auto from_file =
      read_allocation(Environment({{"LSB_JOBID", "7"}, {"LSB_DJOB_HOSTFILE", file}}));
  std::filesystem::remove(file);
  CHECK(from_file->nodes == Hosts{"a01n01", "a01n02"});
  CHECK(from_file->tasks == 84);
  const auto from_variable = read_allocation(
      Environment({{"LSB_JOBID", "7"}, {"LSB_MCPU_HOSTS", "batch3 1 a01n01 42 a01n02 42"}}));
  CHECK(from_variable->nodes == Hosts{"a01n01", "a01n02"});
  CHECK(from_variable->tasks == 84);
  // One slot per host everywhere, or a single host, is an ordinary job: nothing is dropped.
  CHECK(
      read_allocation(Environment({{"LSB_JOBID", "7"}, {"LSB_MCPU_HOSTS", "h1 1 h2 1"}}))->nodes ==
      Hosts{"h1", "h2"});
  CHECK(read_allocation(Environment({{"LSB_JOBID", "7"}, {"LSB_MCPU_HOSTS", "h1 1"}}))->nodes ==
        Hosts{"h1"});
  CHECK(read_allocation(Environment({{"LSB_JOBID", "7"}, {"LSB_MCPU_HOSTS", "h1 4 h2 1 h3 4"}}))
            ->nodes == Hosts{"h1", "h2", "h3"});
}

TEST_CASE("LSB_MCPU_HOSTS pairs", "[lsf]") {
  CHECK(parse_mcpu_hosts(" a 1  b 42 ") ==
        std::vector<std::pair<std::string, int>>{{"a", 1}, {"b", 42}});
  for (const char* bad : {"", "a", "a b", "a 4 b", "a -1", "a 0"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_mcpu_hosts(bad), InvalidArgument);
  }
}

TEST_CASE("malformed LSF variables are errors naming the variable", "[lsf]") {
  CHECK_THROWS_WITH(read_allocation(Environment({{"LSB_JOBID", "1"}})),
                    Catch::Contains("LSB_DJOB_HOSTFILE") && Catch::Contains("LSB_MCPU_HOSTS"));
  CHECK_THROWS_WITH(read_allocation(Environment(
                        {{"LSB_JOBID", "1"}, {"LSB_DJOB_HOSTFILE", "/nonexistent/hosts"}})),
                    Catch::Contains("/nonexistent/hosts"));
  const auto empty = write_host_file("\n");
  CHECK_THROWS_WITH(
      read_allocation(Environment({{"LSB_JOBID", "1"}, {"LSB_DJOB_HOSTFILE", empty}})),
      Catch::Contains("no hosts"));
  std::filesystem::remove(empty);
}
