#include <catch2/catch.hpp>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/broadcast_state.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "in_process_world.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;
using hardy::testing::InProcessWorld;

TEST_CASE("broadcast state: serialize and deserialize round-trip every field", "[checkpoint]") {
  TrainedModel trained(1);
  TrainingState state = capture(trained.model, *trained.optimizer);
  set_scalars(state, 10);
  const auto bytes = serialize(state);
  const TrainingState copy = deserialize(bytes);
  CHECK(copy.model == state.model);
  CHECK(copy.optimizer == state.optimizer);
  CHECK(serialize(copy) == bytes);  // the scalars too: they are part of the bytes
  CHECK(copy.hosts == state.hosts);
  CHECK(copy.sampler.cursor == 17);
}

TEST_CASE("broadcast state: damaged or foreign bytes are rejected", "[checkpoint]") {
  auto bytes = serialize(synthetic_state(3));
  CHECK_THROWS_AS(deserialize(std::span(bytes).first(bytes.size() - 1)), CorruptCheckpoint);
  std::vector<std::byte> foreign(100, std::byte{7});
  CHECK_THROWS_WITH(deserialize(foreign), Catch::Contains("not a serialized hardy training state"));
  bytes.push_back(std::byte{0});
  CHECK_THROWS_WITH(deserialize(bytes), Catch::Contains("bytes after its last field"));
}

TEST_CASE("broadcast state: every rank receives root's state and agrees on its digest",
          "[checkpoint]") {
  TrainedModel trained(1);
  TrainingState root_state = capture(trained.model, *trained.optimizer);
  set_scalars(root_state, 10);
  const auto expected = serialize(root_state);
  InProcessWorld world(4);
  std::vector<TrainingState> states(4);
  states[1] = root_state;
  const auto errors = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    broadcast_state(*comm, states[static_cast<std::size_t>(comm->rank())], 1);
  });
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank << ": "
                 << hardy::testing::describe(errors[static_cast<std::size_t>(rank)]));
    CHECK_FALSE(errors[static_cast<std::size_t>(rank)]);
    CHECK(serialize(states[static_cast<std::size_t>(rank)]) == expected);
  }
}

TEST_CASE("broadcast state: a rank that received damaged bytes makes every rank throw",
          "[checkpoint]") {
  const TrainingState root_state = synthetic_state(4);
  InProcessWorld world(3);
  std::vector<TrainingState> states(3);
  states[0] = root_state;
  world.on_broadcast_received([](int rank, std::span<std::byte> bytes) {
    if (rank == 2 && bytes.size() > 100) bytes[bytes.size() / 2] ^= std::byte{1};
  });
  const auto errors = world.run([&](std::unique_ptr<comm::Communicator> comm) {
    broadcast_state(*comm, states[static_cast<std::size_t>(comm->rank())], 0);
  });
  for (const auto& error : errors) {
    REQUIRE(error);
    CHECK_THROWS_WITH(std::rethrow_exception(error), Catch::Contains("1 of 3 ranks"));
  }
  CHECK(states[1].model.empty());  // not replaced
}
