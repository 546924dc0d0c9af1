// The DeepCAM layout (core/data/deepcam.hpp): the generator, the reader, and the reader's verdicts
// on bad files, against values worked out here from the files themselves.
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/deepcam.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "sample_fixtures.hpp"
#include "scratch_directory.hpp"

namespace fs = std::filesystem;
using namespace hardy;
using namespace hardy::core;
using namespace hardy::testing;

namespace {

std::vector<float> read_floats(const fs::path& file, const char* name) {
  h5::Handle handle = h5::open_file(file);
  return h5::read_dataset<float>(handle.id(), name);
}

// ---- hand-made files ----

void write_stats(const fs::path& root, std::vector<float> minval, std::vector<float> maxval) {
  h5::Handle file = h5::create_file(root / "stats.h5");
  h5::Handle group = h5::create_groups(file.id(), "climate");
  const std::int64_t count = 1;
  h5::write_dataset<std::int64_t>(group.id(), "count", std::span(&count, 1), {});
  const std::vector<float> zeros(16, 0.0f);
  h5::write_dataset<float>(group.id(), "mean", zeros, {16});
  h5::write_dataset<float>(group.id(), "sqmean", zeros, {16});
  h5::write_dataset<float>(group.id(), "minval", minval, {16});
  h5::write_dataset<float>(group.id(), "maxval", maxval, {16});
}

void write_unit_stats(const fs::path& root) {
  write_stats(root, std::vector<float>(16, 0.0f), std::vector<float>(16, 1.0f));
}

// What a hand-made sample file holds; tests spoil one part of it.
struct HandMade {
  int height = 4, width = 4;
  std::vector<float> data{};    // (H, W, 16)
  std::vector<float> labels{};  // (H, W), written as labels_0 and labels_1
  bool chunked = false, float64 = false, write_labels = true;
};

HandMade regular_sample(int height = 4, int width = 4) {
  HandMade sample{height, width};
  sample.data.resize(static_cast<std::size_t>(height) * width * 16);
  for (std::size_t k = 0; k < sample.data.size(); ++k) sample.data[k] = 0.01f * (k % 97);
  sample.labels.assign(static_cast<std::size_t>(height) * width, 0.0f);
  return sample;
}

void write_sample(const fs::path& path, const HandMade& sample) {
  h5::Handle file = h5::create_file(path);
  h5::Handle group = h5::create_groups(file.id(), "climate");
  const auto H = static_cast<h5::Extent>(sample.height), W = static_cast<h5::Extent>(sample.width);
  if (sample.float64 || sample.chunked) {
    h5::Handle data = h5::create_dataset(
        group.id(), "data", sample.float64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE, {H, W, 16},
        sample.chunked ? std::vector<h5::Extent>{1, W, 16} : std::vector<h5::Extent>{});
    REQUIRE(H5Dwrite(data.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                     sample.data.data()) >= 0);
  } else {
    h5::write_dataset<float>(group.id(), "data", sample.data, {H, W, 16});
  }
  if (sample.write_labels) {
    h5::write_dataset<float>(group.id(), "labels_0", sample.labels, {H, W});
    h5::write_dataset<float>(group.id(), "labels_1", sample.labels, {H, W});
  }
}

// ROOT with unit statistics and train/ holding a good first file and `second` as the second.
void write_pair(const fs::path& root, const HandMade& second) {
  write_unit_stats(root);
  fs::create_directories(root / "train");
  write_sample(root / "train" / "data-2000-01-01-00-1.h5", regular_sample());
  write_sample(root / "train" / "data-2000-01-01-01-1.h5", second);
}

DeepCamGenerateOptions small_dataset() {
  return {.train = 3, .validation = 2, .test = 1, .height = 32, .width = 48, .seed = 5};
}

}  // namespace

