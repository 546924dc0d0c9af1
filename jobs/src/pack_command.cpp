// `hardy data pack`: a DeepCAM- or ClimateNet-layout dataset read once as training reads it (the
// window, channels and normalisation applied) and written as bf16 samples of their own, which
// training then reads with one read and a widening per sample (packed_samples.hpp, docs/data.md).
#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "command_line.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/data/deepcam.hpp"
#include "hardy/core/data/packed_samples.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/jobs/train_spec.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kPackUsage =
    "Usage: hardy data pack --dataset ROOT --out DIR [--split all] [--threads N]\n"
    "                       [--labels 0|1] [--channels LIST] [--crop H,W] [--downsample K]\n"
    "                       [--normalization FILE] [--seed S]\n\n"
    "Reads a DeepCAM- or ClimateNet-layout dataset as `hardy train` would with the same window "
    "options,\n"
    "and writes every sample normalised, in the (C, H, W) order the step takes, as bf16 fields "
    "and int8\n"
    "labels: half the bytes of the fp32 fields and nothing left to convert but the widening. "
    "Train on\n"
    "DIR (`hardy train --dataset DIR`, with --stage-to as for the published layouts); the window "
    "options\n"
    "are then fixed by DIR/packed.json. Pack once, on the parallel file system; every job "
    "reads the result.\n";

}  // namespace

po::options_description data_pack_options() {
  po::options_description options("hardy data pack options");
  options.add_options()("help,h", "print this help")(
      "dataset", po::value<std::string>(),
      "dataset root (DeepCAM: ROOT/stats.h5, ROOT/train/, ...; ClimateNet: ROOT/train/*.nc, ...)")(
      "out", po::value<std::string>(), "output directory (created; must be new or empty)")(
      "split", po::value<std::string>()->default_value("all"), "train, validation, test or all")(
      "threads", po::value<int>()->default_value(4), "samples packed at once")(
      "labels", po::value<int>()->default_value(0),
      "DeepCAM layout: label set 0 (labels_0) or 1 (labels_1)")(
      "channels", po::value<std::string>()->default_value("all"),
      "input channels by name or index, e.g. TMQ,U850,V850,PSL (all: the 16)")(
      "crop", po::value<std::string>()->default_value("none"),
      "an H,W window of each sample, e.g. 384,576 (its position a pure function of --seed and the "
      "sample)")("downsample", po::value<int>()->default_value(1),
                 "average KxK blocks of the fields (labels: the block's majority class)")(
      "normalization", po::value<std::string>()->default_value("auto"),
      "ClimateNet layout: per-variable mean and std (as `hardy train --normalization`)")(
      "seed", po::value<std::uint64_t>()->default_value(1),
      "crop positions (as `hardy train --seed`)");
  return options;
}

int data_pack_command(const std::vector<std::string>& args) {
  const auto options = data_pack_options();
  po::variables_map vm;
  if (!parse_command_line(args, options, {"hardy data pack", kPackUsage}, vm)) return 0;
  if (!vm.count("dataset")) throw InvalidArgument("--dataset ROOT is required");
  if (!vm.count("out")) throw InvalidArgument("--out DIR is required");
  core::DataSpec spec;
  spec.synthetic = false;
  spec.dataset = vm["dataset"].as<std::string>();
  const core::DatasetLayout layout = core::dataset_layout(spec.dataset);
  if (layout != core::DatasetLayout::deepcam && layout != core::DatasetLayout::climatenet)
    throw InvalidArgument(fmt::format(
        "{} is not a dataset in the DeepCAM layout (ROOT/stats.h5 and ROOT/train/) or ClimateNet's "
        "(ROOT/train/*.nc){}",
        spec.dataset.string(),
        layout == core::DatasetLayout::packed ? "; it is packed already" : ""));
  const int threads = vm["threads"].as<int>();
  if (threads < 1) throw InvalidArgument("--threads must be at least 1");
  auto& deepcam = spec.deepcam;
  deepcam.seed = vm["seed"].as<std::uint64_t>();
  deepcam.label_set = vm["labels"].as<int>();
  if (deepcam.label_set != 0 && deepcam.label_set != 1)
    throw InvalidArgument(fmt::format("--labels must be 0 or 1, not {}", deepcam.label_set));
  if (deepcam.label_set != 0 && layout != core::DatasetLayout::deepcam)
    throw InvalidArgument("--labels needs a dataset in the DeepCAM layout");
  if (const auto channels = vm["channels"].as<std::string>(); channels != "all")
    deepcam.channels = core::parse_channel_selection(channels);
  if (const auto crop = vm["crop"].as<std::string>(); crop != "none") {
    const auto size = parse_int_list(crop, "--crop");
    if (size.size() != 2 || size[0] <= 0 || size[1] <= 0)
      throw InvalidArgument(
          fmt::format("--crop takes a height and a width, e.g. 384,576 (got '{}')", crop));
    deepcam.crop_height = size[0];
    deepcam.crop_width = size[1];
  }
  deepcam.downsample = vm["downsample"].as<int>();
  if (deepcam.downsample < 1) throw InvalidArgument("--downsample must be at least 1");
  spec.climatenet = {.channels = deepcam.channels,
                     .crop_height = deepcam.crop_height,
                     .crop_width = deepcam.crop_width,
                     .downsample = deepcam.downsample,
                     .seed = deepcam.seed};
  if (const auto normalization = vm["normalization"].as<std::string>(); normalization != "auto") {
    if (layout != core::DatasetLayout::climatenet)
      throw InvalidArgument("--normalization needs a dataset in the ClimateNet layout");
    spec.climatenet.statistics = normalization;
  }
  const auto names = chosen_splits(spec.dataset, vm["split"].as<std::string>());
  std::vector<std::unique_ptr<core::SampleSource>> sources;
  std::vector<core::PackedSplit> splits;
  std::size_t total = 0;
  for (const auto& name : names) {
    sources.push_back(core::open_split(spec, name));
    splits.push_back({name, sources.back().get()});
    total += sources.back()->size();
  }
  const std::filesystem::path out = vm["out"].as<std::string>();
  std::error_code error;
  if (std::filesystem::exists(out, error) && !std::filesystem::is_empty(out, error))
    throw InvalidArgument(fmt::format("{} is not empty: pack into a new directory", out.string()));
  std::cout << fmt::format("packing {} sample(s) of {} into {}\n", total,
                           sources.front()->describe(), out.string())
            << std::flush;
  const auto start = std::chrono::steady_clock::now();
  const std::size_t every = std::max<std::size_t>(1, (total + 9) / 10);  // about ten lines
  const auto report = core::pack_dataset(splits, out, threads, [&](std::size_t done) {
    if (done % every == 0 || done == total)
      std::cout << fmt::format("  {}/{} samples\n", done, total) << std::flush;
  });
  const double seconds = core::seconds_since(start);
  std::cout << fmt::format("packed {} sample(s) of {} ({:.2f} GB) in {:.1f} s\n", total,
                           core::to_string(sources.front()->shape()),
                           static_cast<double>(report.bytes) / 1e9, seconds);
  return 0;
}

}  // namespace hardy::jobs
