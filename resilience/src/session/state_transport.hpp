#pragma once
// How a state that one rank read (a checkpoint, a node-local snapshot, a peer domain's state)
// reaches every rank of the communicator and is applied there: one implementation per way the
// tensors can travel. Host tensors go through the communicator with the loop's scalars; device
// tensors go device to device through the gradient reducer's transport (NCCL), and only the
// scalars through the communicator.
#include <memory>

#include "hardy/checkpoint/training_state.hpp"
#include "hardy/comm/communicator.hpp"
#include "session/trainer.hpp"

namespace hardy::resilience {

class StateTransport {
 public:
  virtual ~StateTransport() = default;
  // Collective. Root's `state` to every rank, applied to each rank's trainer; afterwards `state`
  // may hold only the loop's scalars. A state that does not fit the model fails on every rank
  // (comm::Agreed<InvalidArgument>) before any rank waits for tensors.
  virtual void restore(comm::Communicator& comm, Trainer& trainer, checkpoint::TrainingState& state,
                       int root) = 0;
};

// The transport that matches where the trainer keeps its tensors.
std::unique_ptr<StateTransport> make_state_transport(Trainer& trainer);

}  // namespace hardy::resilience