TEST_CASE("deepcam: generated files read back normalised by stats.h5", "[core]") {
  ScratchDirectory dir("deepcam");
  const fs::path root = dir.path() / "root";
  CHECK_FALSE(hardy::core::is_deepcam_layout(root));
  hardy::core::write_deepcam_dataset(root, small_dataset());
  CHECK(hardy::core::is_deepcam_layout(root));

  const DeepCamDataset train(root, "train");
  REQUIRE(train.size() == 3);
  CHECK(train.shape() == SampleShape{16, 32, 48});
  CHECK(train.files()[0].filename() == "data-2000-01-01-00-1.h5");
  CHECK(train.files()[2].filename() == "data-2000-01-01-02-1.h5");
  CHECK(DeepCamDataset(root, "validation").file(1).filename() == "data-2000-01-01-04-1.h5");
  CHECK(DeepCamDataset(root, "test").file(0).filename() == "data-2000-01-01-05-1.h5");
  CHECK(train.channel_names().front() == "TMQ");
  CHECK(train.describe().find("DeepCAM train split") != std::string::npos);
  CHECK(train.describe().find("3 samples of 16x32x48 (labels_0)") != std::string::npos);

  // stats.h5 covers the training files and nothing else.
  const std::vector<float> minval = read_floats(root / "stats.h5", "climate/minval");
  const std::vector<float> maxval = read_floats(root / "stats.h5", "climate/maxval");
  {
    h5::Handle stats = h5::open_file(root / "stats.h5");
    CHECK(h5::read_dataset<std::int64_t>(stats.id(), "climate/count") ==
          std::vector<std::int64_t>{3});
  }
  std::vector<float> low(16, 1e30f), high(16, -1e30f);
  for (const fs::path& file : train.files()) {
    const std::vector<float> data = read_floats(file, "climate/data");
    for (std::size_t k = 0; k < data.size(); ++k) {
      low[k % 16] = std::min(low[k % 16], data[k]);
      high[k % 16] = std::max(high[k % 16], data[k]);
    }
  }
  CHECK(low == minval);
  CHECK(high == maxval);
  // Physical units: TMQ in kg/m2, PS in Pa, T500 in K.
  CHECK(minval[0] >= 0.0f);
  CHECK(maxval[0] < 150.0f);
  CHECK(minval[6] > 8.0e4f);
  CHECK(minval[9] > 150.0f);

  const hardy::core::SyntheticClimate synthetic({16, 32, 48}, 6, 5);
  for (std::size_t i = 0; i < train.size(); ++i) {
    const Sample sample = load(train, i);
    const std::vector<float> data = read_floats(train.file(i), "climate/data");
    const std::vector<float> labels = read_floats(train.file(i), "climate/labels_0");
    for (int c = 0; c < 16; ++c)
      for (int p = 0; p < 32 * 48; ++p) {
        const double x = data[static_cast<std::size_t>(p) * 16 + c];
        const double expected = (x - minval[c]) / (static_cast<double>(maxval[c]) - minval[c]);
        REQUIRE(sample.fields[static_cast<std::size_t>(c) * 32 * 48 + p] ==
                Approx(expected).margin(1e-5));
      }
    for (int p = 0; p < 32 * 48; ++p) REQUIRE(sample.labels[p] == static_cast<int>(labels[p]));
    // labels_0 are the synthetic labels; TMQ is the synthetic TMQ in kg/m2.
    std::vector<float> fields(16 * 32 * 48);
    std::vector<std::int32_t> synthetic_labels(32 * 48);
    synthetic.load(i, fields, synthetic_labels);
    CHECK(sample.labels == synthetic_labels);
    for (int p = 0; p < 32 * 48; ++p)
      REQUIRE(data[static_cast<std::size_t>(p) * 16] ==
              Approx(std::max(0.0f, 24.0f + 14.0f * fields[p])).margin(1e-4));
  }
  // labels_1 is labels_0 grown: every labelled pixel keeps its class, and more are labelled.
  const std::vector<float> strict = read_floats(train.file(0), "climate/labels_0");
  const std::vector<float> relaxed = read_floats(train.file(0), "climate/labels_1");
  std::size_t strict_count = 0, relaxed_count = 0;
  for (std::size_t p = 0; p < strict.size(); ++p) {
    if (strict[p] != 0) REQUIRE(relaxed[p] == strict[p]);
    strict_count += strict[p] != 0;
    relaxed_count += relaxed[p] != 0;
  }
  CHECK(relaxed_count >= strict_count);
  const std::vector<float> stats = read_floats(train.file(0), "climate/labels_0_stats");
  REQUIRE(stats.size() == 7);
  CHECK(stats[0] == 32 * 48);
  CHECK(stats[1] + stats[2] + stats[3] == 32 * 48);
  CHECK(stats[4] + stats[5] + stats[6] == Approx(1.0));
  const std::vector<float> data_stats = read_floats(train.file(0), "climate/data_stats");
  REQUIRE(data_stats.size() == 4 * 16);
  CHECK(data_stats[16 + 6] >= data_stats[6]);  // max >= mean of PS

  // The same seed gives the same data; the validation split continues the synthetic indices.
  const fs::path again = dir.path() / "again";
  hardy::core::write_deepcam_dataset(again, small_dataset());
  const DeepCamDataset validation(root, "validation"), validation_again(again, "validation");
  CHECK(load(validation, 1) == load(validation_again, 1));
  std::vector<float> fields(16 * 32 * 48);
  std::vector<std::int32_t> synthetic_labels(32 * 48);
  synthetic.load(4, fields, synthetic_labels);
  CHECK(load(validation, 1).labels == synthetic_labels);
  // A second dataset into the same directories is refused instead of mixed in.
  CHECK_THROWS_AS(hardy::core::write_deepcam_dataset(root, small_dataset()), InvalidArgument);
}

