#pragma once
// RUN_DIR/scheduler.json: which scheduler job `hardy submit` made of a run directory, read back by
// `hardy status` and `hardy cancel`.
#include <boost/program_options.hpp>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace hardy::jobs {

struct Submission {
  std::string scheduler;  // "slurm" or "lsf"
  std::string job_id;
  std::string job_name;
  std::string submitted;  // ISO-8601 UTC
  std::filesystem::path script;
};

inline constexpr const char* kSubmissionFile = "scheduler.json";

// Writes RUN_DIR/scheduler.json atomically; throws IoError.
void write_submission(const std::filesystem::path& run_dir, const Submission& submission);
// nullopt when the run directory has no scheduler.json (a job not started by `hardy submit`);
// throws InvalidArgument naming the file when it is not what `hardy submit` writes.
std::optional<Submission> read_submission(const std::filesystem::path& run_dir);

// The options of a command on one run directory: --help and --run-dir (also given as the one
// positional argument), under `caption`; the command adds its own.
boost::program_options::options_description run_dir_options(const std::string& caption);

// Parses `hardy <command> RUN_DIR [options]` (`command`: "hardy cancel") against `options` (from
// run_dir_options) into `vm`. Prints `usage` and the options and returns nullopt for --help;
// returns the run directory (which must exist when `must_exist`), and throws InvalidArgument for
// anything wrong.
std::optional<std::string> parse_run_dir_command(
    const std::vector<std::string>& args,
    const boost::program_options::options_description& options, const std::string& command,
    const std::string& usage, boost::program_options::variables_map& vm);
std::optional<std::filesystem::path> parse_existing_run_dir_command(
    const std::vector<std::string>& args,
    const boost::program_options::options_description& options, const std::string& command,
    const std::string& usage, boost::program_options::variables_map& vm);

}  // namespace hardy::jobs
