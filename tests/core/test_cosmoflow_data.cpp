// The CosmoFlow layout (core/data/cosmoflow.hpp): the generator and the reader in both variants,
// files written by NumPy and h5py themselves, and the reader's verdicts on damaged, foreign and
// hostile files, against values worked out here.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "hardy/core/data/cosmoflow.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "sample_fixtures.hpp"
#include "scratch_directory.hpp"

namespace fs = std::filesystem;
using namespace hardy::core;
using namespace hardy::testing;

namespace {

constexpr int kEdge = 4;
constexpr std::size_t kCounts = kEdge * kEdge * kEdge * 4;

// Counts that tell every position apart: x[d, h, w, c] (channels last).
std::int16_t count_at(std::size_t d, std::size_t h, std::size_t w, std::size_t c) {
  return static_cast<std::int16_t>((d * 97 + h * 31 + w * 7 + c * 3) % 1000);
}

std::vector<std::int16_t> regular_counts(int edge = kEdge) {
  const auto e = static_cast<std::size_t>(edge);
  std::vector<std::int16_t> counts(e * e * e * 4);
  for (std::size_t d = 0; d < e; ++d)
    for (std::size_t h = 0; h < e; ++h)
      for (std::size_t w = 0; w < e; ++w)
        for (std::size_t c = 0; c < 4; ++c)
          counts[((d * e + h) * e + w) * 4 + c] = count_at(d, h, w, c);
  return counts;
}

const std::vector<float> kTargets = {0.25f, -0.5f, 0.75f, -1.0f};

// What the reader must give for regular_counts(edge) and kTargets: fields (C, D, H, W).
void check_regular_sample(const hardy::testing::Sample& sample, int edge = kEdge) {
  const auto e = static_cast<std::size_t>(edge), voxels = e * e * e;
  REQUIRE(sample.fields.size() == 4 * voxels);
  bool equal = true;
  for (std::size_t c = 0; c < 4; ++c)
    for (std::size_t d = 0; d < e; ++d)
      for (std::size_t h = 0; h < e; ++h)
        for (std::size_t w = 0; w < e; ++w)
          equal = equal && sample.fields[c * voxels + (d * e + h) * e + w] ==
                               log1p_count(count_at(d, h, w, c));
  CHECK(equal);
  REQUIRE(sample.labels.size() == 4);
  for (std::size_t t = 0; t < 4; ++t) CHECK(target_value(sample.labels[t]) == kTargets[t]);
}

// ---- hand-made files ----

std::string npy_header(const std::string& dict, int major = 1) {
  std::string padded = dict;
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + padded.size() + 1) % 64) padded += ' ';
  padded += '\n';
  std::string header = "\x93NUMPY";
  header += static_cast<char>(major);
  header += '\0';
  const std::size_t n = padded.size();
  header += static_cast<char>(n & 0xff);
  header += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) header += std::string("\0\0", 2);
  return header + padded;
}

void write_raw(const fs::path& path, const std::string& header, const void* data,
               std::size_t bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

struct NumpySample {
  std::string data_dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (4, 4, 4, 4), }";
  std::string label_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }";
  std::vector<std::int16_t> counts = regular_counts();
  std::vector<float> targets = kTargets;
  bool write_label = true;
};

void write_numpy(const fs::path& dir, const std::string& name, const NumpySample& sample = {}) {
  fs::create_directories(dir);
  write_raw(dir / (name + "_data.npy"), npy_header(sample.data_dict), sample.counts.data(),
            sample.counts.size() * 2);
  if (sample.write_label)
    write_raw(dir / (name + "_label.npy"), npy_header(sample.label_dict), sample.targets.data(),
              sample.targets.size() * 4);
}

struct Hdf5Sample {
  int edge = kEdge;
  std::vector<std::int16_t> counts = regular_counts();
  std::vector<float> targets = kTargets;
  hid_t x_type = H5T_STD_I16LE;
  bool chunked = false, write_y = true;
};

