// The event schema's mechanism (core/support/event_schema.hpp) against the writer, EventLog::emit,
// on a table of this test's own: what the table declares is written, anything else is refused
// (this build has tests, so it throws). The tables hardy writes are checked in
// tests/resilience/test_events.cpp.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "scratch_directory.hpp"

using hardy::core::event_schema_problem;
using hardy::core::EventField;
using hardy::core::EventKind;
using hardy::core::EventLog;
using T = hardy::core::EventFieldType;

namespace {

constexpr std::string_view kColours[] = {"red", "green"};
constexpr EventField kPainted[] = {
    {"step", T::integer, true}, {"colour", T::string, true, kColours}, {"note", T::string, false}};
constexpr EventField kLaunched[] = {{"launch", T::integer, true}, {"how", T::string, true}};
constexpr EventKind kFirstLayer[] = {{"painted", "a test's kind", kPainted}};
constexpr EventKind kSecondLayer[] = {{"launched", "another layer's kind", kLaunched}};
constexpr auto kKinds = hardy::core::join_event_kinds(kFirstLayer, kSecondLayer);

}  // namespace

TEST_CASE("events: a declared event with its required fields is written", "[core]") {
  hardy::testing::ScratchDirectory dir("events");
  {
    EventLog log(dir / "events.jsonl", kKinds);
    log.emit("painted", {{"step", 5}, {"colour", "red"}});
    log.emit("launched", {{"launch", 1}, {"how", nullptr}});  // null: not known
  }
  std::ifstream file(dir / "events.jsonl");
  std::string line;
  REQUIRE(std::getline(file, line));
  const auto record = nlohmann::json::parse(line);
  CHECK(record["event"] == "painted");
  CHECK(record["step"] == 5);
  CHECK(record.contains("unix_time"));
  CHECK(!record.contains("schema_problem"));
  REQUIRE(std::getline(file, line));
  CHECK(nlohmann::json::parse(line)["event"] == "launched");
}

TEST_CASE("events: emit refuses what the table does not declare", "[core]") {
  EventLog disabled(kKinds);  // checked even where nothing is written (ranks other than 0)
  CHECK_THROWS_WITH(disabled.emit("no_such_event", {{"step", 1}}),
                    Catch::Contains("'no_such_event' is not declared"));
  CHECK_THROWS_WITH(disabled.emit("painted", {{"step", 1}, {"colour", "red"}, {"signal", "USR1"}}),
                    Catch::Contains("field 'signal' is not declared"));
  CHECK_THROWS_WITH(disabled.emit("painted", {{"colour", "red"}}),
                    Catch::Contains("required field 'step' is missing"));
  CHECK_THROWS_WITH(disabled.emit("painted", {{"step", "seven"}, {"colour", "red"}}),
                    Catch::Contains("'step' should be integer, not string"));
  CHECK_THROWS_WITH(disabled.emit("painted", {{"step", 1}, {"colour", "red"}, {"unix_time", 2.0}}),
                    Catch::Contains("written by EventLog::emit"));
  CHECK_THROWS_AS(disabled.emit("no_such_event"), hardy::Error);
  CHECK_NOTHROW(disabled.emit("painted", {{"step", 1}, {"colour", "green"}}));
  // A log checks against its own table only: a kind of another table is undeclared there.
  EventLog first_only(kFirstLayer);
  CHECK_THROWS_WITH(first_only.emit("launched", {{"launch", 1}, {"how", "x"}}),
                    Catch::Contains("'launched' is not declared"));
}

TEST_CASE("events: a field of a fixed set of values takes only those", "[core]") {
  static_assert(hardy::core::checked_event_value(kKinds, "painted", "colour", "green") == "green");
  CHECK(event_schema_problem(kKinds, "painted", {{"step", 3}, {"colour", "red"}}).empty());
  CHECK_THAT(event_schema_problem(kKinds, "painted", {{"step", 3}, {"colour", "rde"}}),
             Catch::Contains("'rde', not one of the values it declares"));
  const auto schema = hardy::core::event_schema_json(kKinds);
  CHECK(schema["events"].size() == 2);
  CHECK(schema["events"]["painted"]["fields"]["colour"]["values"] ==
        nlohmann::json::array({"red", "green"}));
  CHECK_FALSE(schema["events"]["launched"]["fields"]["how"].contains("values"));
  CHECK(schema["envelope"].contains("unix_time"));
}

TEST_CASE("events: joined tables keep every kind, and readers skip unknown ones", "[core]") {
  static_assert(kKinds.size() == 2);
  static_assert(hardy::core::is_known_event_kind(kKinds, "launched"));
  static_assert(!hardy::core::is_known_event_kind(kKinds, "launched_v2"));
  static_assert(hardy::core::checked_event_kind(kKinds, "painted") == "painted");
  static_assert(hardy::core::checked_event_field(kKinds, "painted", "note") == "note");
  static_assert(hardy::core::checked_event_field(kKinds, "painted", "unix_time") == "unix_time");
}

TEST_CASE("reading a log back: its last records, oldest first, past a line cut short", "[core]") {
  hardy::testing::ScratchDirectory dir("last-records");
  const auto file = dir.path() / "metrics.jsonl";
  CHECK(hardy::core::last_json_records(file, 3).empty());  // no file
  CHECK_FALSE(hardy::core::last_json_record(file));
  {
    std::ofstream out(file);
    for (int step = 1; step <= 100; ++step) out << R"({"step":)" << step << "}\n";
    out << R"({"step":101,"lo)";  // a crash mid-line
  }
  const auto last = hardy::core::last_json_records(file, 3);
  REQUIRE(last.size() == 3);
  CHECK(last[0]["step"] == 98);
  CHECK(last[2]["step"] == 100);
  CHECK((*hardy::core::last_json_record(file))["step"] == 100);
  // A window that cuts the file mid-line: the cut line is passed over, the rest kept.
  const auto windowed = hardy::core::last_json_records(file, 1000, 200);
  REQUIRE_FALSE(windowed.empty());
  CHECK(windowed.back()["step"] == 100);
  CHECK(windowed.size() < 100);
  for (std::size_t i = 1; i < windowed.size(); ++i)
    CHECK(windowed[i]["step"].get<int>() == windowed[i - 1]["step"].get<int>() + 1);
}
