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

// Parses `hardy <command> RUN_DIR [options]` (`command`: "hardy status") (RUN_DIR also as
// --run-dir) into `vm`, checking that RUN_DIR exists. Prints `usage` and the options and returns
// nullopt for --help; throws InvalidArgument for anything wrong.
std::optional<std::filesystem::path> parse_run_dir_command(
    const std::vector<std::string>& args, boost::program_options::options_description options,
    const std::string& command, const std::string& usage,
    boost::program_options::variables_map& vm);

}  // namespace hardy::jobs
