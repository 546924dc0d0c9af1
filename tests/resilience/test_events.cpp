// The event kinds hardy writes (hardy/resilience/events.hpp: each layer's table, joined): every
// kind once, every field once per kind, none named like the envelope, and the values readers
// rely on.
#include <catch2/catch.hpp>
#include <set>
#include <string_view>

#include "hardy/resilience/events.hpp"

namespace resilience = hardy::resilience;

TEST_CASE("events: the tables name each kind once, and each field once per kind", "[resilience]") {
  std::set<std::string_view> kinds;
  for (const auto& kind : resilience::event_kinds()) {
    CHECK(kinds.insert(kind.name).second);
    CHECK(!kind.meaning.empty());
    std::set<std::string_view> fields;
    for (const auto& field : kind.fields) {
      CHECK(fields.insert(field.name).second);
      for (const auto& envelope : hardy::core::event_fields::envelope)
        CHECK(field.name != envelope.name);
    }
  }
  // Each layer's table is in the joined one.
  CHECK(kinds.size() ==
        std::size(resilience::kSessionEvents) + std::size(hardy::checkpoint::kCheckpointEvents) +
            std::size(resilience::kDomainEvents) + std::size(resilience::kSupervisorEvents));
  const auto schema = hardy::core::event_schema_json(resilience::event_kinds());
  CHECK(schema["events"].size() == kinds.size());
  CHECK(schema["events"]["failure_detected"]["fields"]["detected_by"]["values"] ==
        nlohmann::json::array({"process failure error", "hang monitor", "watchdog"}));
  CHECK(hardy::core::event_schema_problem(resilience::event_kinds(), "job_finished",
                                          {{"status", "failed"}, {"steps", 3}})
            .empty());
}

TEST_CASE("events: readers name kinds, fields and values the tables declare", "[resilience]") {
  static_assert(resilience::event_value("failure_detected", "detected_by", "watchdog") ==
                "watchdog");
  static_assert(resilience::event_kind("checkpoint_written") == "checkpoint_written");
  static_assert(resilience::event_field("state_restored", "source") == "source");
  static_assert(resilience::is_known_event_kind("domain_healed"));
  static_assert(!resilience::is_known_event_kind("job_started_v2"));
}
