#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "command_line.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/schedulers.hpp"
#include "hardy/resilience/events.hpp"
#include "run_progress.hpp"
#include "submission.hpp"

namespace po = boost::program_options;

namespace hardy::jobs {

// Event kinds and fields by name, checked against hardy/resilience/events.hpp at compile time.
using resilience::event_field;
using resilience::event_kind;

namespace {

constexpr const char* kStatusUsage =
    R"(Usage: hardy status RUN_DIR|JOB_ID [--json] [--follow [--interval S]]

Where a job stands: its scheduler job id and state (for a job started with `hardy submit`), the
last step it logged, its newest valid checkpoint, the failures it survived (failure_detected
events: recovered inside the job; job_relaunched events: restarted by `hardy run`), and the nodes
`hardy run` left out, with its evidence and what it did; and whether the training loss diverged
(a training_diverging event: docs/training.md).

A Slurm or LSF job id instead of RUN_DIR names the run directory whose scheduler.json (written by
`hardy submit`) records that job; it is looked for under --runs.

--follow refreshes a compact view (step, ETA, world size, samples/s, the last failure and its
recovery, a divergence, the newest checkpoint and its age) every --interval seconds until the job ends, then
prints the final state. Exit status 0 when the job finished its last step, 1 when it ended
otherwise (failed, cancelled, or no longer running without having finished).
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
          {"lost_nodes", lost_nodes_json(progress.lost_nodes)},
          {"diverging", optional_json(progress.diverging)},
          {"slow_ranks", progress.slow_ranks},
          {"slow_links", progress.slow_links},
          {"straggler_shares", progress.straggler_shares},
          {"slow_domains", progress.slow_domains},
          {"domain_shares", progress.domain_shares},
          {"slowest_rank", metric("slowest_rank")},
          {"slowest_score", metric("slowest_score")}};
}

// The training_diverging event in a line: since when, how far above the early level.
std::string diverging_text(const nlohmann::json& event) {
  const auto number_or_nan = [&](std::string_view key) {
    return core::read_field<double>(event, key).value_or(NAN);
  };
  return fmt::format(
      "since step {:.0f}: the loss stayed above {:g} x its early level {:.4g} for {:.0f} steps "
      "(mean {:.4g}, {:.4g} at step {:.0f}); the job trains on",
      number_or_nan(event_field("training_diverging", "since_step")),
      number_or_nan(event_field("training_diverging", "factor")),
      number_or_nan(event_field("training_diverging", "early_loss")),
      number_or_nan(event_field("training_diverging", "window")),
      number_or_nan(event_field("training_diverging", "window_mean_loss")),
      number_or_nan(event_field("training_diverging", "loss")),
      number_or_nan(event_field("training_diverging", "step")));
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
  if (!status["diverging"].is_null())
    std::cout << fmt::format("diverging      {}\n", diverging_text(status["diverging"]));
  for (const auto& slow : status["slow_ranks"])
    std::cout << fmt::format("slow rank      {} on {}: {:.2f} of its peers' speed since step {}\n",
                             core::read_field<int>(slow, "rank").value_or(-1),
                             core::read_field<std::string>(slow, "host").value_or("?"),
                             core::read_field<double>(slow, "score").value_or(NAN),
                             core::read_field<long>(slow, "since_step").value_or(-1));
  for (const auto& link : status["slow_links"])
    std::cout << fmt::format(
        "slow link      {} since step {}: its pairs' exchanges {:.1f} ms against {:.1f} ms\n",
        core::read_field<std::string>(link, "host").value_or("?"),
        core::read_field<long>(link, "since_step").value_or(-1),
        1e3 * core::read_field<double>(link, "pair_s").value_or(NAN),
        1e3 * core::read_field<double>(link, "peers_pair_s").value_or(NAN));
  if (!status["straggler_shares"].empty())
    std::cout << fmt::format(
        "shares         {} samples per rank (around slow ranks)\n",
        fmt::join(status["straggler_shares"].get<std::vector<std::size_t>>(), ","));
  for (const auto& slow : status["slow_domains"])
    std::cout << fmt::format(
        "slow domain    {}: {:.2f} of the other domains' speed since step {}\n",
        core::read_field<int>(slow, "slow_domain").value_or(-1),
        core::read_field<double>(slow, "score").value_or(NAN),
        core::read_field<long>(slow, "since_step").value_or(-1));
  if (!status["domain_shares"].empty())
    std::cout << fmt::format(
        "domain shares  {} samples per fault domain (around slow domains)\n",
        fmt::join(status["domain_shares"].get<std::vector<std::size_t>>(), ","));
  if (!status["slowest_score"].is_null())
    std::cout << fmt::format(
        "slowest rank   {} at {} of its peers' speed (the peers' time per sample over its own)\n",
        text_or(status["slowest_rank"], "?"), text_or(status["slowest_score"], "?"));
}

