#pragma once
// SIGUSR1 asks a running session to checkpoint and stop at the next step boundary
// (install_preemption_handler, training_session.hpp); the step's agreement carries the request so
// that every rank stops at the same step.
namespace hardy::resilience {

bool preemption_requested();

}  // namespace hardy::resilience
