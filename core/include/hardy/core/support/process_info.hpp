#pragma once
// What the kernel says of a process.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace hardy::core {

// /proc/PID/stat's start time (field 22, clock ticks after boot), as written there; empty when
// there is no such process. With the pid it names one process: a reused pid has another.
std::string process_start_ticks(pid_t pid);

// The CPUs this process may run on (sched_getaffinity): what a scheduler's cpuset (Slurm's
// task/cgroup, LSF's affinity) or a launcher's binding left it. `count` is at least 1;
// `fingerprint` is the same for processes allowed the same set.
struct AllowedCpus {
  int count = 1;
  std::uint64_t fingerprint = 0;
};
AllowedCpus allowed_cpus();

// This host's name (gethostname(2)); "localhost" in the unlikely case it cannot be read.
std::string host_name();

// Seconds on the steady clock since `start`.
double seconds_since(std::chrono::steady_clock::time_point start);

// CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): what work on a helper
// thread took from the cores, whatever its wall time.
double thread_cpu_seconds();

}  // namespace hardy::core
