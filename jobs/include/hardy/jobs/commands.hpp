#pragma once
// The `hardy` subcommands. Each takes its arguments without the program and subcommand names and
// returns the process exit status: 0 success, 1 a failed check or job, 2 bad input.
#include <exception>
#include <string>
#include <vector>

namespace hardy::jobs {

int run_cli(int argc, char** argv);

// Prints why `hardy COMMAND` failed ("hardy COMMAND: ..." for bad input, "hardy COMMAND: error:
// ..." otherwise) and returns its exit status: 2 for bad input, 1 for anything else.
int report_error(const std::string& command, const std::exception& error);

int train_command(const std::vector<std::string>& args);
int eval_command(const std::vector<std::string>& args);
int data_command(const std::vector<std::string>& args);
int data_stage_command(const std::vector<std::string>& args);  // `hardy data stage`
int data_pack_command(const std::vector<std::string>& args);   // `hardy data pack`
int ckpt_command(const std::vector<std::string>& args);
int submit_command(const std::vector<std::string>& args);
int status_command(const std::vector<std::string>& args);
int cancel_command(const std::vector<std::string>& args);
int clean_command(const std::vector<std::string>& args);
int run_command(const std::vector<std::string>& args);
int simulate_command(const std::vector<std::string>& args);
int report_command(const std::vector<std::string>& args);
int export_command(const std::vector<std::string>& args);
int completion_command(const std::vector<std::string>& args);
int events_command(const std::vector<std::string>& args);

}  // namespace hardy::jobs
