#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/data/dataset.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "scratch_directory.hpp"

namespace fs = std::filesystem;
namespace h5 = hardy::core::h5;
using hardy::core::Hdf5Dataset;
using hardy::core::SampleShape;
using hardy::core::SyntheticClimate;

using hardy::testing::ScratchDirectory;
namespace {

// A file with /fields and /labels of the given dimensions, labels all `label`.
void write_raw_file(const fs::path& path, const std::vector<h5::Extent>& fields_dims,
                    const std::vector<h5::Extent>& labels_dims, std::uint8_t label = 0) {
  h5::Handle file = h5::create_file(path);
  std::size_t fields_count = 1, labels_count = 1;
  for (h5::Extent extent : fields_dims) fields_count *= extent;
  for (h5::Extent extent : labels_dims) labels_count *= extent;
  h5::write_dataset<float>(file.id(), "fields", std::vector<float>(fields_count, 0.5f),
                           fields_dims);
  h5::write_dataset<std::uint8_t>(file.id(), "labels",
                                  std::vector<std::uint8_t>(labels_count, label), labels_dims);
}

std::string message_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const hardy::Error& error) {
    return error.what();
  }
  return "(no exception)";
}

}  // namespace

TEST_CASE("data: HDF5 round trip is bit-identical to the generator", "[core]") {
  ScratchDirectory directory("data");
  const SyntheticClimate source(SampleShape{16, 32, 24}, 20, 77);
  const ssize_t open_objects = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
  hardy::core::write_dataset(source, 2, 5, directory.path(), /*samples_per_file=*/3);
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == open_objects);  // the writer closed all

  auto dataset_holder = std::make_unique<Hdf5Dataset>(directory.path());
  const Hdf5Dataset& dataset = *dataset_holder;
  REQUIRE(dataset.size() == 5);
  CHECK(dataset.shape() == source.shape());
  CHECK(dataset.files() == std::vector<fs::path>{directory.path() / "climate-00000.h5",
                                                 directory.path() / "climate-00001.h5"});
  CHECK(dataset.channel_names() == source.channel_names());
  CHECK_THAT(dataset.describe(), Catch::Contains("5 samples"));

  std::vector<float> expected_fields(source.shape().field_elements()),
      fields(source.shape().field_elements());
  std::vector<std::int32_t> expected_labels(source.shape().label_elements()),
      labels(source.shape().label_elements());
  for (std::size_t index = 0; index < dataset.size(); ++index) {
    INFO("sample " << index);
    source.load(2 + index, expected_fields, expected_labels);
    dataset.load(index, fields, labels);
    CHECK(std::memcmp(fields.data(), expected_fields.data(), fields.size() * sizeof(float)) == 0);
    CHECK(labels == expected_labels);
  }
  CHECK_THROWS_AS(dataset.load(5, fields, labels), hardy::InvalidArgument);
  dataset_holder.reset();
  CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == open_objects);  // and so did the reader

  std::ifstream index_stream(directory.path() / "index.json");
  const nlohmann::json index = nlohmann::json::parse(index_stream);
  CHECK(index["format"] == "hardy-climate");
  CHECK(index["samples"] == 5);
  REQUIRE(index["files"].size() == 2);
  CHECK(index["files"][1]["samples"] == 2);
  CHECK(index["files"][1]["first_sample"] == 5);
  for (const auto& entry : fs::directory_iterator(directory.path()))
    CHECK(entry.path().extension() != ".tmp");

  // A single file, or a directory without index.json, reads as well.
  CHECK(Hdf5Dataset(directory.path() / "climate-00001.h5").size() == 2);
  fs::remove(directory.path() / "index.json");
  CHECK(Hdf5Dataset(directory.path()).size() == 5);
}

