#include <catch2/catch.hpp>
#include <fstream>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/model_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/version.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;
namespace h5 = hardy::core::h5;

namespace {

void check_same_scalars(const TrainingState& a, const TrainingState& b) {
  CHECK(a.step == b.step);
  CHECK(a.epoch == b.epoch);
  CHECK(a.sampler.seed == b.sampler.seed);
  CHECK(a.sampler.epoch == b.sampler.epoch);
  CHECK(a.sampler.cursor == b.sampler.cursor);
  CHECK(a.rng_seed == b.rng_seed);
  CHECK(a.lr_schedule.base_lr == b.lr_schedule.base_lr);
  CHECK(a.lr_schedule.warmup_steps == b.lr_schedule.warmup_steps);
  CHECK(a.lr_schedule.total_steps == b.lr_schedule.total_steps);
  CHECK(a.lr_schedule.decay == b.lr_schedule.decay);
  CHECK(a.lr_schedule.final_fraction == b.lr_schedule.final_fraction);
  CHECK(a.lr_schedule.poly_power == b.lr_schedule.poly_power);
  CHECK(a.lr_schedule.step_every == b.lr_schedule.step_every);
  CHECK(a.lr_schedule.step_gamma == b.lr_schedule.step_gamma);
  CHECK(a.loss_scale == b.loss_scale);
  CHECK(a.loss_scale_good_steps == b.loss_scale_good_steps);
  CHECK(a.loss == b.loss);
  CHECK(a.optimizer_kind == b.optimizer_kind);
  CHECK(a.optimizer_steps == b.optimizer_steps);
  CHECK(a.config_ini == b.config_ini);
  CHECK(a.world_size == b.world_size);
  CHECK(a.hardy_version == b.hardy_version);
  CHECK(a.hosts == b.hosts);
  CHECK(a.unix_time == b.unix_time);
  CHECK(a.committed_lines == b.committed_lines);
}

// A valid checkpoint of a trained tiny model, for the damage tests.
std::filesystem::path write_sample(const ScratchDirectory& dir, long step = 10) {
  TrainedModel trained(1);
  TrainingState state = capture(trained.model, *trained.optimizer);
  set_scalars(state, step);
  const auto path = checkpoint_path(dir.path(), step);
  write_checkpoint_file(state, path);
  return path;
}

// Catch's matcher for "the message of a CorruptCheckpoint names the file and says this".
void check_rejected(const std::filesystem::path& path, const std::string& says) {
  CHECK_THROWS_AS(read_checkpoint(path), CorruptCheckpoint);
  CHECK_THROWS_WITH(read_checkpoint(path), Catch::Contains(path.string()) && Catch::Contains(says));
}

}  // namespace

TEST_CASE(
    "checkpoint file: capture, write, read, apply restores model, optimizer and scalars exactly",
    "[checkpoint]") {
  ScratchDirectory dir("roundtrip");
  TrainedModel source(1);
  TrainingState saved = capture(source.model, *source.optimizer);
  set_scalars(saved, 10);
  saved.committed_lines =
      R"({"metrics":{"step":10,"loss":0.5},"audit":{"step":10,"samples":[3,1]}})";
  const auto path = dir / "ckpt-10.h5";
  const std::uint64_t bytes = write_checkpoint_file(saved, path);
  CHECK(bytes == std::filesystem::file_size(path));
  CHECK(bytes > tensor_bytes(saved));
  CHECK_FALSE(std::filesystem::exists(path.string() + ".tmp"));

  const CheckpointContents contents = read_checkpoint_file(path);
  CHECK(contents.format_version == kFormatVersion);
  CHECK(contents.file_bytes == bytes);
  CHECK(contents.state.model == saved.model);
  CHECK(contents.state.optimizer == saved.optimizer);
  check_same_scalars(contents.state, saved);
  CHECK(contents.datasets.size() == saved.model.size() + saved.optimizer.size() + 28);

  TrainedModel target(2, core::OptimizerKind::adam, 0);
  apply(contents.state, target.model, *target.optimizer);
  const TrainingState restored = capture(target.model, *target.optimizer);
  CHECK(restored.model == saved.model);
  CHECK(restored.optimizer == saved.optimizer);
  CHECK(target.optimizer->steps_taken() == saved.optimizer_steps);
}

