#include "session/preemption_signal.hpp"

#include <signal.h>

#include <atomic>

#include "hardy/resilience/training_session.hpp"

namespace hardy::resilience {

namespace {

std::atomic<bool> requested{false};

void on_preemption_signal(int) { requested.store(true); }

}  // namespace

bool preemption_requested() { return requested.load(); }

void install_preemption_handler() {
  struct sigaction action {};
  action.sa_handler = on_preemption_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
}

}  // namespace hardy::resilience
