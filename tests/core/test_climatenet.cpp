// The ClimateNet layout (core/data/climatenet.hpp): statistics, the reader and its verdicts on bad
// files, against values worked out here. Files are written with HDF5 as netCDF-4 lays them out
// (each variable a dataset at the file's root); tests/jobs/climatenet_data.py reads files that
// netCDF4 itself wrote.
#include <fmt/format.h>
#include <hdf5.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "hardy/core/data/climatenet.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/hdf5.hpp"
#include "sample_fixtures.hpp"
#include "scratch_directory.hpp"

namespace fs = std::filesystem;
using namespace hardy::core;
using namespace hardy::testing;

namespace {

constexpr int kH = 8, kW = 12;

// The value of variable c at (y, x) in file k: distinct per variable, file and pixel (no two
// windows of a file alike), and in the variable's own range (PS around 1e5, as in the release).
float value(int k, int c, int y, int x) {
  return static_cast<float>((c == 6 ? 1.0e5 : 10.0 * c) + 0.5 * k + 0.25 * y - 0.125 * x +
                            0.01 * y * x);
}

int label(int k, int y, int x) { return (y + x + k) % 3; }

struct FileSpec {
  bool labels_time_axis = true;
  std::vector<std::string> skip{};  // variables left out
  bool labels_as_float = false;
};

void write_file(const fs::path& path, int k, const FileSpec& spec = {}) {
  h5::Handle file = h5::create_file(path);
  for (int c = 0; c < 16; ++c) {
    const std::string name(kClimateChannelNames[c]);
    if (std::find(spec.skip.begin(), spec.skip.end(), name) != spec.skip.end()) continue;
    std::vector<float> values;
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) values.push_back(value(k, c, y, x));
    h5::write_dataset<float>(file.id(), name, values, {1, kH, kW});
  }
  if (std::find(spec.skip.begin(), spec.skip.end(), "LABELS") != spec.skip.end()) return;
  std::vector<std::int64_t> labels;
  std::vector<double> float_labels;
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      labels.push_back(label(k, y, x));
      float_labels.push_back(label(k, y, x));
    }
  const std::vector<h5::Extent> dims =
      spec.labels_time_axis ? std::vector<h5::Extent>{1, kH, kW} : std::vector<h5::Extent>{kH, kW};
  if (spec.labels_as_float)
    h5::write_dataset<double>(file.id(), "LABELS", float_labels, dims);
  else
    h5::write_dataset<std::int64_t>(file.id(), "LABELS", labels, dims);
}

// ROOT/train/ with `train` files and ROOT/test/ with `test`, file k holding sample k.
void write_set(const fs::path& root, int train, int test) {
  fs::create_directories(root / "train");
  fs::create_directories(root / "test");
  for (int k = 0; k < train + test; ++k)
    write_file(root / (k < train ? "train" : "test") / fmt::format("data-{:02d}.nc", k), k,
               {.labels_time_axis = k % 2 == 0});
}

// Two train files and ClimateNet's own statistics file (config.json, holding `config_text`)
// beside them, in a fresh scratch directory.
struct TwoFilesAndConfig {
  explicit TwoFilesAndConfig(std::string_view config_text) {
    write_set(root, 2, 0);
    std::ofstream(config) << config_text;
  }
  const ScratchDirectory scratch{"climatenet"};
  const fs::path root = scratch / "set";
  const fs::path config = scratch / "config.json";
};

// Mean and std of variable c over train files [0, files), in double.
std::pair<double, double> moments(int c, int files) {
  double sum = 0, squares = 0;
  const double n = static_cast<double>(files) * kH * kW;
  for (int k = 0; k < files; ++k)
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) sum += value(k, c, y, x);
  const double mean = sum / n;
  for (int k = 0; k < files; ++k)
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) squares += std::pow(value(k, c, y, x) - mean, 2);
  return {mean, std::sqrt(squares / n)};
}

}  // namespace

