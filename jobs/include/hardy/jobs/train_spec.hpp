#pragma once
// `hardy train` options, from the command line and an INI configuration file (the command line
// wins). Every tunable is declared once, with its default and help text, in train_options.cpp; the
// effective values are written to the run directory as config.ini, which
// `hardy train --config RUN_DIR/config.ini` accepts back.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hardy/resilience/training_config.hpp"

namespace hardy::jobs {

using TrainSpec = resilience::TrainingConfig;

// Parses `hardy train` arguments (argv excludes the program and subcommand names). Prints help
// and returns nullopt for --help; throws InvalidArgument for anything wrong.
std::optional<TrainSpec> parse_train_spec(const std::vector<std::string>& args);
// The same options from a configuration file alone (e.g. a run directory's config.ini).
TrainSpec load_train_spec(const std::filesystem::path& config_file);

std::vector<int> parse_int_list(const std::string& text, const std::string& option);
std::vector<float> parse_float_list(const std::string& text, const std::string& option);

}  // namespace hardy::jobs