TEST_CASE("data: dataset files have the documented layout for any HDF5 reader", "[core]") {
  ScratchDirectory directory("data");
  const SyntheticClimate source(SampleShape{16, 16, 20}, 4, 5);
  hardy::core::write_dataset(source, 0, 4, directory.path());
  const std::string path = (directory.path() / "climate-00000.h5").string();

  // Plain C API, as h5dump, h5py or netCDF would see the file.
  h5::Handle file{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "H5Fopen", path};
  h5::Handle fields{H5Dopen2(file.id(), "/fields", H5P_DEFAULT), "H5Dopen2", "/fields"};
  h5::Handle labels{H5Dopen2(file.id(), "/labels", H5P_DEFAULT), "H5Dopen2", "/labels"};
  h5::Handle fields_type{H5Dget_type(fields.id()), "H5Dget_type", "/fields"};
  h5::Handle labels_type{H5Dget_type(labels.id()), "H5Dget_type", "/labels"};
  CHECK(H5Tequal(fields_type.id(), H5T_IEEE_F32LE) > 0);
  CHECK(H5Tequal(labels_type.id(), H5T_STD_U8LE) > 0);

  h5::Handle space{H5Dget_space(fields.id()), "H5Dget_space", "/fields"};
  hsize_t dims[4] = {};
  REQUIRE(H5Sget_simple_extent_ndims(space.id()) == 4);
  H5Sget_simple_extent_dims(space.id(), dims, nullptr);
  CHECK(std::vector<hsize_t>(dims, dims + 4) == std::vector<hsize_t>{4, 16, 16, 20});
  CHECK(h5::dataset_dims(labels.id()) == std::vector<h5::Extent>{4, 16, 20});

  h5::Handle creation{H5Dget_create_plist(fields.id()), "H5Dget_create_plist", "/fields"};
  hsize_t chunk[4] = {};
  REQUIRE(H5Pget_layout(creation.id()) == H5D_CHUNKED);
  REQUIRE(H5Pget_chunk(creation.id(), 4, chunk) == 4);
  CHECK(std::vector<hsize_t>(chunk, chunk + 4) == std::vector<hsize_t>{1, 16, 16, 20});

  h5::Handle version{H5Aopen(file.id(), "format_version", H5P_DEFAULT), "H5Aopen", "version"};
  int format_version = 0;
  H5Aread(version.id(), H5T_NATIVE_INT, &format_version);
  CHECK(format_version == 1);
  CHECK(h5::read_string_attribute(file.id(), "format") == "hardy-climate");
  CHECK(h5::read_strings_attribute(file.id(), "class_names") ==
        std::vector<std::string>{"background", "tropical_cyclone", "atmospheric_river"});
  CHECK(h5::read_strings_attribute(file.id(), "channel_names").size() == 16);
  CHECK(h5::read_attribute<std::uint64_t>(file.id(), "seed") == 5);
  CHECK_THAT(h5::read_string_attribute(file.id(), "source"), Catch::Contains("synthetic"));
  CHECK(h5::list_children(file.id()) == std::vector<std::string>{"fields", "labels"});
}

