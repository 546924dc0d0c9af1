#pragma once
// The event kinds of fault domains (resilience/src/domains/, the session's domain coordinator and
// the domain supervisor): the leaders meeting, losing a domain, letting one in, healing it.
#include "hardy/core/support/event_schema.hpp"
#include "hardy/resilience/events/session_events.hpp"

namespace hardy::resilience {

namespace event_fields {
using namespace core::event_fields;  // T, req, opt and the shapes several kinds share
using core::EventField;
// Fault domains (resilience/src/domains/fault_domains.hpp, domain_supervisor.cpp).
inline constexpr EventField domain_membership[] = {{"generation", T::integer, req},
                                                   {"members", T::array, req},
                                                   {"ranks_per_domain", T::array, req},
                                                   {"step", T::integer, req},
                                                   {"seconds", T::number, req}};
inline constexpr std::string_view resume_sources[] = {"checkpoint", "node-local", "start"};
inline constexpr EventField domains_resumed[] = {{"domain", T::integer, req},
                                                 {"generation", T::integer, req},
                                                 {"step", T::integer, req},
                                                 {"source", T::string, req, resume_sources},
                                                 // the member whose state every one took
                                                 {"from_domain", T::integer, opt}};
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
    {"launch", T::integer, req},
    {"how", T::string, req},
    {"exit_status", T::integer, req},
    {"nodes", T::array, req},
    {"excluded", T::array, req},
    {"members", T::array, req},
    // It ended as planned, to leave out a node it evicted as slow (node_evicted).
    {"evicting", T::boolean, req},
    // It ended as planned, having shrunk inside, to come back at its full world
    // (regrow_planned).
    {"regrowing", T::boolean, opt}};
inline constexpr EventField domain_relaunched[] = {{"launch", T::integer, req},
                                                   {"nodes", T::array, req},
                                                   {"spare_nodes", T::array, req},
                                                   {"seconds_since_end", T::number, req}};
// The domains' split of the batch around a slow one (domain_balance.hpp); the lowest member's
// leader writes them. slow_domain: the domain named (the event's own `domain` is the writer's).
inline constexpr EventField domain_slow[] = {{"step", T::integer, req},
                                             {"slow_domain", T::integer, req},
                                             {"score", T::number, req},
                                             {"own_s_per_sample", T::number, req},
                                             {"peers_s_per_sample", T::number, req},
                                             {"since_step", T::integer, req}};
inline constexpr EventField domain_recovered[] = {{"step", T::integer, req},
                                                  {"slow_domain", T::integer, req},
                                                  {"score", T::number, req},
                                                  {"since_step", T::integer, req}};
inline constexpr EventField domains_rebalanced[] = {{"step", T::integer, req},
                                                    {"reason", T::string, req},
                                                    {"members", T::array, req},
                                                    {"global_batch", T::integer, req},
                                                    {"per_domain_batch", T::array, req},
                                                    {"predicted_gain", T::number, req},
                                                    {"scores", T::array, req}};
}  // namespace event_fields

inline constexpr core::EventKind kDomainEvents[] = {
    {"domain_started", "a fault domain that does not write the run directory's files began",
     event_fields::job_started},
    {"domain_finished", "such a domain ended (job_finished's fields)", event_fields::job_finished},
    {"domains_connected", "the domains' leaders met at the start", event_fields::domain_membership},
    {"domain_joined", "a relaunched domain was let back in", event_fields::domain_membership},
    {"domains_resumed",
     "every domain that held committed state was lost: the relaunched ones go on from the newest "
     "state one of them reads (the run directory's newest checkpoint, or its leader node's "
     "snapshot: source checkpoint or node-local), or from the start",
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
    {"domain_slow",
     "a fault domain's own work per sample and rank (its slowest rank's seconds over its samples "
     "per rank) stayed --straggler-slowdown above the other domains' median for "
     "--straggler-confirm steps (score: theirs over its own)",
     event_fields::domain_slow},
    {"domain_recovered", "a slow fault domain kept up with the others again",
     event_fields::domain_recovered},
    {"domains_rebalanced",
     "the global batch was shared out anew over the fault domains, around a slow one (reason "
     "straggler or replanned), back by their ranks (recovered, ranks changed); it holds from "
     "the batch drawn after the next vote",
     event_fields::domains_rebalanced},
};

}  // namespace hardy::resilience
