#pragma once
// Every kind of event hardy writes to a run directory's events.jsonl: the tables each layer
// declares next to its code, joined. The session's and the supervisor's logs check what they
// write against it, `hardy events --schema` prints it, and C++ readers name kinds, fields and
// values through the consteval functions below, so that a reader naming an undeclared one does
// not compile. A new kind is one more entry in its layer's table.
#include <string_view>

#include "hardy/checkpoint/checkpoint_events.hpp"
#include "hardy/core/support/event_schema.hpp"
#include "hardy/resilience/events/domain_events.hpp"
#include "hardy/resilience/events/session_events.hpp"
#include "hardy/resilience/events/supervisor_events.hpp"

namespace hardy::resilience {

inline constexpr auto kEventKinds = core::join_event_kinds(
    kSessionEvents, checkpoint::kCheckpointEvents, kDomainEvents, kSupervisorEvents);

constexpr core::EventKinds event_kinds() { return kEventKinds; }

constexpr bool is_known_event_kind(std::string_view name) {
  return core::is_known_event_kind(kEventKinds, name);
}
consteval std::string_view event_kind(std::string_view name) {
  return core::checked_event_kind(kEventKinds, name);
}
consteval std::string_view event_field(std::string_view kind, std::string_view field) {
  return core::checked_event_field(kEventKinds, kind, field);
}
consteval std::string_view event_value(std::string_view kind, std::string_view field,
                                       std::string_view value) {
  return core::checked_event_value(kEventKinds, kind, field, value);
}

}  // namespace hardy::resilience
