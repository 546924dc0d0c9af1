// The trainer alone, outside a session: what recovery and the fault domains rely on. A state it
// captured and another trainer applied goes on bitwise the same, and the state transport brings
// every rank to the root's state, ready for the next collective step.
#include <catch2/catch.hpp>

#include "hardy/comm/agreement.hpp"
#include "in_process_world.hpp"
#include "scratch_directory.hpp"
#include "session/hooks/step_hook.hpp"
#include "session/state_transport.hpp"
#include "session/trainer.hpp"
#include "training_fixtures.hpp"

using namespace hardy;
using namespace hardy::resilience;

namespace {

// The first half of a step as the session takes it: draw, load and compute the next step.
void compute_next_step(Trainer& trainer, const comm::Communicator& comm,
                       const TrainingConfig& config) {
  const auto global_batch = static_cast<std::size_t>(config.global_batch);
  const auto shape = config.data.shape;
  const float grad_scale = 1.0f / static_cast<float>(global_batch * shape.height * shape.width);
  trainer.draw_batch(global_batch);
  trainer.load_batch([&](const core::GlobalBatch& batch) {
    const core::Shard shard = core::shard_of(batch.samples.size(), comm.rank(), comm.size());
    return std::vector<std::size_t>(
        batch.samples.begin() + static_cast<std::ptrdiff_t>(shard.begin),
        batch.samples.begin() + static_cast<std::ptrdiff_t>(shard.end));
  });
  trainer.compute(grad_scale, [](std::size_t, std::size_t) {});
}

// The second half: the oldest computed step's reduction, update and commit.
void commit_oldest_step(Trainer& trainer, const TrainingConfig& config) {
  trainer.set_last_loss(trainer.oldest_loss_sum());
  trainer.finish_reduction();
  REQUIRE(trainer.update(config.schedule.at(trainer.step())));
  trainer.advance();
}

// One step as the session takes it, without agreement, hooks or failures.
void train_one_step(Trainer& trainer, const comm::Communicator& comm,
                    const TrainingConfig& config) {
  compute_next_step(trainer, comm, config);
  commit_oldest_step(trainer, config);
}

// One iteration with --gradient-lag 1 once the pipeline is full: the next step is computed while
// the oldest one's gradients are still in flight, then that one is committed.
void train_one_lagged_step(Trainer& trainer, const comm::Communicator& comm,
                           const TrainingConfig& config) {
  if (trainer.computed_steps() == 0) compute_next_step(trainer, comm, config);
  compute_next_step(trainer, comm, config);
  REQUIRE(trainer.computed_steps() == 2);
  commit_oldest_step(trainer, config);
}

// What the session completes before its first step.
TrainingConfig completed(TrainingConfig config) {
  config.schedule.total_steps = config.steps;
  return config;
}

// Runs `body` on every rank of an in-process world of `ranks`, with the small job's configuration
// (changed by `adjust`) and its samples; fails the test when a rank ends with an exception.
void on_ranks(
    int ranks,
    const std::function<void(comm::Communicator&, const TrainingConfig&,
                             const core::SampleSource&)>& body,
    const std::function<void(TrainingConfig&)>& adjust = [](TrainingConfig&) {}) {
  hardy::testing::ScratchDirectory scratch("trainer");
  TrainingConfig config = completed(hardy::testing::small_training_job(scratch.path(), 8));
  adjust(config);
  hardy::testing::InProcessWorld world(ranks);
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const core::DataSources data = core::open_data(config.data);
    body(*comm, config, *data.train);
  });
  for (const auto& outcome : outcomes) REQUIRE(hardy::testing::describe(outcome).empty());
}

// A trainer of the small job on one kernel thread and one loader thread.
Trainer small_trainer(const TrainingConfig& config, comm::Communicator& comm,
                      const core::SampleSource& samples) {
  return Trainer(config, comm, samples, {.kernel_threads = 1, .loader_threads = 1});
}

// The configurations the tests adjust the small job to.
void lagged_with_batch_norm(TrainingConfig& config) {
  config.gradient_lag = 1;
  config.model.norm = core::NormKind::batch;
}
void with_batch_norm(TrainingConfig& config) { config.model.norm = core::NormKind::batch; }

std::uint64_t digest_of(Trainer& trainer) {
  return core::parameter_digest(trainer.backend(), trainer.model().parameters());
}

}  // namespace

