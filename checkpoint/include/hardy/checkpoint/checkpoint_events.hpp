#pragma once
// The event kinds about checkpoints and node-local snapshots (core/support/event_schema.hpp has
// the mechanism): written by the session that keeps the committed state
// (resilience/src/session/state_store.cpp), declared here beside the files they describe.
#include "hardy/core/support/event_schema.hpp"

namespace hardy::checkpoint {

namespace event_fields {
using namespace core::event_fields;  // T, req, opt and the shapes several kinds share
using core::EventField;
inline constexpr EventField checkpoint_written[] = {{"step", T::integer, req},
                                                    {"path", T::string, req},
                                                    {"bytes", T::integer, req},
                                                    {"stall_s", T::number, req},
                                                    {"write_s", T::number, req}};
inline constexpr EventField checkpoint_failed[] = {{"step", T::integer, req},
                                                   {"error", T::string, req}};
inline constexpr EventField checkpoint_rejected[] = {{"reason", T::string, req},
                                                     {"path", T::string, opt}};
inline constexpr EventField checkpoints_discarded[] = {{"newer_than_step", T::integer, req},
                                                       {"files", T::array, req}};
inline constexpr EventField snapshot_failed[] = {
    {"step", T::integer, req}, {"host", T::string, req}, {"error", T::string, req}};
inline constexpr EventField snapshot_rejected[] = {{"host", T::string, req},
                                                   {"reason", T::string, req}};
inline constexpr EventField stale_snapshots_removed[] = {{"host", T::string, req},
                                                         {"directory", T::string, req},
                                                         {"idle_s", T::number, req},
                                                         {"bytes", T::integer, req},
                                                         {"run_over", T::boolean, opt}};
inline constexpr EventField tree_refused[] = {
    {"host", T::string, req}, {"directory", T::string, req}, {"reason", T::string, req}};
}  // namespace event_fields

inline constexpr core::EventKind kCheckpointEvents[] = {
    {"checkpoint_written", "a checkpoint is on disk", event_fields::checkpoint_written},
    {"checkpoint_skipped", "a checkpoint was due but the writer was busy",
     event_fields::step_and_reason},
    {"checkpoint_failed", "writing a checkpoint failed", event_fields::checkpoint_failed},
    {"final_checkpoint", "the checkpoint written as the job stops", event_fields::step_and_reason},
    {"checkpoint_rejected", "a checkpoint failed validation, or does not fit, and was passed over",
     event_fields::checkpoint_rejected},
    {"checkpoints_discarded", "checkpoints of another timeline, newer than the one resumed",
     event_fields::checkpoints_discarded},
    {"snapshot_failed", "writing a node-local snapshot failed", event_fields::snapshot_failed},
    {"snapshot_rejected", "a node-local snapshot was passed over", event_fields::snapshot_rejected},
    {"stale_snapshots_removed",
     "another run's node-local snapshots removed from this node: idle past the grace (a "
     "crash's), or left by a run that is over (run_over: its supervisor could not reach the "
     "node at the end)",
     event_fields::stale_snapshots_removed},
    {"snapshot_tier_refused", "the node-local snapshot tree failed the ownership checks",
     event_fields::tree_refused},
};

}  // namespace hardy::checkpoint
