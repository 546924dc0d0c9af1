#include <iostream>

#include <fmt/format.h>

#include "hardy/comm/mpi_communicator.hpp"
#include "hardy/core/error.hpp"
#include "hardy/jobs/commands.hpp"

namespace hardy::jobs {

namespace {

constexpr const char* kUsage = R"(Usage: hardy <command> [options]

Fault-tolerant data-parallel training of a DeepLabv3+ climate-segmentation model.

Commands:
  train      train the model (one process, or every rank of an MPI job)
  eval       score a trained model's mean IoU on held-out samples
  data       generate synthetic climate data:  hardy data generate --help

Run `hardy <command> --help` for the options of a command.
)";

}  // namespace

int run_cli(int argc, char** argv) {
  std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc >= 2 ? argv[1] : "";
  try {
    if (command == "train") {
      // Every rank of an MPI job runs `hardy train`; a plain start is a world of one.
      comm::MpiSession mpi(&argc, &argv);
      return train_command(args);
    }
    if (command == "eval") return eval_command(args);
    if (command == "data") return data_command(args);
    if (command == "--help" || command == "-h" || command == "help") {
      std::cout << kUsage;
      return 0;
    }
    if (command == "--version") {
      std::cout << "hardy " << HARDY_VERSION << "\n";
      return 0;
    }
    std::cerr << (command.empty() ? std::string("hardy: no command given\n\n")
                                  : fmt::format("hardy: unknown command '{}'\n\n", command))
              << kUsage;
    return 2;
  } catch (const InvalidArgument& e) {
    std::cerr << "hardy " << command << ": " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hardy " << command << ": error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace hardy::jobs