TEST_CASE("climatenet: statistics over train/ are computed once, kept beside the data", "[core]") {
  const ScratchDirectory scratch("climatenet");
  const fs::path root = scratch / "set";
  write_set(root, 3, 1);
  REQUIRE(hardy::core::is_climatenet_layout(root));
  REQUIRE(hardy::core::dataset_layout(root) == hardy::core::DatasetLayout::climatenet);
  CHECK(hardy::core::held_out_split(root) == "test");

  const ClimateNetDataset train(root, "train");
  const fs::path stats = root / std::string(hardy::core::kClimateNetStatsFile);
  REQUIRE(fs::is_regular_file(stats));
  const auto statistics = hardy::core::read_climatenet_statistics(stats);
  CHECK(statistics.files == 3);
  for (int c = 0; c < 16; ++c) {
    const auto [mean, std] = moments(c, 3);
    const auto& got = statistics.fields.at(std::string(kClimateChannelNames[c]));
    CHECK(got.mean == Approx(mean).epsilon(1e-12));
    CHECK(got.std == Approx(std).epsilon(1e-9));
  }
  // Kept: a second reader does not rewrite the file.
  const auto written = fs::last_write_time(stats);
  const ClimateNetDataset test(root, "test");
  CHECK(fs::last_write_time(stats) == written);
  CHECK(test.size() == 1);
  CHECK(train.shape() == SampleShape{16, kH, kW});

  // Every value is (x - mean) / std; labels as stored, with or without the time axis.
  for (std::size_t index = 0; index < 3; ++index) {
    const Sample sample = load(train, index);
    const int k = static_cast<int>(index);
    for (int c : {0, 6, 15})
      for (int y : {0, kH - 1})
        for (int x : {0, 5, kW - 1}) {
          const auto& s = statistics.fields.at(std::string(kClimateChannelNames[c]));
          CHECK(sample.fields[(c * kH + y) * kW + x] ==
                Approx((value(k, c, y, x) - s.mean) / s.std).margin(1e-5));
        }
    for (int y = 0; y < kH; ++y)
      for (int x = 0; x < kW; ++x) CHECK(sample.labels[y * kW + x] == label(k, y, x));
  }
  CHECK_THAT(train.describe(),
             Catch::Contains("ClimateNet train split") && Catch::Contains("3 samples of 16x8x12"));
}

TEST_CASE("climatenet: given statistics (ClimateNet's config.json), variables, crop, downsample",
          "[core]") {
  const TwoFilesAndConfig set(
      R"({"architecture": "cgnet", "fields": {"TMQ": {"mean": 1.0, "std": 2.0},
    "PSL": {"mean": 70.0, "std": 4.0}}, "labels": ["Background", "Tropical Cyclone", "Atmospheric River"]})");
  const fs::path &root = set.root, &config = set.config;

  ClimateNetOptions options{.channels = {7, 0}, .statistics = config};
  const ClimateNetDataset dataset(root, "train", options);
  CHECK_FALSE(fs::exists(root / std::string(hardy::core::kClimateNetStatsFile)));
  const Sample sample = load(dataset, 1);
  CHECK(sample.fields[0] == Approx((value(1, 7, 0, 0) - 70.0) / 4.0));
  CHECK(sample.fields[kH * kW + 3] == Approx((value(1, 0, 0, 3) - 1.0) / 2.0));
  CHECK(dataset.channel_names() == std::vector<std::string>{"PSL", "TMQ"});

  // A variable the statistics lack is named, with the way out.
  options.channels = {0, 3};
  const auto missing = message_of([&] { ClimateNetDataset(root, "train", options); });
  CHECK_THAT(missing, Catch::Contains("UBOT") && Catch::Contains("--channels"));

  // Crop 4x6 downsampled by 2: block means of the window at the sample's fixed origin, labels the
  // block majority with ties to the higher class.
  options = {.channels = {0},
             .crop_height = 4,
             .crop_width = 6,
             .downsample = 2,
             .seed = 9,
             .statistics = config};
  const ClimateNetDataset cropped(root, "train", options);
  REQUIRE(cropped.shape() == SampleShape{1, 2, 3});
  const Sample a = load(cropped, 0), b = load(cropped, 0);
  CHECK(a.fields == b.fields);
  // Find the window: the block mean of TMQ at output (0, 0) is value at (y0 + 0.5, x0 + 0.5).
  const double mean00 = a.fields[0] * 2.0 + 1.0;
  bool found = false;
  for (int y0 = 0; y0 + 4 <= kH && !found; ++y0)
    for (int x0 = 0; x0 + 6 <= kW && !found; ++x0) {
      double block = 0;
      for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) block += value(0, 0, y0 + dy, x0 + dx) / 4.0;
      if (std::abs(block - mean00) > 1e-4) continue;
      found = true;
      for (int oy = 0; oy < 2; ++oy)
        for (int ox = 0; ox < 3; ++ox) {
          int votes[3] = {};
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx) ++votes[label(0, y0 + oy * 2 + dy, x0 + ox * 2 + dx)];
          int winner = 0;
          for (int c = 1; c < 3; ++c)
            if (votes[c] >= votes[winner]) winner = c;
          CHECK(a.labels[oy * 3 + ox] == winner);
        }
    }
  CHECK(found);
}

