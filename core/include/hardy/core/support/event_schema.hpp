#pragma once
// The mechanism of events.jsonl's schema: what an event kind and its fields are, the fields of
// every record (the envelope, the context), and the checks made against a table of kinds. core/
// declares no kind: each layer declares the kinds it writes next to its code, as a table of
// EventKind (checkpoint/checkpoint_events.hpp, resilience/events/), and the tables are joined
// where they are used (hardy/resilience/events.hpp). Three things are checked against a table:
// - the writer: EventLog::emit refuses a kind or a field that its table does not declare, a
//   value of the wrong type and a missing required field (throws Error in builds with tests,
//   see event_log.hpp);
// - the C++ readers: they name kinds and fields through consteval functions over the table
//   (checked_event_kind() and the others below), so a reader that names an undeclared one does
//   not compile;
// - the Python readers (tools/report.py, tools/timeline.py): tests/jobs/event_readers.py checks
//   them against `hardy events --schema`, the joined table as JSON.
// Files read back may come from another hardy version: readers ignore kinds and fields they do
// not know (is_known_event_kind() says which) instead of failing on them.
#include <algorithm>
#include <array>
#include <iterator>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

namespace hardy::core {

// JSON types. `number` takes integers too; `any` is for fields whose type depends on the case.
// null is accepted for every field: "not known" (e.g. no scheduler job id outside a scheduler).
enum class EventFieldType { string, integer, number, boolean, array, object, any };
std::string_view to_string(EventFieldType type);

struct EventField {
  std::string_view name;
  EventFieldType type;
  bool required;  // every emit of the kind sets it; readers may rely on it
  // A string field that names one of a fixed set (a kind of failure, a detector): its values.
  // Empty: any value of the type.
  std::span<const std::string_view> values = {};
};

struct EventKind {
  std::string_view name;
  std::string_view meaning;
  std::span<const EventField> fields;
};

namespace event_fields {
using T = EventFieldType;
inline constexpr bool req = true, opt = false;
// What emit adds to every record; a caller may not set these. schema_problem: what was wrong
// with an event that a build without tests wrote anyway (event_log.hpp).
inline constexpr EventField envelope[] = {{"time", T::string, req},
                                          {"unix_time", T::number, req},
                                          {"event", T::string, req},
                                          {"schema_problem", T::string, opt}};

// Shapes that several kinds share.
inline constexpr EventField reason_only[] = {{"reason", T::string, req}};
inline constexpr EventField step_and_reason[] = {{"step", T::integer, req},
                                                 {"reason", T::string, req}};

// Fields that may stand on a record of any kind: put there by EventLog::add_context (every
// record of a fault domain's leader says which domain wrote it), or by a caller about a domain
// (the supervisor's domain_* events).
inline constexpr EventField context[] = {{"domain", T::integer, opt}};

}  // namespace event_fields

// A table of kinds: one layer's, or several joined.
using EventKinds = std::span<const EventKind>;

// Several layers' tables as one (constexpr: for the consteval checks below).
template <std::size_t... N>
consteval std::array<EventKind, (N + ...)> join_event_kinds(const EventKind (&... tables)[N]) {
  std::array<EventKind, (N + ...)> joined{};
  std::size_t next = 0;
  ((std::copy(std::begin(tables), std::end(tables), joined.begin() + next), next += N), ...);
  return joined;
}

constexpr const EventKind* find_event_kind(EventKinds kinds, std::string_view name) {
  for (const EventKind& kind : kinds)
    if (kind.name == name) return &kind;
  return nullptr;
}

constexpr const EventField* find_event_field(const EventKind& kind, std::string_view name) {
  for (const EventField& field : kind.fields)
    if (field.name == name) return &field;
  for (const EventField& field : event_fields::envelope)
    if (field.name == name) return &field;
  return nullptr;
}

constexpr bool is_event_context_field(std::string_view name) {
  for (const EventField& field : event_fields::context)
    if (field.name == name) return true;
  return false;
}

// An event from a file written by another version of hardy may be of a kind this one does not
// know; readers skip such records (they cannot say what it means) rather than fail on them.
constexpr bool is_known_event_kind(EventKinds kinds, std::string_view name) {
  return find_event_kind(kinds, name) != nullptr;
}

// For readers: the name of a kind `kinds` declares, or a compile error ("not a constant
// expression", pointing here) when it does not.
consteval std::string_view checked_event_kind(EventKinds kinds, std::string_view name) {
  if (!find_event_kind(kinds, name)) throw "not an event kind declared in the table";
  return name;
}

// For readers: the name of a field that `kind` declares (or the envelope: time, unix_time,
// event), or a compile error.
consteval std::string_view checked_event_field(EventKinds kinds, std::string_view kind,
                                               std::string_view field) {
  const EventKind* found = find_event_kind(kinds, kind);
  if (!found) throw "not an event kind declared in the table";
  if (!find_event_field(*found, field)) throw "not a field of this event kind in the table";
  return field;
}

// For readers and writers: a value that `kind`'s `field` declares (failure_detected's
// detected_by: "watchdog"), or a compile error.
consteval std::string_view checked_event_value(EventKinds kinds, std::string_view kind,
                                               std::string_view field, std::string_view value) {
  const EventKind* found = find_event_kind(kinds, kind);
  if (!found) throw "not an event kind declared in the table";
  const EventField* declared = find_event_field(*found, field);
  if (!declared) throw "not a field of this event kind in the table";
  for (std::string_view allowed : declared->values)
    if (allowed == value) return value;
  throw "not a value this field declares in the table";
}

// What is wrong with an event about to be written, or "" when nothing: a kind `kinds` does not
// declare, an undeclared field, an envelope field set by the caller, a value of the wrong type
// or not among the field's declared values, a missing required field.
std::string event_schema_problem(EventKinds kinds, std::string_view kind,
                                 const nlohmann::json& fields);

// A table as JSON (`hardy events --schema`): {"envelope": [fields], "context": [fields],
// "events": {kind: {"meaning": ..., "fields": {name: {"type": ..., "required": ...,
// ["values": [...]]}}}}}.
nlohmann::json event_schema_json(EventKinds kinds);

}  // namespace hardy::core