TEST_CASE("a state one trainer captured, applied to a fresh one, goes on bitwise the same") {
  on_ranks(1, [](comm::Communicator& comm, const TrainingConfig& config,
                 const core::SampleSource& samples) {
    Trainer first = small_trainer(config, comm, samples);
    for (int k = 0; k < 3; ++k) train_one_step(first, comm, config);
    checkpoint::TrainingState state;
    first.capture_into(state);

    Trainer second = small_trainer(config, comm, samples);
    const std::uint64_t fresh = digest_of(second);
    second.apply(state);
    CHECK(second.step() == 3);
    CHECK(second.last_loss() == first.last_loss());
    CHECK(digest_of(second) == digest_of(first));
    CHECK(digest_of(second) != fresh);

    // The next step draws the same samples and moves the parameters (and Adam's moments) alike.
    train_one_step(first, comm, config);
    train_one_step(second, comm, config);
    CHECK(second.batch().samples == first.batch().samples);
    CHECK(digest_of(second) == digest_of(first));

    // A trainer that had the parameters but not Adam's moments does not.
    Trainer partial = small_trainer(config, comm, samples);
    partial.apply(state);
    for (auto& [name, tensor] : partial.optimizer().state_tensors())
      std::fill(tensor->f32().begin(), tensor->f32().end(), 0.0f);
    train_one_step(partial, comm, config);
    CHECK(partial.batch().samples == first.batch().samples);
    CHECK(digest_of(partial) != digest_of(first));
  });
}

TEST_CASE("the state transport brings every rank to the root's state and the next step agrees") {
  on_ranks(3, [](comm::Communicator& comm, const TrainingConfig& config,
                 const core::SampleSource& samples) {
    Trainer trained = small_trainer(config, comm, samples);
    for (int k = 0; k < 2; ++k) train_one_step(trained, comm, config);

    // The root keeps its trainer; the others start again from nothing, as relaunched ranks do.
    Trainer fresh = small_trainer(config, comm, samples);
    Trainer& mine = comm.rank() == 0 ? trained : fresh;
    checkpoint::TrainingState state;
    if (comm.rank() == 0) trained.capture_into(state);
    make_state_transport(mine)->restore(comm, mine, state, 0);
    CHECK(mine.step() == 2);
    CHECK(comm::all_equal(comm, static_cast<std::int64_t>(digest_of(mine))));

    train_one_step(mine, comm, config);
    CHECK(mine.step() == 3);
    CHECK(comm::all_equal(comm, static_cast<std::int64_t>(digest_of(mine))));
    CHECK(comm::all_equal(comm, static_cast<std::int64_t>(mine.batch().samples.front())));
  });
}

TEST_CASE(
    "with --gradient-lag 1 a step's update applies the gradients of a batch computed before "
    "the previous update") {
  on_ranks(1, [](comm::Communicator& comm, const TrainingConfig& plain,
                 const core::SampleSource& samples) {
    TrainingConfig lagged_config = plain;
    lagged_config.gradient_lag = 1;
    Trainer lagged = small_trainer(lagged_config, comm, samples);
    Trainer unlagged = small_trainer(plain, comm, samples);
    const std::uint64_t initial = digest_of(lagged);
    REQUIRE(digest_of(unlagged) == initial);

    // Step 1: both computed batch 1 from the initial parameters; batch 2 is computed too, from
    // the same parameters, and its reduction is in flight.
    train_one_lagged_step(lagged, comm, lagged_config);
    train_one_step(unlagged, comm, plain);
    CHECK(lagged.step() == 1);
    CHECK(lagged.computed_steps() == 1);
    CHECK(lagged.batch().samples == unlagged.batch().samples);
    CHECK(digest_of(lagged) == digest_of(unlagged));

    // Step 2 applies batch 2's gradients, taken before step 1's update: one step stale.
    train_one_lagged_step(lagged, comm, lagged_config);
    train_one_step(unlagged, comm, plain);
    CHECK(lagged.batch().samples == unlagged.batch().samples);
    CHECK(digest_of(lagged) != digest_of(unlagged));

    // The same stale update by hand: from the state after step 1, batch 2's gradients taken at
    // the initial parameters (a fresh trainer computing it), applied to step 1's parameters.
    Trainer by_hand = small_trainer(plain, comm, samples);
    train_one_step(by_hand, comm, plain);  // step 1, as the unlagged trainer took it
    checkpoint::TrainingState after_step_1;
    by_hand.capture_into(after_step_1);
    Trainer stale = small_trainer(plain, comm, samples);
    stale.apply(after_step_1);  // the sampler at batch 2 ...
    checkpoint::TrainingState initial_state;
    small_trainer(plain, comm, samples).capture_into(initial_state);
    for (std::size_t i = 0; i < stale.model().parameters().size(); ++i)  // ... the weights at 0
      std::copy(initial_state.model[i].values.begin(), initial_state.model[i].values.end(),
                stale.model().parameters()[i]->value.f32().begin());
    compute_next_step(stale, comm, plain);
    stale.finish_reduction();
    stale.apply(after_step_1);  // every tensor back at step 1, the gradients kept
    REQUIRE(stale.update(plain.schedule.at(1)));
    CHECK(digest_of(stale) == digest_of(lagged));
  });
}

