#pragma once
// Which run a saved state belongs to, and whether it fits this job (docs/checkpoint-format.md,
// "Run identity"). A run directory holds a random run id in its file `run_id`, created once;
// every checkpoint and node-local snapshot records it, with a hash of the configuration that a
// resume must match. A node-local snapshot is restored only when both match (a run directory
// deleted and made again at the same path is another run, whose snapshots may still be on the
// nodes); a checkpoint may come from another run (a fork), but its configuration must match.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "hardy/checkpoint/training_state.hpp"
#include "hardy/comm/communicator.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/resilience/training_config.hpp"

namespace hardy::resilience {

inline constexpr const char* kRunIdFile = "run_id";

// The run id of run_dir: the content of run_dir/run_id, which is created first (32 random
// hexadecimal digits) when it does not exist. Creation is atomic: the id is written under a
// temporary name and hard-linked into place, so two jobs starting at once agree on one id and a
// reader never sees half of it. Throws IoError when the file cannot be written or read, and
// InvalidArgument when it holds something that is not a run id.
std::string ensure_run_id(const std::filesystem::path& run_dir);
// The run id of run_dir, nullopt when it has none yet; throws as ensure_run_id.
std::optional<std::string> read_run_id(const std::filesystem::path& run_dir);

// What a resume must match, one "key=value" line each: the model's shape, the optimizer, the
// dataset's identity (a synthetic dataset's seed, else its canonical path), the training
// split's size and the shape of its samples. Not the step count, batch, schedule or seed: a
// resumed run may change those.
std::string resume_identity(const TrainingConfig& config, const core::SampleShape& sample_shape,
                            std::size_t train_samples);
// 16 hexadecimal digits: the xxHash64 of resume_identity().
std::string config_hash(const std::string& identity);

struct RunIdentity {
  std::string run_id;
  std::string config_hash;
  // This launch's random token (16 hex digits): the ranks of one launch share it, the next
  // launch of the same run has another (what a node-local file "verified in this job" is keyed by).
  std::string launch;
  // The network it trains (--model), named in a refusal to resume another network's state.
  std::string network = "compact";
};

// Collective: rank 0 gives the run directory its run id (ensure_run_id) and tells every rank the
// id, the configuration's hash and a fresh launch token; every rank throws when rank 0 could not.
RunIdentity establish_run_identity(comm::Communicator& comm, const TrainingConfig& config,
                                   const core::SampleSource& train);

// A fresh random launch token.
std::string random_launch_token();

// Why a node-local snapshot of `state` must not be restored into the run `mine`: it was written
// by another run (or before run ids were recorded) or for another configuration. nullopt when
// it may.
std::optional<std::string> snapshot_mismatch(const checkpoint::TrainingState& state,
                                             const RunIdentity& mine);
// Why a checkpoint of `state` does not fit the configuration of `mine`; nullopt when it does,
// or when it records no configuration hash (written before hardy recorded one: the shapes are
// still checked when it is applied).
std::optional<std::string> config_mismatch(const checkpoint::TrainingState& state,
                                           const RunIdentity& mine);
// Whether `state` was written by another run than `mine` (an older checkpoint without a run id
// counts as foreign).
bool is_foreign(const checkpoint::TrainingState& state, const RunIdentity& mine);

}  // namespace hardy::resilience
