#include "hardy/core/support/event_schema.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hardy::core {

namespace {

bool has_type(const nlohmann::json& value, EventFieldType type) {
  using T = EventFieldType;
  return value.is_null() || type == T::any || (type == T::string && value.is_string()) ||
         (type == T::integer && value.is_number_integer()) ||
         (type == T::number && value.is_number()) || (type == T::boolean && value.is_boolean()) ||
         (type == T::array && value.is_array()) || (type == T::object && value.is_object());
}

bool in_envelope(std::string_view name) {
  for (const EventField& field : event_fields::envelope)
    if (field.name == name) return true;
  return false;
}

const EventField* context_field(std::string_view name) {
  for (const EventField& field : event_fields::context)
    if (field.name == name) return &field;
  return nullptr;
}  // is_event_context_field() is the same question for the header's users

}  // namespace

std::string_view to_string(EventFieldType type) {
  // In the order of the enum.
  static constexpr std::string_view kNames[] = {"string", "integer", "number", "boolean",
                                                "array",  "object",  "any"};
  return kNames[static_cast<std::size_t>(type)];
}

std::string event_schema_problem(EventKinds kinds, std::string_view kind_name,
                                 const nlohmann::json& fields) {
  const EventKind* kind = find_event_kind(kinds, kind_name);
  if (!kind) return fmt::format("event kind '{}' is not declared in its layer's table", kind_name);
  if (!fields.is_object())
    return fmt::format("event '{}': fields are not a JSON object", kind_name);
  for (const auto& [name, value] : fields.items()) {
    if (in_envelope(name))
      return fmt::format("event '{}': '{}' is written by EventLog::emit, not by its caller",
                         kind_name, name);
    const EventField* field = find_event_field(*kind, name);
    if (!field) field = context_field(name);
    if (!field)
      return fmt::format("event '{}': field '{}' is not declared in its layer's table", kind_name,
                         name);
    if (!has_type(value, field->type))
      return fmt::format("event '{}': field '{}' should be {}, not {}", kind_name, name,
                         to_string(field->type), value.type_name());
    if (!field->values.empty() && value.is_string() &&
        std::find(field->values.begin(), field->values.end(), value.get<std::string>()) ==
            field->values.end())
      return fmt::format("event '{}': field '{}' is '{}', not one of the values it declares",
                         kind_name, name, value.get<std::string>());
  }
  for (const EventField& field : kind->fields)
    if (field.required && !fields.contains(std::string(field.name)))
      return fmt::format("event '{}': required field '{}' is missing", kind_name, field.name);
  return {};
}

nlohmann::json event_schema_json(EventKinds kinds) {
  const auto describe = [](std::span<const EventField> fields) {
    nlohmann::json out = nlohmann::json::object();
    for (const EventField& field : fields) {
      auto& described = out[std::string(field.name)];
      described = {{"type", to_string(field.type)}, {"required", field.required}};
      if (!field.values.empty())
        described["values"] = std::vector<std::string>(field.values.begin(), field.values.end());
    }
    return out;
  };
  nlohmann::json events = nlohmann::json::object();
  for (const EventKind& kind : kinds)
    events[std::string(kind.name)] = {{"meaning", kind.meaning}, {"fields", describe(kind.fields)}};
  return {{"envelope", describe(event_fields::envelope)},
          {"context", describe(event_fields::context)},
          {"events", events}};
}

}  // namespace hardy::core
