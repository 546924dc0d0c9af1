#pragma once
// The event kinds the training session writes inside the job (resilience/src/session/): the job,
// its ranks and steps, failures and recovery, resumes and data staging.
#include "hardy/checkpoint/checkpoint_events.hpp"
#include "hardy/core/support/event_schema.hpp"

namespace hardy::resilience {

namespace event_fields {
using namespace core::event_fields;  // T, req, opt and the shapes several kinds share
using core::EventField;
inline constexpr EventField job_started[] = {{"hardy_version", T::string, req},
                                             {"world_size", T::integer, req},
                                             {"fault_tolerant", T::boolean, req},
                                             {"ranks_per_node", T::integer, req},
                                             {"backend", T::string, req},
                                             {"precision", T::string, opt},
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
inline constexpr EventField hang_detected[] = {
    {"rank", T::integer, req},     {"host", T::string, req},
    {"pid", T::integer, req},      {"step", T::integer, req},
    {"doing", T::string, req},     {"seconds_without_progress", T::number, req},
    {"timeout_s", T::number, req}, {"detected_by", T::string, req},
    {"reason", T::string, req},    {"detected_unix_time", T::number, req}};
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
                                                {"saved_run_id", T::string, opt},
                                                // The job's precision, and the one the state
                                                // was saved in where it recorded one.
                                                {"precision", T::string, opt},
                                                {"saved_precision", T::string, opt}};
inline constexpr EventField shards_rebalanced[] = {
    {"policy", T::string, req},
    {"world_size", T::integer, req},
    {"global_batch", T::integer, req},
    {"per_rank_batch", T::array, req},
    {"lr_scale", T::number, req},
    // policy "straggler" (slow_ranks.hpp): why ("straggler", "recovered", "replanned"), at which
    // step, the step time predicted under the old shares over the new, and every rank's score.
    {"reason", T::string, opt},
    {"step", T::integer, opt},
    {"predicted_gain", T::number, opt},
    {"scores", T::array, opt}};
inline constexpr EventField rank_slow[] = {{"step", T::integer, req},
                                           {"rank", T::integer, req},
                                           {"host", T::string, req},
                                           {"score", T::number, req},
                                           {"own_s_per_sample", T::number, req},
                                           {"peers_s_per_sample", T::number, req},
                                           {"since_step", T::integer, req}};
inline constexpr EventField regrow_planned[] = {
    {"step", T::integer, req},
    {"world_size", T::integer, req},
    {"full_world_size", T::integer, req},
    {"shrunk_since_step", T::integer, req},
    {"lost_s", T::number, req},
    {"cost_s", T::number, req},
    // "measured" (the steps against the healthy step before the shrink, healthy_step_s),
    // "earlier launch" (against the launch before's, logged in metrics.jsonl: the shrink came
    // before this launch had one) or "estimated" (no healthy step: the step's time x the share
    // of the world lost).
    {"basis", T::string, req},
    {"evidence", T::string, req},
    {"healthy_step_s", T::number, opt},
    // Due before the loss reached the cost: what the steps left would lose shrunk.
    {"projected_s", T::number, opt},
    {"steps_left", T::integer, opt}};
inline constexpr EventField node_evicted[] = {
    {"step", T::integer, req},
    {"rank", T::integer, req},
    {"world_rank", T::integer, req},
    {"node", T::integer, req},
    {"host", T::string, req},
    {"score", T::number, req},
    {"lost_s", T::number, req},
    {"cost_s", T::number, req},
    {"evidence", T::string, req},
    // "compute" (the rank's own work, rank_slow) or "link" (its node's network, link_slow).
    {"cause", T::string, opt}};
inline constexpr EventField eviction_forgone[] = {
    {"step", T::integer, req}, {"rank", T::integer, req},  {"host", T::string, req},
    {"cause", T::string, req}, {"lost_s", T::number, req}, {"cost_s", T::number, req},
    {"reason", T::string, req}};
inline constexpr EventField link_probe[] = {
    {"step", T::integer, req},     {"seconds", T::number, req},    {"bytes", T::integer, req},
    {"pairs", T::array, req},      {"exchange_s", T::number, req}, {"baseline_s", T::number, req},
    {"named_host", T::string, opt}};
inline constexpr EventField link_slow[] = {
    {"step", T::integer, req},        {"rank", T::integer, req},
    {"host", T::string, req},         {"pair_s", T::number, req},
    {"peers_pair_s", T::number, req}, {"exchange_s", T::number, req},
    {"baseline_s", T::number, req},   {"since_step", T::integer, req}};
inline constexpr EventField link_recovered[] = {{"step", T::integer, req},
                                                {"rank", T::integer, req},
                                                {"host", T::string, req},
                                                {"since_step", T::integer, req}};
inline constexpr EventField rank_recovered[] = {{"step", T::integer, req},
                                                {"rank", T::integer, req},
                                                {"host", T::string, req},
                                                {"score", T::number, req},
                                                {"since_step", T::integer, req}};
inline constexpr EventField training_resumed[] = {{"step", T::integer, req},
                                                  {"seconds_since_detection", T::number, req}};
inline constexpr EventField recovery_finished[] = {
    {"step", T::integer, req}, {"seconds", T::number, req}, {"attempts", T::integer, req}};
inline constexpr EventField mpi_segments_removed[] = {
    {"host", T::string, req}, {"files", T::integer, req}, {"bytes", T::integer, req}};
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
inline constexpr EventField training_diverging[] = {
    {"step", T::integer, req},           {"since_step", T::integer, req},
    {"early_loss", T::number, req},      {"factor", T::number, req},
    {"window", T::integer, req},         {"early_steps", T::integer, req},
    {"non_finite", T::integer, req},     {"loss", T::number, opt},
    {"window_mean_loss", T::number, opt}};
}  // namespace event_fields

inline constexpr core::EventKind kSessionEvents[] = {
    {"job_started", "a training job began (every launch)", event_fields::job_started},
    {"job_finished",
     "a training job ended: completed, stopped, preempted, failed, or evicting or regrowing (a "
     "planned relaunch, exit status 5)",
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
    {"training_diverging",
     "the training loss stayed above --divergence-factor x its early level (the mean loss of "
     "the first early_steps steps) for --divergence-window steps, since_step to step; reported "
     "once, nothing is done about it (docs/training.md)",
     event_fields::training_diverging},
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
    {"shards_rebalanced",
     "the global batch was shared out among the survivors, or (policy straggler) anew around a "
     "slow rank",
     event_fields::shards_rebalanced},
    {"rank_slow",
     "a rank's own work per sample stayed --straggler-slowdown above its peers' median for "
     "--straggler-confirm steps (score: the peers' time over its own; rank: in the current "
     "communicator)",
     event_fields::rank_slow},
    {"node_evicted",
     "--straggler evict: the time lost to a slow rank reached the cost of a relaunch without its "
     "node (lost_s against cost_s); the job wrote a final checkpoint and stops with status 5 so "
     "that hardy run relaunches on a spare in the node's place (node: in --ranks-per-node terms "
     "of the original world)",
     event_fields::node_evicted},
    {"eviction_forgone",
     "--straggler evict named a node whose eviction would have paid, but hardy run had no spare "
     "node left (with fault domains, another domain's relaunch took it): it stays, rebalanced "
     "around, and nothing is evicted from then on",
     event_fields::eviction_forgone},
    {"regrow_planned",
     "--regrow: the job (or its fault domain) ran shrunk after a failure until the time lost to "
     "it reached the cost of a relaunch (lost_s against cost_s); it wrote a final checkpoint and "
     "stops with status 5 so that hardy run relaunches it at its full world",
     event_fields::regrow_planned},
    {"rank_recovered", "a slow rank kept up with its peers again for --straggler-confirm steps",
     event_fields::rank_recovered},
    {"link_probe",
     "the step's exchange stayed --straggler-slowdown of a step above its own best while no "
     "rank's own work was slow: pairs of neighbouring nodes timed an exchange of the gradients' "
     "size (pairs: [host, host, seconds]; named_host: the node in two slow pairs, if one)",
     event_fields::link_probe},
    {"link_slow",
     "a probe found one node whose two pairs took at least twice the other pairs' median: its "
     "network link is slow (rank: that node's lowest, in the current communicator)",
     event_fields::link_slow},
    {"link_recovered",
     "the exchange came back within half --straggler-slowdown of a step of its best for "
     "--straggler-confirm steps after a slow link",
     event_fields::link_recovered},
    {"training_resumed", "the first step after a recovery", event_fields::training_resumed},
    {"recovery_finished", "a recovery inside the job ended", event_fields::recovery_finished},
    {"resume_skipped", "--resume found nothing to resume from", event_fields::reason_only},
    {"mpi_segments_removed",
     "the first rank on a host removed the shared-memory files killed MPI ranks had left in "
     "/dev/shm (comm/mpi/segments.hpp)",
     event_fields::mpi_segments_removed},
    {"staging_refused", "the --stage-to tree failed the ownership checks",
     checkpoint::event_fields::tree_refused},
    {"data_restaging", "node-local data moves for a new membership", event_fields::data_restaging},
    {"data_staging_failed", "staging data to node-local storage failed",
     event_fields::data_staging_failed},
    {"data_staged", "data was staged to node-local storage", event_fields::data_staged},
};

}  // namespace hardy::resilience