TEST_CASE("deepcam: layout detection, splits and statistics", "[core]") {
  ScratchDirectory dir("deepcam");
  const fs::path root = dir.path();
  CHECK_FALSE(hardy::core::is_deepcam_layout(root));
  CHECK_THAT(message_of([&] { DeepCamDataset(root, "train"); }),
             Catch::Contains("train") && Catch::Contains("does not exist"));
  fs::create_directories(root / "train");
  CHECK_FALSE(hardy::core::is_deepcam_layout(root));
  CHECK_THAT(message_of([&] { DeepCamDataset(root, "train"); }), Catch::Contains("no .h5 files"));
  write_sample(root / "train" / "data-2000-01-01-00-1.h5", regular_sample());
  CHECK_THAT(message_of([&] { DeepCamDataset(root, "train"); }), Catch::Contains("stats.h5"));
  std::vector<float> minval(16, 0.0f), maxval(16, 1.0f);
  maxval[6] = 0.0f;
  write_stats(root, minval, maxval);
  CHECK(hardy::core::is_deepcam_layout(root));
  CHECK_THROWS_AS(DeepCamDataset(root, "train"), InvalidArgument);
  CHECK_THAT(message_of([&] { DeepCamDataset(root, "train"); }), Catch::Contains("PS"));
  write_unit_stats(root);
  CHECK(DeepCamDataset(root, "train").size() == 1);
  CHECK_THAT(message_of([&] { DeepCamDataset(root, "training"); }), Catch::Contains("training"));
  CHECK_THROWS_AS(DeepCamDataset(root, "train", {.label_set = 2}), InvalidArgument);

  // A bad first file is the dataset's problem, named at construction.
  HandMade chunked = regular_sample();
  chunked.chunked = true;
  write_sample(root / "train" / "data-2000-01-01-00-1.h5", chunked);
  const std::string message = message_of([&] { DeepCamDataset(root, "train"); });
  CHECK_THAT(message, Catch::Contains("data-2000-01-01-00-1.h5") && Catch::Contains("contiguous"));
}

