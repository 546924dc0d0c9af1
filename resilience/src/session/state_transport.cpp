#include "session/state_transport.hpp"

#include <fmt/format.h>

#include "hardy/checkpoint/checkpoint.hpp"
#include "hardy/comm/agreement.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

namespace {

// Everything as bytes through the communicator (host tensors).
class CommunicatorTransport final : public StateTransport {
 public:
  void restore(comm::Communicator& comm, Trainer& trainer, checkpoint::TrainingState& state,
               int root) override {
    checkpoint::broadcast_state(comm, state, root);
    trainer.apply(state);
  }
};

// The scalars through the communicator, the tensors device to device (whose ranks are the
// communicator's).
class DeviceTransport final : public StateTransport {
 public:
  void restore(comm::Communicator& comm, Trainer& trainer, checkpoint::TrainingState& state,
               int root) override {
    // The root applies the state first, so that a checkpoint that does not fit fails everywhere
    // before any rank waits in NCCL for tensors that will not come.
    const bool is_root = comm.rank() == root;
    std::string error;
    if (is_root) {
      try {
        trainer.apply(state);
      } catch (const InvalidArgument& e) {
        error = e.what();
      }
    }
    if (comm::allreduce(comm, error.empty() ? 0 : 1, comm::ReduceOp::max) != 0)
      throw comm::Agreed<InvalidArgument>(
          is_root ? error : fmt::format("rank {} could not apply the checkpoint", root));
    checkpoint::TrainingState scalars;
    if (is_root) {
      scalars = state;
      scalars.model.clear();
      scalars.optimizer.clear();
    }
    checkpoint::broadcast_state(comm, scalars, root);
    if (!is_root) {
      trainer.optimizer().set_steps_taken(scalars.optimizer_steps);
      trainer.restore_scalars(scalars);
    }
    const auto tensors = trainer.state_tensors();
    trainer.reducer().broadcast(tensors, root);
    state = std::move(scalars);
  }
};

}  // namespace

std::unique_ptr<StateTransport> make_state_transport(Trainer& trainer) {
  if (trainer.reducer().broadcasts_tensors()) return std::make_unique<DeviceTransport>();
  return std::make_unique<CommunicatorTransport>();
}

}  // namespace hardy::resilience
