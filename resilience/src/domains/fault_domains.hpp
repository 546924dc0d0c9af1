#pragma once
// The session's side of fault domains (docs/resilience.md, "Fault domains"): a job of several MPI
// jobs, one per domain, whose leaders (each domain's rank 0) exchange gradients and votes through
// a gloo group that rendezvous in a store. domain_plan.hpp has the protocol's decisions; this
// class runs them. Every call here is collective over the domain's own communicator: the leader
// talks to the other domains, then tells its ranks what was decided (an MPI broadcast), so a
// domain's ranks always act on one decision.
//
// A lost domain never stops the others: their leaders' collectives fail (GroupFailure), they wait
// for the supervisor's next generation of members, connect to it, and resync (the in-flight step
// is committed everywhere or nowhere). A rank that dies inside a domain is shrunk away there
// (after_local_recovery); a domain whose leader dies, or whose MPI job ends, is relaunched by the
// supervisor and heals from a live peer.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "domains/domain_plan.hpp"
#include "domains/sum_queue.hpp"
#include "hardy/checkpoint/training_state.hpp"
#include "hardy/comm/communicator.hpp"
#include "hardy/comm/rendezvous/store.hpp"
#include "hardy/core/compute/tensor.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/domain_balance.hpp"
#include "hardy/resilience/training_config.hpp"

namespace hardy::resilience {

struct DomainOptions {
  int index = -1;  // this domain; -1: the job is one domain (everything here is off)
  int count = 1;
  std::string store;  // the rendezvous store: a directory every node sees, or redis://HOST:PORT
  std::filesystem::path store_token = {};  // a redis:// store's password file
  std::string address;                     // where this leader listens (empty: the host name)
  double timeout_s = 10;  // a gloo collective or connection that takes longer fails
  // How long a leader waits for the supervisor to publish the next generation before giving up.
  double membership_timeout_s = 120;
  // Relaunched after a loss: the supervisor's token for this launch (empty: the job's first
  // launch). The leader asks to be let in under it, then heals from a peer.
  std::string join_token;
  DomainExchange exchange = DomainExchange::leader;
  // The slow-rank policy's thresholds, for the domains' split of the batch (domain_balance.hpp;
  // mode off: split by ranks always).
  StragglerThresholds balance = {.mode = StragglerMode::off};
};

// A leader that finds its domain left out of a generation: the domain must end (the supervisor
// relaunches it). Not a failure of this process.
class DomainExcluded : public Error {
 public:
  using Error::Error;
};

// What the session hands over: its committed state, and how to replace it (in-domain collective).
struct DomainStateAccess {
  std::function<const checkpoint::TrainingState&()> committed;  // the leader's copy
  // Every rank of the domain: root (the leader) has `state`, all end up applying it.
  std::function<void(checkpoint::TrainingState&)> restore_in_domain;
  std::function<long()> committed_step;
  // The leader, when every domain that held committed state was lost: the newest committed state
  // it can read, the run directory's newest valid checkpoint or its own node's newest snapshot
  // of this run (source "checkpoint" or "node-local"), or nothing. The members' newest wins.
  struct Persisted {
    checkpoint::TrainingState state;
    std::string source;
    std::string path;    // the file read
    double seconds = 0;  // to read it
  };
  std::function<std::optional<Persisted>()> persisted;
  // The leader's lines of the run directory's logs (metrics, audit) for its committed step, as
  // one string, and how it takes a peer's at a resync: the member that writes the run files
  // afterwards may be a joiner that never computed the agreed step, while the writer died before
  // logging it. Either may be empty (no lines kept).
  std::function<std::string()> committed_lines;
  std::function<void(const std::string&)> adopt_lines;
};

enum class StepVerdict {
  commit,   // the summed tensors are in place: apply them and commit the step
  abandon,  // the step is dropped everywhere: go back to the domain's committed state, redo it
  // The members changed: the step is dropped and every domain goes back to the last state all
  // of them committed together (with --domain-sync-every 1, the domain's committed state).
  rewind,
  healed,  // the step is dropped and the state was replaced by a peer's (already applied)
};

struct DomainStep {
  StepVerdict verdict = StepVerdict::commit;
  double loss = 0;             // the job-wide loss sum (every domain's), for the step's metrics
  double skipped = 0;          // bad samples skipped across domains
  bool admit_pending = false;  // a next generation waits: call admit_if_pending() after the commit
};

class FaultDomains {
 public:
  // `domain` holds the domain's communicator (Membership's slot: a shrink replaces what it holds).
  FaultDomains(DomainOptions options, const std::unique_ptr<comm::Communicator>& domain,
               core::EventLog& events);
  ~FaultDomains();

