#include <fmt/format.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "command_line.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/climatenet.hpp"
#include "hardy/core/data/cosmoflow.hpp"
#include "hardy/core/data/dataset.hpp"
#include "hardy/core/data/deepcam.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/jobs/commands.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kDataUsage =
    "Usage: hardy data generate --out DIR [--format hardy|deepcam|cosmoflow] [--samples N]\n"
    "                           [--validation-samples M] [--test-samples K] [--height H]\n"
    "                           [--width W] [--volume V] [--variant hdf5|numpy] [--seed S]\n"
    "                           [--samples-per-file F]\n\n"
    "Writes synthetic climate-like samples (16 channels, with tropical-cyclone and "
    "atmospheric-river\n"
    "masks) into HDF5 files, the same for the same seed.\n"
    "  --format hardy    hardy's own layout (default): DIR/climate-*.h5 and index.json, 64x64 "
    "by default\n"
    "  --format deepcam  the MLPerf HPC DeepCAM layout: DIR/stats.h5, DIR/train/, "
    "DIR/validation/\n"
    "                    (DIR/test/ with --test-samples), one data-YYYY-MM-DD-TT-R.h5 per "
    "sample,\n"
    "                    fields in physical units, 768x1152 by default; --samples counts the "
    "training\n"
    "                    samples\n"
    "  --format cosmoflow  the MLPerf HPC CosmoFlow layout: DIR/train/, DIR/validation/, one "
    "sample\n"
    "                    per file (SyntheticCosmology's particle counts and 4 targets): with\n"
    "                    --variant hdf5 (default) cosmo-NNNNN.h5 holding x int16 (V, V, V, 4) "
    "and\n"
    "                    y float32 (4); with --variant numpy cosmo-NNNNN_data.npy and\n"
    "                    cosmo-NNNNN_label.npy; --volume V is the cube's edge (default 128)\n";

// Runs `write`, then says what it wrote and in how long: "wrote WHAT in 1.2 s". Exit status 0.
template <class Write>
int write_timed(Write&& write, const std::string& what) {
  const auto start = std::chrono::steady_clock::now();
  write();
  std::cout << fmt::format("wrote {} in {:.1f} s\n", what, core::seconds_since(start));
  return 0;
}

constexpr const char* kStatsUsage =
    "Usage: hardy data stats --dataset ROOT [--out FILE]\n\n"
    "Computes the normalisation statistics of a ClimateNet-layout dataset (ROOT/train/*.nc): the "
    "mean\n"
    "and standard deviation of every variable over every pixel of the training split, written as "
    "JSON\n"
    "to ROOT/hardy_climatenet_stats.json (or FILE; give it to `hardy train --normalization "
    "FILE`).\n"
    "`hardy train` computes them itself when the file is missing; run this once first for a "
    "multi-node\n"
    "job, or where ROOT is read-only.\n";

int data_stats_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  if (!parse_command_line(args, data_stats_options(), {"hardy data stats", kStatsUsage}, vm))
    return 0;
  if (!vm.count("dataset")) throw InvalidArgument("--dataset ROOT is required");
  const std::filesystem::path root = vm["dataset"].as<std::string>();
  if (!core::is_climatenet_layout(root))
    throw InvalidArgument(fmt::format(
        "{} is not a ClimateNet-layout dataset (ROOT/train/ holding .nc files)", root.string()));
  const std::filesystem::path out =
      vm.count("out") ? vm["out"].as<std::string>() : (root / core::kClimateNetStatsFile).string();
  const auto start = std::chrono::steady_clock::now();
  const auto statistics = core::write_climatenet_statistics(root, out);
  const double seconds = core::seconds_since(start);
  std::cout << fmt::format(
      "wrote the statistics of {} variables over {} training files to {} in "
      "{:.1f} s\n",
      statistics.fields.size(), statistics.files, out.string(), seconds);
  for (const auto& skipped : statistics.skipped_files)
    std::cout << fmt::format("  left out {}\n", skipped);
  return 0;
}

