#pragma once
// The event kinds the supervisor writes outside the job (`hardy run`, resilience/src/supervisor/):
// its launches, their ends, relaunches and requeues.
#include "hardy/core/support/event_schema.hpp"

namespace hardy::resilience {

namespace event_fields {
using namespace core::event_fields;  // T, req, opt and the shapes several kinds share
using core::EventField;
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
inline constexpr EventField launch_started[] = {{"launch", T::integer, req},
                                                {"start_s", T::number, req}};
inline constexpr EventField launch_ended[] = {{"launch", T::integer, req},
                                              {"how", T::string, req},
                                              {"exit_status", T::integer, req},
                                              {"verdict", T::string, req},
                                              {"last_committed_step", T::integer, req}};
inline constexpr EventField launch_stalled[] = {
    {"launch", T::integer, opt},     {"domains", T::array, opt}, {"quiet_s", T::number, req},
    {"threshold_s", T::number, req}, {"silent", T::array, req},  {"ended", T::boolean, req},
    {"probe_s", T::number, req}};
inline constexpr EventField job_relaunched[] = {
    {"attempt", T::integer, req},         {"previous_end", T::string, req},
    {"verdict", T::string, req},          {"excluded_nodes", T::array, req},
    {"excluded", T::array, req},          {"kept_despite_reports", T::array, req},
    {"spares_lost", T::array, req},       {"nodes", T::array, req},
    {"spare_nodes", T::array, req},       {"world_size", T::integer, req},
    {"decide_s", T::number, req},         {"backoff_s", T::number, req},
    {"seconds_since_end", T::number, req}};
inline constexpr EventField requeue_requested[] = {{"reason", T::string, req},
                                                   {"step", T::integer, req},
                                                   {"scheduler", T::string, req},
                                                   {"scheduler_job_id", T::string, req},
                                                   {"scheduler_restart_count", T::integer, req},
                                                   {"newly_lost", T::array, req},
                                                   {"exclude_nodes", T::array, req}};
inline constexpr EventField supervisor_finished[] = {
    {"status", T::integer, req},   {"how", T::string, req},
    {"launches", T::integer, req}, {"excluded_nodes", T::array, opt},
    {"reason", T::string, opt},    {"gave_up", T::boolean, opt},
    {"domains", T::integer, opt},  {"generations", T::integer, opt}};
inline constexpr EventField node_state_removed[] = {{"nodes", T::array, req},
                                                    {"unreachable", T::array, req},
                                                    {"kept", T::object, req},
                                                    {"left", T::array, req},
                                                    {"seconds", T::number, req}};
}  // namespace event_fields

inline constexpr core::EventKind kSupervisorEvents[] = {
    {"supervisor_started", "hardy run began", event_fields::supervisor_started},
    {"launch_started",
     "the job of one launch under hardy run started (its job_started or domain_started came "
     "start_s seconds after the launch)",
     event_fields::launch_started},
    {"launch_ended", "one launch of the job under hardy run ended", event_fields::launch_ended},
    {"launch_stalled",
     "the job committed no step for quiet_s seconds (threshold_s: --stall-probe-after, or ten "
     "of its steps), so hardy run probed the nodes of the launch (one job: its number) or of the "
     "domains in the job (fault domains: their indices): those that did not answer (host, "
     "evidence), and whether it ended their launches (ended: some answered, some did not)",
     event_fields::launch_stalled},
    {"job_relaunched", "hardy run relaunched the job", event_fields::job_relaunched},
    {"requeue_requested", "hardy run asked the scheduler to requeue the job",
     event_fields::requeue_requested},
    {"supervisor_finished", "hardy run ended", event_fields::supervisor_finished},
    {"node_state_removed",
     "after the run: the nodes whose node-local snapshots of the run were removed, those that "
     "could not be reached (host, why), the step a node kept as a checkpoint first (host, step; "
     "null when none needed keeping), and the nodes whose snapshots were left because keeping "
     "them failed there (host, why)",
     event_fields::node_state_removed},
};

}  // namespace hardy::resilience