  bool enabled() const { return options_.index >= 0; }
  int index() const { return options_.index; }
  // This domain is the lowest live one: its leader writes the run directory's files.
  bool owns_run_files() const { return !enabled() || members_.front() == options_.index; }
  std::size_t generation() const { return generation_; }
  // Every rank of the domain exchanges with the other domains (--domain-exchange sharded): a
  // rank lost inside the domain ends it, since its shard's peers cannot go on without it.
  bool sharded() const { return enabled() && options_.exchange == DomainExchange::sharded; }
  // The job's live ranks: every member domain's, as last reported (the domain's own without
  // domains).
  int job_world_size() const;

  // The job-wide split (domain_plan.hpp): this rank's slice of a global batch, the domain's
  // ranks sharing theirs evenly or by `weights` (one per rank of the domain).
  core::Shard my_slice(std::size_t global_batch, std::span<const double> weights = {}) const;
  // This domain's slice of a global batch, which its ranks split among themselves (the whole
  // batch without domains).
  core::Shard my_domain_slice(std::size_t global_batch) const;
  // Changes whenever the split of the global batch over the domains does (members, or their
  // live ranks as last reported); equal on every rank of every domain after a vote.
  std::uint64_t split_digest() const;
  // This domain's share of a global batch (domain_plan.hpp's domain_share); 1 without domains.
  double share(std::size_t global_batch) const;
  // The domain's own work for the step about to be exchanged (its slowest rank's seconds, 0: not
  // measured) and the samples it covered: the leader votes them, and the lowest member shares
  // the batch out by them (domain_balance.hpp).
  void note_own_work(double own_s, double samples) {
    own_s_ = own_s;
    own_samples_ = samples;
  }
  // The split of the batch over the members in force (empty: by ranks).
  const std::vector<double>& shares_per_member() const { return shares_per_member_; }
  // Collective over the domain: whether hardy run still has a spare node for a relaunch, as it
  // last published it (true where it published nothing: the launch's own count then holds).
  // Another domain's relaunch may have taken the spare this domain's launch was told of.
  bool spare_left();

  // Start or join: the leaders connect, the state of the newest member (the highest committed
  // step; a joiner has none) goes to every member behind it, and each domain restores it.
  void start(const DomainStateAccess& state);

  // The step's exchange, after the domain's own gradient allreduce: the leader sums `tensors`
  // (the gradients; at a meeting of domains that train alone in between, also their weighted
  // state) over the domains and votes; every rank of the domain gets the sums (on commit) and
  // the verdict. `loss` and `skipped` are the domain's sums. `weights`, when given, has one
  // factor per tensor, applied to what is sent and never to the tensor itself (a domain's share
  // of the batch, so that the sum of the states is their average; a dropped step leaves the
  // state as it was). A lost peer domain is handled inside (regroup and resync), so the verdict
  // holds for every live domain.
  DomainStep exchange(long step, std::span<core::Tensor* const> tensors, double loss,
                      double skipped, const DomainStateAccess& state,
                      std::span<const float> weights = {});
  // The same in two halves, so that the next step computes while the sums travel (lagged
  // updates): start_exchange() takes what is sent (the leader copies `tensors` before it
  // returns, so the caller may overwrite them) and leaves the leader's collective in flight on a
  // thread of its own; settle_exchange() waits for it, votes, and puts the sums in `tensors`,
  // which may be other buffers of the same sizes. Between the two only after_local_recovery()
  // may be called (it settles the step in flight first).
  void start_exchange(long step, std::span<core::Tensor* const> tensors, double loss,
                      double skipped, std::span<const float> weights = {});
  DomainStep settle_exchange(std::span<core::Tensor* const> tensors,
                             const DomainStateAccess& state);
  bool exchange_in_flight() const { return in_flight_ != nullptr; }

  // Sharded, at a step where the domains meet to sum gradients alone (`total` values: every
  // gradient in the order exchange() packs them, no weights): this rank's shard leaves bucket by
  // bucket while backward still runs, as HSDP's and torchft's replica groups send theirs.
  // start_relay() before the step's backward; relay_bucket() for each bucket the domain has
  // reduced, in bucket order; then exchange() or start_exchange() as always, which add only the
  // vote. A bucket is a contiguous range of the packed values, given gradient by gradient: where
  // it starts, and its sums before finish() scales them by `scale` (scaled here alike, so the
  // domains' sums are bitwise those of an exchange after finish()).
  struct RelayedPart {
    std::size_t offset = 0;  // in the packed values
    std::span<const float> sums;
  };
  void start_relay(long step, std::size_t total, float scale);
  void relay_bucket(std::span<const RelayedPart> parts);

