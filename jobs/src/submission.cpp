#include "submission.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command_line.hpp"
#include "hardy/batch/scheduler.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/jobs/run_directory.hpp"

namespace hardy::jobs {

void write_submission(const std::filesystem::path& run_dir, const Submission& submission) {
  const nlohmann::json record = {{"scheduler", submission.scheduler},
                                 {"job_id", submission.job_id},
                                 {"job_name", submission.job_name},
                                 {"submitted", submission.submitted},
                                 {"script", submission.script.string()}};
  RunDirectory(run_dir).write_file(kSubmissionFile, record.dump(2) + "\n");
}

std::optional<Submission> read_submission(const std::filesystem::path& run_dir) {
  const auto path = run_dir / kSubmissionFile;
  std::ifstream file(path);
  if (!file) return std::nullopt;
  try {
    const auto record = nlohmann::json::parse(file);
    Submission submission{.scheduler = record.at("scheduler").get<std::string>(),
                          .job_id = record.at("job_id").get<std::string>(),
                          .job_name = record.value("job_name", ""),
                          .submitted = record.value("submitted", ""),
                          .script = record.value("script", "")};
    batch::check_job_id(submission.job_id);  // it goes to scancel and bkill
    return submission;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}: {}", path.string(), e.what()));
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(
        fmt::format("{} is not a hardy submission record: {}", path.string(), e.what()));
  }
}

boost::program_options::options_description run_dir_options(const std::string& caption) {
  namespace po = boost::program_options;
  po::options_description options(caption);
  options.add_options()("help,h", "print this help")("run-dir", po::value<std::string>(),
                                                     "the job's run directory");
  return options;
}

std::optional<std::string> parse_run_dir_command(
    const std::vector<std::string>& args,
    const boost::program_options::options_description& options, const std::string& command,
    const std::string& usage, boost::program_options::variables_map& vm) {
  boost::program_options::positional_options_description positional;
  positional.add("run-dir", 1);
  if (!parse_command_line(args, options, {command, usage, &positional}, vm)) return std::nullopt;
  if (!vm.count("run-dir"))
    throw InvalidArgument(fmt::format("a run directory is required (see {} --help)", command));
  return vm["run-dir"].as<std::string>();
}

std::optional<std::filesystem::path> parse_existing_run_dir_command(
    const std::vector<std::string>& args,
    const boost::program_options::options_description& options, const std::string& command,
    const std::string& usage, boost::program_options::variables_map& vm) {
  const auto run_dir = parse_run_dir_command(args, options, command, usage, vm);
  if (!run_dir) return std::nullopt;
  if (!std::filesystem::is_directory(*run_dir))
    throw InvalidArgument(fmt::format("run directory {} does not exist", *run_dir));
  return std::filesystem::path(*run_dir);
}

}  // namespace hardy::jobs
