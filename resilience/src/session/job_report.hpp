#pragma once
// What a launch tells at its start and its end: the fields of job_started (domain_started) and
// the console's first line, and at a completed job's end the model saved and evaluated on the
// held-out samples, with the console's summary. The loop decides when; this says what.
#include <cstddef>
#include <nlohmann/json.hpp>

#include "hardy/core/data/data_sources.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/loop_state.hpp"
#include "session/membership.hpp"
#include "session/trainer.hpp"

namespace hardy::resilience {

// job_started's fields; with fault domains, where this domain's leader listens for the others.
nlohmann::json job_started_fields(const TrainingConfig& config, const Membership& membership,
                                  Trainer& trainer, const core::DataSources& data, bool domains);
void print_training_line(const TrainingConfig& config, const Membership& membership,
                         Trainer& trainer, const core::DataSources& data);

// The writer of the run files at a completed job's end: model.h5 written, the held-out samples
// evaluated (their scores into `finished`), and the console's summary of the run.
void save_and_evaluate(const TrainingConfig& config, Trainer& trainer,
                       const core::DataSources& data, const LoopProgress& progress,
                       std::size_t skipped_samples, nlohmann::json& finished);

}  // namespace hardy::resilience