TEST_CASE(
    "a state captured with a lagged step in flight holds the step before it; a restore "
    "computes that step again") {
  on_ranks(
      2,
      [](comm::Communicator& comm, const TrainingConfig& config,
         const core::SampleSource& samples) {
        Trainer first = small_trainer(config, comm, samples);
        for (int k = 0; k < 3; ++k) train_one_lagged_step(first, comm, config);
        REQUIRE(first.computed_steps() == 1);  // step 4 is in flight
        checkpoint::TrainingState state;
        first.capture_into(state);
        CHECK(state.step == 3);

        // Step 4's batch norm statistics are not in the state: its forward pass moved them.
        const std::size_t first_buffer = first.model().parameters().size();
        REQUIRE(state.model.size() > first_buffer);
        const auto buffers = first.model().buffers();  // by value: keep it while reading
        const auto& [name, live] = buffers.front();
        CHECK(!std::equal(live->f32().begin(), live->f32().end(),
                          state.model[first_buffer].values.begin()));

        // A fresh trainer restored from it draws step 4's batch next, as the first one did.
        Trainer second = small_trainer(config, comm, samples);
        second.apply(state);
        CHECK(second.step() == 3);
        CHECK(second.computed_steps() == 0);
        for (int k = 0; k < 2; ++k) {
          train_one_lagged_step(first, comm, config);
          train_one_lagged_step(second, comm, config);
          CHECK(second.batch().samples == first.batch().samples);
        }
        // The pipeline started again from step 3's parameters, so the steps were computed from
        // other parameters: exactly once, not bitwise the same.
        CHECK(digest_of(second) != digest_of(first));
        CHECK(comm::all_equal(comm, static_cast<std::int64_t>(digest_of(second))));

        // The first trainer abandons its step in flight (a rollback) and goes on with the others.
        first.apply(state);
        CHECK(first.computed_steps() == 0);
        train_one_lagged_step(first, comm, config);
        CHECK(first.step() == 4);
        CHECK(comm::all_equal(comm, static_cast<std::int64_t>(digest_of(first))));
      },
      lagged_with_batch_norm);
}

TEST_CASE("a computed step that is not committed is dropped without a copy of the state") {
  on_ranks(
      2,
      [](comm::Communicator& comm, const TrainingConfig& config,
         const core::SampleSource& samples) {
        Trainer trainer = small_trainer(config, comm, samples);
        Trainer twin = small_trainer(config, comm, samples);
        for (int k = 0; k < 2; ++k) {
          train_one_step(trainer, comm, config);
          train_one_step(twin, comm, config);
        }
        const std::uint64_t committed = digest_of(trainer);
        checkpoint::TrainingState before;
        trainer.capture_into(before);

        // A step computed and reduced, its forward pass having moved the batch norm's
        // statistics, then abandoned (its agreement said no): the update was never applied.
        compute_next_step(trainer, comm, config);
        trainer.finish_reduction();
        trainer.drop_uncommitted();
        CHECK(trainer.computed_steps() == 0);
        CHECK(trainer.step() == 2);
        CHECK(digest_of(trainer) == committed);
        checkpoint::TrainingState after;
        trainer.capture_into(after);
        CHECK(after.model == before.model);  // the statistics too
        CHECK(after.sampler.cursor == before.sampler.cursor);

        // It goes on exactly as a trainer that never computed the dropped step.
        train_one_step(trainer, comm, config);
        train_one_step(twin, comm, config);
        CHECK(trainer.batch().samples == twin.batch().samples);
        CHECK(digest_of(trainer) == digest_of(twin));
      },
      with_batch_norm);
}