  // After the domain recovered from a rank's death inside it (ULFM shrink, state back at the
  // domain's committed step): settles `next_step`, the step that was in flight. When the domains
  // meet at it (`synchronized`) it rolls forward (verdict commit, the sums its leader held put
  // in `tensors`, the same list as the exchange's) if its vote had completed, else joins the
  // others in dropping it (abandon). A step where the domains do not meet concerns no other
  // domain: abandon, without a word to them. Collective over the shrunk domain; its leader must
  // be the one that was (a domain whose leader died ends: the caller checks).
  DomainStep after_local_recovery(long next_step, bool synchronized,
                                  std::span<core::Tensor* const> tensors,
                                  const DomainStateAccess& state);

  // After a committed step whose vote saw a next generation waiting (a relaunched domain): every
  // member connects to it and the joiner heals. Collective over the domain.
  void admit_if_pending(const DomainStateAccess& state);

 private:
  comm::Communicator& domain() const { return *domain_; }
  bool leader() const { return domain().rank() == 0; }
  void connect(std::size_t generation, const std::vector<int>& members);
  // Leader: until every member of `generation` said it is ready to connect; GroupFailure when a
  // newer generation replaces it first, or after the membership timeout.
  void wait_until_members_ready(std::size_t generation, const std::vector<int>& members);
  // Leader: after a GroupFailure, until connected to a later generation that includes this domain.
  void regroup(const std::string& why);
  // Leader: positions exchanged, the plan made; heals members that need it (over the group).
  ResyncPlan resync(const MemberPosition& mine, const DomainStateAccess& state,
                    checkpoint::TrainingState& healed);
  // Leader, in resync(), when no member holds committed state: the plan completed from the run
  // directory's newest checkpoint (into `healed`), alike for every member.
  ResyncPlan resume_persisted(ResyncPlan plan, const DomainStateAccess& state,
                              checkpoint::TrainingState& healed);
  // Leader: the step's exchange and vote (`ok`: this domain's contribution counts), started on
  // a thread that conclude() waits for; every other rank only notes the step (sharded: sends
  // its shard on a thread too).
  void start_step(long step, std::span<core::Tensor* const> tensors, double loss, double skipped,
                  bool ok, std::span<const float> weights);
  // Relayed: the leader's vote after the last piece, then nothing more (start_step's end).
  void finish_relay(double loss, double skipped);
  // The leader's vote for the step in flight (a relaunched domain waiting to join is seen here).
  Vote my_vote(bool ok, double loss, double skipped) const;
  // A completed vote of `step`: the members' sizes and split from it on; the lowest member's
  // leader weighs the domains' own work and says what the next votes are to publish.
  void adopt_vote(const Vote& vote, long step);
  // A new generation: the split goes back to ranks, the policy starts afresh.
  void split_by_ranks();
  // Drops the exchanges and connects left behind (abandoned_, abandoned_connects_) that ended.
  void forget_ended_abandoned();
  // Whether a generation after `generation` was published without one of `members` (the
  // supervisor saw that domain's launch end): a reason to stop waiting for it. A later one that
  // only adds members (a relaunched domain let in) is not.
  bool member_lost_after(std::size_t generation, const std::vector<int>& members) const;
  // Leader: the encoded decision of the step started last (its vote, or after a lost peer domain
  // the resync that followed, with the healed state in `healed`).
  // Sharded, only when a shard did not arrive (`shards_missing`, from gather_shards).
  std::vector<double> conclude(const DomainStateAccess& state, checkpoint::TrainingState& healed,
                               const std::optional<std::string>& shards_missing = std::nullopt);
  // Every rank: takes the leader's encoded decision with the sums it holds (one broadcast; put
  // in `tensors` on commit), or the healed state (from `healed`, the leader's; others receive
  // it).
  DomainStep apply_decision(std::vector<double> encoded, std::span<core::Tensor* const> tensors,
                            checkpoint::TrainingState* healed, const DomainStateAccess& state);
  std::size_t member_index() const;
  // The gloo group this rank sends its part of a step through: the leaders' group for the
  // leader (the whole sum, or with the sharded exchange shard 0), else (sharded only) the group
  // of this rank's shard in the current generation, connected at its first use.
  comm::Communicator& exchange_group();
  // Sharded, every rank: waits for its shard's sums, then the domain's ranks trade their shards
  // (one in-domain allgather), so that each holds every sum in held_sums_, and the vote that
  // rode with the leader's shard. Without the vote when a shard did not arrive (`missing` says
  // whose).
  struct ShardsGathered {
    std::optional<Vote> vote;
    std::string missing;
  };
  ShardsGathered gather_shards();
  // Until the step's collective on `group` (the leaders' group, or sharded a shard's) ends, or
  // (GroupFailure) the supervisor publishes a newer generation without one of the members
  // first: then the collective is left to end on its thread, with `group` (abandoned_).
  void wait_unless_superseded(std::unique_ptr<comm::Communicator>& group);
  // Sharded, every rank, when every shard arrived: the step commits here (the domain's commit
  // point: a domain that missed a shard regroups, and the resync heals it from this one).
  DomainStep commit_gathered(const Vote& vote, std::span<core::Tensor* const> tensors, long step);
  // Sharded: every member (`ranks`, one count per member) the size of this domain, or Error.
  void require_equal_sizes(const std::vector<int>& members, const std::vector<int>& ranks) const;
  // The sums held (the step's, every value of every tensor in order) into `tensors`.
  void put_held_sums(std::span<core::Tensor* const> tensors) const;
  // domain_quorum_changed: the members now (this generation's) and what changed.
  struct QuorumChange {
    std::string why;  // the failure, or the generation published without a domain
    long step = 0;    // the step in flight, or the last committed
    std::size_t old_generation = 0;
    std::vector<int> lost;
    long agreed_step = 0;
    std::string action;
    double seconds = 0;
  };
  void log_quorum_change(const QuorumChange& change);

