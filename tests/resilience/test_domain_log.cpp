// DomainLog: the supervisor's incremental reading of what the domains log to events.jsonl.
#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "scratch_directory.hpp"
#include "supervisor/domain_log.hpp"

using hardy::resilience::DomainLog;

namespace {

void append(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::app | std::ios::binary);
  out << text;
}

}  // namespace

TEST_CASE(
    "domain log: starts, completions, joins and regrows since a launch, read as the file grows",
    "[resilience]") {
  hardy::testing::ScratchDirectory scratch("domain-log");
  const auto file = scratch.path() / "events.jsonl";
  DomainLog log(file, 3);
  CHECK_FALSE(log.started(0, 0));  // no file yet
  append(file, R"({"event":"job_started","domain":0,"unix_time":10})"
               "\n"
               R"({"event":"domain_started","domain":1,"unix_time":11})"
               "\n"
               R"({"event":"rank_started","domain":2,"unix_time":12})"
               "\n");
  CHECK(log.started(0, 5) == 10.0);
  CHECK(log.started(1, 5) == 11.0);
  CHECK_FALSE(log.started(2, 5));   // a rank's start is not the domain's
  CHECK_FALSE(log.started(0, 20));  // before that launch
  // A line still being written waits; a damaged or foreign one is skipped.
  append(file, R"({"event":"domain_finished","domain":1,"status":"completed","unix_t)");
  CHECK_FALSE(log.finished(1, 5));
  append(file,
         "ime\":30}\n"
         "not json\n"
         R"({"event":"domain_finished","domain":7,"status":"completed","unix_time":31})"
         "\n"
         R"({"event":"job_finished","domain":0,"status":"failed","unix_time":32})"
         "\n");
  CHECK(log.finished(1, 5));
  CHECK_FALSE(log.finished(0, 5));  // failed is not finished
  // but a launch that is ending (its launcher may not have exited yet); a completed one is not
  CHECK(log.ending(0, 5));
  CHECK_FALSE(log.ending(0, 33));
  CHECK_FALSE(log.ending(1, 5));
  CHECK_FALSE(log.joined(2, 5));
  append(file, R"({"event":"domain_joined","domain":2,"unix_time":40})"
               "\n");
  CHECK(log.joined(2, 35));
  CHECK_FALSE(log.joined(2, 41));
  // A domain that stopped to come back whole (regrow_planned), since its launch only.
  CHECK_FALSE(log.regrowing(1, 5));
  append(file, R"({"event":"regrow_planned","domain":1,"unix_time":50})"
               "\n");
  CHECK(log.regrowing(1, 45));
  CHECK_FALSE(log.regrowing(1, 51));
  CHECK_FALSE(log.regrowing(0, 5));
  // Stopping to regrow or to leave a slow node out ends the launch too; a preemption's stop is
  // the whole job's, and the supervisor handles it as such.
  append(file, R"({"event":"job_finished","domain":1,"status":"regrowing","unix_time":51})"
               "\n"
               R"({"event":"job_finished","domain":2,"status":"preempted","unix_time":52})"
               "\n");
  CHECK(log.ending(1, 45));
  CHECK_FALSE(log.ending(2, 45));
}