TEST_CASE(
    "a meeting's averaged statistics, taken with a lagged step in flight, are what the "
    "committed state holds and a rollback goes back to") {
  on_ranks(
      1,
      [](comm::Communicator& comm, const TrainingConfig& config,
         const core::SampleSource& samples) {
        Trainer trainer = small_trainer(config, comm, samples);
        train_one_lagged_step(trainer, comm, config);
        // A meeting at step 2 as the session takes it with the lag: step 2's reduction finished
        // in the domain, what the domains sum (gradients and state) staged, step 3 computed
        // while the sums travel, then the sums put in place and step 2 committed.
        REQUIRE(trainer.computed_steps() == 1);
        trainer.finish_reduction();
        const auto exchanged = trainer.exchanged_tensors(/*whole_state=*/true);
        compute_next_step(trainer, comm, config);
        REQUIRE(trainer.computed_steps() == 2);
        // The domains' average of the statistics: a value no domain's forward pass produced.
        const std::size_t first_buffer = trainer.model().parameters().size();
        const std::size_t buffers = trainer.model().buffers().size();
        REQUIRE(buffers > 0);
        for (std::size_t b = 0; b < buffers; ++b) {
          auto values = exchanged[trainer.model().parameters().size() + first_buffer + b]->f32();
          std::fill(values.begin(), values.end(), 0.25f + static_cast<float>(b));
        }
        trainer.take_exchanged();
        REQUIRE(trainer.update(config.schedule.at(trainer.step())));
        trainer.advance();
        REQUIRE(trainer.step() == 2);
        REQUIRE(trainer.computed_steps() == 1);  // step 3, computed before the average came

        const auto holds_average = [&](const std::vector<float>& values, std::size_t b) {
          return std::all_of(values.begin(), values.end(),
                             [&](float v) { return v == 0.25f + static_cast<float>(b); });
        };
        checkpoint::TrainingState state;
        trainer.capture_into(state);
        for (std::size_t b = 0; b < buffers; ++b)
          CHECK(holds_average(state.model[first_buffer + b].values, b));
        trainer.drop_uncommitted();  // step 3 rolled back
        for (std::size_t b = 0; b < buffers; ++b) {
          const auto live = trainer.model().buffers()[b].second->f32();
          CHECK(holds_average(std::vector<float>(live.begin(), live.end()), b));
        }
      },
      lagged_with_batch_norm);
}

TEST_CASE("an update refuses gradients that a later step's backward pass overwrote") {
  on_ranks(
      1,
      [](comm::Communicator& comm, const TrainingConfig& config,
         const core::SampleSource& samples) {
        Trainer trainer = small_trainer(config, comm, samples);
        compute_next_step(trainer, comm, config);
        trainer.finish_reduction();
        compute_next_step(trainer, comm, config);  // step 2's backward, after step 1's reduction
        CHECK_THROWS_WITH(trainer.update(config.schedule.at(0)),
                          Catch::Contains("gradients of a step computed after its reduction"));
        // The domains' sums put in place are the step's again.
        trainer.exchanged_tensors(/*whole_state=*/false);
        trainer.take_exchanged();
        CHECK_NOTHROW(trainer.apply_update(config.schedule.at(0)));
        // And consumed: a second update without a reduction is refused.
        CHECK_THROWS(trainer.apply_update(config.schedule.at(0)));
      },
      [](TrainingConfig& config) { config.gradient_lag = 1; });
}

namespace {

// A device's span as a test sets it: ended by the code under test, read only after that.
class FixedSpan final : public core::DeviceSpan {
 public:
  explicit FixedSpan(double seconds) : seconds_(seconds) {}
  void end() override { ended_ = true; }
  double seconds() override {
    if (!ended_) throw Error("FixedSpan read before end()");
    return seconds_;
  }

 private:
  double seconds_;
  bool ended_ = false;
};

}  // namespace

TEST_CASE("a step's metrics line carries the device's span of its compute where there is one") {
  on_ranks(1, [](comm::Communicator& comm, const TrainingConfig& config,
                 const core::SampleSource& samples) {
    Trainer trainer = small_trainer(config, comm, samples);
    train_one_step(trainer, comm, config);
    CommittedStep done{.started = Clock::now(), .compute_s = 0.05, .data_wait_s = 0.01};
    // The CPU backend has no device of its own: no span, and no field in the line.
    CHECK(trainer.backend().start_device_span() == nullptr);
    nlohmann::json line = metrics_line(done, 0.08, trainer, 0, 0, 1);
    CHECK(line["compute_s"] == 0.05);
    CHECK_FALSE(line.contains("compute_device_s"));

    auto span = std::make_shared<FixedSpan>(0.0375);
    span->end();
    done.compute_span = span;
    line = metrics_line(done, 0.08, trainer, 0, 0, 1);
    CHECK(line["compute_device_s"] == 0.0375);
  });
}
