#pragma once
// The epoch sampler owns the order in which samples are seen. Its whole state is three integers
// (seed, epoch, cursor), so it can be checkpointed exactly and re-split over any number of ranks:
// every rank derives the same global batch and takes its contiguous slice of it.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace hardy::core {

struct SamplerState {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;   // epoch of the next sample to be drawn
  std::int64_t cursor = 0;  // position of that sample in the epoch's permutation
};

struct GlobalBatch {
  std::vector<std::size_t> samples;  // dataset indices in global order
  std::vector<std::int64_t> epochs;  // the epoch each sample belongs to
};

// A contiguous slice [begin, end) of a global batch. The first (batch % world) ranks take one
// sample more, so uneven splits are allowed and every sample is assigned exactly once.
struct Shard {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};
Shard shard_of(std::size_t global_batch, int rank, int world_size);

// Whole-sample shares of a global batch in proportion to `weights` (one per rank, each positive
// and finite): the whole parts, then the samples left to the largest remainders (ties to the
// lower rank, so equal weights give shard_of's split, and whole-number weights that add up to
// the batch give themselves); a rank rounded to nothing takes one sample from the largest share.
// Throws InvalidArgument for a bad weight or a batch smaller than the ranks.
std::vector<std::size_t> weighted_shares(std::size_t global_batch, std::span<const double> weights);
// Rank r's contiguous slice of the batch under weighted_shares; no weights: shard_of's even split
// over `world_size` ranks.
Shard shard_of(std::size_t global_batch, int rank, int world_size, std::span<const double> weights);

class EpochSampler {
 public:
  EpochSampler(std::size_t dataset_size, std::uint64_t seed);

  // The next global batch; a batch that runs past the end of an epoch continues with the next
  // epoch's permutation, so each epoch's samples are seen exactly once.
  GlobalBatch next(std::size_t global_batch);

  const SamplerState& state() const { return state_; }
  void restore(const SamplerState& state);  // throws InvalidArgument if out of range
  std::size_t dataset_size() const { return size_; }
  // The permutation of epoch `epoch` (deterministic in seed and epoch).
  std::vector<std::size_t> permutation(std::int64_t epoch) const;

 private:
  std::size_t size_;
  SamplerState state_;
  std::vector<std::size_t> order_;  // permutation of state_.epoch
};

}  // namespace hardy::core