TEST_CASE("data: Hdf5Dataset names the file and the problem", "[core]") {
  ScratchDirectory directory("data");
  const fs::path dir = directory.path();

  CHECK_THROWS_AS(Hdf5Dataset(dir / "missing"), hardy::InvalidArgument);
  CHECK_THAT(message_of([&] { Hdf5Dataset(dir / "missing"); }),
             Catch::Contains("missing") && Catch::Contains("does not exist"));
  CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }), Catch::Contains("no .h5 files"));

  SECTION("wrong shapes") {
    write_raw_file(dir / "bad-shape.h5", {2, 16, 8, 8}, {2, 8, 9});
    CHECK_THROWS_AS(Hdf5Dataset(dir), hardy::InvalidArgument);
    CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }),
               Catch::Contains("bad-shape.h5") && Catch::Contains("[2, 8, 9]"));
  }
  SECTION("missing dataset") {
    h5::Handle file = h5::create_file(dir / "no-labels.h5");
    h5::write_dataset<float>(file.id(), "fields", std::vector<float>(64), {1, 1, 8, 8});
    file.close();
    CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }),
               Catch::Contains("no-labels.h5") && Catch::Contains("/labels"));
  }
  SECTION("inconsistent files") {
    write_raw_file(dir / "a.h5", {1, 4, 8, 8}, {1, 8, 8});
    write_raw_file(dir / "b.h5", {1, 4, 8, 16}, {1, 8, 16});
    CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }),
               Catch::Contains("b.h5") && Catch::Contains("4x8x16"));
  }
  SECTION("not HDF5") {
    std::ofstream(dir / "text.h5") << "not hdf5\n";
    CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }),
               Catch::Contains("text.h5") && Catch::Contains("not an HDF5 file"));
  }
  SECTION("newer or foreign format") {
    write_raw_file(dir / "future.h5", {1, 4, 8, 8}, {1, 8, 8});
    {
      h5::Handle file = h5::open_file(dir / "future.h5", h5::FileMode::read_write);
      h5::write_attribute(file.id(), "format_version", 2);
    }
    CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }),
               Catch::Contains("future.h5") && Catch::Contains("version 2"));
    {
      h5::Handle file = h5::open_file(dir / "future.h5", h5::FileMode::read_write);
      h5::write_attribute(file.id(), "format", std::string_view("other"));
    }
    CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }), Catch::Contains("'other'"));
  }
  SECTION("label out of range") {
    write_raw_file(dir / "labels.h5", {2, 4, 8, 8}, {2, 8, 8}, /*label=*/3);
    const Hdf5Dataset dataset(dir);  // labels are checked as samples are read
    std::vector<float> fields(dataset.shape().field_elements());
    std::vector<std::int32_t> labels(dataset.shape().label_elements());
    CHECK_THROWS_AS(dataset.load(1, fields, labels), hardy::InvalidArgument);
    CHECK_THAT(message_of([&] { dataset.load(1, fields, labels); }),
               Catch::Contains("labels.h5") && Catch::Contains("label 3"));
  }
  SECTION("index.json naming a missing file") {
    std::ofstream(dir / "index.json") << R"({"files": [{"name": "gone.h5", "samples": 1}]})";
    CHECK_THAT(message_of([&] { Hdf5Dataset{dir}; }), Catch::Contains("gone.h5"));
  }
}

TEST_CASE("data: write_dataset reports bad arguments and unwritable directories", "[core]") {
  ScratchDirectory directory("data");
  const SyntheticClimate source(SampleShape{16, 16, 16}, 4, 1);
  std::ofstream(directory.path() / "a-file") << "x";
  // Below a regular file no directory can be made, whoever runs the test (even root).
  CHECK_THROWS_AS(hardy::core::write_dataset(source, 0, 2, directory.path() / "a-file" / "sub"),
                  hardy::IoError);
  CHECK_THAT(message_of([&] {
               hardy::core::write_dataset(source, 0, 2, directory.path() / "a-file" / "sub");
             }),
             Catch::Contains("a-file"));
  CHECK_THROWS_AS(hardy::core::write_dataset(source, 3, 2, directory.path() / "out"),
                  hardy::InvalidArgument);
  CHECK_THROWS_AS(hardy::core::write_dataset(source, 0, 2, directory.path() / "out", 0),
                  hardy::InvalidArgument);
}

