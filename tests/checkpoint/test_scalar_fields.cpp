#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "checkpoint_fixtures.hpp"
#include "distinct_scalars.hpp"
#include "hardy/checkpoint/broadcast_state.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/scalar_fields.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;

namespace {

void check_every_scalar(const TrainingState& read, const TrainingState& written) {
  for (const ScalarField& scalar : scalar_fields()) {
    INFO(scalar.path);
    CHECK(scalar.get(read) == scalar.get(written));
  }
}

}  // namespace

TEST_CASE("every scalar field has its own dataset path, JSON pointer and description") {
  std::set<std::string_view> paths, pointers;
  for (const ScalarField& scalar : scalar_fields()) {
    INFO(scalar.path);
    CHECK((scalar.path.starts_with("/train/") || scalar.path.starts_with("/job/")));
    CHECK(scalar.json_pointer.starts_with('/'));
    CHECK(!scalar.description.empty());
    CHECK(paths.insert(scalar.path).second);
    CHECK(pointers.insert(scalar.json_pointer).second);
  }
}

TEST_CASE("every scalar field survives a checkpoint file, in the table's order") {
  ScratchDirectory dir("scalars");
  TrainingState written = synthetic_state(7, 10);
  const TrainingState scalars = distinct_scalars();
  for (const ScalarField& scalar : scalar_fields()) scalar.set(written, scalar.get(scalars));
  write_checkpoint_file(written, dir / "ckpt.h5");
  const CheckpointContents contents = read_checkpoint_file(dir / "ckpt.h5");
  check_every_scalar(contents.state, written);
  // The scalars follow the tensors in the file, as the table lists them.
  std::vector<std::string> stored;
  for (const auto& dataset : contents.datasets)
    if (!dataset.path.starts_with(kModelGroup) && !dataset.path.starts_with(kOptimizerGroup))
      stored.push_back(dataset.path);
  std::vector<std::string> listed;
  for (const ScalarField& scalar : scalar_fields()) listed.emplace_back(scalar.path);
  CHECK(stored == listed);
}

TEST_CASE("every scalar field survives the broadcast byte stream") {
  const TrainingState written = distinct_scalars();
  check_every_scalar(deserialize(serialize(written)), written);
}
