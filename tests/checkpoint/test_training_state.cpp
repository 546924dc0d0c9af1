#include <catch2/catch.hpp>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/training_state.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;

namespace {

std::vector<float> values_of(core::Backend& backend, const core::Tensor& tensor) {
  core::Tensor host =
      core::Tensor::host(tensor.dims(), core::DType::f32,
                         tensor.rank() == 4 ? core::Layout::nchw : core::Layout::flat);
  backend.copy(tensor, host);
  return {host.f32().begin(), host.f32().end()};
}

}  // namespace

TEST_CASE("training state: capture holds every parameter, buffer and optimizer tensor",
          "[checkpoint]") {
  TrainedModel trained(1);
  const TrainingState state = capture(trained.model, *trained.optimizer);
  CHECK(state.model.size() == trained.model.parameters().size() + trained.model.buffers().size());
  CHECK(state.optimizer.size() == 2 * trained.model.parameters().size());  // Adam: m and v
  CHECK(state.optimizer_kind == "adam");
  CHECK(state.optimizer_steps == 2);
  CHECK(state.hardy_version == HARDY_VERSION);
  CHECK(state.unix_time > 0);
  const core::Parameter& first = *trained.model.parameters().front();
  CHECK(state.model.front().name == first.name);
  CHECK(state.model.front().dims == first.value.dims());
  CHECK(state.model.front().values == values_of(*trained.backend, first.value));
  CHECK(state.optimizer.front().name == "adam_m/" + first.name);
  CHECK(tensor_bytes(state) > 0);
}

TEST_CASE("training state: apply restores a model and optimizer bit for bit", "[checkpoint]") {
  TrainedModel source(1);
  TrainedModel target(2, core::OptimizerKind::adam, 0);  // other weights, no optimizer state yet
  apply(capture(source.model, *source.optimizer), target.model, *target.optimizer);
  const TrainingState a = capture(source.model, *source.optimizer);
  const TrainingState b = capture(target.model, *target.optimizer);
  CHECK(a.model == b.model);
  CHECK(a.optimizer == b.optimizer);
  CHECK(target.optimizer->steps_taken() == source.optimizer->steps_taken());
  // The next step is the same too: Adam's bias correction saw the restored step count.
  core::SplitMix64 rng_a(99), rng_b(99);
  source.random_gradients(rng_a);
  target.random_gradients(rng_b);
  source.optimizer->step(source.model.parameters(), 0.01f);
  target.optimizer->step(target.model.parameters(), 0.01f);
  CHECK(capture(source.model, *source.optimizer).model ==
        capture(target.model, *target.optimizer).model);
}

TEST_CASE("training state: capture_into reuses the buffers of an earlier capture", "[checkpoint]") {
  TrainedModel trained(1);
  TrainingState state = capture(trained.model, *trained.optimizer);
  const float* before = state.model.front().values.data();
  core::SplitMix64 rng(5);
  trained.random_gradients(rng);
  trained.optimizer->step(trained.model.parameters(), 0.01f);
  capture_into(trained.model, *trained.optimizer, state);
  CHECK(state.model.front().values.data() == before);
  CHECK(state.optimizer_steps == 3);
  CHECK(state.model == capture(trained.model, *trained.optimizer).model);
}

TEST_CASE(
    "training state: apply rejects a state of another model, naming the tensor, and changes "
    "nothing",
    "[checkpoint]") {
  TrainedModel wide(1, core::OptimizerKind::adam, 1, tiny_model_config(8));
  TrainedModel narrow(2, core::OptimizerKind::adam, 1);
  const TrainingState before = capture(narrow.model, *narrow.optimizer);
  const TrainingState state = capture(wide.model, *wide.optimizer);
  CHECK_THROWS_AS(apply(state, narrow.model, *narrow.optimizer), InvalidArgument);
  CHECK_THROWS_WITH(apply(state, narrow.model, *narrow.optimizer),
                    Catch::Contains("/model/") && Catch::Contains("has shape"));
  CHECK(capture(narrow.model, *narrow.optimizer).model == before.model);

  TrainingState missing = capture(narrow.model, *narrow.optimizer);
  const std::string removed = missing.model.back().name;
  missing.model.pop_back();
  CHECK_THROWS_WITH(apply(missing, narrow.model, *narrow.optimizer),
                    Catch::Contains("no tensor /model/" + removed));

  TrainingState extra = capture(narrow.model, *narrow.optimizer);
  extra.optimizer.push_back({"adam_m/not.a.parameter", {1}, {0.0f}});
  CHECK_THROWS_WITH(apply(extra, narrow.model, *narrow.optimizer),
                    Catch::Contains("/optimizer/adam_m/not.a.parameter"));
}

TEST_CASE("training state: apply rejects another optimizer's state, naming both", "[checkpoint]") {
  TrainedModel adam(1, core::OptimizerKind::adam, 1);
  TrainedModel sgd(1, core::OptimizerKind::sgd, 1);
  CHECK_THROWS_WITH(apply(capture(adam.model, *adam.optimizer), sgd.model, *sgd.optimizer),
                    Catch::Contains("'adam'") && Catch::Contains("'sgd'"));
}
