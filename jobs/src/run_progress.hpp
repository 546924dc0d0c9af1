#pragma once
// Where a run stands, from its run directory alone: the last step logged, the checkpoints, and
// the failures it survived. `hardy status` adds the scheduler's view.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace hardy::jobs {

// A node `hardy run` left out of the job: from a job_relaunched event's `excluded` list (the job
// went on without it, or on a spare in its place) or a supervisor_finished event's
// `excluded_nodes` (too few nodes were left, and the supervisor stopped).
struct LostNode {
  std::string host;
  std::vector<std::string> evidence;  // why: the launcher's words, the job's events, the probe
  std::string outcome;                // "relaunched without it", "replaced by SPARE", "stopped"
  std::optional<std::string> time;    // the event's ISO-8601 time
};

struct RunProgress {
  std::optional<nlohmann::json> last_metrics;         // the last complete line of metrics.jsonl
  std::optional<std::string> last_event;              // the name of the last event in events.jsonl
  std::size_t checkpoint_files = 0;                   // ckpt-<step>.h5 files, valid or not
  std::optional<std::filesystem::path> latest;        // what checkpoints/latest names
  std::optional<std::filesystem::path> latest_valid;  // the newest checkpoint that validates
  std::optional<long> latest_valid_step;
  std::vector<std::string> skipped;  // why newer checkpoints were passed over
  long failures_detected = 0;        // failure_detected events: survived inside the job
  long relaunches = 0;               // job_relaunched events: the supervisor restarted the job
  std::vector<LostNode> lost_nodes;  // in the order the supervisor left them out
  std::optional<nlohmann::json> diverging;  // the last training_diverging event
  // The ranks slow now (rank_slow events not followed by rank_recovered, a shrink or a new
  // launch), and the shares the straggler policy set last (empty: even).
  std::vector<nlohmann::json> slow_ranks;
  // The nodes whose link is slow now (link_slow events not followed by link_recovered, a shrink
  // or a new launch).
  std::vector<nlohmann::json> slow_links;
  std::vector<std::size_t> straggler_shares;
  // With fault domains: the domains slow now (domain_slow not followed by domain_recovered or a
  // change of members), and the samples per domain of the split around them (empty: by ranks).
  std::vector<nlohmann::json> slow_domains;
  std::vector<std::size_t> domain_shares;
};

// The last complete line of a JSON-lines file (events.jsonl, metrics.jsonl), reading only the
// file's tail: a long job's metrics.jsonl is large. nullopt when there is none.
std::optional<nlohmann::json> last_record(const std::filesystem::path& path);
// Every complete line that is a JSON object; a line cut short by a crash is passed over.
std::vector<nlohmann::json> read_records(const std::filesystem::path& path);

// Reads metrics.jsonl (from its end), events.jsonl and checkpoints/ (validating checkpoints from
// the newest down until one is valid). Missing files give empty fields, not errors; a line cut
// short by a crash is passed over.
RunProgress read_run_progress(const std::filesystem::path& run_dir);

}  // namespace hardy::jobs
