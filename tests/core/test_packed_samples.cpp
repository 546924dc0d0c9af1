// Packed samples (core/data/packed_samples.hpp): what `hardy data pack` writes reads back as the
// source's samples to bf16's precision, and the reader's verdicts on damaged files.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <vector>

#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/data/deepcam.hpp"
#include "hardy/core/data/packed_samples.hpp"
#include "hardy/core/data/sample_cache.hpp"
#include "hardy/core/support/error.hpp"
#include "sample_fixtures.hpp"
#include "scratch_directory.hpp"

namespace fs = std::filesystem;
using namespace hardy;
using namespace hardy::core;
using namespace hardy::testing;

namespace {

// A source of fixed samples, one of which may hold a value bf16 cannot or a bad label.
class FixedSource final : public hardy::core::SampleSource {
 public:
  explicit FixedSource(SampleShape shape, std::size_t count) : shape_(shape), count_(count) {}
  std::size_t size() const override { return count_; }
  SampleShape shape() const override { return shape_; }
  void load(std::size_t index, std::span<float> fields,
            std::span<std::int32_t> labels) const override {
    check_load_arguments(index, fields, labels);
    for (std::size_t i = 0; i < fields.size(); ++i)
      fields[i] = static_cast<float>(index) + 0.001f * static_cast<float>(i);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 3);
    if (index == huge_at) fields[5] = std::numeric_limits<float>::max();
    if (index == bad_at) throw BadSample(index, "sample-3.h5", "is truncated");
  }
  std::string describe() const override { return "fixed"; }
  std::size_t huge_at = static_cast<std::size_t>(-1), bad_at = static_cast<std::size_t>(-1);

 private:
  SampleShape shape_;
  std::size_t count_;
};