TEST_CASE("deepcam: channel selection by name or index", "[core]") {
  using hardy::core::parse_channel_selection;
  CHECK(parse_channel_selection("TMQ, psl,3") == std::vector<int>{0, 7, 3});
  CHECK(parse_channel_selection("zbot") == std::vector<int>{15});
  CHECK(parse_channel_selection("15,0") == std::vector<int>{15, 0});
  CHECK_THAT(message_of([] { parse_channel_selection("TMQ,FOO"); }), Catch::Contains("'FOO'"));
  CHECK_THAT(message_of([] { parse_channel_selection("TMQ,0"); }),
             Catch::Contains("'0'") && Catch::Contains("repeats"));
  CHECK_THROWS_AS(parse_channel_selection("16"), InvalidArgument);
  CHECK_THROWS_AS(parse_channel_selection("-1"), InvalidArgument);
  CHECK_THROWS_AS(parse_channel_selection(""), InvalidArgument);
  CHECK_THROWS_AS(parse_channel_selection("TMQ,"), InvalidArgument);

  ScratchDirectory dir("deepcam");
  hardy::core::write_deepcam_dataset(dir.path(), small_dataset());
  const DeepCamDataset all(dir.path(), "train");
  const DeepCamDataset some(dir.path(), "train", {.channels = parse_channel_selection("PSL,TMQ")});
  CHECK(some.shape() == SampleShape{2, 32, 48});
  CHECK(some.channel_names() == std::vector<std::string>{"PSL", "TMQ"});
  CHECK(some.describe().find("channels PSL,TMQ") != std::string::npos);
  const Sample full = load(all, 1), picked = load(some, 1);
  const std::size_t plane = 32 * 48;
  CHECK(std::equal(picked.fields.begin(), picked.fields.begin() + plane,
                   full.fields.begin() + 7 * plane));
  CHECK(std::equal(picked.fields.begin() + plane, picked.fields.end(), full.fields.begin()));
  CHECK(picked.labels == full.labels);
  CHECK_THROWS_AS(DeepCamDataset(dir.path(), "train", {.channels = {0, 0}}), InvalidArgument);
  CHECK_THROWS_AS(DeepCamDataset(dir.path(), "train", {.channels = {16}}), InvalidArgument);
}

TEST_CASE("deepcam: crops are a pure function of (seed, index) and lie inside the grid", "[core]") {
  ScratchDirectory dir("deepcam");
  hardy::core::write_deepcam_dataset(dir.path(), small_dataset());
  const DeepCamDataset full(dir.path(), "train");
  const DeepCamOptions options{.crop_height = 16, .crop_width = 24, .seed = 9};
  const DeepCamDataset cropped(dir.path(), "train", options), again(dir.path(), "train", options);
  auto reseeded = options;
  reseeded.seed = 10;
  const DeepCamDataset other(dir.path(), "train", reseeded);
  CHECK(cropped.shape() == SampleShape{16, 16, 24});
  CHECK(cropped.describe().find("crop 16x24") != std::string::npos);
  bool any_moved = false;
  for (std::size_t i = 0; i < cropped.size(); ++i) {
    const Sample window = load(cropped, i), whole = load(full, i);
    CHECK(window == load(again, i));
    any_moved |= !(window == load(other, i));
    // The window is somewhere in the sample: find it.
    int matches = 0;
    for (int y0 = 0; y0 + 16 <= 32; ++y0)
      for (int x0 = 0; x0 + 24 <= 48; ++x0) {
        bool same = true;
        for (int c = 0; c < 16 && same; ++c)
          for (int y = 0; y < 16 && same; ++y)
            for (int x = 0; x < 24 && same; ++x)
              same = window.fields[(c * 16 + y) * 24 + x] ==
                         whole.fields[(c * 32 + y0 + y) * 48 + x0 + x] &&
                     window.labels[y * 24 + x] == whole.labels[(y0 + y) * 48 + x0 + x];
        matches += same;
      }
    CHECK(matches == 1);
  }
  CHECK(any_moved);
  CHECK_THROWS_AS(DeepCamDataset(dir.path(), "train", {.crop_height = 33, .crop_width = 8}),
                  InvalidArgument);
  CHECK_THROWS_AS(DeepCamDataset(dir.path(), "train", {.crop_height = 8, .crop_width = 0}),
                  InvalidArgument);
  CHECK_THAT(message_of([&] {
               DeepCamDataset(dir.path(), "train",
                              {.crop_height = 15, .crop_width = 24, .downsample = 2});
             }),
             Catch::Contains("15x24"));
  CHECK_THROWS_AS(DeepCamDataset(dir.path(), "train", {.downsample = 5}), InvalidArgument);
  CHECK_THROWS_AS(DeepCamDataset(dir.path(), "train", {.downsample = 0}), InvalidArgument);
}

