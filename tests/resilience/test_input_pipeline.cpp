// The input pipeline inside whole training sessions (ranks are threads of an in-process world):
// prefetching changes nothing that training computes, also across a failure and its recovery,
// and a sample that a reader rejects ends the job or is skipped, as --bad-samples says.
#include <fmt/format.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "hardy/core/support/error.hpp"
#include "hardy/resilience/training_session.hpp"
#include "in_process_world.hpp"
#include "training_fixtures.hpp"

using namespace hardy;
using hardy::testing::InProcessWorld;
using hardy::testing::read_jsonl;

namespace {

std::vector<nlohmann::json> events_named(const std::filesystem::path& run_dir,
                                         const std::string& name) {
  std::vector<nlohmann::json> found;
  for (auto& e : read_jsonl(run_dir / "events.jsonl"))
    if (e["event"] == name) found.push_back(e);
  return found;
}

resilience::TrainingConfig small_job(const std::filesystem::path& run_dir, long steps) {
  resilience::TrainingConfig config = hardy::testing::small_training_job(run_dir, steps);
  config.verify_replicas_every = 1;  // a digest of the parameters after every step
  // Given, so that no sample is read before training (class frequencies would read the first).
  config.class_weights = std::vector<float>{1.0f, 2.0f, 2.0f};
  return config;
}

std::filesystem::path fresh_run_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("hardy-pipeline-{}-{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

// A job's numbers: every step's loss and the parameters' digest after it.
struct Trajectory {
  std::vector<double> losses;
  std::vector<std::string> digests;
  bool operator==(const Trajectory&) const = default;
};

Trajectory trajectory_of(const std::filesystem::path& run_dir) {
  Trajectory t;
  for (const auto& line : read_jsonl(run_dir / "metrics.jsonl")) {
    t.losses.push_back(line["loss"]);
    CHECK(line.contains("data_wait_s"));
    // The copy into the backend's input is timed, and is part of compute_s (which runs from
    // the draw of the batch to the end of backward).
    REQUIRE(line.contains("input_copy_s"));
    CHECK(line["input_copy_s"].get<double>() > 0);
    CHECK(line["input_copy_s"].get<double>() + line["data_wait_s"].get<double>() <=
          line["compute_s"].get<double>());
    // The CPU backend's kernels run on the host's clock: no device span in the line.
    CHECK_FALSE(line.contains("compute_device_s"));
  }
  // Steps redone after the rollback are verified twice; the last digest of each step counts.
  std::map<long, std::string> by_step;
  for (const auto& e : events_named(run_dir, "replicas_verified"))
    by_step[e["step"].get<long>()] = e["digest"];
  for (const auto& [step, digest] : by_step) t.digests.push_back(digest);
  return t;
}

// Sample `bad` cannot be read; the others are those of the synthetic source.
class OneBadSample final : public core::SampleSource {
 public:
  OneBadSample(const core::SampleSource& good, std::size_t bad) : good_(good), bad_(bad) {}
  std::size_t size() const override { return good_.size(); }
  core::SampleShape shape() const override { return good_.shape(); }
  std::string describe() const override { return "one bad sample in " + good_.describe(); }
  int load_concurrency() const override { return good_.load_concurrency(); }
  void load(std::size_t index, std::span<float> fields,
            std::span<std::int32_t> labels) const override {
    if (index == bad_) throw BadSample(index, "bad.h5", "TMQ is not finite");
    good_.load(index, fields, labels);
  }

 private:
  const core::SampleSource& good_;
  std::size_t bad_;
};

core::DataSources with_bad_sample(const resilience::TrainingConfig& config, std::size_t bad) {
  core::DataSources data;
  data.storage = std::make_unique<core::SyntheticClimate>(config.data.shape, config.data.samples,
                                                          config.data.seed);
  data.train = std::make_unique<OneBadSample>(*data.storage, bad);
  return data;
}

}  // namespace

TEST_CASE(
    "training session: prefetching gives the same losses and parameters as loading in "
    "the step, also across a failure and recovery",
    "[recovery]") {
  const bool with_failure = GENERATE(false, true);
  CAPTURE(with_failure);
  const long steps = 9;
  std::vector<Trajectory> runs;
  // Loading in the step; prefetching; prefetching with the next batch taken and copied while
  // the step computes (the GPU's default, forced here on the CPU backend).
  // A pair, not a structured binding: clang before 16 (the sanitizer builds) cannot capture one
  // in a lambda.
  for (const auto& loading : {std::pair{0L, false}, {2L, false}, {2L, true}}) {
    const long prefetch = loading.first;
    const bool overlap = loading.second;
    CAPTURE(prefetch, overlap);
    const auto run_dir = fresh_run_dir(fmt::format("same-{}-{}", prefetch, overlap));
    InProcessWorld world(4, 2);
    world.deadlock_timeout = std::chrono::seconds(60);
    // Rank 3 dies in step 4's gradient allreduce; the survivors roll back and re-split.
    if (with_failure)
      world.plan({.victim = 3,
                  .at_call = 4,
                  .kind = "allreduce f32",
                  .after_contributing = false,
                  .unaware = {}});
    const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
      auto config = small_job(run_dir, steps);
      config.prefetch_batches = prefetch;
      config.loader_threads = 2;
      config.overlap_input = overlap;
      resilience::TrainingSession session(config, std::move(comm));
      if (session.run() != resilience::kCompleted) throw Error("not completed");
    });
    for (int rank = 0; rank < 4; ++rank) {
      INFO("rank " << rank << ": " << hardy::testing::describe(outcomes[rank]));
      if (with_failure && rank == 3)
        CHECK(hardy::testing::died(outcomes[rank]));
      else
        CHECK_FALSE(outcomes[rank]);
    }
    CHECK(events_named(run_dir, "failure_detected").size() == (with_failure ? 1u : 0u));
    const auto finished = events_named(run_dir, "job_finished");
    REQUIRE(finished.size() == 1);
    CHECK(finished[0]["data_wait_fraction"].get<double>() >= 0);
    CHECK(finished[0]["data_wait_fraction"].get<double>() <= 1);
    runs.push_back(trajectory_of(run_dir));
    // Every step after the first (and after the recovery's first) took a staged batch.
    long staged = 0;
    for (const auto& line : read_jsonl(run_dir / "metrics.jsonl"))
      staged += line["input_staged"].get<bool>() ? 1 : 0;
    CHECK(staged >= (overlap ? steps - (with_failure ? 2 : 1) : 0));
    CHECK(staged <= (overlap ? steps - 1 : 0));
    CHECK(runs.back().losses.size() == static_cast<std::size_t>(steps));
    CHECK(runs.back().digests.size() == static_cast<std::size_t>(steps));
    std::filesystem::remove_all(run_dir);
  }
  CHECK(runs[0] == runs[1]);
  CHECK(runs[0] == runs[2]);
}