TEST_CASE("climatenet: every kind of bad sample file is a BadSample naming it, every time",
          "[core]") {
  const TwoFilesAndConfig set(
      R"({"fields": {"TMQ": {"mean": 0, "std": 1}, "U850": {"mean": 0, "std": 1}}})");
  const fs::path &root = set.root, &config = set.config;
  const ClimateNetOptions options{.channels = {0, 1}, .statistics = config};

  const auto verdict = [&](const std::function<void(const fs::path&)>& spoil) {
    const fs::path bad = root / "train" / "data-99.nc";
    spoil(bad);
    const ClimateNetDataset dataset(root, "train", options);
    REQUIRE(dataset.size() == 3);
    const std::string first = message_of([&] { load(dataset, 2); });
    CHECK_THROWS_AS(load(dataset, 2), hardy::BadSample);
    CHECK(message_of([&] { load(dataset, 2); }) == first);
    CHECK_NOTHROW(load(dataset, 0));
    fs::remove(bad);
    return first;
  };
  CHECK_THAT(verdict([](const fs::path& p) { write_file(p, 5, {.skip = {"U850"}}); }),
             Catch::Contains("data-99.nc") && Catch::Contains("has no variable U850"));
  CHECK_THAT(verdict([](const fs::path& p) { write_file(p, 5, {.skip = {"LABELS"}}); }),
             Catch::Contains("has no variable LABELS"));
  CHECK_THAT(verdict([](const fs::path& p) { std::ofstream(p) << "CDF\x01 classic"; }),
             Catch::Contains("netCDF-3"));
  CHECK_THAT(verdict([](const fs::path& p) { std::ofstream(p) << "not a file"; }),
             Catch::Contains("not a netCDF-4 (HDF5) file"));
  CHECK_THAT(verdict([](const fs::path& p) {
               write_file(p, 5);
               fs::resize_file(p, fs::file_size(p) / 2);
             }),
             Catch::Contains("data-99.nc"));
  CHECK_THAT(verdict([](const fs::path& p) {
               h5::Handle file = h5::create_file(p);
               const std::vector<float> nan(kH * kW, std::nanf(""));
               h5::write_dataset<float>(file.id(), "TMQ", nan, {1, kH, kW});
               h5::write_dataset<float>(file.id(), "U850", nan, {1, kH, kW});
               h5::write_dataset<std::int64_t>(file.id(), "LABELS",
                                               std::vector<std::int64_t>(kH * kW, 0), {kH, kW});
             }),
             Catch::Contains("non-finite value of TMQ"));
  CHECK_THAT(verdict([](const fs::path& p) {
               h5::Handle file = h5::create_file(p);
               const std::vector<float> zeros(kH * kW, 0.0f);
               h5::write_dataset<float>(file.id(), "TMQ", zeros, {1, kH, kW});
               h5::write_dataset<float>(file.id(), "U850", zeros, {1, kH, kW});
               std::vector<std::int64_t> labels(kH * kW, 0);
               labels[13] = 4;
               h5::write_dataset<std::int64_t>(file.id(), "LABELS", labels, {kH, kW});
             }),
             Catch::Contains("label 4 at row 1, column 1"));
  CHECK_THAT(verdict([](const fs::path& p) {
               h5::Handle file = h5::create_file(p);
               const std::vector<float> zeros(2 * kH * kW, 0.0f);
               h5::write_dataset<float>(file.id(), "TMQ", zeros, {2, kH, kW});
             }),
             Catch::Contains("2 time steps"));
  CHECK_THAT(verdict([](const fs::path& p) {
               h5::Handle file = h5::create_file(p);
               h5::write_dataset<float>(file.id(), "TMQ", std::vector<float>(kH * (kW - 1), 0.0f),
                                        {1, kH, kW - 1});
             }),
             Catch::Contains("grid is 8 x 12"));
  CHECK_THAT(verdict([](const fs::path& p) {
               h5::Handle file = h5::create_file(p);
               h5::write_dataset<std::int32_t>(file.id(), "TMQ",
                                               std::vector<std::int32_t>(kH * kW, 0), {1, kH, kW});
             }),
             Catch::Contains("integers (packed)"));
  // A float _FillValue marks missing values.
  CHECK_THAT(verdict([](const fs::path& p) {
               write_file(p, 5);
               h5::Handle file = h5::open_file(p, h5::FileMode::read_write);
               h5::Handle tmq = h5::open_dataset(file.id(), "TMQ");
               h5::write_attribute(tmq.id(), "_FillValue", value(5, 0, 0, 2));
             }),
             Catch::Contains("missing value (_FillValue) of TMQ at row 0, column 2"));
}

