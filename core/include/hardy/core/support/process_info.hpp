#pragma once
// What the kernel says of a process.
#include <sys/types.h>

#include <string>

namespace hardy::core {

// /proc/PID/stat's start time (field 22, clock ticks after boot), as written there; empty when
// there is no such process. With the pid it names one process: a reused pid has another.
std::string process_start_ticks(pid_t pid);

}  // namespace hardy::core
