#pragma once
// --bad-samples: a sample that cannot be read or holds non-finite values. Every rank learns of
// every bad sample of a step, so that under `fail` all of them end the job together (one rank
// ending alone would look like a process failure to recover from), and under `skip` the lead
// logs each sample once (sample_skipped).
#include <cstddef>
#include <set>
#include <vector>

#include "hardy/comm/communicator.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/support/event_log.hpp"

namespace hardy::resilience {

class BadSamples {
 public:
  BadSamples(core::BadSamplePolicy policy, core::EventLog& events);
  // Collective: this rank's bad samples of `step` among everyone's; comm::Agreed<InvalidArgument>
  // on every rank under `fail`.
  void report(comm::Communicator& communicator, const std::vector<core::SkippedSample>& mine,
              long step);
  // The samples skipped so far, each once (equal on every rank).
  std::size_t count() const { return skipped_.size(); }

 private:
  core::BadSamplePolicy policy_;
  core::EventLog& events_;
  std::set<std::size_t> skipped_;
};

}  // namespace hardy::resilience
