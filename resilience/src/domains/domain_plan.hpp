#pragma once
// The decisions of the fault-domain protocol, as pure functions (fault_domains.hpp runs them).
//
// A job of several fault domains is several MPI jobs. Their leaders (each domain's rank 0) form a
// gloo group per *generation*: the set of live domains, published in the rendezvous store by the
// supervisor (`hardy run`), which watches every domain's launcher. Within a generation each step
// ends in one vote among the leaders (an allreduce); the vote is the commit point of the step
// across domains. A leader whose collective fails (a domain died, or stopped answering) waits for
// the next generation, connects to it and, with the other survivors, resyncs: the step is
// committed everywhere if any survivor saw its vote complete (those that did not take that
// member's state), otherwise abandoned everywhere.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hardy/core/data/sampler.hpp"

namespace hardy::resilience {

// ---- members and the global batch ----

// "0,2,3" <-> {0, 2, 3}: the live domains of a generation, ascending. Throws InvalidArgument for
// anything else.
std::vector<int> parse_members(const std::string& text);
std::string format_members(const std::vector<int>& members);

// The global batch split over the live ranks of the live domains, domain after domain: domain i
// (an index into `ranks_per_domain`, the live ranks each domain reported at the last vote) takes
// the slices of its ranks in the job-wide split, and inside the domain its `live_ranks` split
// that slice among themselves, evenly or by `weights` (one per live rank: core::weighted_shares,
// the slow-rank policy's). So a domain that lost ranks since it reported covers its share with
// fewer, the others never notice, and every sample is still assigned exactly once.
// `domain_shares`, when given (one positive weight per domain: the cross-domain slow-rank
// policy's, domain_balance.hpp), replaces the split by ranks: domain i takes core::shard_of's
// weighted slice, whole samples that whole-number weights adding up to the batch give exactly.
core::Shard domain_slice(std::size_t global_batch, const std::vector<int>& ranks_per_domain,
                         std::size_t domain, std::span<const double> domain_shares = {});
core::Shard rank_slice_in_domain(std::size_t global_batch, const std::vector<int>& ranks_per_domain,
                                 std::size_t domain, int rank, int live_ranks,
                                 std::span<const double> weights = {},
                                 std::span<const double> domain_shares = {});

// ---- synchronising every N steps (--domain-sync-every, the NERSC hybrid scheme; LocalSGD) ----
//
// With N > 1 each domain trains alone on its own slice of every global batch and the domains
// meet every N-th step, where they average their parameters, batch statistics and optimizer
// state, weighted by their shares of the batch, and sum that step's gradients. Only such a step
// is committed across domains: what a lost domain did since the last one is lost with it, and the
// survivors rewind to it, so every sample still counts exactly once.

// Whether the domains meet at `step`: every `sync_every`-th step and the last one (the job ends on
// a state every domain shares). Every step when sync_every is 1.
bool synchronizes(long step, int sync_every, long last_step);
// A domain's share of a global batch: its samples over the batch's. The weight of its state in
// the average at a meeting, and what its gradient sum is divided by on the steps in between to
// make it its own batch's mean.
double domain_share(std::size_t global_batch, const std::vector<int>& ranks_per_domain,
                    std::size_t domain, std::span<const double> domain_shares = {});

// ---- the per-step vote ----

// What a leader brings to its step's vote, and what the vote returns to all of them (sums). The
// vote rides at the end of the step's gradient buffer, so a step costs the leaders one
// collective: floats, exact for the counts, and the loss carried as two (a float and its
// remainder) to keep about a double's precision.
struct Vote {
  bool ok = true;                   // this domain finished the step (its gradients are in the sum)
  bool generation_pending = false;  // the store names a next generation (a domain asks to join)
  double loss = 0;                  // the domain's loss sum (already summed over its ranks)
  double skipped = 0;               // bad samples skipped in the domain this step
  std::vector<int> ranks;           // live ranks per member; a leader fills in its own slot only
  // The domain's own work for the step (its slowest rank's seconds, 0: not measured) and the
  // samples it covered, per member; a leader fills in its own slot only.
  std::vector<double> own_s = {}, own_samples = {};
  // The split of the batch over the members that the lowest member's cross-domain policy asks
  // for (domain_balance.hpp): the lowest member fills in every slot, the others none; all zero:
  // by ranks. It holds from the next batch drawn after the vote.
  std::vector<double> shares = {};
};
// The values a vote of `members` members takes at the end of a buffer.
std::size_t vote_values(std::size_t members);
// Appends this leader's vote to `buffer` (its gradients).
void append_vote(std::vector<float>& buffer, const Vote& mine, std::size_t my_index,
                 std::size_t members);
// The summed vote at the end of `buffer`, which is cut back to the gradients: ok when every
// member was, pending when any member saw a next generation.
Vote take_vote(std::vector<float>& buffer, std::size_t members);

// ---- resync after a lost member ----

// Where a leader stood when its generation broke.
struct MemberPosition {
  long decided = 0;      // the last step whose vote completed here: committed across domains
  bool joining = false;  // a relaunched domain with no state yet (healed from a peer)
};

enum class ResyncAction {
  keep,  // already at the agreed step: drop whatever step was in flight
  heal,  // take the agreed state from the member that has it
};

struct ResyncPlan {
  long agreed_step = 0;
  std::vector<ResyncAction> actions;  // per member
  std::size_t heal_source = 0;        // a member at the agreed step (the lowest)
  // Every member is a relaunched domain: all that held committed state were lost (a domain lost
  // while another healed). Each goes on from what persists and every domain reads alike: the run
  // directory's newest checkpoint, or the start when there is none. agreed_step is then unknown
  // (-1) until that is read, and `actions` are all `heal`.
  bool from_persisted = false;
};

// Any member's completed vote commits its step everywhere. A member behind the agreed step (its
// collective failed before the vote reached it, it joined, or its domain restarted from older
// state) heals from the lowest member at the agreed step. When only joiners are left, the plan
// says so (from_persisted) rather than inventing a state.
ResyncPlan plan_resync(const std::vector<MemberPosition>& positions);

}  // namespace hardy::resilience
