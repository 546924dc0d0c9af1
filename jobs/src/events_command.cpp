// `hardy events --schema`: the event kinds and fields that hardy writes to events.jsonl, as JSON
// from the tables each layer declares, joined in hardy/resilience/events.hpp. Tools that read
// events.jsonl (tools/, tests/jobs/event_readers.py) check their names against it.
#include <fmt/format.h>

#include <iostream>

#include "command_line.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_schema.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/resilience/events.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kEventsUsage = R"(Usage: hardy events --schema

Prints the schema of RUN_DIR/events.jsonl as JSON: every event kind, what it means, and each of
its fields with its type and whether every event of the kind has it; "envelope" lists the fields
of every event (time, unix_time, event).
)";

}  // namespace

po::options_description events_options() {
  po::options_description options("hardy events options");
  options.add_options()("help,h", "print this help")(
      "schema", po::bool_switch(), "print the event kinds and their fields as JSON");
  return options;
}

int events_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  if (!parse_command_line(args, events_options(), {"hardy events", kEventsUsage}, vm)) return 0;
  if (!vm["schema"].as<bool>()) throw InvalidArgument("nothing to do: hardy events --schema");
  std::cout << core::event_schema_json(resilience::event_kinds()).dump(2) << "\n";
  return 0;
}

}  // namespace hardy::jobs
