#pragma once
// A communicator of one process: every collective leaves the data as it is. For a single-rank
// bootstrap (NCCL on one GPU without a launcher) and for tests of code that takes a
// Communicator. Not fault tolerant: there is nobody to lose.
#include "hardy/comm/communicator.hpp"

namespace hardy::comm {

class SelfCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(std::span<float>) override {}
  void allreduce_sum(std::span<double>) override {}
  void allreduce(std::span<std::int64_t>, ReduceOp) override {}
  std::vector<std::int64_t> allgather(std::int64_t value) override { return {value}; }
  std::unique_ptr<Request> iallreduce_sum(std::span<float> data) override;
  void broadcast(std::span<std::byte> data, int root) override;
  void barrier() override {}
  std::unique_ptr<Communicator> split(int color, int key) override;
  std::vector<std::string> hostnames() override;
  bool fault_tolerant() const override { return false; }
  void revoke() override;
  int agree(int flag) override { return flag; }
  std::vector<int> failed_ranks() override { return {}; }
  Survivors shrink() override;
};

}  // namespace hardy::comm
