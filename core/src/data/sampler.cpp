#include "hardy/core/data/sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

std::vector<std::size_t> weighted_shares(std::size_t global_batch,
                                         std::span<const double> weights) {
  const std::size_t world = weights.size();
  if (world == 0) throw InvalidArgument("no ranks to share a batch among");
  if (global_batch < world)
    throw InvalidArgument(fmt::format("a global batch of {} cannot give each of {} ranks a sample",
                                      global_batch, world));
  for (double w : weights)
    if (!(w > 0) || !std::isfinite(w))
      throw InvalidArgument(fmt::format("a rank's share weight is {}; weights are positive", w));
  // Whole parts first, then the largest remainders (whole-number weights that add up to the
  // batch come out as themselves).
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<std::size_t> shares(world);
  std::vector<double> remainder(world);
  std::size_t given = 0;
  for (std::size_t r = 0; r < world; ++r) {
    const double exact = static_cast<double>(global_batch) * weights[r] / total;
    shares[r] = std::min(global_batch - given, static_cast<std::size_t>(std::floor(exact)));
    given += shares[r];
    remainder[r] = exact - static_cast<double>(shares[r]);
  }
  std::vector<std::size_t> order(world);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  for (std::size_t i = 0; given < global_batch; i = (i + 1) % world, ++given) ++shares[order[i]];
  // No rank is left idle: the loaders, normalizations and losses all assume a batch. A rank
  // rounded to nothing takes a sample from the largest share.
  for (std::size_t r = 0; r < world; ++r)
    if (shares[r] == 0) {
      --*std::max_element(shares.begin(), shares.end());
      shares[r] = 1;
    }
  return shares;
}

Shard shard_of(std::size_t global_batch, int rank, int world_size,
               std::span<const double> weights) {
  if (weights.empty()) return shard_of(global_batch, rank, world_size);
  if (static_cast<std::size_t>(world_size) != weights.size() || rank < 0 || rank >= world_size)
    throw InvalidArgument(fmt::format("rank {} of {} has no share among {} weights", rank,
                                      world_size, weights.size()));
  const auto shares = weighted_shares(global_batch, weights);
  const auto mine = static_cast<std::size_t>(rank);
  const std::size_t begin = std::accumulate(shares.begin(), shares.begin() + mine, std::size_t{0});
  return {begin, begin + shares[mine]};
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