TEST_CASE("deepcam: downsampling averages fields and takes the majority label, ties to the rarer",
          "[core]") {
  ScratchDirectory dir("deepcam");
  const fs::path root = dir.path();
  std::vector<float> minval(16, 0.0f), maxval(16, 1.0f);
  minval[3] = 10.0f;
  maxval[3] = 30.0f;
  write_stats(root, minval, maxval);
  fs::create_directories(root / "train");
  HandMade sample = regular_sample(4, 4);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      for (int c = 0; c < 16; ++c) sample.data[(y * 4 + x) * 16 + c] = 10.0f + y * 4 + x + c;
  // 2x2 blocks: {0,0,1,2} -> 0, {1,1,2,2} -> 2 (tie), {0,0,1,1} -> 1 (tie), {0,1,2,2} -> 2.
  sample.labels = {0, 0, 1, 1,  //
                   1, 2, 2, 2,  //
                   0, 0, 0, 1,  //
                   1, 1, 2, 2};
  write_sample(root / "train" / "data-2000-01-01-00-1.h5", sample);

  const DeepCamDataset plain(root, "train");
  const Sample whole = load(plain, 0);
  CHECK(whole.fields[0 * 16 + 1 * 4 + 2] == Approx(10.0f + 6));                 // channel 0, (1, 2)
  CHECK(whole.fields[3 * 16 + 2 * 4 + 1] == Approx((10.0 + 9 + 3 - 10) / 20));  // channel 3
  CHECK(whole.labels[1 * 4 + 1] == 2);

  const DeepCamDataset halved(root, "train", {.downsample = 2});
  CHECK(halved.shape() == SampleShape{16, 2, 2});
  const Sample small = load(halved, 0);
  CHECK(small.labels == std::vector<std::int32_t>{0, 2, 1, 2});
  for (int by = 0; by < 2; ++by)
    for (int bx = 0; bx < 2; ++bx)
      for (int c = 0; c < 16; ++c) {
        double mean = 0;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) mean += 10.0 + (by * 2 + dy) * 4 + bx * 2 + dx + c;
        mean /= 4;
        const double expected = (mean - minval[c]) / (maxval[c] - minval[c]);
        CHECK(small.fields[(c * 2 + by) * 2 + bx] == Approx(expected).epsilon(1e-6));
      }
  // Crop then downsample: a 2x2 crop by 2 is one block.
  const DeepCamDataset one(root, "train", {.crop_height = 2, .crop_width = 2, .downsample = 2});
  CHECK(one.shape() == SampleShape{16, 1, 1});
  const std::int32_t label = load(one, 0).labels[0];
  CHECK((label == 0 || label == 1 || label == 2));
}

