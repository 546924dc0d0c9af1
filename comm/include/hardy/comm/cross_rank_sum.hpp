#pragma once
#include "hardy/comm/communicator.hpp"
#include "hardy/core/nn/layers.hpp"

namespace hardy::comm {

// Lets the model's batch normalization sum its statistics over the job's ranks.
class CommunicatorSum final : public core::CrossRankSum {
 public:
  explicit CommunicatorSum(Communicator& comm) : comm_(&comm) {}
  void sum(std::span<double> values) override { comm_->allreduce_sum(values); }
  void rebind(Communicator& comm) { comm_ = &comm; }

 private:
  Communicator* comm_;
};

}  // namespace hardy::comm
