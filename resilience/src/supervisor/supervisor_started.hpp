#pragma once
// What both supervisors (supervisor.cpp, domain_supervisor.cpp) log about their configuration.
#include <nlohmann/json.hpp>

#include "hardy/resilience/supervisor.hpp"

namespace hardy::resilience {

// supervisor_started's fields that describe `config` (the caller adds its own).
nlohmann::json supervisor_started_fields(const SupervisorConfig& config);

}  // namespace hardy::resilience