// ---- RUN_DIR or a job id ----

bool looks_like_job_id(const std::string& text) {
  return !text.empty() && std::isdigit(static_cast<unsigned char>(text.front())) &&
         std::all_of(text.begin(), text.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '[' ||
                  c == ']';
         });
}

// A run directory as given, or the one under `runs` whose scheduler.json records job `target`.
std::filesystem::path resolve_run_dir(const std::string& target,
                                      const std::filesystem::path& runs) {
  if (std::filesystem::is_directory(target)) return target;
  if (!looks_like_job_id(target))
    throw InvalidArgument(fmt::format("run directory {} does not exist", target));
  std::error_code error;
  if (std::filesystem::is_directory(runs, error))
    for (const auto& entry : std::filesystem::directory_iterator(runs, error)) {
      if (!entry.is_directory()) continue;
      try {
        const auto submission = read_submission(entry.path());
        if (submission && submission->job_id == target) return entry.path();
      } catch (const InvalidArgument&) {
        // another kind of scheduler.json: not this job's
      }
    }
  throw InvalidArgument(fmt::format(
      "{} is neither a run directory nor the job id of a run under {}/ (hardy submit records "
      "it in RUN_DIR/{}; give the run directory, or --runs DIR)",
      target, runs.string(), kSubmissionFile));
}

// ---- --follow ----

// What the compact view shows, from events.jsonl, the tail of metrics.jsonl and the scheduler.
struct LiveView {
  std::optional<nlohmann::json> metrics;  // the last metrics line
  long total_steps = 0;                   // job_started's `steps`
  std::optional<nlohmann::json> last_failure, last_recovery, last_checkpoint, finished, diverging;
  bool supervised = false;            // supervisor_started was logged: wait for supervisor_finished
  std::optional<nlohmann::json> end;  // job_finished (unsupervised) or supervisor_finished
  long failures = 0, relaunches = 0;
  nlohmann::json scheduler;  // null when not submitted
  std::optional<long> pid;   // the supervisor's, else rank 0's: to tell a local run that died
};

LiveView read_live_view(const std::filesystem::path& run_dir) {
  LiveView view;
  view.metrics = last_record(run_dir / "metrics.jsonl");
  for (auto& event : read_records(run_dir / "events.jsonl")) {
    const std::string name = core::read_field<std::string>(event, "event").value_or("");
    if (!resilience::is_known_event_kind(name))
      continue;  // another hardy version's: not for this view
    if (name == event_kind("supervisor_started"))
      view.supervised = true,
      view.pid =
          core::read_field<long>(event, event_field("supervisor_started", "pid")).value_or(0);
    if (name == event_kind("rank_started") &&
        core::read_field<int>(event, event_field("rank_started", "rank")) == 0 && !view.supervised)
      view.pid = core::read_field<long>(event, event_field("rank_started", "pid")).value_or(0);
    if (name == event_kind("job_started"))
      view.total_steps =
          core::read_field<long>(event, event_field("job_started", "steps")).value_or(0);
    if (name == event_kind("failure_detected"))
      ++view.failures, view.last_failure = event, view.last_recovery.reset();
    if (name == event_kind("recovery_finished")) view.last_recovery = event;
    if (name == event_kind("job_relaunched")) ++view.relaunches, view.last_recovery = event;
    if (name == event_kind("checkpoint_written") || name == event_kind("final_checkpoint"))
      view.last_checkpoint = event;
    if (name == event_kind("job_finished")) view.finished = event;
    if (name == event_kind("training_diverging")) view.diverging = event;
    if (name == event_kind("supervisor_finished") ||
        (name == event_kind("job_finished") && !view.supervised))
      view.end = event;
  }
  view.scheduler = scheduler_status(read_submission(run_dir));
  return view;
}