void write_hdf5(const fs::path& path, const Hdf5Sample& sample = {}) {
  fs::create_directories(path.parent_path());
  h5::Handle file = h5::create_file(path);
  const auto e = static_cast<hsize_t>(sample.edge);
  const std::vector<hsize_t> dims = {e, e, e, 4};
  h5::Handle space{H5Screate_simple(4, dims.data(), nullptr), "H5Screate_simple", "x"};
  h5::Handle properties{H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate", "x"};
  if (sample.chunked) {  // and compressed
    const hsize_t chunk[] = {2, 2, 2, 4};
    H5Pset_chunk(properties.id(), 4, chunk);
    H5Pset_deflate(properties.id(), 6);
  }
  h5::Handle x{H5Dcreate2(file.id(), "x", sample.x_type, space.id(), H5P_DEFAULT, properties.id(),
                          H5P_DEFAULT),
               "H5Dcreate2", "x"};
  H5Dwrite(x.id(), H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, sample.counts.data());
  x.close();
  if (sample.write_y) h5::write_dataset<float>(file.id(), "y", sample.targets, {4});
}

std::string bad_load_message(const CosmoFlowDataset& dataset, std::size_t index) {
  try {
    load(dataset, index);
  } catch (const hardy::BadSample& error) {
    CHECK(error.index() == index);
    CHECK(error.file() == dataset.files()[index].string());
    // Remembered: the second load fails the same way.
    CHECK(message_of([&] { load(dataset, index); }) == error.what());
    return error.what();
  } catch (const std::exception& error) {
    FAIL("not a BadSample: " << error.what());
  }
  FAIL("sample " << index << " loaded");
  return {};
}

// Each sample of `expected` fails to load naming its file and the reason given.
void check_bad_samples(const CosmoFlowDataset& dataset,
                       const std::vector<std::pair<std::size_t, std::string>>& expected) {
  for (const auto& [index, reason] : expected) {
    const std::string message = bad_load_message(dataset, index);
    CHECK_THAT(message, Catch::Contains(dataset.files()[index].filename().string()) &&
                            Catch::Contains(reason));
  }
}

}  // namespace

TEST_CASE("CosmoFlow generator output reads back as SyntheticCosmology's samples, both variants",
          "[data][cosmoflow]") {
  for (const CosmoFlowVariant variant : {CosmoFlowVariant::hdf5, CosmoFlowVariant::numpy}) {
    ScratchDirectory dir("cosmoflow-generated");
    const CosmoFlowGenerateOptions options{
        .train = 3, .validation = 2, .volume = 8, .seed = 5, .variant = variant};
    hardy::core::write_cosmoflow_dataset(dir.path(), options);
    CHECK(hardy::core::is_cosmoflow_layout(dir.path()));
    CHECK(hardy::core::dataset_layout(dir.path()) == hardy::core::DatasetLayout::cosmoflow);
    const SyntheticCosmology synthetic(8, 5, 5);
    const CosmoFlowDataset train(dir.path(), "train"), validation(dir.path(), "validation");
    CHECK(train.variant() == variant);
    CHECK(train.size() == 3);
    CHECK(validation.size() == 2);
    CHECK(train.shape() == synthetic.shape());
    CHECK(train.describe().find(variant == CosmoFlowVariant::hdf5 ? "(HDF5)" : "(NumPy)") !=
          std::string::npos);
    for (std::size_t i = 0; i < 3; ++i) CHECK(load(train, i) == load(synthetic, i));
    for (std::size_t i = 0; i < 2; ++i) CHECK(load(validation, i) == load(synthetic, 3 + i));
    // A second dataset into the same directory is refused, not mixed in.
    CHECK_THROWS_AS(hardy::core::write_cosmoflow_dataset(dir.path(), options),
                    hardy::InvalidArgument);
  }
}

