#pragma once
// Everything a training job needs to know, from the command line and an INI configuration file
// (the command line wins). Every tunable is declared once, with its default and help text, in
// train_spec.cpp; the effective values are written to the run directory as config.ini, which
// `hardy train --config RUN_DIR/config.ini` accepts back.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "hardy/core/lr_schedule.hpp"
#include "hardy/core/model.hpp"
#include "hardy/core/optimizer.hpp"

namespace hardy::jobs {

struct TrainSpec {
  std::filesystem::path run_dir;
  long steps = 0;  // the job's total, 0 = derive from epochs
  long epochs = 1;
  long global_batch = 8;
  std::uint64_t seed = 1;
  std::string backend = "cpu";
  int threads = 0;  // 0 = all cores
  long log_every = 10;

  // Data parallelism.
  double bucket_mib = 25;          // gradient fusion buffer size
  bool audit_samples = false;      // rank 0 writes samples.jsonl
  long verify_replicas_every = 0;  // compare parameter digests across ranks every N steps

  // Data: synthetic (generated on the fly) unless a dataset directory is given.
  bool synthetic = true;
  std::filesystem::path dataset;
  long samples = 1024;  // size of the synthetic training set
  int height = 64, width = 64;
  std::string class_weights = "auto";
  long eval_samples = 64;  // held-out samples scored at the end (0 = skip)

  core::ModelConfig model;
  core::OptimizerConfig optimizer;
  core::LrSchedule schedule;

  // The effective configuration as INI text (flat `key = value` lines, one per option).
  std::string config_ini;
};

// Parses `hardy train` arguments (argv excludes the program and subcommand names). Prints help
// and returns nullopt for --help; throws InvalidArgument for anything wrong.
std::optional<TrainSpec> parse_train_spec(const std::vector<std::string>& args);
// The same options from a configuration file alone (e.g. a run directory's config.ini).
TrainSpec load_train_spec(const std::filesystem::path& config_file);

std::vector<int> parse_int_list(const std::string& text, const std::string& option);
std::vector<float> parse_float_list(const std::string& text, const std::string& option);

}  // namespace hardy::jobs
