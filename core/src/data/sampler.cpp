#include "hardy/core/data/sampler.hpp"

#include <fmt/format.h>

#include <numeric>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::core {

Shard shard_of(std::size_t global_batch, int rank, int world_size) {
  if (world_size <= 0 || rank < 0 || rank >= world_size)
    throw InvalidArgument(fmt::format("rank {} is not in a world of {}", rank, world_size));
  const std::size_t world = static_cast<std::size_t>(world_size),
                    r = static_cast<std::size_t>(rank);
  const std::size_t base = global_batch / world, extra = global_batch % world;
  const std::size_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

EpochSampler::EpochSampler(std::size_t dataset_size, std::uint64_t seed) : size_(dataset_size) {
  if (dataset_size == 0) throw InvalidArgument("the dataset has no samples");
  state_.seed = seed;
  order_ = permutation(0);
}

std::vector<std::size_t> EpochSampler::permutation(std::int64_t epoch) const {
  std::vector<std::size_t> order(size_);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Fisher-Yates with a portable generator, so the order is the same on every machine.
  SplitMix64 rng(mix_seed(state_.seed, 0x5a3b1e, static_cast<std::uint64_t>(epoch)));
  for (std::size_t i = size_ - 1; i > 0; --i) std::swap(order[i], order[rng.next() % (i + 1)]);
  return order;
}

GlobalBatch EpochSampler::next(std::size_t global_batch) {
  GlobalBatch batch;
  batch.samples.reserve(global_batch);
  batch.epochs.reserve(global_batch);
  while (batch.samples.size() < global_batch) {
    batch.samples.push_back(order_[static_cast<std::size_t>(state_.cursor)]);
    batch.epochs.push_back(state_.epoch);
    if (static_cast<std::size_t>(++state_.cursor) == size_) {
      state_.cursor = 0;
      ++state_.epoch;
      order_ = permutation(state_.epoch);
    }
  }
  return batch;
}

void EpochSampler::restore(const SamplerState& state) {
  if (state.epoch < 0 || state.cursor < 0 || static_cast<std::size_t>(state.cursor) >= size_)
    throw InvalidArgument(
        fmt::format("sampler state (epoch {}, cursor {}) does not fit a dataset of {} samples",
                    state.epoch, state.cursor, size_));
  state_ = state;
  order_ = permutation(state_.epoch);
}

}  // namespace hardy::core
