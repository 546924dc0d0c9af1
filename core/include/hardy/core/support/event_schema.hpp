#pragma once
// Every kind of event that hardy writes to events.jsonl, with its fields: the one place where a
// kind or a field is added. Three things are checked against this table:
// - the writer: EventLog::emit refuses a kind or a field that is not declared here, a value of
//   the wrong type and a missing required field (throws Error in builds with tests, see
//   event_log.hpp);
// - the C++ readers: they name kinds and fields through event_kind() and event_field(), which
//   are consteval, so a reader that names an undeclared one does not compile;
// - the Python readers (tools/report.py, tools/timeline.py): tests/jobs/event_readers.py checks
//   them against `hardy events --schema`, this table as JSON.
// Files read back may come from another hardy version: readers ignore kinds and fields they do
// not know (is_known_event_kind() says which) instead of failing on them.
#include <array>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

namespace hardy::core {

// JSON types. `number` takes integers too; `any` is for fields whose type depends on the case.
// null is accepted for every field: "not known" (e.g. no scheduler job id outside a scheduler).
enum class EventFieldType { string, integer, number, boolean, array, object, any };
std::string_view to_string(EventFieldType type);

struct EventField {
  std::string_view name;
  EventFieldType type;
  bool required;  // every emit of the kind sets it; readers may rely on it
  // A string field that names one of a fixed set (a kind of failure, a detector): its values.
  // Empty: any value of the type.
  std::span<const std::string_view> values = {};
};

struct EventKind {
  std::string_view name;
  std::string_view meaning;
  std::span<const EventField> fields;
};

namespace event_fields {
using T = EventFieldType;
inline constexpr bool req = true, opt = false;
// What emit adds to every record; a caller may not set these. schema_problem: what was wrong
// with an event that a build without tests wrote anyway (event_log.hpp).
inline constexpr EventField envelope[] = {{"time", T::string, req},
                                          {"unix_time", T::number, req},
                                          {"event", T::string, req},
                                          {"schema_problem", T::string, opt}};

// Fields that may stand on a record of any kind: put there by EventLog::add_context (every
// record of a fault domain's leader says which domain wrote it), or by a caller about a domain
// (the supervisor's domain_* events).
inline constexpr EventField context[] = {{"domain", T::integer, opt}};

inline constexpr EventField job_started[] = {{"hardy_version", T::string, req},
                                             {"world_size", T::integer, req},
                                             {"fault_tolerant", T::boolean, req},
                                             {"ranks_per_node", T::integer, req},
                                             {"backend", T::string, req},
                                             {"threads_per_rank", T::integer, req},
                                             {"steps", T::integer, req},
                                             {"global_batch", T::integer, req},
                                             {"parameters", T::integer, req},
                                             {"model", T::string, opt},
                                             {"gradient_buckets", T::integer, req},
                                             {"data", T::string, req},
                                             {"resume", T::string, req},
                                             {"run_dir", T::string, req},
                                             {"domains", T::integer, opt},
                                             {"domain_address", T::string, opt}};
inline constexpr EventField job_finished[] = {{"status", T::string, req},
                                              {"steps", T::integer, req},
                                              {"reason", T::string, opt},
                                              {"error", T::string, opt},
                                              {"final_loss", T::number, opt},
                                              {"world_size", T::integer, opt},
                                              {"failures", T::integer, opt},
                                              {"data_wait_s", T::number, opt},
                                              {"data_wait_fraction", T::number, opt},
                                              {"skipped_samples", T::integer, opt},
                                              {"model", T::string, opt},
                                              {"mean_iou", T::number, opt},
                                              {"iou", T::array, opt},
                                              {"mae", T::number, opt},
                                              {"target_mae", T::array, opt},
                                              {"parameter_digest", T::string, opt}};
inline constexpr EventField rank_started[] = {{"rank", T::integer, req},
                                              {"pid", T::integer, req},
                                              {"host", T::string, req},
                                              {"process_started_unix_time", T::number, opt},
                                              {"mpi_ready_unix_time", T::number, opt}};
inline constexpr EventField preemption_requested[] = {{"step", T::integer, req}};
inline constexpr EventField replicas_verified[] = {{"step", T::integer, req},
                                                   {"digest", T::string, req}};
inline constexpr EventField sample_skipped[] = {{"sample", T::integer, req},
                                                {"file", T::string, req},
                                                {"reason", T::string, req},
                                                {"rank", T::integer, req},
                                                {"step", T::integer, req}};
inline constexpr EventField step_skipped[] = {{"step", T::integer, req},
                                              {"reason", T::string, req},
                                              {"loss_scale", T::number, req},
                                              {"new_loss_scale", T::number, req}};
// What found a failure: the MPI's process-failure error (a crash, or a rank the hang monitor
// killed and named in hang_detected), the hang monitor, or the watchdog (the job then ends).
inline constexpr std::string_view failure_detectors[] = {"process failure error", "hang monitor",
                                                         "watchdog"};
inline constexpr EventField failure_detected[] = {
    {"detected_by", T::string, req, failure_detectors},
    {"step", T::integer, req},
    {"failed_ranks", T::array, opt},
    {"failed_hosts", T::array, opt},
    {"failed_nodes", T::array, opt},
    {"error", T::string, opt},
    {"detection_latency_s", T::number, opt},
    {"latency_from", T::string, opt},
    {"attempt", T::integer, opt},
    {"stuck_in", T::string, opt},
    {"stuck_s", T::number, opt},
    {"rank", T::integer, opt}};
inline constexpr EventField hang_detected[] = {
    {"rank", T::integer, req},     {"host", T::string, req},
    {"pid", T::integer, req},      {"step", T::integer, req},
    {"doing", T::string, req},     {"seconds_without_progress", T::number, req},
    {"timeout_s", T::number, req}, {"detected_by", T::string, req},
    {"reason", T::string, req},    {"detected_unix_time", T::number, req}};
inline constexpr std::string_view resume_sources[] = {"checkpoint", "start"};
inline constexpr EventField domains_resumed[] = {{"domain", T::integer, req},
                                                 {"generation", T::integer, req},
                                                 {"step", T::integer, req},
                                                 {"source", T::string, req, resume_sources}};
inline constexpr EventField communicator_shrunk[] = {
    {"old_size", T::integer, req}, {"new_size", T::integer, req}, {"seconds", T::number, req}};
// How the device gradients' NCCL communicator followed the MPI shrink: ncclCommShrink; an abort
// and a new communicator over the shrunk MPI one (a survivor's NCCL communicator had been
// aborted, by a timeout or an error); a new communicator (nobody was lost: NCCL cannot shrink
// by nobody).
inline constexpr std::string_view device_transport_paths[] = {"nccl_shrink", "nccl_abort_recreate",
                                                              "nccl_recreate"};
inline constexpr EventField device_communicator_rebuilt[] = {
    {"path", T::string, req, device_transport_paths},
    {"seconds", T::number, req},
    {"size", T::integer, req}};
inline constexpr EventField state_restored[] = {{"source", T::string, req},
                                                {"step", T::integer, req},
                                                {"seconds", T::number, req},
                                                {"path", T::string, opt},
                                                {"saved_world_size", T::integer, opt},
                                                {"world_size", T::integer, opt},
                                                {"host", T::string, opt},
                                                {"foreign", T::boolean, opt},
                                                {"saved_run_id", T::string, opt}};
inline constexpr EventField shards_rebalanced[] = {{"policy", T::string, req},
                                                   {"world_size", T::integer, req},
                                                   {"global_batch", T::integer, req},
                                                   {"per_rank_batch", T::array, req},
                                                   {"lr_scale", T::number, req}};
inline constexpr EventField training_resumed[] = {{"step", T::integer, req},
                                                  {"seconds_since_detection", T::number, req}};
inline constexpr EventField recovery_finished[] = {
    {"step", T::integer, req}, {"seconds", T::number, req}, {"attempts", T::integer, req}};
inline constexpr EventField reason_only[] = {{"reason", T::string, req}};
inline constexpr EventField snapshot_rejected[] = {{"host", T::string, req},
                                                   {"reason", T::string, req}};
inline constexpr EventField checkpoint_written[] = {{"step", T::integer, req},
                                                    {"path", T::string, req},
                                                    {"bytes", T::integer, req},
                                                    {"stall_s", T::number, req},
                                                    {"write_s", T::number, req}};
inline constexpr EventField step_and_reason[] = {{"step", T::integer, req},
                                                 {"reason", T::string, req}};
inline constexpr EventField checkpoint_failed[] = {{"step", T::integer, req},
                                                   {"error", T::string, req}};
inline constexpr EventField snapshot_failed[] = {
    {"step", T::integer, req}, {"host", T::string, req}, {"error", T::string, req}};
inline constexpr EventField data_restaging[] = {{"reason", T::string, req},
                                                {"files_moved", T::integer, req},
                                                {"world_size", T::integer, req},
                                                {"directory", T::string, req}};
inline constexpr EventField data_staging_failed[] = {
    {"reason", T::string, req}, {"lead_error", T::string, req}, {"directory", T::string, req}};
inline constexpr EventField data_staged[] = {
    {"reason", T::string, req},  {"directory", T::string, req},        {"files", T::integer, req},
    {"copied", T::integer, req}, {"already_current", T::integer, req}, {"bytes", T::integer, req},
    {"seconds", T::number, req}, {"gb_per_s", T::number, req},         {"nodes", T::array, req}};
inline constexpr EventField supervisor_started[] = {{"nodes", T::array, req},
                                                    {"spare_nodes", T::array, req},
                                                    {"ranks_per_node", T::integer, req},
                                                    {"launcher", T::string, req},
                                                    {"launch_agent", T::string, req},
                                                    {"ulfm", T::boolean, req},
                                                    {"heartbeat_timeout_s", T::number, req},
                                                    {"keepalive_time_s", T::number, req},
                                                    {"scheduler", T::string, req},
                                                    {"scheduler_job_id", T::string, req},
                                                    {"scheduler_restart_count", T::integer, req},
                                                    {"pid", T::integer, req},
                                                    {"domains", T::integer, opt},
                                                    {"nodes_per_domain", T::integer, opt},
                                                    {"rendezvous_store", T::string, opt},
                                                    {"domain_interface", T::string, opt},
                                                    {"rendezvous_store_caveat", T::string, opt}};
inline constexpr EventField supervisor_finished[] = {
    {"status", T::integer, req},   {"how", T::string, req},
    {"launches", T::integer, req}, {"excluded_nodes", T::array, opt},
    {"reason", T::string, opt},    {"gave_up", T::boolean, opt},
    {"domains", T::integer, opt},  {"generations", T::integer, opt}};
inline constexpr EventField tree_refused[] = {
    {"host", T::string, req}, {"directory", T::string, req}, {"reason", T::string, req}};
inline constexpr EventField checkpoint_rejected[] = {{"reason", T::string, req},
                                                     {"path", T::string, opt}};
inline constexpr EventField mpi_segments_removed[] = {
    {"host", T::string, req}, {"files", T::integer, req}, {"bytes", T::integer, req}};
inline constexpr EventField stale_snapshots_removed[] = {{"host", T::string, req},
                                                         {"directory", T::string, req},
                                                         {"idle_s", T::number, req},
                                                         {"bytes", T::integer, req}};
inline constexpr EventField checkpoints_discarded[] = {{"newer_than_step", T::integer, req},
                                                       {"files", T::array, req}};
// Fault domains (resilience/src/domains/fault_domains.hpp, domain_supervisor.cpp).
inline constexpr EventField domain_membership[] = {{"generation", T::integer, req},
                                                   {"members", T::array, req},
                                                   {"ranks_per_domain", T::array, req},
                                                   {"step", T::integer, req},
                                                   {"seconds", T::number, req}};
inline constexpr EventField domain_healed[] = {{"generation", T::integer, req},
                                               {"from_domain", T::integer, req},
                                               {"step", T::integer, req},
                                               {"bytes", T::integer, req},
                                               {"seconds", T::number, req}};
inline constexpr EventField domain_quorum_changed[] = {
    {"error", T::string, req},           {"step", T::integer, req},
    {"old_generation", T::integer, req}, {"generation", T::integer, req},
    {"lost_domains", T::array, req},     {"members", T::array, req},
    {"ranks_per_domain", T::array, req}, {"agreed_step", T::integer, req},
    {"action", T::string, req},          {"seconds", T::number, req}};
inline constexpr EventField domain_rewound[] = {
    {"step", T::integer, req}, {"to_step", T::integer, req}, {"steps_redone", T::integer, req}};
inline constexpr EventField domain_generation_published[] = {
    {"generation", T::integer, req}, {"members", T::array, req}, {"reason", T::string, req}};
inline constexpr EventField domain_lost[] = {
    {"launch", T::integer, req}, {"how", T::string, req},     {"exit_status", T::integer, req},
    {"nodes", T::array, req},    {"excluded", T::array, req}, {"members", T::array, req}};
inline constexpr EventField domain_relaunched[] = {{"launch", T::integer, req},
                                                   {"nodes", T::array, req},
                                                   {"spare_nodes", T::array, req},
                                                   {"seconds_since_end", T::number, req}};
inline constexpr EventField launch_started[] = {{"launch", T::integer, req},
                                                {"start_s", T::number, req}};
inline constexpr EventField launch_ended[] = {{"launch", T::integer, req},
                                              {"how", T::string, req},
                                              {"exit_status", T::integer, req},
                                              {"verdict", T::string, req},
                                              {"last_committed_step", T::integer, req}};
inline constexpr EventField requeue_requested[] = {{"reason", T::string, req},
                                                   {"step", T::integer, req},
                                                   {"scheduler", T::string, req},
                                                   {"scheduler_job_id", T::string, req},
                                                   {"scheduler_restart_count", T::integer, req},
                                                   {"newly_lost", T::array, req},
                                                   {"exclude_nodes", T::array, req}};
inline constexpr EventField job_relaunched[] = {
    {"attempt", T::integer, req},         {"previous_end", T::string, req},
    {"verdict", T::string, req},          {"excluded_nodes", T::array, req},
    {"excluded", T::array, req},          {"kept_despite_reports", T::array, req},
    {"spares_lost", T::array, req},       {"nodes", T::array, req},
    {"spare_nodes", T::array, req},       {"world_size", T::integer, req},
    {"decide_s", T::number, req},         {"backoff_s", T::number, req},
    {"seconds_since_end", T::number, req}};
}  // namespace event_fields

// In the order a run writes them, roughly: the job, its ranks, steps, failures and recovery,
// state (checkpoints, snapshots, staging), then the supervisor (`hardy run`).
inline constexpr EventKind kEventKinds[] = {
    {"job_started", "a training job began (every launch)", event_fields::job_started},
    {"job_finished", "a training job ended: completed, stopped, preempted or failed",
     event_fields::job_finished},
    {"rank_started", "a rank of the job started, on which host", event_fields::rank_started},
    {"preemption_requested", "the job got its scheduler's warning signal",
     event_fields::preemption_requested},
    {"replicas_verified", "every rank holds the same parameters (digest)",
     event_fields::replicas_verified},
    {"sample_skipped", "a sample a reader rejected was left out (--bad-samples skip)",
     event_fields::sample_skipped},
    {"step_skipped", "the optimizer skipped a step (loss-scale overflow)",
     event_fields::step_skipped},
    {"hang_detected",
     "a rank made no progress for longer than its bound; its own monitor or a peer on its host "
     "killed it (rank: its original world rank)",
     event_fields::hang_detected},
    {"failure_detected", "ranks failed, or the watchdog found one stuck",
     event_fields::failure_detected},
    {"communicator_shrunk", "the job continues on the survivors",
     event_fields::communicator_shrunk},
    {"device_communicator_rebuilt",
     "the GPU gradients' NCCL communicator followed the shrink (which path, how long)",
     event_fields::device_communicator_rebuilt},
    {"state_restored", "the committed state came back: memory, snapshot or checkpoint",
     event_fields::state_restored},
    {"shards_rebalanced", "the global batch was shared out among the survivors",
     event_fields::shards_rebalanced},
    {"training_resumed", "the first step after a recovery", event_fields::training_resumed},
    {"recovery_finished", "a recovery inside the job ended", event_fields::recovery_finished},
    {"checkpoint_rejected", "a checkpoint failed validation, or does not fit, and was passed over",
     event_fields::checkpoint_rejected},
    {"mpi_segments_removed",
     "the first rank on a host removed the shared-memory files killed MPI ranks had left in "
     "/dev/shm (comm/mpi_segments.hpp)",
     event_fields::mpi_segments_removed},
    {"stale_snapshots_removed",
     "a crashed run's node-local snapshots, idle past the grace, removed",
     event_fields::stale_snapshots_removed},
    {"checkpoints_discarded", "checkpoints of another timeline, newer than the one resumed",
     event_fields::checkpoints_discarded},
    {"snapshot_tier_refused", "the node-local snapshot tree failed the ownership checks",
     event_fields::tree_refused},
    {"staging_refused", "the --stage-to tree failed the ownership checks",
     event_fields::tree_refused},
    {"domain_started", "a fault domain that does not write the run directory's files began",
     event_fields::job_started},
    {"domain_finished", "such a domain ended (job_finished's fields)", event_fields::job_finished},
    {"domains_connected", "the domains' leaders met at the start", event_fields::domain_membership},
    {"domain_joined", "a relaunched domain was let back in", event_fields::domain_membership},
    {"domains_resumed",
     "every domain that held committed state was lost: the relaunched ones go on from the run "
     "directory's newest checkpoint (source checkpoint), or from the start",
     event_fields::domains_resumed},
    {"domain_admitted", "the members switched to a generation with a relaunched domain",
     event_fields::domain_membership},
    {"domain_healed", "a domain took the committed state from a live one",
     event_fields::domain_healed},
    {"domain_quorum_changed",
     "the live domains changed: a leader's collective failed and the survivors regrouped, or the "
     "supervisor published a generation without a domain whose job had ended",
     event_fields::domain_quorum_changed},
    {"step_rolled_forward", "after an in-domain recovery, a step the other domains committed",
     event_fields::step_and_reason},
    {"domain_rewound",
     "a domain was lost between meetings (--domain-sync-every): the survivors went back to the "
     "last step every domain committed",
     event_fields::domain_rewound},
    {"domain_generation_published", "hardy run published the domains' members",
     event_fields::domain_generation_published},
    {"domain_lost", "a domain's launcher ended before the job", event_fields::domain_lost},
    {"domain_relaunched", "hardy run relaunched a lost domain", event_fields::domain_relaunched},
    {"domain_abandoned", "a lost domain is not relaunched; the others train on",
     event_fields::reason_only},
    {"resume_skipped", "--resume found nothing to resume from", event_fields::reason_only},
    {"checkpoint_written", "a checkpoint is on disk", event_fields::checkpoint_written},
    {"checkpoint_skipped", "a checkpoint was due but the writer was busy",
     event_fields::step_and_reason},
    {"checkpoint_failed", "writing a checkpoint failed", event_fields::checkpoint_failed},
    {"final_checkpoint", "the checkpoint written as the job stops", event_fields::step_and_reason},
    {"snapshot_failed", "writing a node-local snapshot failed", event_fields::snapshot_failed},
    {"snapshot_rejected", "a node-local snapshot was passed over", event_fields::snapshot_rejected},
    {"data_restaging", "node-local data moves for a new membership", event_fields::data_restaging},
    {"data_staging_failed", "staging data to node-local storage failed",
     event_fields::data_staging_failed},
    {"data_staged", "data was staged to node-local storage", event_fields::data_staged},
    {"supervisor_started", "hardy run began", event_fields::supervisor_started},
    {"launch_started",
     "the job of one launch under hardy run started (its job_started or domain_started came "
     "start_s seconds after the launch)",
     event_fields::launch_started},
    {"launch_ended", "one launch of the job under hardy run ended", event_fields::launch_ended},
    {"job_relaunched", "hardy run relaunched the job", event_fields::job_relaunched},
    {"requeue_requested", "hardy run asked the scheduler to requeue the job",
     event_fields::requeue_requested},
    {"supervisor_finished", "hardy run ended", event_fields::supervisor_finished},
};

constexpr const EventKind* find_event_kind(std::string_view name) {
  for (const EventKind& kind : kEventKinds)
    if (kind.name == name) return &kind;
  return nullptr;
}

constexpr const EventField* find_event_field(const EventKind& kind, std::string_view name) {
  for (const EventField& field : kind.fields)
    if (field.name == name) return &field;
  for (const EventField& field : event_fields::envelope)
    if (field.name == name) return &field;
  return nullptr;
}

// An event from a file written by another version of hardy may be of a kind this one does not
// know; readers skip such records (they cannot say what it means) rather than fail on them.
constexpr bool is_event_context_field(std::string_view name) {
  for (const EventField& field : event_fields::context)
    if (field.name == name) return true;
  return false;
}

constexpr bool is_known_event_kind(std::string_view name) {
  return find_event_kind(name) != nullptr;
}

// For readers: the name of a declared kind, or a compile error ("not a constant expression",
// pointing here) when `name` is not declared above.
consteval std::string_view event_kind(std::string_view name) {
  if (!find_event_kind(name)) throw "not an event kind declared in event_schema.hpp";
  return name;
}

// For readers: the name of a field that `kind` declares (or the envelope: time, unix_time,
// event), or a compile error.
consteval std::string_view event_field(std::string_view kind, std::string_view field) {
  const EventKind* found = find_event_kind(kind);
  if (!found) throw "not an event kind declared in event_schema.hpp";
  if (!find_event_field(*found, field)) throw "not a field of this event kind in event_schema.hpp";
  return field;
}

// For readers and writers: a value that `kind`'s `field` declares (failure_detected's
// detected_by: "watchdog"), or a compile error.
consteval std::string_view event_value(std::string_view kind, std::string_view field,
                                       std::string_view value) {
  const EventKind* found = find_event_kind(kind);
  if (!found) throw "not an event kind declared in event_schema.hpp";
  const EventField* declared = find_event_field(*found, field);
  if (!declared) throw "not a field of this event kind in event_schema.hpp";
  for (std::string_view allowed : declared->values)
    if (allowed == value) return value;
  throw "not a value this field declares in event_schema.hpp";
}

// What is wrong with an event about to be written, or "" when nothing: an undeclared kind, an
// undeclared field, an envelope field set by the caller, a value of the wrong type or not among
// the field's declared values, a missing required field.
std::string event_schema_problem(std::string_view kind, const nlohmann::json& fields);

// The table as JSON (`hardy events --schema`): {"envelope": [fields], "events": {kind:
// {"meaning": ..., "fields": {name: {"type": ..., "required": ..., ["values": [...]]}}}}}.
nlohmann::json event_schema_json();

}  // namespace hardy::core