TEST_CASE("CosmoFlow reader: hand-made NumPy and HDF5 files, every storage HDF5 offers",
          "[data][cosmoflow]") {
  ScratchDirectory dir("cosmoflow-hand");
  SECTION("NumPy, header versions 1 and 2, either quotes") {
    NumpySample sample;
    sample.data_dict = "{\"descr\":\"<i2\",\"fortran_order\":False,\"shape\":(4,4,4,4)}";
    write_numpy(dir / "train", "a", sample);
    // Version 2.0 header for the second sample.
    fs::create_directories(dir / "train");
    const auto counts = regular_counts();
    write_raw(dir / "train" / "b_data.npy",
              npy_header("{'descr': '<i2', 'fortran_order': False, 'shape': (4, 4, 4, 4), }", 2),
              counts.data(), counts.size() * 2);
    write_raw(dir / "train" / "b_label.npy",
              npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 2),
              kTargets.data(), 16);
    const CosmoFlowDataset dataset(dir.path(), "train");
    CHECK(dataset.variant() == CosmoFlowVariant::numpy);
    REQUIRE(dataset.size() == 2);
    CHECK(dataset.files()[0].filename() == "a_data.npy");
    check_regular_sample(load(dataset, 0));
    check_regular_sample(load(dataset, 1));
  }
  SECTION("HDF5: contiguous, chunked and compressed, big-endian, .hdf5") {
    write_hdf5(dir / "train" / "a.h5");
    write_hdf5(dir / "train" / "b.h5", {.chunked = true});
    write_hdf5(dir / "train" / "c.hdf5", {.x_type = H5T_STD_I16BE});
    const CosmoFlowDataset dataset(dir.path(), "train");
    CHECK(dataset.variant() == CosmoFlowVariant::hdf5);
    REQUIRE(dataset.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) check_regular_sample(load(dataset, i));
  }
  SECTION("loads in parallel give the same samples") {
    for (const char* name : {"s0", "s1", "s2", "s3", "s4", "s5"}) write_numpy(dir / "train", name);
    const CosmoFlowDataset dataset(dir.path(), "train");
    std::vector<std::thread> threads;
    std::vector<int> good(6, 0);
    for (int k = 0; k < 6; ++k)
      threads.emplace_back([&, k] {
        const auto sample = load(dataset, static_cast<std::size_t>(k));
        good[k] = sample.fields[1] == log1p_count(count_at(0, 0, 1, 0)) ? 1 : 0;
      });
    for (auto& thread : threads) thread.join();
    CHECK(good == std::vector<int>(6, 1));
  }
}

TEST_CASE("CosmoFlow reader: files NumPy and h5py write themselves", "[data][cosmoflow]") {
  // An independent writer: Python's own np.save and h5py, of the counts count_at() defines.
  if (std::system("/usr/bin/python3 -c 'import numpy, h5py' > /dev/null 2>&1") != 0) {
    WARN("no /usr/bin/python3 with numpy and h5py: skipped");
    return;
  }
  ScratchDirectory dir("cosmoflow-python");
  const std::string script = R"(
import sys, numpy as np, h5py
root = sys.argv[1]
d, h, w, c = np.meshgrid(*(np.arange(n) for n in (6, 6, 6, 4)), indexing="ij")
x = ((d * 97 + h * 31 + w * 7 + c * 3) % 1000).astype(np.int16)
y = np.array([0.25, -0.5, 0.75, -1.0], dtype=np.float32)
np.save(f"{root}/numpy/train/u_data.npy", x)
np.save(f"{root}/numpy/train/u_label.npy", y)
with h5py.File(f"{root}/hdf5/train/u.h5", "w") as f:
    f.create_dataset("x", data=x)
    f.create_dataset("y", data=y)
with h5py.File(f"{root}/hdf5/train/v.h5", "w") as f:
    f.create_dataset("x", data=x, chunks=(3, 3, 3, 4), compression="gzip")
    f.create_dataset("y", data=y)
)";
  fs::create_directories(dir / "numpy/train");
  fs::create_directories(dir / "hdf5/train");
  std::ofstream(dir / "write.py") << script;
  const std::string command =
      "/usr/bin/python3 " + (dir / "write.py").string() + " " + dir.path().string();
  REQUIRE(std::system(command.c_str()) == 0);
  const CosmoFlowDataset numpy(dir / "numpy", "train"), hdf5(dir / "hdf5", "train");
  CHECK(numpy.variant() == CosmoFlowVariant::numpy);
  CHECK(numpy.shape().depth == 6);
  check_regular_sample(load(numpy, 0), 6);
  REQUIRE(hdf5.size() == 2);
  check_regular_sample(load(hdf5, 0), 6);
  check_regular_sample(load(hdf5, 1), 6);
}

