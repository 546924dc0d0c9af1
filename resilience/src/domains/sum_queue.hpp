#pragma once
// Sums over a group, one after another, in the order they were queued (the same on every member
// of the group), run by a thread of the caller's while the caller goes on: a shard's pieces sent
// to the other domains bucket by bucket while backward still runs (docs/resilience.md, "The
// sharded exchange").
#include <condition_variable>
#include <deque>
#include <mutex>
#include <span>

#include "hardy/comm/communicator.hpp"

namespace hardy::resilience {

class SumQueue {
 public:
  // `values` summed in place over the group after everything queued before; it must stay valid
  // and untouched until run() returned.
  void queue(std::span<float> values);
  // Nothing more comes: run() returns once every queued sum ended.
  void close();
  // Nothing more is sent: run() returns after the sum in flight, if any (which ends at the
  // group's timeout at the latest).
  void stop();
  // On the sending thread: sums what is queued, waiting for more until close() or stop(). Throws
  // the first failure (comm::GroupFailure); what was queued after it is never sent.
  void run(comm::Communicator& group);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::span<float>> waiting_;
  bool closed_ = false;
};

}  // namespace hardy::resilience