// Overwrites `bytes` at `offset` of `file`.
void patch(const fs::path& file, std::uint64_t offset, const std::vector<char>& bytes) {
  std::fstream out(file, std::ios::in | std::ios::out | std::ios::binary);
  out.seekp(static_cast<std::streamoff>(offset));
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("packed samples: what is packed reads back to bf16's precision, labels exactly",
          "[core]") {
  ScratchDirectory scratch("packed-roundtrip");
  const SyntheticClimate train({4, 16, 24}, 6, 7), validation({4, 16, 24}, 3, 8);
  const auto report = hardy::core::pack_dataset({{"train", &train}, {"validation", &validation}},
                                                scratch.path() / "packed", 3);
  CHECK(report.samples.at("train") == 6);
  CHECK(report.samples.at("validation") == 3);
  CHECK(report.bytes == 9 * (32 + 2 * 4 * 16 * 24 + 16 * 24));
  const fs::path root = scratch.path() / "packed";
  CHECK(hardy::core::is_packed_layout(root));
  CHECK(hardy::core::dataset_layout(root) == hardy::core::DatasetLayout::packed);
  CHECK(hardy::core::packed_channels(root) == 4);

  for (const auto& [name, source] :
       {std::pair{"train", &train}, std::pair{"validation", &validation}}) {
    const PackedSamples packed(root, name);
    REQUIRE(packed.size() == source->size());
    CHECK(packed.shape() == source->shape());
    CHECK(packed.channel_names() == source->channel_names());
    CHECK(packed.files().size() == source->size());
    for (std::size_t i = 0; i < packed.size(); ++i) {
      const auto original = load(*source, i), read = load(packed, i);
      CHECK(read.labels == original.labels);
      double worst = 0;
      for (std::size_t k = 0; k < read.fields.size(); ++k)
        worst =
            std::max(worst, std::abs(static_cast<double>(read.fields[k]) - original.fields[k]) /
                                std::max(1e-30, std::abs(static_cast<double>(original.fields[k]))));
      CHECK(worst <= 1.0 / 256);  // bf16 keeps 8 significant bits: half a unit in the last place
    }
  }
  // Reading through a locator (a staged copy) gives the same samples.
  PackedSamples staged(root, "train");
  const fs::path copy = scratch.path() / "copy.hpk";
  fs::copy_file(staged.files()[2], copy);
  staged.set_file_locator(
      [&](const fs::path& source) { return source == staged.files()[2] ? copy : source; });
  CHECK(load(staged, 2) == load(PackedSamples(root, "train"), 2));
  CHECK_THAT(message_of([&] { PackedSamples(root, "test"); }),
             Catch::Contains("has no test split"));
  // A directory that holds a dataset already is not packed into.
  CHECK_THAT(message_of([&] {
               hardy::core::pack_dataset({{"train", &train}}, root, 1);
             }),
             Catch::Contains("is not empty"));
}

TEST_CASE("packed samples: a damaged file is a bad sample that names it", "[core]") {
  ScratchDirectory scratch("packed-damage");
  const FixedSource source({2, 8, 8}, 4);
  const fs::path root = scratch.path() / "packed";
  hardy::core::pack_dataset({{"train", &source}}, root, 2);
  const PackedSamples packed(root, "train");
  const auto& files = packed.files();
  // Both ways of reading give the same verdict.
  const auto bad = [&](std::size_t index) {
    std::string verdict[2] = {"(no exception)", "(no exception)"};
    for (int as_stored = 0; as_stored < 2; ++as_stored) {
      try {
        if (as_stored == 1) {
          std::vector<std::byte> fields(2 * packed.shape().field_elements());
          std::vector<std::int32_t> labels(packed.shape().label_elements());
          packed.load_stored(index, fields, labels);
        } else {
          load(packed, index);
        }
      } catch (const BadSample& e) {
        CHECK(e.index() == index);
        CHECK(e.file() == files[index].string());
        verdict[as_stored] = e.what();
      }
    }
    CHECK(verdict[0] == verdict[1]);
    return verdict[0];
  };
  CHECK(load(packed, 0).labels[4] == 1);

  fs::resize_file(files[0], fs::file_size(files[0]) - 1);
  CHECK_THAT(bad(0), Catch::Contains("bytes; a packed sample of 2x8x8 has"));
  patch(files[1], 16, {9});  // the channel count in the header
  CHECK_THAT(bad(1), Catch::Contains("is not a packed bf16 sample of 2x8x8"));
  patch(files[2], 32 + 2 * (64 + 8 * 3 + 5), {'\x80', '\x7f'});  // +inf in channel 1, row 3, col 5
  CHECK_THAT(bad(2), Catch::Contains("non-finite field (inf) in channel 1 at row 3, column 5"));
  patch(files[3], 32 + 2 * 128 + 8 * 2 + 1, {7});  // row 2, column 1
  CHECK_THAT(bad(3), Catch::Contains("has label 7 at row 2, column 1"));
  fs::remove(files[3]);
  CHECK_THAT(bad(3), Catch::Contains("cannot be opened"));
}

TEST_CASE("packed samples: what bf16 cannot hold, or a source's bad sample, stops the pack",
          "[core]") {
  ScratchDirectory scratch("packed-refused");
  FixedSource source({2, 8, 8}, 4);
  source.huge_at = 2;
  CHECK_THAT(message_of([&] {
               hardy::core::pack_dataset({{"train", &source}}, scratch.path() / "a", 2);
             }),
             Catch::Contains("sample 2 of the train split has field value"));
  CHECK_FALSE(hardy::core::is_packed_layout(scratch.path() / "a"));  // no packed.json
  source.huge_at = static_cast<std::size_t>(-1);
  source.bad_at = 3;
  CHECK(message_of([&] {
          hardy::core::pack_dataset({{"train", &source}}, scratch.path() / "d", 2);
        }) == "sample-3.h5: is truncated");
  const FixedSource other({3, 8, 8}, 2);
  FixedSource fine({2, 8, 8}, 2);
  CHECK_THAT(
      message_of([&] {
        hardy::core::pack_dataset({{"train", &fine}, {"validation", &other}}, scratch.path() / "b",
                                  1);
      }),
      Catch::Contains("the validation split has samples of 3x8x8, the train split of 2x8x8"));
  CHECK_THAT(message_of([&] {
               hardy::core::pack_dataset({{"extra", &fine}}, scratch.path() / "c", 1);
             }),
             Catch::Contains("not 'extra'"));
}

TEST_CASE(
    "packed samples: read as stored, through a range and a cache, they widen to what load gives",
    "[core]") {
  ScratchDirectory scratch("packed-stored");
  const SyntheticClimate train({4, 16, 24}, 6, 7);
  const fs::path root = scratch.path() / "packed";
  hardy::core::pack_dataset({{"train", &train}}, root, 2);
  auto packed = std::make_unique<PackedSamples>(root, "train");
  const auto reference = [&](std::size_t i) { return load(PackedSamples(root, "train"), i); };
  const std::size_t values = packed->shape().field_elements();
  CHECK(packed->stored_dtype() == hardy::core::DType::bf16);
  hardy::core::CachedSamples cache(std::move(packed), std::size_t{1} << 20);
  const hardy::core::SampleRange range(cache, 2, 3);
  CHECK(range.stored_dtype() == hardy::core::DType::bf16);
  for (int pass = 0; pass < 2; ++pass) {  // the second from the cache
    for (std::size_t i = 0; i < range.size(); ++i) {
      std::vector<std::byte> stored(2 * values);
      std::vector<std::int32_t> labels(range.shape().label_elements());
      range.load_stored(i, stored, labels);
      std::vector<float> widened(values);
      hardy::core::widen_to_f32(hardy::core::DType::bf16, stored, widened);
      const auto expected = reference(2 + i);
      CHECK(widened == expected.fields);
      CHECK(labels == expected.labels);
      CHECK(load(range, i) == expected);
    }
  }
  // Kept as stored: half the bytes of f32 fields.
  CHECK(cache.cached_bytes() == 3 * (2 * values + 4 * range.shape().label_elements()));
  std::vector<std::byte> wrong(3);
  std::vector<std::int32_t> labels(range.shape().label_elements());
  CHECK_THROWS_AS(range.load_stored(0, wrong, labels), InvalidArgument);
  // A source that holds f32 serves the stored form through load().
  std::vector<std::byte> as_f32(4 * values);
  train.load_stored(1, as_f32, labels);
  std::vector<float> f32_fields(values);
  hardy::core::widen_to_f32(hardy::core::DType::f32, as_f32, f32_fields);
  CHECK(f32_fields == load(train, 1).fields);
}
