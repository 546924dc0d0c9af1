#include <memory>

#include "hardy/comm/mpi_communicator.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/train_spec.hpp"
#include "hardy/resilience/training_session.hpp"

namespace hardy::jobs {

int train_command(const std::vector<std::string>& args) {
  auto spec = parse_train_spec(args);
  if (!spec) return 0;
  resilience::install_preemption_handler();
  resilience::TrainingSession session(std::move(*spec), comm::MpiCommunicator::world());
  return session.run();
}

}  // namespace hardy::jobs
