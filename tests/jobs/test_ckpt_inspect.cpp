#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <variant>

#include "../checkpoint/distinct_scalars.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/scalar_fields.hpp"
#include "hardy/jobs/commands.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using nlohmann::json;

namespace {

// What `hardy ckpt ARGS...` prints on stdout.
std::string run_ckpt(const std::vector<std::string>& args) {
  std::ostringstream captured;
  std::streambuf* original = std::cout.rdbuf(captured.rdbuf());
  try {
    REQUIRE(jobs::ckpt_command(args) == 0);
  } catch (...) {
    std::cout.rdbuf(original);
    throw;
  }
  std::cout.rdbuf(original);
  return captured.str();
}

struct CheckpointWithDistinctScalars {
  CheckpointWithDistinctScalars() {
    state = testing::distinct_scalars();
    path = std::filesystem::temp_directory_path() /
           ("hardy-inspect-test-" + std::to_string(::getpid()) + ".h5");
    write_checkpoint_file(state, path);
  }
  ~CheckpointWithDistinctScalars() { std::filesystem::remove(path); }
  TrainingState state;
  std::filesystem::path path;
};

}  // namespace

TEST_CASE("hardy ckpt inspect --json shows every scalar field at its JSON pointer") {
  const CheckpointWithDistinctScalars checkpoint;
  const json report = json::parse(run_ckpt({"inspect", checkpoint.path.string(), "--json"}));
  for (const ScalarField& scalar : scalar_fields()) {
    INFO(scalar.path);
    const json::json_pointer pointer{std::string(scalar.json_pointer)};
    REQUIRE(report.contains(pointer));
    std::visit([&](const auto& value) { CHECK(report[pointer] == json(value)); },
               scalar.get(checkpoint.state));
  }
}

TEST_CASE(
    "hardy ckpt inspect's text shows every scalar field but the configuration and the step's log "
    "lines") {
  const CheckpointWithDistinctScalars checkpoint;
  // Throws when a field of the table has no place in the text.
  const std::string text = run_ckpt({"inspect", checkpoint.path.string()});
  for (const ScalarField& scalar : scalar_fields()) {
    INFO(scalar.path);
    std::visit(
        [&](const auto& value) {
          using T = std::decay_t<decltype(value)>;
          if constexpr (std::is_integral_v<T>)
            CHECK_THAT(text, Catch::Contains(std::to_string(value)));
          if constexpr (std::is_same_v<T, std::vector<std::string>>)  // hosts, each once in a row
            CHECK_THAT(text, Catch::Contains(value[0] + ", " + value[1] + ", " + value[2]));
          // Those two are long texts that only --json shows.
          if constexpr (std::is_same_v<T, std::string>)
            if (scalar.path != "/job/config" && scalar.path != "/job/committed_lines")
              CHECK_THAT(text, Catch::Contains(value));
        },
        scalar.get(checkpoint.state));
  }
}
