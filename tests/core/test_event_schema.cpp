// The event schema (core/support/event_schema.hpp) against the writer, EventLog::emit: what the
// table declares is written, anything else is refused (this build has tests, so it throws).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "scratch_directory.hpp"

using hardy::core::event_schema_problem;
using hardy::core::EventLog;

TEST_CASE("events: a declared event with its required fields is written", "[core]") {
  hardy::testing::ScratchDirectory dir("events");
  {
    EventLog log(dir / "events.jsonl");
    log.emit("checkpoint_written",
             {{"step", 5}, {"path", "/x"}, {"bytes", 10}, {"stall_s", 0.1}, {"write_s", 0.2}});
    log.emit("launch_ended", {{"launch", 1},
                              {"how", "exited 0"},
                              {"exit_status", 0},
                              {"verdict", "completed"},
                              {"last_committed_step", nullptr}});  // null: not known
  }
  std::ifstream file(dir / "events.jsonl");
  std::string line;
  REQUIRE(std::getline(file, line));
  const auto record = nlohmann::json::parse(line);
  CHECK(record["event"] == "checkpoint_written");
  CHECK(record["bytes"] == 10);
  CHECK(record.contains("unix_time"));
  CHECK(!record.contains("schema_problem"));
}

TEST_CASE("events: emit refuses what the schema does not declare", "[core]") {
  EventLog disabled;  // checked even where nothing is written (ranks other than 0)
  CHECK_THROWS_WITH(disabled.emit("no_such_event", {{"step", 1}}),
                    Catch::Contains("'no_such_event' is not declared"));
  CHECK_THROWS_WITH(disabled.emit("preemption_requested", {{"step", 1}, {"signal", "USR1"}}),
                    Catch::Contains("field 'signal' is not declared"));
  CHECK_THROWS_WITH(disabled.emit("preemption_requested", nlohmann::json::object()),
                    Catch::Contains("required field 'step' is missing"));
  CHECK_THROWS_WITH(disabled.emit("preemption_requested", {{"step", "seven"}}),
                    Catch::Contains("'step' should be integer, not string"));
  CHECK_THROWS_WITH(disabled.emit("preemption_requested", {{"step", 1}, {"unix_time", 2.0}}),
                    Catch::Contains("written by EventLog::emit"));
  CHECK_THROWS_AS(disabled.emit("no_such_event"), hardy::Error);
  CHECK_NOTHROW(disabled.emit("preemption_requested", {{"step", 1}}));
}

TEST_CASE("events: the schema names each kind once, and each field once per kind", "[core]") {
  std::set<std::string_view> kinds;
  for (const auto& kind : hardy::core::kEventKinds) {
    CHECK(kinds.insert(kind.name).second);
    CHECK(!kind.meaning.empty());
    std::set<std::string_view> fields;
    for (const auto& field : kind.fields) {
      CHECK(fields.insert(field.name).second);
      for (const auto& envelope : hardy::core::event_fields::envelope)
        CHECK(field.name != envelope.name);
    }
  }
  const auto schema = hardy::core::event_schema_json();
  CHECK(schema["events"].size() == kinds.size());
  CHECK(schema["events"]["failure_detected"]["fields"]["detected_by"]["type"] == "string");
  CHECK(schema["envelope"].contains("unix_time"));
  CHECK(event_schema_problem("job_finished", {{"status", "failed"}, {"steps", 3}}).empty());
}

TEST_CASE("events: a field of a fixed set of values takes only those", "[core]") {
  using hardy::core::event_schema_problem;
  // What found a failure is one of a declared few: a new kind is added to the table, and the
  // writer, the C++ readers (event_value) and the Python readers (tests/jobs/event_readers.py)
  // all see it there.
  static_assert(hardy::core::event_value("failure_detected", "detected_by", "watchdog") ==
                "watchdog");
  CHECK(event_schema_problem("failure_detected", {{"detected_by", "hang monitor"}, {"step", 3}})
            .empty());
  CHECK_THAT(event_schema_problem("failure_detected", {{"detected_by", "watchdgo"}, {"step", 3}}),
             Catch::Contains("'watchdgo', not one of the values it declares"));
  const auto schema = hardy::core::event_schema_json();
  CHECK(schema["events"]["failure_detected"]["fields"]["detected_by"]["values"] ==
        nlohmann::json::array({"process failure error", "hang monitor", "watchdog"}));
  CHECK_FALSE(schema["events"]["job_finished"]["fields"]["status"].contains("values"));
}

TEST_CASE("events: readers skip kinds of another hardy version", "[core]") {
  static_assert(hardy::core::is_known_event_kind("job_started"));
  static_assert(!hardy::core::is_known_event_kind("job_started_v2"));
  static_assert(hardy::core::event_field("state_restored", "source") == "source");
  static_assert(hardy::core::event_field("state_restored", "unix_time") == "unix_time");
}
