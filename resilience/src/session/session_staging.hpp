#pragma once
// --stage-to inside the session: each node copies its share of the dataset before training, each
// batch's samples are placed on the ranks whose node holds them, and after a shrink each node
// fetches what moved to it (node_staging.hpp has the copies themselves).
#include <memory>
#include <string>
#include <vector>

#include "domains/fault_domains.hpp"
#include "hardy/core/data/sample_source.hpp"
#include "hardy/core/data/sampler.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/resilience/training_config.hpp"
#include "session/membership.hpp"
#include "session/node_staging.hpp"

namespace hardy::resilience {

class SessionStaging {
 public:
  SessionStaging(const TrainingConfig& config, const Membership& membership,
                 const FaultDomains& domains, core::EventLog& events);

  // With --stage-to, collective: each node copies its share of `storage` (a dataset of one file
  // per sample, InvalidArgument otherwise) before training, and its loads read those copies.
  // `launch` names this launch's copies (run_identity.hpp).
  void start(core::SampleSource& storage, const std::string& launch);
  // The hosts changed: recompute the homes; `wait` copies now and reports every node's figures
  // (collective), otherwise each node fetches what moved to it in the background.
  void restage(bool wait, const std::string& reason);
  // This rank's samples of a global batch, in the order it loads them. The one place that maps
  // samples to ranks: the step and the prefetcher's look-ahead both ask it. Its contiguous slice
  // (core::shard_of), or with --stage-to its node's staged samples first.
  std::vector<std::size_t> local_samples(const core::GlobalBatch& batch) const;
  // How the ranks of this communicator (of the domain, with fault domains) share out their slice
  // of each batch from the next one drawn: in proportion to `weights`, one per rank
  // (core::weighted_shares); empty: evenly. Every rank sets the same weights at the same step
  // (the straggler policy decides from figures every rank has).
  void set_share_weights(std::vector<double> weights) { weights_ = std::move(weights); }
  const std::vector<double>& share_weights() const { return weights_; }

 private:
  const TrainingConfig& config_;
  const Membership& membership_;
  const FaultDomains& domains_;
  core::EventLog& events_;
  std::vector<double> weights_;  // empty: even shares
  // Shared with the dataset's file locator, through which the prefetcher's workers read until
  // they are joined: it outlives them whatever order the session's members go in.
  std::shared_ptr<NodeStaging> staging_;
};

}  // namespace hardy::resilience