int generate_cosmoflow(const po::variables_map& vm) {
  for (const char* option : {"test-samples", "height", "width"})
    if (vm.count(option))
      throw InvalidArgument(fmt::format(
          "--{} does not apply to --format cosmoflow (train/ and validation/ of V^3 cubes)",
          option));
  if (!vm["samples-per-file"].defaulted())
    throw InvalidArgument("--samples-per-file does not apply to --format cosmoflow (one per file)");
  const std::string variant = vm.count("variant") ? vm["variant"].as<std::string>() : "hdf5";
  if (variant != "hdf5" && variant != "numpy")
    throw InvalidArgument(
        fmt::format("unknown --variant '{}'; the variants are hdf5 and numpy", variant));
  const long samples = vm["samples"].as<long>();
  if (samples <= 0) throw InvalidArgument("--samples must be positive");
  // MLPerf HPC's CosmoFlow set holds out a quarter as many samples as it trains on (262,144 and
  // 65,536), so that a held-out error says more than the draw of a few samples.
  const long validation = vm.count("validation-samples") ? vm["validation-samples"].as<long>()
                                                         : std::max(1L, samples / 4);
  if (validation < 0) throw InvalidArgument("--validation-samples must not be negative");
  const core::CosmoFlowGenerateOptions options{
      .train = static_cast<std::size_t>(samples),
      .validation = static_cast<std::size_t>(validation),
      .volume = vm.count("volume") ? vm["volume"].as<int>() : 128,
      .seed = vm["seed"].as<std::uint64_t>(),
      .variant = variant == "numpy" ? core::CosmoFlowVariant::numpy : core::CosmoFlowVariant::hdf5};
  const std::filesystem::path out = vm["out"].as<std::string>();
  return write_timed([&] { core::write_cosmoflow_dataset(out, options); },
                     fmt::format("a CosmoFlow dataset ({}) of {} training and {} validation "
                                 "samples of 4x{}^3 to {}",
                                 core::to_string(options.variant), samples, validation,
                                 options.volume, out.string()));
}

}  // namespace

po::options_description data_stats_options() {
  po::options_description options("hardy data stats options");
  options.add_options()("help,h", "print this help")(
      "dataset", po::value<std::string>(), "ClimateNet-layout dataset root (ROOT/train/*.nc)")(
      "out", po::value<std::string>(), "where to write (default ROOT/hardy_climatenet_stats.json)");
  return options;
}

po::options_description data_generate_options() {
  po::options_description options("hardy data generate options");
  options.add_options()("help,h", "print this help")("out", po::value<std::string>(),
                                                     "output directory (created)")(
      "format", po::value<std::string>()->default_value("hardy"), "hardy, deepcam or cosmoflow")(
      "variant", po::value<std::string>(), "cosmoflow: hdf5 (default) or numpy")(
      "volume", po::value<int>(), "cosmoflow: the cube's edge (default 128)")(
      "samples", po::value<long>()->default_value(256),
      "number of samples (deepcam: training samples)")(
      "validation-samples", po::value<long>(),
      "deepcam: validation samples (default 4); cosmoflow: held-out samples (default a quarter "
      "of --samples, MLPerf's split)")("test-samples", po::value<long>(),
                                       "deepcam: test samples (default 0)")(
      "height", po::value<int>(), "sample height in pixels (default 64; deepcam 768)")(
      "width", po::value<int>(), "sample width in pixels (default 64; deepcam 1152)")(
      "seed", po::value<std::uint64_t>()->default_value(1),
      "seed; the same seed gives the same files")(
      "samples-per-file", po::value<long>()->default_value(256), "samples in each HDF5 file");
  return options;
}

