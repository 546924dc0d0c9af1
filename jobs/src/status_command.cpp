#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "hardy/core/support/error.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/schedulers.hpp"
#include "run_progress.hpp"
#include "submission.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

namespace {

constexpr const char* kStatusUsage = R"(Usage: hardy status RUN_DIR [--json]

Where a job stands: its scheduler job id and state (for a job started with `hardy submit`), the
last step it logged, its newest valid checkpoint, the failures it survived (failure_detected
events: recovered inside the job; job_relaunched events: restarted by `hardy run`), and the nodes
`hardy run` left out, with its evidence and what it did.
)";

nlohmann::json optional_json(const auto& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

// The scheduler's view; a scheduler whose commands are missing here gives UNKNOWN with the reason.
nlohmann::json scheduler_status(const std::optional<Submission>& submission) {
  if (!submission) return nullptr;
  batch::JobState state;
  try {
    state = make_scheduler(submission->scheduler)->query(submission->job_id);
  } catch (const Error& e) {
    state = {.state = "UNKNOWN", .detail = e.what()};
  }
  return {{"name", submission->scheduler},
          {"job_id", submission->job_id},
          {"state", state.state},
          {"detail", state.detail},
          {"restart_count", optional_json(state.restart_count)},
          {"submitted", submission->submitted}};
}

nlohmann::json lost_nodes_json(const std::vector<LostNode>& nodes) {
  auto list = nlohmann::json::array();
  for (const auto& node : nodes)
    list.push_back({{"host", node.host},
                    {"evidence", node.evidence},
                    {"outcome", node.outcome},
                    {"time", optional_json(node.time)}});
  return list;
}

nlohmann::json status_json(const std::filesystem::path& run_dir) {
  const auto progress = read_run_progress(run_dir);
  const auto metric = [&](const char* key) {
    return progress.last_metrics && progress.last_metrics->contains(key)
               ? (*progress.last_metrics)[key]
               : nlohmann::json(nullptr);
  };
  const auto path_json = [](const auto& path) {
    return path ? nlohmann::json(path->string()) : nlohmann::json(nullptr);
  };
  return {{"run_dir", std::filesystem::absolute(run_dir).lexically_normal().string()},
          {"scheduler", scheduler_status(read_submission(run_dir))},
          {"step", metric("step")},
          {"epoch", metric("epoch")},
          {"loss", metric("loss")},
          {"last_event", optional_json(progress.last_event)},
          {"checkpoint",
           {{"valid", path_json(progress.latest_valid)},
            {"step", optional_json(progress.latest_valid_step)},
            {"latest", path_json(progress.latest)},
            {"files", progress.checkpoint_files},
            {"skipped", progress.skipped}}},
          {"failures",
           {{"failure_detected", progress.failures_detected},
            {"job_relaunched", progress.relaunches},
            {"survived", progress.failures_detected + progress.relaunches}}},
          {"lost_nodes", lost_nodes_json(progress.lost_nodes)}};
}

std::string text_or(const nlohmann::json& value, const std::string& otherwise) {
  return value.is_null() ? otherwise : value.is_string() ? value.get<std::string>() : value.dump();
}

void print_text(const nlohmann::json& status) {
  std::cout << fmt::format("run directory  {}\n", status["run_dir"].get<std::string>());
  const auto& job = status["scheduler"];
  if (job.is_null()) {
    std::cout << "job            not submitted with hardy submit (no scheduler.json)\n";
  } else {
    const auto& detail = job["detail"].get<std::string>();
    std::cout << fmt::format(
        "job            {} {}: {}{}{}\n", job["name"].get<std::string>(),
        job["job_id"].get<std::string>(), job["state"].get<std::string>(),
        detail.empty() ? "" : " (" + detail + ")",
        job["restart_count"].is_null()
            ? ""
            : fmt::format(", requeued {} times", job["restart_count"].get<int>()));
  }
  std::cout << fmt::format("step           {} (epoch {}, loss {}); last event {}\n",
                           text_or(status["step"], "none logged"), text_or(status["epoch"], "-"),
                           text_or(status["loss"], "-"), text_or(status["last_event"], "none"));
  const auto& checkpoint = status["checkpoint"];
  if (checkpoint["valid"].is_null())
    std::cout << fmt::format("checkpoint     no valid checkpoint ({} files)\n",
                             checkpoint["files"].get<std::size_t>());
  else
    std::cout << fmt::format("checkpoint     {} (step {}, validated; {} files)\n",
                             checkpoint["valid"].get<std::string>(),
                             text_or(checkpoint["step"], "?"),
                             checkpoint["files"].get<std::size_t>());
  for (const auto& reason : checkpoint["skipped"])
    std::cout << fmt::format("               passed over: {}\n", reason.get<std::string>());
  const auto& failures = status["failures"];
  std::cout << fmt::format("failures       {} survived ({} recovered in the job, {} relaunches)\n",
                           failures["survived"].get<long>(),
                           failures["failure_detected"].get<long>(),
                           failures["job_relaunched"].get<long>());
  for (const auto& node : status["lost_nodes"])
    std::cout << fmt::format("lost node      {} at {}: {} ({})\n", node["host"].get<std::string>(),
                             text_or(node["time"], "?"), node["outcome"].get<std::string>(),
                             fmt::join(node["evidence"].get<std::vector<std::string>>(), "; "));
}

}  // namespace

int status_command(const std::vector<std::string>& args) {
  po::options_description options("hardy status options");
  options.add_options()("json", po::bool_switch(), "print one JSON object");
  po::variables_map vm;
  const auto run_dir = parse_run_dir_command(args, options, "hardy status", kStatusUsage, vm);
  if (!run_dir) return 0;
  const auto status = status_json(*run_dir);
  if (vm["json"].as<bool>())
    std::cout << status.dump(2) << "\n";
  else
    print_text(status);
  return 0;
}

}  // namespace hardy::jobs
