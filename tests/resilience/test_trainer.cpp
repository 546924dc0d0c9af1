// The trainer alone, outside a session: what recovery and the fault domains rely on. A state it
// captured and another trainer applied goes on bitwise the same, and the state transport brings
// every rank to the root's state, ready for the next collective step.
#include <catch2/catch.hpp>

#include "hardy/comm/agreement.hpp"
#include "in_process_world.hpp"
#include "scratch_directory.hpp"
#include "state_transport.hpp"
#include "trainer.hpp"
#include "training_fixtures.hpp"

using namespace hardy;
using namespace hardy::resilience;

namespace {

// One step as the session takes it, without agreement, hooks or failures.
void train_one_step(Trainer& trainer, const comm::Communicator& comm,
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
  trainer.set_last_loss(trainer.compute(grad_scale, [](std::size_t, std::size_t) {}));
  trainer.finish_reduction();
  REQUIRE(trainer.update(config.schedule.at(trainer.step())));
  trainer.advance();
}

// What the session completes before its first step.
TrainingConfig completed(TrainingConfig config) {
  config.schedule.total_steps = config.steps;
  return config;
}

// Runs `body` on every rank of an in-process world of `ranks`, with the small job's configuration
// and its samples; fails the test when a rank ends with an exception.
void on_ranks(int ranks, const std::function<void(comm::Communicator&, const TrainingConfig&,
                                                  const core::SampleSource&)>& body) {
  hardy::testing::ScratchDirectory scratch("trainer");
  const TrainingConfig config = completed(hardy::testing::small_training_job(scratch.path(), 8));
  hardy::testing::InProcessWorld world(ranks);
  const auto outcomes = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    const core::DataSources data = core::open_data(config.data);
    body(*comm, config, *data.train);
  });
  for (const auto& outcome : outcomes) REQUIRE(hardy::testing::describe(outcome).empty());
}

std::uint64_t digest_of(Trainer& trainer) {
  return core::parameter_digest(trainer.backend(), trainer.model().parameters());
}

}  // namespace

TEST_CASE("a state one trainer captured, applied to a fresh one, goes on bitwise the same") {
  on_ranks(1, [](comm::Communicator& comm, const TrainingConfig& config,
                 const core::SampleSource& samples) {
    Trainer first(config, comm, samples, {.kernel_threads = 1, .loader_threads = 1});
    for (int k = 0; k < 3; ++k) train_one_step(first, comm, config);
    checkpoint::TrainingState state;
    first.capture_into(state);

    Trainer second(config, comm, samples, {.kernel_threads = 1, .loader_threads = 1});
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
    Trainer partial(config, comm, samples, {.kernel_threads = 1, .loader_threads = 1});
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
    Trainer trained(config, comm, samples, {.kernel_threads = 1, .loader_threads = 1});
    for (int k = 0; k < 2; ++k) train_one_step(trained, comm, config);

    // The root keeps its trainer; the others start again from nothing, as relaunched ranks do.
    Trainer fresh(config, comm, samples, {.kernel_threads = 1, .loader_threads = 1});
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
