#pragma once
// The training and held-out samples a job reads, from its specification.
#include <memory>
#include <vector>

#include "hardy/core/climate_data.hpp"
#include "hardy/jobs/train_spec.hpp"

namespace hardy::jobs {

struct DataSources {
  std::unique_ptr<core::SampleSource> storage;  // owns the samples
  std::unique_ptr<core::SampleSource> train;    // a view of storage
  std::unique_ptr<core::SampleSource> held_out; // null when eval_samples is 0
};

// Synthetic: samples [0, samples) train and the next eval_samples are held out (each sample is
// a pure function of seed and index, so these are unseen). Dataset directory: the last
// eval_samples samples are held out.
DataSources open_data(const TrainSpec& spec);

// "auto": inverse square root of class frequency over the first samples, normalised so that the
// average pixel weight is 1; otherwise the spec's list.
std::vector<float> resolve_class_weights(const std::string& text, const core::SampleSource& source, int classes);

}  // namespace hardy::jobs
