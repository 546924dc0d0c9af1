#include <catch2/catch.hpp>
#include <set>

#include "../scheduler_fixtures.hpp"
#include "hardy/batch/job_request.hpp"
#include "hardy/core/support/error.hpp"

using hardy::InvalidArgument;
using namespace hardy::batch;

namespace {

// The template tests' request (2 nodes of 4 ranks and 4 GPUs) with a time limit that is not a
// whole minute, a run directory that needs no quoting, and no account or queue.
JobRequest valid_request() {
  JobRequest request = hardy::testing::example_request();
  request.time = "01:30:20";
  request.run_dir = "/scratch/runs/a";
  request.account.reset();
  request.queue.reset();
  return request;
}

}  // namespace

TEST_CASE("time limits are HH:MM:SS", "[batch]") {
  CHECK(parse_time_limit("00:00:01") == 1);
  CHECK(parse_time_limit("02:00:00") == 7200);
  CHECK(parse_time_limit("36:30:05") == 36 * 3600 + 30 * 60 + 5);
  for (const char* bad : {"1:00", "01:60:00", "01:00:60", "1h", "", "01:00:00:00", "-1:00:00",
                          "00:00:00", "a:bb:cc"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_time_limit(bad), InvalidArgument);
  }
}

TEST_CASE("validate names the option at fault", "[batch]") {
  CHECK_NOTHROW(validate(valid_request()));
  const auto fails_naming = [](auto change, const char* option) {
    auto request = valid_request();
    change(request);
    CHECK_THROWS_WITH(validate(request), Catch::Contains(option));
  };
  fails_naming([](JobRequest& r) { r.nodes = 0; }, "--nodes");
  fails_naming([](JobRequest& r) { r.ranks_per_node = -1; }, "--ranks-per-node");
  fails_naming([](JobRequest& r) { r.gpus_per_node = -1; }, "--gpus-per-node");
  fails_naming([](JobRequest& r) { r.cpus_per_rank = -1; }, "--cpus-per-rank");
  fails_naming([](JobRequest& r) { r.time = "90"; }, "--time");
  fails_naming([](JobRequest& r) { r.job_name = "a\nb"; }, "--job-name");
  fails_naming([](JobRequest& r) { r.account = "x$y"; }, "--account");
  fails_naming([](JobRequest& r) { r.queue = "q\""; }, "--queue");
  fails_naming([](JobRequest& r) { r.run_dir = "relative/run"; }, "absolute");
  fails_naming([](JobRequest& r) { r.run_dir = "/runs/%j"; }, "--run-dir");
  fails_naming([](JobRequest& r) { r.signal_lead_seconds = 0; }, "--signal-lead");
  fails_naming([](JobRequest& r) { r.rendezvous = "etcd"; }, "--rendezvous");
  fails_naming([](JobRequest& r) { r.rendezvous = "redis"; }, "--nodes-per-domain");
  fails_naming([](JobRequest& r) { r.domain_interface = "hsn0"; }, "--nodes-per-domain");
  fails_naming(
      [](JobRequest& r) {
        r.time = "00:02:00";
        r.signal_lead_seconds = 120;
      },
      "--signal-lead");
}

TEST_CASE("every documented placeholder has a value and every value is documented", "[batch]") {
  const auto values = template_values(valid_request());
  std::set<std::string> documented;
  for (const auto& placeholder : placeholders()) documented.insert(std::string(placeholder.name));
  std::set<std::string> provided;
  for (const auto& [name, value] : values) provided.insert(name);
  CHECK(documented == provided);
}

TEST_CASE("derived placeholder values", "[batch]") {
  auto values = template_values(valid_request());
  CHECK(values["tasks"] == "8");
  CHECK(values["time_hhmm"] == "01:31");  // rounded up: the job must not lose its last seconds
  CHECK(values["signal_lead_minutes"] == "2");
  CHECK(values["config"] == "/scratch/runs/a/job.ini");
  CHECK(values["output"] == "/scratch/runs/a/job.out");
  CHECK(values["requeue_exit_status"] == std::to_string(kRequeueExitStatus));
  CHECK_FALSE(values["account"].has_value());
  CHECK_FALSE(values["launcher"].has_value());
  auto no_gpus = valid_request();
  no_gpus.gpus_per_node = 0;
  CHECK_FALSE(template_values(no_gpus)["gpus_per_node"].has_value());
  CHECK(template_values(no_gpus)["gpus_per_rank"] == "0");
  // --cpus-per-rank: a directive only when given; `hardy run` always gets a number.
  auto default_cores = valid_request();
  default_cores.cpus_per_rank = 0;
  CHECK_FALSE(template_values(default_cores)["cpus_per_task"].has_value());
  CHECK(template_values(default_cores)["cpus_per_rank"] == "0");
  auto cores = valid_request();
  cores.cpus_per_rank = 7;
  cores.ranks_per_node = 6;
  cores.gpus_per_node = 6;
  CHECK(template_values(cores)["cpus_per_task"] == "7");
  CHECK(template_values(cores)["cpus_per_rank"] == "7");
  CHECK(template_values(cores)["gpus_per_rank"] == "1");
}
