// `hardy data stage`: the copy --stage-to makes on each node, as a command of its own (a job's
// prologue, or staging once before many short jobs). Copies land where --stage-to looks for them.
#include <fmt/format.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <iostream>

#include "command_line.hpp"
#include "hardy/core/data/climatenet.hpp"
#include "hardy/core/data/cosmoflow.hpp"
#include "hardy/core/data/data_sources.hpp"
#include "hardy/core/data/deepcam.hpp"
#include "hardy/core/data/packed_samples.hpp"
#include "hardy/core/data/staging.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kStageUsage =
    "Usage: hardy data stage --dataset ROOT --to DIR [--split train] [--threads N]\n"
    "                        [--hosts H1,H2,...]\n\n"
    "Copies a DeepCAM-, ClimateNet-, CosmoFlow-layout or packed dataset's files to node-local\n"
    "storage where `hardy train --stage-to DIR`\n"
    "finds them; files already there and unchanged (same size and modification time) are kept.\n"
    "With --hosts, only the files homed on this host among those hosts (the share --stage-to "
    "gives it).\n";

}  // namespace

po::options_description data_stage_options() {
  po::options_description options("hardy data stage options");
  options.add_options()("help,h", "print this help")(
      "dataset", po::value<std::string>(),
      "dataset root (DeepCAM: ROOT/stats.h5, ROOT/train/, ...; ClimateNet: ROOT/train/*.nc, ...)")(
      "to", po::value<std::string>(), "staging directory (the job's --stage-to)")(
      "split", po::value<std::string>()->default_value("train"), "train, validation, test or all")(
      "threads", po::value<int>()->default_value(4), "parallel copies")(
      "hosts", po::value<std::string>(),
      "the job's hosts, comma-separated: copy only this host's share");
  return options;
}

int data_stage_command(const std::vector<std::string>& args) {
  const auto options = data_stage_options();
  po::variables_map vm;
  if (!parse_command_line(args, options, {"hardy data stage", kStageUsage}, vm)) return 0;
  if (!vm.count("dataset")) throw InvalidArgument("--dataset ROOT is required");
  if (!vm.count("to")) throw InvalidArgument("--to DIR is required");
  const std::filesystem::path root = vm["dataset"].as<std::string>();
  const std::filesystem::path to = vm["to"].as<std::string>();
  const int threads = vm["threads"].as<int>();
  if (threads < 1) throw InvalidArgument("--threads must be at least 1");
  const core::DatasetLayout layout = core::dataset_layout(root);
  if (layout == core::DatasetLayout::other)
    throw InvalidArgument(fmt::format(
        "{} is not a dataset in the DeepCAM layout (ROOT/stats.h5 and ROOT/train/), ClimateNet's "
        "(ROOT/train/*.nc), CosmoFlow's (ROOT/train/*.h5 or *_data.npy) or one `hardy data pack` "
        "wrote (ROOT/packed.json)",
        root.string()));
  const auto splits = chosen_splits(root, vm["split"].as<std::string>());
  std::vector<std::uint64_t> keys;
  std::size_t mine = 0;
  if (vm.count("hosts")) {
    const std::string host = core::host_name();
    std::string list = vm["hosts"].as<std::string>();
    bool found = false;
    for (std::size_t start = 0; start <= list.size();) {
      const std::size_t end = std::min(list.find(',', start), list.size());
      const auto name = list.substr(start, end - start);
      if (name.empty()) throw InvalidArgument(fmt::format("--hosts '{}' has an empty name", list));
      if (name == host) {
        mine = keys.size();
        found = true;
      }
      keys.push_back(core::node_key(core::staging_node_name(name)));  // as the job names it
      start = end + 1;
    }
    if (!found)
      throw InvalidArgument(fmt::format("this host, {}, is not in --hosts {}", host, list));
  }
  const auto directory = core::staging_directory(to, root, core::host_name());
  std::vector<core::StageCopy> copies;
  for (const auto& name : splits) {
    // The split's files, as the job lists them (without reading statistics or samples).
    const auto files =
        layout == core::DatasetLayout::deepcam     ? core::DeepCamDataset(root, name, {}).files()
        : layout == core::DatasetLayout::packed    ? core::PackedSamples(root, name).files()
        : layout == core::DatasetLayout::cosmoflow ? core::CosmoFlowDataset(root, name).files()
                                                   : core::climatenet_files(root, name);
    for (const auto& file : files) {
      const auto relative = std::filesystem::path(name) / file.filename();
      if (!keys.empty() && core::home_node(relative.string(), keys) != mine) continue;
      copies.push_back({file, directory / relative});
    }
  }
  std::cout << fmt::format("staging {} file(s) of {} to {}\n", copies.size(), root.string(),
                           directory.string());
  const auto report = core::stage_files(to, copies, threads, [](const core::StageProgress& p) {
    std::cout << fmt::format(
                     "  {}/{} files, {:.2f} GB copied, {:.2f} GB/s\n", p.files_done, p.files_total,
                     static_cast<double>(p.bytes_copied) / 1e9,
                     p.seconds > 0 ? static_cast<double>(p.bytes_copied) / p.seconds / 1e9 : 0.0)
              << std::flush;
  });
  std::cout << fmt::format(
      "copied {} file(s) ({:.2f} GB) in {:.3f} s, {:.2f} GB/s; {} already "
      "current\n",
      report.copied, static_cast<double>(report.bytes_copied) / 1e9, report.seconds,
      report.bytes_per_second() / 1e9, report.current);
  return 0;
}

}  // namespace hardy::jobs