TEST_CASE("deepcam: every kind of bad sample file is a BadSample naming it, every time", "[core]") {
  struct Case {
    const char* name;
    std::function<void(HandMade&)> spoil;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"missing labels", [](HandMade& s) { s.write_labels = false; }, "labels_0"},
      {"wrong shape", [](HandMade& s) { s = regular_sample(5, 4); }, "shape"},
      {"float64 fields", [](HandMade& s) { s.float64 = true; }, "float32"},
      {"chunked fields", [](HandMade& s) { s.chunked = true; }, "contiguous"},
      {"a NaN", [](HandMade& s) { s.data[7 * 16 + 2] = std::nanf(""); },
       "non-finite value of V850"},
      {"an infinity", [](HandMade& s) { s.data[0] = INFINITY; }, "non-finite"},
      {"label 3", [](HandMade& s) { s.labels[5] = 3.0f; }, "label 3"},
      {"label 0.5", [](HandMade& s) { s.labels[5] = 0.5f; }, "label 0.5"},
  };
  for (const Case& spoilt : cases) {
    SECTION(spoilt.name) {
      ScratchDirectory dir("deepcam");
      HandMade second = regular_sample();
      spoilt.spoil(second);
      write_pair(dir.path(), second);
      const DeepCamDataset dataset(dir.path(), "train");
      CHECK_NOTHROW(load(dataset, 0));
      for (int attempt = 0; attempt < 2; ++attempt) {
        try {
          load(dataset, 1);
          FAIL("no BadSample");
        } catch (const BadSample& error) {
          CHECK(error.index() == 1);
          CHECK(error.file() == dataset.file(1).string());
          CHECK_THAT(std::string(error.what()),
                     Catch::Contains("data-2000-01-01-01-1.h5") && Catch::Contains(spoilt.says));
        }
      }
      CHECK_NOTHROW(load(dataset, 0));
    }
  }
  SECTION("not an HDF5 file, and a truncated one") {
    ScratchDirectory dir("deepcam");
    write_pair(dir.path(), regular_sample());
    const fs::path second = dir.path() / "train" / "data-2000-01-01-01-1.h5";
    const fs::path third = dir.path() / "train" / "data-2000-01-01-02-1.h5";
    fs::copy_file(second, third);
    fs::resize_file(third, fs::file_size(third) / 2);
    std::ofstream(second, std::ios::trunc) << "not HDF5";
    const DeepCamDataset dataset(dir.path(), "train");
    CHECK_THROWS_AS(load(dataset, 1), BadSample);
    CHECK_THAT(message_of([&] { load(dataset, 1); }), Catch::Contains("not an HDF5 file"));
    CHECK_THROWS_AS(load(dataset, 2), BadSample);
    CHECK_THAT(message_of([&] { load(dataset, 2); }), Catch::Contains("data-2000-01-01-02-1.h5"));
  }
}

TEST_CASE("deepcam: the locator redirects reads to a copy; a truncated copy is a BadSample",
          "[core]") {
  ScratchDirectory dir("deepcam");
  const fs::path root = dir.path() / "root", staged = dir.path() / "staged";
  hardy::core::write_deepcam_dataset(root, small_dataset());
  fs::create_directories(staged);
  DeepCamDataset dataset(root, "train");
  const Sample original = load(dataset, 0);
  // The copy differs from the source (the test must see which one was read): rewrite its data.
  for (const fs::path& file : dataset.files()) fs::copy_file(file, staged / file.filename());
  {
    h5::Handle file = h5::open_file(staged / dataset.file(0).filename(), h5::FileMode::read_write);
    h5::Handle data = h5::open_dataset(file.id(), "climate/data");
    std::vector<float> values = h5::read_dataset<float>(file.id(), "climate/data");
    for (float& value : values) value += 1.0f;
    h5::detail::write_all(data.id(), h5::native_type(h5::NumberType::f32), values.data(),
                          values.size());
  }
  std::vector<fs::path> asked;
  std::mutex asked_mutex;
  dataset.set_file_locator([&](const fs::path& source) {
    const std::lock_guard lock(asked_mutex);
    asked.push_back(source);
    return staged / source.filename();
  });
  const Sample moved = load(dataset, 0);
  CHECK(asked == std::vector<fs::path>{dataset.file(0)});
  CHECK(moved.labels == original.labels);
  CHECK_FALSE(moved.fields == original.fields);
  const Sample staged_copy = load(dataset, 1);
  dataset.set_file_locator(nullptr);
  CHECK(load(dataset, 1) == staged_copy);  // an unchanged copy reads the same

  fs::resize_file(staged / dataset.file(2).filename(), 4096);
  dataset.set_file_locator([&](const fs::path& source) { return staged / source.filename(); });
  CHECK_THROWS_AS(load(dataset, 2), BadSample);
  CHECK_THAT(message_of([&] { load(dataset, 2); }),
             Catch::Contains("truncated") && Catch::Contains("staged"));
  fs::remove(staged / dataset.file(1).filename());
  CHECK_THAT(message_of([&] { load(dataset, 1); }), Catch::Contains("cannot be opened"));
}

