#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "hardy/comm/agreement.hpp"
#include "hardy/comm/errors.hpp"
#include "hardy/comm/mpi/communicator.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/jobs/commands.hpp"
#include "hardy/jobs/launchers.hpp"
#include "hardy/jobs/train_spec.hpp"
#include "hardy/resilience/training_session.hpp"

namespace hardy::jobs {

int train_command(const std::vector<std::string>& args) {
  // Every rank parses the same command line, so every rank fails here alike: before MPI starts,
  // so that a bad option or --help answers at once, whatever MPI_Init would cost or make of it.
  auto spec = parse_train_spec(args);
  if (!spec) return 0;
  try {
    check_node_runtime_dir();
  } catch (const core::UnsafeDirectory& e) {
    // Nothing a relaunch could mend: the user must (exit status 2, the supervisor stops).
    throw InvalidArgument(e.what());
  }
  // Every rank of an MPI job runs `hardy train`; a plain start is a world of one.
  comm::MpiSession mpi(nullptr, nullptr);
  resilience::install_preemption_handler();
  auto world = comm::MpiCommunicator::world();
  const int world_size = world->size(), world_rank = world->rank();
  try {
    resilience::TrainingSession session(std::move(*spec), std::move(world));
    return session.run();
  } catch (const std::exception& e) {
    // Errors every rank throws (agreed, or a peer's death that every survivor sees) end each
    // process normally, with the message on every rank.
    if (world_size == 1 || dynamic_cast<const comm::ProcessFailure*>(&e) != nullptr) throw;
    // Said before MPI_Finalize (`mpi` going out of scope), whose fence holds every rank until
    // all have said it: the launcher ends the whole job when the first rank exits with a
    // failure status, and a rank still on its way to the message would be ended silently.
    if (dynamic_cast<const comm::AgreedFailure*>(&e) != nullptr) return report_error("train", e);
    // This rank may be failing alone, its peers waiting in a collective for it: MPI_Finalize
    // would wait for them in turn, until wall time. End the whole job instead.
    const bool bad_input = dynamic_cast<const InvalidArgument*>(&e) != nullptr;
    std::cerr << fmt::format("hardy train: {}{} (rank {} ends the job)\n",
                             bad_input ? "" : "error: ", e.what(), world_rank)
              << std::flush;
    comm::abort_job(bad_input ? resilience::kBadInput : resilience::kFailed);
  }
}

}  // namespace hardy::jobs