TEST_CASE("CosmoFlow reader: a bad file is a BadSample naming it, remembered",
          "[data][cosmoflow]") {
  ScratchDirectory dir("cosmoflow-bad");
  const fs::path train = dir / "train";
  SECTION("NumPy") {
    write_numpy(train, "a");  // the first file is good: it sets the edge
    NumpySample other;
    other.data_dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 2, 2, 4), }";
    other.counts.resize(2 * 2 * 2 * 4);
    write_numpy(train, "b-other-shape", other);
    NumpySample float64;
    float64.data_dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (4, 4, 4, 4), }";
    write_numpy(train, "c-float64", float64);
    NumpySample big_endian;
    big_endian.data_dict = "{'descr': '>i2', 'fortran_order': False, 'shape': (4, 4, 4, 4), }";
    write_numpy(train, "d-big-endian", big_endian);
    NumpySample fortran;
    fortran.data_dict = "{'descr': '<i2', 'fortran_order': True, 'shape': (4, 4, 4, 4), }";
    write_numpy(train, "e-fortran", fortran);
    NumpySample no_label;
    no_label.write_label = false;
    write_numpy(train, "f-no-label", no_label);
    NumpySample truncated;
    truncated.counts.resize(kCounts - 10);
    write_numpy(train, "g-truncated", truncated);
    NumpySample trailing;
    trailing.counts.resize(kCounts + 8);
    write_numpy(train, "h-trailing", trailing);
    NumpySample negative;
    negative.counts[5] = -3;
    write_numpy(train, "i-negative", negative);
    NumpySample nan_target;
    nan_target.targets[2] = std::numeric_limits<float>::quiet_NaN();
    write_numpy(train, "j-nan-target", nan_target);
    NumpySample label_shape;
    label_shape.label_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }";
    label_shape.targets.push_back(0.0f);
    write_numpy(train, "k-label-shape", label_shape);
    std::ofstream(train / "l-garbage_data.npy") << "this is not a numpy file at all";
    std::ofstream(train / "l-garbage_label.npy") << "nor this";
    NumpySample huge;
    huge.data_dict =
        "{'descr': '<i2', 'fortran_order': False, 'shape': (100000, 100000, 100000, 4), }";
    write_numpy(train, "m-huge-claim", huge);

    const CosmoFlowDataset dataset(dir.path(), "train");
    REQUIRE(dataset.size() == 13);
    check_regular_sample(load(dataset, 0));
    check_bad_samples(dataset, {{1, "the split's first file has (4, 4, 4, 4)"},
                                {2, "holds elements of type '<f8'"},
                                {3, "holds elements of type '>i2'"},
                                {4, "Fortran order"},
                                {5, "has no label file"},
                                {6, "is truncated"},
                                {7, "bytes after the"},
                                {8, "negative particle count -3"},
                                {9, "non-finite target 2"},
                                {10, "has targets of shape (5)"},
                                {11, "is not a NumPy .npy file"},
                                {12, "hardy reads samples of up to"}});
    // The good sample still loads after all that.
    check_regular_sample(load(dataset, 0));
  }
  SECTION("HDF5") {
    write_hdf5(train / "a.h5");
    write_hdf5(train / "b-other-shape.h5", {.edge = 2, .counts = regular_counts(2)});
    write_hdf5(train / "c-int32.h5", {.x_type = H5T_STD_I32LE});
    write_hdf5(train / "d-unsigned.h5", {.x_type = H5T_STD_U16LE});
    write_hdf5(train / "e-no-y.h5", {.write_y = false});
    write_hdf5(train / "f-truncated.h5");
    fs::resize_file(train / "f-truncated.h5", fs::file_size(train / "f-truncated.h5") - 100);
    std::ofstream(train / "g-garbage.h5") << "not HDF5";
    {
      h5::Handle foreign = h5::create_file(train / "h-foreign.h5");
      h5::write_dataset<float>(foreign.id(), "fields", std::vector<float>(4), {4});
    }
    Hdf5Sample negative;
    negative.counts[7] = -1;
    write_hdf5(train / "i-negative.h5", negative);
    Hdf5Sample infinite;
    infinite.targets[0] = std::numeric_limits<float>::infinity();
    write_hdf5(train / "j-infinite-target.h5", infinite);

    const CosmoFlowDataset dataset(dir.path(), "train");
    REQUIRE(dataset.size() == 10);
    check_regular_sample(load(dataset, 0));
    check_bad_samples(dataset, {{1, "the split's first file has (4, 4, 4, 4)"},
                                {2, "x of a type other than int16"},
                                {3, "x of a type other than int16"},
                                {4, "has no dataset y"},
                                {5, "truncated"},
                                {6, "is not an HDF5 file"},
                                {7, "has no dataset x"},
                                {8, "negative particle count -1"},
                                {9, "non-finite target 0"}});
  }
}