TEST_CASE(
    "checkpoint file: plain HDF5 with format attributes, a manifest and a checksum per dataset",
    "[checkpoint]") {
  ScratchDirectory dir("layout");
  const auto path = write_sample(dir);
  h5::Handle file = h5::open_file(path);
  CHECK(h5::read_string_attribute(file.id(), "format") == "hardy-checkpoint");
  CHECK(h5::read_attribute<int>(file.id(), "format_version") == kFormatVersion);
  CHECK(h5::read_string_attribute(file.id(), "checksum_algorithm") == "xxh64");
  const std::string manifest = h5::read_string_attribute(file.id(), "manifest");
  CHECK_THAT(manifest, Catch::Contains("\"/train/step\"") && Catch::Contains("\"/job/config\""));
  for (const char* group : {"model", "optimizer", "train", "job"})
    CHECK(h5::exists(file.id(), group));
  CHECK(h5::read_dataset<std::int64_t>(file.id(), "/train/step") == std::vector<std::int64_t>{10});
  CHECK(h5::read_dataset<std::int64_t>(file.id(), "/train/sampler/cursor") ==
        std::vector<std::int64_t>{17});
  h5::Handle step = h5::open_dataset(file.id(), "/train/step");
  CHECK(h5::read_string_attribute(step.id(), "checksum_algorithm") == "xxh64");
  CHECK(h5::read_attribute<std::uint64_t>(step.id(), "checksum") != 0);
  // A model file reader (eval --model) takes a checkpoint too: /model has the same layout.
  TrainedModel fresh(5, core::OptimizerKind::adam, 0);
  load_model(fresh.model, path);
}

TEST_CASE("checkpoint file: a truncated file is rejected as damaged", "[checkpoint]") {
  ScratchDirectory dir("truncated");
  const auto path = write_sample(dir);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  check_rejected(path, "truncated");
}

TEST_CASE("checkpoint file: a flipped byte in a dataset's data is a checksum mismatch naming it",
          "[checkpoint]") {
  ScratchDirectory dir("flipped");
  const auto path = write_sample(dir);
  const std::string dataset =
      "/optimizer/adam_v/" + TrainedModel(1).model.parameters().front()->name;
  flip_byte(path, data_offset(path, dataset) + 5);
  check_rejected(path, "checksum mismatch in " + dataset);
}

TEST_CASE("checkpoint file: a missing dataset is named", "[checkpoint]") {
  ScratchDirectory dir("missing");
  const auto path = write_sample(dir);
  {
    h5::Handle file = h5::open_file(path, h5::FileMode::read_write);
    h5::check(H5Ldelete(file.id(), "/train/sampler/cursor", H5P_DEFAULT), "H5Ldelete", "cursor");
    file.close();
  }
  check_rejected(path, "dataset /train/sampler/cursor listed in the manifest is missing");
}

TEST_CASE("checkpoint file: an unknown format version is rejected with both versions",
          "[checkpoint]") {
  ScratchDirectory dir("version");
  const auto path = write_sample(dir);
  {
    h5::Handle file = h5::open_file(path, h5::FileMode::read_write);
    h5::write_attribute(file.id(), "format_version", 7);
    file.close();
  }
  check_rejected(path, "checkpoint format version 7 is unknown; this hardy (" HARDY_VERSION
                       ") reads version 1");
}

