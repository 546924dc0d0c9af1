#include <fmt/format.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>

#include "command_line.hpp"
#include "hardy/core/data/climate_data.hpp"
#include "hardy/core/data/dataset.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kDataUsage =
    "Usage: hardy data generate --out DIR [--samples N] [--height H] [--width W] [--seed S]\n\n"
    "Writes synthetic climate-like samples (16 channels, with tropical-cyclone and "
    "atmospheric-river\n"
    "masks) into HDF5 files, the same for the same seed.\n";

}  // namespace

po::options_description data_generate_options() {
  po::options_description options("hardy data generate options");
  options.add_options()("help,h", "print this help")("out", po::value<std::string>(),
                                                     "output directory (created)")(
      "samples", po::value<long>()->default_value(256), "number of samples")(
      "height", po::value<int>()->default_value(64), "sample height in pixels")(
      "width", po::value<int>()->default_value(64), "sample width in pixels")(
      "seed", po::value<std::uint64_t>()->default_value(1),
      "seed; the same seed gives the same files")(
      "samples-per-file", po::value<long>()->default_value(256), "samples in each HDF5 file");
  return options;
}

int data_command(const std::vector<std::string>& args) {
  const auto options = data_generate_options();
  if (args.empty()) {
    std::cout << kDataUsage << "\n" << options << "\n";
    return 2;
  }
  const bool generate = args.front() == "generate";
  const std::vector<std::string> rest(args.begin() + (generate ? 1 : 0), args.end());
  po::variables_map vm;
  if (!parse_command_line(rest, options, {"hardy data generate", kDataUsage}, vm)) return 0;
  if (!generate)
    throw InvalidArgument(
        fmt::format("unknown data command '{}'; the one command is 'generate'", args.front()));
  if (!vm.count("out")) throw InvalidArgument("--out DIR is required");
  const long samples = vm["samples"].as<long>(), per_file = vm["samples-per-file"].as<long>();
  const int height = vm["height"].as<int>(), width = vm["width"].as<int>();
  if (samples <= 0) throw InvalidArgument("--samples must be positive");
  if (per_file <= 0) throw InvalidArgument("--samples-per-file must be positive");
  if (height < 16 || width < 16)
    throw InvalidArgument(
        fmt::format("--height and --width must be at least 16 (got {}x{})", height, width));
  const std::filesystem::path out = vm["out"].as<std::string>();
  const core::SyntheticClimate source({16, height, width}, static_cast<std::size_t>(samples),
                                      vm["seed"].as<std::uint64_t>());
  const auto start = std::chrono::steady_clock::now();
  core::write_dataset(source, 0, static_cast<std::size_t>(samples), out,
                      static_cast<std::size_t>(per_file));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("wrote {} samples of 16x{}x{} to {} in {:.1f} s\n", samples, height,
                           width, out.string(), seconds);
  return 0;
}

}  // namespace hardy::jobs