TEST_CASE("data: h5::check names the failing call, the object and HDF5's reason", "[core]") {
  const std::string open_failure =
      message_of([] { h5::open_file("/nonexistent-hardy-dir/file.h5"); });
  CHECK_THAT(open_failure, Catch::Contains("H5Fopen") &&
                               Catch::Contains("/nonexistent-hardy-dir/file.h5") &&
                               Catch::Contains("No such file or directory"));
  CHECK_THROWS_AS(h5::open_file("/nonexistent-hardy-dir/file.h5"), hardy::IoError);

  ScratchDirectory directory("data");
  h5::Handle file = h5::create_file(directory.path() / "check.h5");
  const std::string missing_group = message_of(
      [&] { h5::check(H5Gopen2(file.id(), "nope", H5P_DEFAULT), "H5Gopen2", "group /nope"); });
  CHECK_THAT(missing_group, Catch::StartsWith("HDF5 H5Gopen2 failed for group /nope: ") &&
                                Catch::Contains("doesn't exist"));
  CHECK(h5::take_error_stack().empty());  // reported once, then cleared
  CHECK(h5::check(herr_t{0}, "H5Xnothing", "nothing") == 0);
}

TEST_CASE("data: h5 helpers round-trip groups, datasets and attributes", "[core]") {
  ScratchDirectory directory("data");
  const fs::path path = directory.path() / "helpers.h5";
  {
    h5::Handle file = h5::create_file(path);
    h5::Handle group = h5::create_groups(file.id(), "model/layers/conv1");
    h5::create_groups(file.id(), "/model/optimizer");  // reopens "model", creates the rest
    const std::vector<std::int32_t> values = {1, -2, 3, -4, 5, -6};
    h5::write_dataset<std::int32_t>(group.id(), "weights", values, {2, 3});
    h5::write_attribute(group.id(), "step", std::uint64_t{1} << 40);
    h5::write_attribute(group.id(), "learning_rate", 0.125);
    h5::write_attribute(group.id(), "name", std::string_view("conv1"));
    h5::write_attribute(group.id(), "name", std::string_view("conv 1"));  // replaces

    // A fixed-length string, as NumPy's bytes or other tools write them.
    h5::Handle type{H5Tcopy(H5T_C_S1), "H5Tcopy", "string"};
    H5Tset_size(type.id(), 8);
    h5::Handle space{H5Screate(H5S_SCALAR), "H5Screate", "scalar"};
    h5::Handle attribute{
        H5Acreate2(group.id(), "fixed", type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
        "H5Acreate2", "fixed"};
    H5Awrite(attribute.id(), type.id(), "abc\0\0\0\0\0");
    file.close();
    CHECK_FALSE(file.valid());
  }
  h5::Handle file = h5::open_file(path);
  CHECK(h5::exists(file.id(), "model/layers/conv1/weights"));
  CHECK_FALSE(h5::exists(file.id(), "model/missing/weights"));
  CHECK(h5::list_children(h5::open_group(file.id(), "model").id()) ==
        std::vector<std::string>{"layers", "optimizer"});
  h5::Handle group = h5::open_group(file.id(), "/model/layers/conv1");
  CHECK(h5::read_dataset<std::int32_t>(group.id(), "weights") ==
        std::vector<std::int32_t>{1, -2, 3, -4, 5, -6});
  std::vector<double> as_double(6);
  h5::read_dataset<double>(group.id(), "weights", as_double);  // HDF5 converts
  CHECK(as_double[1] == -2.0);
  std::vector<float> wrong_size(5);
  CHECK_THROWS_AS(h5::read_dataset<float>(group.id(), "weights", wrong_size),
                  hardy::InvalidArgument);
  CHECK(h5::read_attribute<std::uint64_t>(group.id(), "step") == std::uint64_t{1} << 40);
  CHECK(h5::read_attribute<double>(group.id(), "learning_rate") == 0.125);
  CHECK(h5::read_string_attribute(group.id(), "name") == "conv 1");
  CHECK(h5::read_string_attribute(group.id(), "fixed") == "abc");
  CHECK_FALSE(h5::has_attribute(group.id(), "missing"));

  h5::Handle moved = std::move(group);
  CHECK_FALSE(group.valid());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  CHECK(moved.valid());
}

TEST_CASE("data: Hdf5Dataset reads samples stored as it writes them without the library",
          "[core]") {
  ScratchDirectory directory("data");
  const fs::path dir = directory.path();
  const SyntheticClimate source(SampleShape{4, 16, 20}, 6, 3);
  std::vector<float> expected(source.shape().field_elements()), fields(expected.size());
  std::vector<std::int32_t> expected_labels(source.shape().label_elements()),
      labels(expected_labels.size());

  SECTION("hardy's files (a sample per chunk): read in parallel, kept by no sample cache") {
    hardy::core::write_dataset(source, 0, 6, dir / "set", /*samples_per_file=*/4);
    const Hdf5Dataset dataset(dir / "set");
    CHECK(dataset.reads_from_page_cache());
    CHECK(dataset.load_concurrency() > 1);
    hardy::core::DataSpec spec;
    spec.synthetic = false;
    spec.dataset = dir / "set";
    spec.eval_samples = 1;
    spec.shape = source.shape();
    spec.cache_bytes = std::size_t{1} << 30;
    const hardy::core::DataSources data = hardy::core::open_data(spec);
    CHECK(dynamic_cast<const Hdf5Dataset*>(data.storage.get()) != nullptr);

    // A file that shrinks under a running job (rewritten, truncated) is a bad sample naming the
    // file, not a crash or a sample of zeros.
    dataset.load(5, fields, labels);
    source.load(5, expected, expected_labels);
    CHECK(fields == expected);
    fs::resize_file(dir / "set" / "climate-00001.h5", 1024);  // its header stays
    CHECK_THROWS_AS(dataset.load(5, fields, labels), hardy::BadSample);
    CHECK_THAT(message_of([&] { dataset.load(5, fields, labels); }),
               Catch::Contains("climate-00001.h5") && Catch::Contains("truncated"));
  }
  SECTION("contiguous float32 and uint8 from another writer") {
    write_raw_file(dir / "raw.h5", {3, 4, 16, 20}, {3, 16, 20}, /*label=*/2);
    const Hdf5Dataset dataset(dir / "raw.h5");
    CHECK(dataset.reads_from_page_cache());
    dataset.load(2, fields, labels);
    CHECK(fields == std::vector<float>(fields.size(), 0.5f));
    CHECK(labels == std::vector<std::int32_t>(labels.size(), 2));
  }
  SECTION("compressed or of other types: through the library, and cached") {
    {
      h5::Handle file = h5::create_file(dir / "other.h5");
      h5::Handle properties{H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "deflate"};
      const hsize_t chunk[4] = {1, 4, 16, 20};
      H5Pset_chunk(properties.id(), 4, chunk);
      H5Pset_deflate(properties.id(), 4);
      const hsize_t dims[4] = {2, 4, 16, 20};
      h5::Handle space{H5Screate_simple(4, dims, nullptr), "H5Screate_simple", "fields"};
      h5::Handle data{H5Dcreate2(file.id(), "fields", H5T_IEEE_F32LE, space.id(), H5P_DEFAULT,
                                 properties.id(), H5P_DEFAULT),
                      "H5Dcreate2", "fields"};
      std::vector<float> values(2 * expected.size());
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 97);
      H5Dwrite(data.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
      // Labels stored as 32-bit integers: converted by the library.
      h5::write_dataset<std::int32_t>(file.id(), "labels",
                                      std::vector<std::int32_t>(2 * labels.size(), 1), {2, 16, 20});
    }
    const Hdf5Dataset dataset(dir / "other.h5");
    CHECK_FALSE(dataset.reads_from_page_cache());
    dataset.load(1, fields, labels);
    CHECK(fields[0] == static_cast<float>(expected.size() % 97));
    CHECK(labels == std::vector<std::int32_t>(labels.size(), 1));
    // One such file among direct ones: the dataset is cached as a whole.
    write_raw_file(dir / "raw.h5", {3, 4, 16, 20}, {3, 16, 20});
    CHECK_FALSE(Hdf5Dataset(dir).reads_from_page_cache());
  }
}
