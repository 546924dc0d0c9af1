// The slow-rank watch's own cost per step, on every rank, as the job grows: the time of one
// StragglerWatch::observe (medians over the window, each rank's peers' median, the decision)
// for 2 to 4,560 ranks (the 2018 climate run's Summit nodes), with one rank 3x slow so that the
// shares are re-planned too, against the bytes it adds to the step's loss sum (two doubles a
// rank). Prints one JSON line per world size: the median over the healthy steps (1-20, even
// shares) and over the rest (rank 1 slow from step 21: re-planned shares).
//   build/bin/hardy_straggler_watch_bench [--steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hardy/core/data/sampler.hpp"
#include "hardy/resilience/straggler_watch.hpp"

int main(int argc, char** argv) {
  long steps = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atol(argv[i + 1]);
  for (int world : {2, 8, 64, 512, 4560}) {
    hardy::resilience::StragglerWatch watch({.warmup = 0});
    const std::size_t batch = static_cast<std::size_t>(world) * 8;
    std::vector<double> weights, own(static_cast<std::size_t>(world)), samples(own.size());
    std::vector<double> seconds, healthy;
    for (long step = 1; step <= steps; ++step) {
      const auto shares =
          weights.empty() ? hardy::core::weighted_shares(batch, std::vector<double>(own.size(), 1))
                          : hardy::core::weighted_shares(batch, weights);
      for (std::size_t r = 0; r < own.size(); ++r) {
        samples[r] = static_cast<double>(shares[r]);
        const double noise =
            1 + 0.05 * static_cast<double>((r * 7 + static_cast<std::size_t>(step) * 13) % 11) / 10;
        own[r] = (r == 1 && step > 20 ? 3.0 : 1.0) * noise * (0.002 + 0.001 * samples[r]);
      }
      const auto started = std::chrono::steady_clock::now();
      const auto verdict = watch.observe(step, own, samples, weights, batch);
      const double took =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      (step <= 20 ? healthy : seconds).push_back(took);
      if (verdict.new_weights) weights = *verdict.new_weights;
    }
    std::sort(seconds.begin(), seconds.end());
    std::sort(healthy.begin(), healthy.end());
    std::printf(
        "{\"bench\":\"straggler_watch\",\"world\":%d,\"steps\":%ld,\"healthy_median_s\":%.9f,"
        "\"slow_median_s\":%.9f,\"slow_max_s\":%.9f,\"bytes_added_to_loss_sum\":%zu,"
        "\"slow_rank_named\":%s}\n",
        world, steps, healthy[healthy.size() / 2], seconds[seconds.size() / 2], seconds.back(),
        2 * static_cast<std::size_t>(world) * sizeof(double), watch.is_slow(1) ? "true" : "false");
  }
  return 0;
}