int data_command(const std::vector<std::string>& args) {
  const auto options = data_generate_options();
  if (args.empty()) {
    std::cout << "Usage: hardy data generate|stage|stats|pack ... (each with --help)\n\n"
              << kDataUsage << "\n"
              << options << "\n";
    return 2;
  }
  if (args.front() == "stage")
    return data_stage_command(std::vector<std::string>(args.begin() + 1, args.end()));
  if (args.front() == "stats")
    return data_stats_command(std::vector<std::string>(args.begin() + 1, args.end()));
  if (args.front() == "pack")
    return data_pack_command(std::vector<std::string>(args.begin() + 1, args.end()));
  const bool generate = args.front() == "generate";
  const std::vector<std::string> rest(args.begin() + (generate ? 1 : 0), args.end());
  po::variables_map vm;
  if (!parse_command_line(rest, options, {"hardy data generate", kDataUsage}, vm)) return 0;
  if (!generate)
    throw InvalidArgument(
        fmt::format("unknown data command '{}'; the commands are 'generate', 'stage', 'stats' and "
                    "'pack'",
                    args.front()));
  if (!vm.count("out")) throw InvalidArgument("--out DIR is required");
  const std::string format = vm["format"].as<std::string>();
  if (format != "hardy" && format != "deepcam" && format != "cosmoflow")
    throw InvalidArgument(
        fmt::format("unknown --format '{}'; the formats are hardy, deepcam and cosmoflow", format));
  if (format != "cosmoflow" && (vm.count("variant") || vm.count("volume")))
    throw InvalidArgument("--variant and --volume go with --format cosmoflow");
  if (format == "cosmoflow") return generate_cosmoflow(vm);
  const bool deepcam = format == "deepcam";
  const long samples = vm["samples"].as<long>(), per_file = vm["samples-per-file"].as<long>();
  const int height = vm.count("height") ? vm["height"].as<int>() : deepcam ? 768 : 64;
  const int width = vm.count("width") ? vm["width"].as<int>() : deepcam ? 1152 : 64;
  if (samples <= 0) throw InvalidArgument("--samples must be positive");
  if (!deepcam && (vm.count("validation-samples") || vm.count("test-samples")))
    throw InvalidArgument("--validation-samples and --test-samples go with --format deepcam");
  if (deepcam && !vm["samples-per-file"].defaulted())
    throw InvalidArgument("--samples-per-file does not apply to --format deepcam (one per file)");
  if (per_file <= 0) throw InvalidArgument("--samples-per-file must be positive");
  if (height < 16 || width < 16)
    throw InvalidArgument(
        fmt::format("--height and --width must be at least 16 (got {}x{})", height, width));
  const std::filesystem::path out = vm["out"].as<std::string>();
  if (deepcam) {
    const long validation =
        vm.count("validation-samples") ? vm["validation-samples"].as<long>() : 4;
    const long test = vm.count("test-samples") ? vm["test-samples"].as<long>() : 0;
    if (validation < 0 || test < 0)
      throw InvalidArgument("--validation-samples and --test-samples must not be negative");
    const core::DeepCamGenerateOptions options{.train = static_cast<std::size_t>(samples),
                                               .validation = static_cast<std::size_t>(validation),
                                               .test = static_cast<std::size_t>(test),
                                               .height = height,
                                               .width = width,
                                               .seed = vm["seed"].as<std::uint64_t>()};
    return write_timed([&] { core::write_deepcam_dataset(out, options); },
                       fmt::format("a DeepCAM dataset of {} training, {} validation and {} test "
                                   "samples of 16x{}x{} to {}",
                                   samples, validation, test, height, width, out.string()));
  }
  const core::SyntheticClimate source({16, height, width}, static_cast<std::size_t>(samples),
                                      vm["seed"].as<std::uint64_t>());
  return write_timed(
      [&] {
        core::write_dataset(source, 0, static_cast<std::size_t>(samples), out,
                            static_cast<std::size_t>(per_file));
      },
      fmt::format("{} samples of 16x{}x{} to {}", samples, height, width, out.string()));
}

}  // namespace hardy::jobs