  DomainOptions options_;
  const std::unique_ptr<comm::Communicator>& domain_;
  core::EventLog& events_;
  // The leader's; with the sharded exchange every rank's (for its shard's group).
  std::unique_ptr<comm::RendezvousStore> store_;
  std::unique_ptr<comm::Communicator> group_;  // leader only
  // Sharded, ranks other than the leader: this rank's shard group and its generation.
  std::unique_ptr<comm::Communicator> shard_group_;
  std::size_t shard_generation_ = 0;
  std::size_t generation_ = 0;
  std::vector<int> members_;           // live domains, ascending
  std::vector<int> ranks_per_member_;  // as reported at the last vote or resync
  // The split of the batch over the members by the last vote (empty: by ranks), what the
  // lowest member's leader publishes in its next votes, its policy, and this domain's own work
  // for the step about to be voted.
  std::vector<double> shares_per_member_;
  std::vector<double> published_shares_;
  DomainBalance balance_;
  std::optional<std::chrono::steady_clock::time_point> last_balanced_;  // the last vote weighed
  double own_s_ = 0, own_samples_ = 0;
  double last_vote_loss_ = 0;  // the job-wide loss of the last step whose vote completed
  // The log lines saved with the state resume_persisted read here (a node-local snapshot's):
  // the domain that wrote them may have died before logging them.
  std::string persisted_lines_;
  double agreed_loss_ = 0;  // the loss of the agreed step, as the last resync found it
  // The leader's sums of that step, kept until the next exchange: a domain that rolls the step
  // forward after a recovery restored its tensors takes them from here. The members receive the
  // sums into it (only a leader's, with in_flight_step_ set, are ever rolled forward).
  std::vector<float> held_sums_;
  // The leader's last exchange: its step, and whether its vote committed it (unset: it failed
  // before the vote completed).
  long in_flight_step_ = -1;
  std::optional<bool> in_flight_ok_;
  // The exchange started and not yet concluded: what the leader sends (then the sums), and its
  // collective, running (start_exchange) or deferred until conclude() (exchange). Sharded: what
  // this rank sends (its shard of the `total` values), and the leader's vote, sent after every
  // shard arrived.
  // A range of the packed values whose shards travel in one collective per shard group: the
  // whole (one exchange after finish()) or, relayed, one range per bucket in the order sent.
  struct Segment {
    std::size_t begin = 0, size = 0;
  };
  struct InFlight {
    ~InFlight() {
      if (queue) queue->stop();  // a thread still sending ends after its sum in flight
    }
    long step = 0;
    std::vector<float> values;
    std::unique_ptr<SumQueue> queue;  // relayed: what the thread behind `sent` sums, in order
    std::future<void> sent;           // destroyed first: its thread uses the above
    std::size_t total = 0;
    Vote vote;
    std::vector<Segment> segments;  // this rank's pieces in `values`, one per segment, in order
    bool relayed = false;           // start_relay(): the pieces leave as the buckets come
    std::size_t filled = 0;         // relayed: the values of `values` the pieces use so far
    std::optional<std::size_t> held_back;  // relayed, the leader: where its unsent piece starts
    float scale = 1;                       // relayed: what the bucket sums are multiplied by
  };
  // On the heap: a thread that still runs its collective keeps its address (abandoned_).
  std::unique_ptr<InFlight> in_flight_;
  // Sharded: exchanges given up on because a newer generation came first, with their groups,
  // kept until their collectives end (gloo's timeout at the latest).
  struct Abandoned {
    std::unique_ptr<comm::Communicator> group;  // destroyed after the exchange's thread ended
    std::unique_ptr<InFlight> exchange;
  };
  std::vector<Abandoned> abandoned_;
  // Connects of a generation that a newer one without one of its members replaced while they
  // waited (gloo's full mesh waits for every member, to the domain timeout): each ends on its
  // thread, and the group it may have made is dropped then.
  std::vector<std::future<std::unique_ptr<comm::Communicator>>> abandoned_connects_;
};

}  // namespace hardy::resilience
