#include <fmt/format.h>

#include <iostream>

#include "hardy/core/support/error.hpp"
#include "hardy/core/version.hpp"
#include "hardy/jobs/commands.hpp"

namespace hardy::jobs {

namespace {

constexpr const char* kUsage = R"(Usage: hardy <command> [options]

Fault-tolerant data-parallel training of a DeepLabv3+ climate-segmentation model.

Commands:
  train      train the model (one process, or every rank of an MPI job)
  run        launch and supervise an MPI training job; relaunch it if it dies
  simulate   project recovery time to thousands of nodes from a run's measurements
  eval       score a trained model's mean IoU on held-out samples
  data       generate climate data, stage it to node-local storage, or compute a ClimateNet
             dataset's normalisation statistics: hardy data generate|stage|stats --help
  ckpt       list, inspect, verify and compare checkpoints:  hardy ckpt --help
  submit     submit a training job to Slurm or LSF from a batch-script template
  status     a job's state, step, newest valid checkpoint and failures; --follow watches it live
  cancel     cancel a submitted job (scancel, bkill)
  clean      remove node-local snapshots that crashed runs left:  hardy clean --node-local
  report     one picture of a run: loss, learning rate, world size, failures and recoveries;
             or the run as TensorBoard event files (--tensorboard DIR)
  export     write a trained network as ONNX:  hardy export RUN_DIR --onnx model.onnx
  completion print a bash completion script:  source <(hardy completion bash)
  events     print the schema of events.jsonl (kinds, fields, types):  hardy events --schema

Run `hardy <command> --help` for the options of a command.
)";

}  // namespace

int report_error(const std::string& command, const std::exception& error) {
  if (dynamic_cast<const InvalidArgument*>(&error) != nullptr) {
    std::cerr << "hardy " << command << ": " << error.what() << "\n" << std::flush;
    return 2;
  }
  std::cerr << "hardy " << command << ": error: " << error.what() << "\n" << std::flush;
  return 1;
}

int run_cli(int argc, char** argv) {
  std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc >= 2 ? argv[1] : "";
  try {
    if (command == "train") return train_command(args);
    if (command == "eval") return eval_command(args);
    if (command == "run") return run_command(args);
    if (command == "simulate") return simulate_command(args);
    if (command == "data") return data_command(args);
    if (command == "ckpt") return ckpt_command(args);
    if (command == "submit") return submit_command(args);
    if (command == "status") return status_command(args);
    if (command == "cancel") return cancel_command(args);
    if (command == "clean") return clean_command(args);
    if (command == "report") return report_command(args);
    if (command == "export") return export_command(args);
    if (command == "completion") return completion_command(args);
    if (command == "events") return events_command(args);
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
  } catch (const std::exception& e) {
    return report_error(command, e);
  }
}

}  // namespace hardy::jobs