TEST_CASE("climatenet: scale_factor and add_offset unpack, float labels read, reads go to the copy",
          "[core]") {
  const ScratchDirectory scratch("climatenet");
  const fs::path root = scratch / "set";
  fs::create_directories(root / "train");
  write_file(root / "train" / "a.nc", 0, {.labels_as_float = true});
  {
    h5::Handle file = h5::create_file(root / "train" / "b.nc");
    for (int c = 0; c < 16; ++c) {
      std::vector<float> packed;
      for (int y = 0; y < kH; ++y)
        for (int x = 0; x < kW; ++x)
          packed.push_back(static_cast<float>((value(1, c, y, x) - 100.0) / 0.5));
      h5::Handle dataset = h5::create_dataset(file.id(), std::string(kClimateChannelNames[c]),
                                              H5T_IEEE_F32LE, {1, kH, kW});
      h5::write_rows<float>(dataset.id(), 0, 1, packed);
      h5::write_attribute(dataset.id(), "scale_factor", 0.5);
      h5::write_attribute(dataset.id(), "add_offset", 100.0);
    }
    h5::write_dataset<std::int64_t>(file.id(), "LABELS", std::vector<std::int64_t>(kH * kW, 1),
                                    {kH, kW});
  }
  const fs::path config = scratch / "unit.json";
  {
    nlohmann::json fields;
    for (const auto& name : kClimateChannelNames)
      fields[std::string(name)] = {{"mean", 0}, {"std", 1}};
    std::ofstream(config) << nlohmann::json{{"fields", fields}}.dump();
  }
  ClimateNetDataset dataset(root, "train", {.statistics = config});
  const Sample unpacked = load(dataset, 1);
  CHECK(unpacked.fields[(6 * kH + 2) * kW + 3] == Approx(value(1, 6, 2, 3)).epsilon(1e-6));
  CHECK(unpacked.labels[5] == 1);
  CHECK(load(dataset, 0).labels[kW + 1] == label(0, 1, 1));

  // Reads go to the locator's copy: a copy that differs shows in the values.
  const fs::path copies = scratch / "copies";
  fs::create_directories(copies);
  write_file(copies / "a.nc", 3);
  dataset.set_file_locator([&](const fs::path& source) {
    return source.filename() == "a.nc" ? copies / "a.nc" : source;
  });
  CHECK(load(dataset, 0).fields[0] == Approx(value(3, 0, 0, 0)));
  fs::resize_file(copies / "a.nc", 100);
  CHECK_THAT(message_of([&] { load(dataset, 0); }), Catch::Contains("read from"));
}