TEST_CASE("deepcam: a symlinked split directory, and concurrent loads equal serial ones",
          "[core]") {
  ScratchDirectory dir("deepcam");
  const fs::path real = dir.path() / "real", linked = dir.path() / "linked";
  hardy::core::write_deepcam_dataset(real,
                                     {.train = 6, .validation = 1, .height = 32, .width = 48});
  fs::create_directories(linked);
  fs::copy_file(real / "stats.h5", linked / "stats.h5");
  fs::create_directory_symlink(real / "train", linked / "train");
  CHECK(hardy::core::is_deepcam_layout(linked));

  for (const DeepCamOptions& options :
       {DeepCamOptions{},
        DeepCamOptions{
            .channels = {3, 1}, .crop_height = 16, .crop_width = 16, .downsample = 4, .seed = 3}}) {
    const DeepCamDataset through_link(linked, "train", options);
    REQUIRE(through_link.size() == 6);
    std::vector<Sample> serial;
    {
      const DeepCamDataset direct(real, "train", options);
      for (std::size_t i = 0; i < direct.size(); ++i) serial.push_back(load(direct, i));
    }
    // Fresh files for the threads: they validate them concurrently too.
    std::vector<std::vector<Sample>> seen(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int round = 0; round < 3; ++round)
          for (std::size_t k = 0; k < through_link.size(); ++k)
            seen[t].push_back(load(through_link, (k + t) % through_link.size()));
      });
    for (std::thread& thread : threads) thread.join();
    for (int t = 0; t < 4; ++t)
      for (std::size_t k = 0; k < seen[t].size(); ++k)
        REQUIRE(seen[t][k] == serial[(k % through_link.size() + t) % through_link.size()]);
  }
}

TEST_CASE("deepcam: at full resolution, each value is the documented normalisation, bit for bit",
          "[core]") {
  // (x - minval) * (1 / (maxval - minval)), the inverse rounded to float once, the rest in
  // double: what the per-pixel path computes, so that the full-resolution fast path changes no
  // job's data.
  ScratchDirectory dir("deepcam");
  const fs::path root = dir.path() / "root";
  hardy::core::write_deepcam_dataset(root, small_dataset());
  const std::vector<float> minval = read_floats(root / "stats.h5", "climate/minval");
  const std::vector<float> maxval = read_floats(root / "stats.h5", "climate/maxval");
  hardy::core::DeepCamOptions options;
  options.channels = {9, 0, 15};
  const DeepCamDataset train(root, "train", options);
  const int plane = 32 * 48;
  for (std::size_t i = 0; i < train.size(); ++i) {
    const Sample sample = load(train, i);
    const std::vector<float> data = read_floats(train.file(i), "climate/data");
    for (std::size_t c = 0; c < options.channels.size(); ++c) {
      const int stored = options.channels[c];
      const auto inverse =
          static_cast<float>(1.0 / (static_cast<double>(maxval[stored]) - minval[stored]));
      for (int p = 0; p < plane; ++p) {
        const double x = data[static_cast<std::size_t>(p) * 16 + stored];
        const auto expected = static_cast<float>((x - minval[stored]) * inverse);
        REQUIRE(sample.fields[c * plane + p] == expected);
      }
    }
  }
}
