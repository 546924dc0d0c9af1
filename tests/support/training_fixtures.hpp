#pragma once
// What the tests of whole in-process training sessions share (ranks are threads of an
// InProcessWorld): a job small enough to train in seconds, and the run directory's JSON-lines
// logs read back.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hardy/resilience/training_session.hpp"

namespace hardy::testing {

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// 24 synthetic 16x16 samples of 16 channels in batches of 8, a model 8 channels wide, Adam, two
// ranks a node and no node-local snapshots (the threads share one host); nothing is logged
// between the records each step writes.
inline resilience::TrainingConfig small_training_job(const std::filesystem::path& run_dir,
                                                     long steps) {
  resilience::TrainingConfig config;
  config.run_dir = run_dir;
  config.steps = steps;
  config.global_batch = 8;
  config.threads = 1;
  config.log_every = 1000;
  config.data.samples = 24;
  config.data.eval_samples = 0;
  config.data.shape = {16, 16, 16};
  config.model.width = 8;
  config.model.aspp_channels = 8;
  config.model.aspp_rates = {1, 2};
  config.model.low_level_channels = 8;
  config.model.decoder_channels = 8;
  config.optimizer.kind = core::OptimizerKind::adam;
  config.schedule.base_lr = 0.003f;
  config.snapshot_every = 0;
  config.ranks_per_node = 2;
  return config;
}

}  // namespace hardy::testing