TEST_CASE("CosmoFlow reader: what cannot be a split is refused at construction",
          "[data][cosmoflow]") {
  ScratchDirectory dir("cosmoflow-refused");
  CHECK_THAT(message_of([&] { CosmoFlowDataset(dir.path(), "train"); }),
             Catch::Contains("does not exist"));
  fs::create_directories(dir / "train");
  CHECK_FALSE(hardy::core::is_cosmoflow_layout(dir.path()));
  CHECK_THAT(message_of([&] { CosmoFlowDataset(dir.path(), "train"); }),
             Catch::Contains("holds no CosmoFlow samples"));
  CHECK_THAT(message_of([&] { CosmoFlowDataset(dir.path(), "tests"); }),
             Catch::Contains("unknown CosmoFlow split"));
  write_numpy(dir / "train", "a");
  write_hdf5(dir / "train" / "b.h5");
  CHECK_THAT(message_of([&] { CosmoFlowDataset(dir.path(), "train"); }),
             Catch::Contains("holds both HDF5 samples"));
  fs::remove(dir / "train" / "b.h5");
  // A bad first file: the whole split is unusable (it sets the edge).
  NumpySample not_cube;
  not_cube.data_dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (4, 4, 2, 4), }";
  write_numpy(dir / "train", "0-first", not_cube);
  const std::string message = message_of([&] { CosmoFlowDataset(dir.path(), "train"); });
  CHECK_THAT(message, Catch::Contains("0-first_data.npy") && Catch::Contains("a cube"));
  // stats.h5 beside train/ makes it DeepCAM's layout.
  std::ofstream(dir / "stats.h5") << "";
  CHECK_FALSE(hardy::core::is_cosmoflow_layout(dir.path()));
}

TEST_CASE("parse_npy_header: NumPy's headers, and hostile ones refused before any allocation",
          "[data][cosmoflow]") {
  const auto header = parse_npy_header(
      npy_header("{'descr': '<i2', 'fortran_order': False, 'shape': (128, 128, 128, 4), }"));
  CHECK(header.descr == "<i2");
  CHECK_FALSE(header.fortran_order);
  CHECK(header.shape == std::vector<std::uint64_t>{128, 128, 128, 4});
  CHECK(header.data_offset % 64 == 0);
  CHECK(parse_npy_header(npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (), }"))
            .shape.empty());

  const auto refusal = [](const std::string& bytes) {
    return message_of([&] { parse_npy_header(bytes); });
  };
  CHECK_THAT(refusal("PK\x03\x04 a zip file"), Catch::Contains("not a NumPy .npy file"));
  // Version 2 with a 4 GiB header length: refused by its length, not read.
  std::string huge = "\x93NUMPY\x02";
  huge += std::string("\0\xff\xff\xff\xff", 5);
  CHECK_THAT(refusal(huge), Catch::Contains("NumPy's are at most"));
  CHECK_THAT(refusal(std::string("\x93NUMPY\x09\x00\x10\x00", 10) + std::string(16, ' ')),
             Catch::Contains("version 9.0"));
  CHECK_THAT(
      refusal(
          npy_header("{'descr': '<i2', 'fortran_order': False, 'shape': (4, 4), ").substr(0, 40)),
      Catch::Contains("truncated inside its .npy header"));
  CHECK_THAT(refusal(npy_header("{'descr': '<i2', 'fortran_order': False}")),
             Catch::Contains("without descr, fortran_order or shape"));
  CHECK_THAT(refusal(npy_header("{'descr': '<i2', 'fortran_order': False, 'shape': (4,), "
                                "'extra': 1}")),
             Catch::Contains("key 'extra'"));
  CHECK_THAT(refusal(npy_header("{'descr': '<i2', 'descr': '<i2', 'fortran_order': False, "
                                "'shape': (4,)}")),
             Catch::Contains("twice"));
  CHECK_THAT(refusal(npy_header("{'descr': '<i2', 'fortran_order': False, 'shape': "
                                "(99999999999999999999999, 4)}")),
             Catch::Contains("too large"));
  CHECK_THAT(refusal(npy_header("{'descr': '<i2', 'fortran_order': Maybe, 'shape': (4,)}")),
             Catch::Contains("fortran_order"));
  CHECK_THAT(refusal(npy_header("{'descr': '<i2', 'fortran_order': False, 'shape': (4, x)}")),
             Catch::Contains("not integers"));
  CHECK_THAT(refusal(npy_header("['descr', '<i2']")), Catch::Contains("not NumPy's"));
  CHECK_THAT(refusal(npy_header("{'descr': '<i2', 'fortran_order': False, 'shape': (4,)} x")),
             Catch::Contains("bytes after the dictionary"));
}
