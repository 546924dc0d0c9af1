#pragma once
// The session's side of fault domains: what its trainer, state store and run files do when the
// domains exchange a step, lose a member, let one in or heal it (docs/resilience.md, "Fault
// domains"). FaultDomains (domains/fault_domains.hpp) runs the leaders' protocol and decides; this
// class applies the decisions here. It lives in session/ because it drives the trainer and the
// state store, which domains/ must not know. Without --domain every call is cheap and changes
// nothing: the job is one domain.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "domains/fault_domains.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/loop_state.hpp"
#include "session/membership.hpp"
#include "session/run_files.hpp"
#include "session/state_store.hpp"
#include "session/trainer.hpp"
#include "session/watchdog.hpp"

namespace hardy::resilience {

class DomainCoordinator {
 public:
  // Collective over the domain (connects nothing yet: see start). `label_elements` is a sample's
  // count of loss terms (pixels or targets): a step rolled forward is scaled as a computed one.
  DomainCoordinator(const TrainingConfig& config, Membership& membership, Trainer& trainer,
                    StateStore& store, RunFiles& files, Watchdog& watchdog,
                    std::size_t label_elements);
  ~DomainCoordinator();

  FaultDomains& domains() { return *domains_; }
  const FaultDomains& domains() const { return *domains_; }
  bool enabled() const { return domains_->enabled(); }

  // Start or join: the leaders connect and every domain goes on from the newest member's state.
  void start();
  // Before step `computed_step`'s backward, where the domains meet at it: the leader exchange
  // needs the domain's sums at its leader alone; the sharded one sends each bucket's shard on to
  // the other domains as soon as the domain has reduced the bucket, while backward goes on (when
  // what the domains sum is this step's host gradients alone: meeting every step, no step
  // computed ahead, not a GPU's; otherwise the shards leave after the reduction).
  void prepare_reduction(long computed_step);
  // After the step's gradients are summed in the domain: where the domains meet, the exchange of
  // those sums with the other domains and the vote, left in flight (`in_background`, while the
  // next step computes) or done at once; elsewhere the sums become the domain's mean. `loss` is
  // the domain's sums (loss, skipped, computed).
  void start_exchange(long this_step, std::size_t global_batch, std::vector<double>& loss,
                      bool in_background);
  // Its outcome: false when the step is not to be committed here (abandoned, rewound, or taken
  // from a peer whole); on commit the sums are in the gradients and `loss` holds the job's.
  // `done` is the step's record so far (for the lines of a step healed here).
  bool settle_exchange(long this_step, std::vector<double>& loss, const CommittedStep& done,
                       bool& admit_after_commit);
  // After a committed step whose vote saw a relaunched domain waiting: it is let in and heals.
  void admit_pending();
  // After a recovery inside this domain (`what` failed): the step that was in flight across
  // domains, rolled forward when the others committed it (the step to commit here, its update
  // ready), or dropped with them (nothing). A domain that lost its leader ends (comm::Agreed).
  std::optional<CommittedStep> after_local_recovery(const std::string& what);
  // That the ranks' counts of a step's samples cover the domain's share of its global batch
  // exactly (comm::Agreed<Error> otherwise: collective sums, equal on every rank).
  void check_samples_covered(long computed, long skipped, long at_step) const;
  // Whether the steps computed ahead still fit the split of the batch (it changes when a domain
  // is lost or let in, or one shrank inside): remember it as each step loads its samples.
  void note_split_of_computed() { split_of_newest_computed_ = domains_->split_digest(); }
  bool split_changed_since_computed() const {
    return domains_->split_digest() != split_of_newest_computed_;
  }

 private:
  // What the domains commit together: every step, or every --domain-sync-every steps.
  DomainStateAccess state_access();
  // After a lost domain: back to the last state every domain committed (domain_rewound).
  void rewind_to_synced(long at_step);
  // After the domains' membership changed: who writes the run directory's files now.
  void follow_ownership();

  const TrainingConfig& config_;
  Membership& membership_;
  Trainer& trainer_;
  StateStore& store_;
  RunFiles& files_;
  Watchdog& watchdog_;
  std::size_t label_elements_;
  std::unique_ptr<FaultDomains> domains_;  // always present; enabled() with --domain
  // FaultDomains::split_digest() when the newest computed step loaded its samples.
  std::uint64_t split_of_newest_computed_ = 0;
  // Between start_exchange and settle_exchange: the tensors exchanged (host copies on a GPU),
  // the step's batch (for a heal's audit line), and the outcome of an exchange done at once.
  std::span<core::Tensor* const> exchanging_;
  std::optional<core::GlobalBatch> batch_in_exchange_;
  std::optional<DomainStep> exchanged_now_;
  // Relayed buckets: where each gradient starts in the values the domains exchange (every
  // gradient in the model's order), their count, and one bucket's parts (reused).
  std::unordered_map<const core::Parameter*, std::size_t> exchanged_offset_;
  std::size_t exchanged_values_ = 0;
  std::vector<FaultDomains::RelayedPart> relayed_parts_;
};

}  // namespace hardy::resilience
