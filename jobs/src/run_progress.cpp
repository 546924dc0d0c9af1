#include "run_progress.hpp"

#include <algorithm>
#include <fstream>

#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/events.hpp"

namespace hardy::jobs {

// Event kinds and fields by name, checked against hardy/resilience/events.hpp at compile time.
using resilience::event_field;
using resilience::event_kind;

namespace {

std::optional<nlohmann::json> parse_line(const std::string& line) {
  auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded() || !record.is_object()) return std::nullopt;
  return record;
}

}  // namespace

std::optional<nlohmann::json> last_record(const std::filesystem::path& path) {
  return core::last_json_record(path);
}

std::vector<nlohmann::json> read_records(const std::filesystem::path& path) {
  std::vector<nlohmann::json> records;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);)
    if (auto record = parse_line(line)) records.push_back(std::move(*record));
  return records;
}

namespace {

// The `excluded` entries of job_relaunched and the `excluded_nodes` of supervisor_finished have
// the same shape: {host, evidence: [...], replaced_by?}. Anything else is passed over, so that a
// run directory of an older hardy still reads.
// `ended`: what happened to the lost nodes when the supervisor ended there, empty for a relaunch.
void read_lost_nodes(const nlohmann::json& record, std::string_view key, const std::string& ended,
                     RunProgress& progress) {
  const auto found = record.find(std::string(key));
  if (found == record.end() || !found->is_array()) return;
  for (const auto& entry : *found) {
    if (!entry.is_object() || !entry.contains("host") || !entry["host"].is_string()) continue;
    LostNode node;
    node.host = entry["host"].get<std::string>();
    if (const auto evidence = entry.find("evidence");
        evidence != entry.end() && evidence->is_array())
      for (const auto& item : *evidence)
        if (item.is_string()) node.evidence.push_back(item.get<std::string>());
    const auto spare = entry.find("replaced_by");
    node.outcome = !ended.empty() ? ended
                   : spare != entry.end() && spare->is_string()
                       ? "replaced by " + spare->get<std::string>()
                       : "relaunched without it";
    if (record.contains("time") && record["time"].is_string())
      node.time = record["time"].get<std::string>();
    progress.lost_nodes.push_back(std::move(node));
  }
}

// The straggler policy's view: who is slow, and the shares it set. A shrink or a new launch
// renumbers the ranks and shares the batch evenly again.
void read_slow_ranks(const std::string& event, const nlohmann::json& record,
                     RunProgress& progress) {
  const auto rank_of = [](const nlohmann::json& r) { return core::read_field<int>(r, "rank"); };
  if (event == event_kind("communicator_shrunk") || event == event_kind("job_started")) {
    progress.slow_ranks.clear();
    progress.slow_links.clear();
    progress.straggler_shares.clear();
  } else if (event == event_kind("link_slow")) {
    progress.slow_links.push_back(record);
  } else if (event == event_kind("link_recovered")) {
    const auto host = core::read_field<std::string>(record, "host");
    std::erase_if(progress.slow_links, [&](const nlohmann::json& slow) {
      return core::read_field<std::string>(slow, "host") == host;
    });
  } else if (event == event_kind("rank_slow")) {
    progress.slow_ranks.push_back(record);
  } else if (event == event_kind("rank_recovered")) {
    std::erase_if(progress.slow_ranks,
                  [&](const nlohmann::json& slow) { return rank_of(slow) == rank_of(record); });
  } else if (event == event_kind("shards_rebalanced") &&
             core::read_field<std::string>(record, event_field("shards_rebalanced", "policy")) ==
                 "straggler") {
    const bool even = core::read_field<std::string>(record, "reason") == "recovered";
    progress.straggler_shares.clear();
    if (!even && record.contains("per_rank_batch") && record["per_rank_batch"].is_array())
      for (const auto& share : record["per_rank_batch"])
        if (share.is_number_unsigned())
          progress.straggler_shares.push_back(share.get<std::size_t>());
  }
}

// The same one level up (domain_balance.hpp): which fault domains are slow, and the split of
// the batch over them. New members share it out by ranks again.
void read_slow_domains(const std::string& event, const nlohmann::json& record,
                       RunProgress& progress) {
  const auto domain_of = [](const nlohmann::json& r) {
    return core::read_field<int>(r, "slow_domain");
  };
  if (event == event_kind("domains_connected") || event == event_kind("domain_admitted") ||
      event == event_kind("domain_quorum_changed")) {
    progress.slow_domains.clear();
    progress.domain_shares.clear();
  } else if (event == event_kind("domain_slow")) {
    progress.slow_domains.push_back(record);
  } else if (event == event_kind("domain_recovered")) {
    std::erase_if(progress.slow_domains,
                  [&](const nlohmann::json& slow) { return domain_of(slow) == domain_of(record); });
  } else if (event == event_kind("domains_rebalanced")) {
    const std::string reason = core::read_field<std::string>(record, "reason").value_or("");
    progress.domain_shares.clear();
    if (reason != "recovered" && reason != "ranks changed" && record.contains("per_domain_batch"))
      for (const auto& share : record["per_domain_batch"])
        if (share.is_number_unsigned()) progress.domain_shares.push_back(share.get<std::size_t>());
  }
}

void read_events(const std::filesystem::path& path, RunProgress& progress) {
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) {
    const auto record = parse_line(line);
    if (!record) continue;
    const std::string event = core::read_field<std::string>(*record, "event").value_or("");
    progress.last_event = event;
    // Another hardy version's kind: shown as the last event, otherwise nothing here reads it.
    if (!resilience::is_known_event_kind(event)) continue;
    progress.failures_detected += event == event_kind("failure_detected");
    progress.relaunches += event == event_kind("job_relaunched");
    if (event == event_kind("training_diverging")) progress.diverging = *record;
    read_slow_ranks(event, *record, progress);
    read_slow_domains(event, *record, progress);
    if (event == event_kind("job_relaunched"))
      read_lost_nodes(*record, event_field("job_relaunched", "excluded"), "", progress);
    if (event ==
        event_kind("supervisor_finished"))  // status 4: the job asked its scheduler for a requeue
      read_lost_nodes(
          *record, event_field("supervisor_finished", "excluded_nodes"),
          core::read_field<int>(*record, event_field("supervisor_finished", "status")) == 4
              ? "requeued without it"
              : "stopped: too few nodes left",
          progress);
  }
}

}  // namespace

RunProgress read_run_progress(const std::filesystem::path& run_dir) {
  RunProgress progress;
  progress.last_metrics = last_record(run_dir / "metrics.jsonl");
  read_events(run_dir / "events.jsonl", progress);
  const auto checkpoints = run_dir / "checkpoints";
  const auto entries = checkpoint::list_checkpoints(checkpoints);
  progress.checkpoint_files = entries.size();
  progress.latest = checkpoint::read_latest(checkpoints);
  progress.latest_valid = checkpoint::find_latest_valid(checkpoints, &progress.skipped);
  for (const auto& entry : entries)
    if (progress.latest_valid && entry.path.filename() == progress.latest_valid->filename())
      progress.latest_valid_step = entry.step;
  return progress;
}

}  // namespace hardy::jobs