// Seconds since the run last wrote its events or metrics.
double seconds_since_written(const std::filesystem::path& run_dir, double now) {
  double newest = 0;
  for (const char* name : {"events.jsonl", "metrics.jsonl"}) {
    std::error_code error;
    const auto written = std::filesystem::last_write_time(run_dir / name, error);
    if (error) continue;
    newest = std::max(newest, std::chrono::duration<double>(
                                  std::chrono::file_clock::to_sys(written).time_since_epoch())
                                  .count());
  }
  return newest > 0 ? now - newest : INFINITY;
}

// A run with no scheduler died unseen when its process is gone from this host and it has written
// nothing for a while (the silence guards against a pid that belongs to another host).
bool local_process_gone(const std::filesystem::path& run_dir, const LiveView& view, double now) {
  constexpr double kSilentS = 30;
  if (!view.pid || *view.pid <= 0 || !view.scheduler.is_null()) return false;
  return kill(static_cast<pid_t>(*view.pid), 0) != 0 && errno == ESRCH &&
         seconds_since_written(run_dir, now) > kSilentS;
}

// Scheduler states in which the job may still train (Slurm's and LSF's words).
bool scheduler_running(const nlohmann::json& scheduler) {
  if (scheduler.is_null()) return true;
  const auto state = scheduler["state"].get<std::string>();
  for (const char* live : {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED",
                           "RESIZING", "SUSPENDED", "PEND", "RUN", "PSUSP", "USUSP", "SSUSP"})
    if (state == live) return true;
  return false;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  const long s = std::lround(seconds);
  return fmt::format("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

// A numeric field of a log record, or `otherwise` when it is missing or not a number.
double number(const nlohmann::json& record, std::string_view key, double otherwise = NAN) {
  return core::read_field<double>(record, key).value_or(otherwise);
}

std::string compact_text(const std::filesystem::path& run_dir, const LiveView& view, double now) {
  std::string text =
      fmt::format("hardy status {}  ({})\n", run_dir.string(),
                  view.scheduler.is_null()
                      ? std::string("local run")
                      : fmt::format("{} job {}: {}", view.scheduler["name"].get<std::string>(),
                                    view.scheduler["job_id"].get<std::string>(),
                                    view.scheduler["state"].get<std::string>()));
  if (!view.metrics) {
    text += "step      none logged yet\n";
  } else {
    const auto& m = *view.metrics;
    const double step = number(m, "step", 0), rate = number(m, "samples_per_s");
    const double batch = number(m, "global_batch");
    const double eta = view.total_steps > 0 && rate > 0 && batch > 0
                           ? (view.total_steps - step) * batch / rate
                           : NAN;
    text += fmt::format(
        "step      {:.0f}/{}  ETA {}  loss {:.4f}\nworld     {:.0f} ranks  {:.1f} samples/s\n",
        step, view.total_steps > 0 ? std::to_string(view.total_steps) : "?",
        view.end ? "done" : duration_text(eta), number(m, "loss"), number(m, "world_size"), rate);
  }
  if (!view.last_failure) {
    text += fmt::format(
        "failure   none{}\n",
        view.relaunches ? fmt::format(" in the job; {} relaunch(es)", view.relaunches) : "");
  } else {
    const auto& f = *view.last_failure;
    const std::string recovery =
        !view.last_recovery ? "recovering"
        : core::read_field<std::string>(*view.last_recovery, "event") ==
                event_kind("job_relaunched")
            ? "relaunched by hardy run"
            : fmt::format("recovered in {:.3f} s",
                          number(*view.last_recovery, event_field("recovery_finished", "seconds")));
    text += fmt::format(
        "failure   {} of {} at step {:.0f} ({}): {}\n", view.failures,
        view.failures + view.relaunches, number(f, event_field("failure_detected", "step")),
        core::read_field<std::string>(f, event_field("failure_detected", "detected_by"))
            .value_or("detected"),
        recovery);
  }
  if (view.diverging) text += fmt::format("diverging {}\n", diverging_text(*view.diverging));
  if (!view.last_checkpoint)
    text += "ckpt      none written yet\n";
  else
    text +=
        fmt::format("ckpt      step {:.0f}, {} old  {}\n", number(*view.last_checkpoint, "step"),
                    duration_text(now - number(*view.last_checkpoint, "unix_time")),
                    view.last_checkpoint->value("path", ""));
  return text;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int follow(const std::filesystem::path& run_dir, double interval_s) {
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  for (;;) {
    const LiveView view = read_live_view(run_dir);
    const double now = unix_now();
    const bool gone = local_process_gone(run_dir, view, now);
    const bool running = scheduler_running(view.scheduler) && !gone;
    // A terminal gets the view redrawn in place; a file or pipe gets one block per refresh.
    std::cout << (terminal ? "\033[H\033[J" : "") << compact_text(run_dir, view, now);
    if (view.end || !running) {
      const auto text = [](const nlohmann::json& record, std::string_view key,
                           const char* otherwise) {
        return core::read_field<std::string>(record, key).value_or(otherwise);
      };
      const bool supervisor_ended =
          view.end && text(*view.end, "event", "") == event_kind("supervisor_finished");
      const bool completed =
          view.finished &&
          text(*view.finished, event_field("job_finished", "status"), "") == "completed" &&
          (!supervisor_ended ||
           number(*view.end, event_field("supervisor_finished", "status"), 1) == 0);
      if (view.end)
        std::cout << fmt::format(
            "ended     {}\n",
            supervisor_ended
                ? text(*view.end, event_field("supervisor_finished", "how"), "supervisor finished")
                : text(*view.end, event_field("job_finished", "status"), "job finished"));
      else if (gone)
        std::cout << fmt::format(
            "ended     the job is not running: process {} is gone and it "
            "logged no end\n",
            *view.pid);
      else
        std::cout << fmt::format("ended     the job is not running ({}: {}) and logged no end\n",
                                 view.scheduler["state"].get<std::string>(),
                                 view.scheduler["detail"].get<std::string>());
      std::cout << std::flush;
      return completed ? 0 : 1;
    }
    std::cout << (terminal ? "" : "\n") << std::flush;
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
  }
}

}  // namespace

po::options_description status_options() {
  auto options = run_dir_options("hardy status options");
  options.add_options()("json", po::bool_switch(), "print one JSON object")(
      "follow,f", po::bool_switch(), "refresh a compact live view until the job ends")(
      "interval", po::value<double>()->default_value(5.0), "seconds between --follow refreshes")(
      "runs", po::value<std::string>()->default_value("runs"),
      "where to look for the run directory of a JOB_ID");
  return options;
}

int status_command(const std::vector<std::string>& args) {
  po::variables_map vm;
  const auto target =
      parse_run_dir_command(args, status_options(), "hardy status", kStatusUsage, vm);
  if (!target) return 0;
  const auto run_dir = resolve_run_dir(*target, vm["runs"].as<std::string>());
  if (vm["follow"].as<bool>()) {
    const double interval = vm["interval"].as<double>();
    if (!(interval > 0)) throw InvalidArgument("--interval must be positive");
    return follow(run_dir, interval);
  }
  const auto status = status_json(run_dir);
  if (vm["json"].as<bool>())
    std::cout << status.dump(2) << "\n";
  else
    print_text(status);
  return 0;
}

}  // namespace hardy::jobs