TEST_CASE(
    "training session: a bad sample ends the job on every rank, with the reader's message, under "
    "--bad-samples fail",
    "[recovery]") {
  const auto run_dir = fresh_run_dir("fail");
  // Two ranks: the one that meets the sample must not end alone (its peers would take that for
  // a process failure and carry on without it).
  InProcessWorld world(2);
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    auto config = small_job(run_dir, 3);
    config.ranks_per_node = 1;
    config.bad_samples = core::BadSamplePolicy::fail;
    resilience::TrainingSession session(config, std::move(comm), with_bad_sample(config, 5));
    session.run();
  });
  for (const auto& outcome : outcomes) {
    REQUIRE(outcome);
    CHECK_THAT(hardy::testing::describe(outcome),
               Catch::StartsWith("bad.h5: TMQ is not finite (step "));
    CHECK_THROWS_AS(std::rethrow_exception(outcome), hardy::InvalidArgument);
  }
  const auto finished = events_named(run_dir, "job_finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["status"] == "failed");
  CHECK_THAT(finished[0]["error"].get<std::string>(),
             Catch::StartsWith("bad.h5: TMQ is not finite"));
  CHECK(events_named(run_dir, "failure_detected").empty());
  std::filesystem::remove_all(run_dir);
}

TEST_CASE("training session: --bad-samples skip leaves the sample out, logs it once and goes on",
          "[recovery]") {
  const auto run_dir = fresh_run_dir("skip");
  const long steps = 6;  // two epochs of 24 samples: the bad one comes twice
  InProcessWorld world(2, 2);
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    auto config = small_job(run_dir, steps);
    config.bad_samples = core::BadSamplePolicy::skip;
    resilience::TrainingSession session(config, std::move(comm), with_bad_sample(config, 5));
    if (session.run() != resilience::kCompleted) throw Error("not completed");
  });
  for (const auto& outcome : outcomes) CHECK_FALSE(outcome);
  const auto skipped = events_named(run_dir, "sample_skipped");
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0]["sample"] == 5);
  CHECK(skipped[0]["file"] == "bad.h5");
  CHECK(skipped[0]["reason"] == "TMQ is not finite");
  long skipped_loads = 0;
  for (const auto& line : read_jsonl(run_dir / "metrics.jsonl"))
    skipped_loads += line["skipped_samples"].get<long>();
  CHECK(skipped_loads == 2);
  const auto finished = events_named(run_dir, "job_finished");
  REQUIRE(finished.size() == 1);
  CHECK(finished[0]["status"] == "completed");
  CHECK(finished[0]["skipped_samples"] == 1);
  std::filesystem::remove_all(run_dir);
}