TEST_CASE("checkpoint file: a checksum attribute that disagrees with the manifest is rejected",
          "[checkpoint]") {
  ScratchDirectory dir("attribute");
  const auto path = write_sample(dir);
  {
    h5::Handle file = h5::open_file(path, h5::FileMode::read_write);
    h5::Handle step = h5::open_dataset(file.id(), "/train/step");
    h5::write_attribute(step.id(), "checksum", std::uint64_t{12345});
    step.close();
    file.close();
  }
  check_rejected(path, "the checksum attribute of /train/step");
}

TEST_CASE("checkpoint file: missing files, non-HDF5 files and model files are bad input",
          "[checkpoint]") {
  ScratchDirectory dir("input");
  CHECK_THROWS_AS(read_checkpoint(dir / "nothing.h5"), InvalidArgument);
  CHECK_THROWS_WITH(read_checkpoint(dir / "nothing.h5"), Catch::Contains("does not exist"));
  std::ofstream(dir / "text.h5") << "not hdf5\n";
  CHECK_THROWS_WITH(read_checkpoint(dir / "text.h5"), Catch::Contains("is not an HDF5 file"));
  TrainedModel trained(1);
  save_model(trained.model, dir / "model.h5");
  CHECK_THROWS_AS(read_checkpoint(dir / "model.h5"), InvalidArgument);
  CHECK_THROWS_WITH(read_checkpoint(dir / "model.h5"), Catch::Contains("not a hardy checkpoint"));
}

TEST_CASE("checkpoint file: an empty host list and empty configuration round-trip",
          "[checkpoint]") {
  ScratchDirectory dir("empty");
  TrainingState state = synthetic_state(1, 0);
  state.hosts.clear();
  state.config_ini.clear();
  write_checkpoint_file(state, dir / "ckpt-1.h5");
  const TrainingState read = read_checkpoint(dir / "ckpt-1.h5");
  CHECK(read.hosts.empty());
  CHECK(read.config_ini.empty());
  CHECK(read.model == state.model);
}

TEST_CASE("checkpoint file: HDF5's metadata lies before the tensors and the file ends with them",
          "[checkpoint]") {
  // What keeps the writer's memory small: the in-memory image HDF5 builds ends where the first
  // tensor begins (a variable-length string attribute, for one, would put a heap after them).
  ScratchDirectory dir("metadata-first");
  TrainingState state = synthetic_state(1, 1'000'000);  // two 4 MB tensors
  write_checkpoint_file(state, dir / "ckpt-1.h5");
  const std::uint64_t first = data_offset(dir / "ckpt-1.h5", "/model/layer.weight");
  CHECK(first < 64 * 1024);
  const std::uint64_t last_end = data_offset(dir / "ckpt-1.h5", "/job/unix_time") + 8;
  CHECK(std::filesystem::file_size(dir / "ckpt-1.h5") - last_end <= 2048);  // a small-data block
}

TEST_CASE(
    "model file: save_model and load_model round-trip the weights, with a checksum per tensor",
    "[checkpoint]") {
  ScratchDirectory dir("model-file");
  TrainedModel source(1);
  save_model(source.model, dir / "model.h5");
  CHECK_FALSE(std::filesystem::exists(dir / "model.h5.tmp"));
  TrainedModel target(2, core::OptimizerKind::adam, 0);
  load_model(target.model, dir / "model.h5");
  CHECK(capture(target.model, *target.optimizer).model ==
        capture(source.model, *source.optimizer).model);
  h5::Handle file = h5::open_file(dir / "model.h5");
  CHECK(h5::read_string_attribute(file.id(), "format") == "hardy-model");
  h5::Handle weight =
      h5::open_dataset(file.id(), "/model/" + source.model.parameters().front()->name);
  CHECK(h5::read_string_attribute(weight.id(), "checksum_algorithm") == "xxh64");
  TrainedModel wider(3, core::OptimizerKind::adam, 0, tiny_model_config(8));
  CHECK_THROWS_WITH(load_model(wider.model, dir / "model.h5"), Catch::Contains("has shape"));
}
