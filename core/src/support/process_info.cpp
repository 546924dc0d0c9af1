#include "hardy/core/support/process_info.hpp"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>
#include <vector>

#include "hardy/core/support/digest.hpp"

namespace hardy::core {

std::string host_name() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "localhost";
  return name.data();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string process_start_ticks(pid_t pid) {
  // The command name (field 2) may hold spaces, so fields count from its ')'.
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(file)), {});
  const auto name_end = stat.rfind(')');
  if (name_end == std::string::npos || name_end + 2 > stat.size()) return {};
  std::istringstream fields(stat.substr(name_end + 2));
  std::string field;
  for (int index = 3; index <= 22 && fields >> field; ++index)
    if (index == 22) return field;
  return {};
}

AllowedCpus allowed_cpus() {
  // Grow the set until the kernel's mask fits (hosts with more than 1024 CPUs).
  for (int cpus = 1024; cpus <= (1 << 16); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) break;
    const std::size_t bytes = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(bytes, set);
    if (::sched_getaffinity(0, bytes, set) == 0) {
      std::vector<std::byte> mask(bytes);
      std::memcpy(mask.data(), set, bytes);
      const AllowedCpus allowed{.count = std::max(1, CPU_COUNT_S(bytes, set)),
                                .fingerprint = xxhash64(mask)};
      CPU_FREE(set);
      return allowed;
    }
    const int error = errno;
    CPU_FREE(set);
    if (error != EINVAL) break;
  }
  // No mask to read: every online CPU.
  return {.count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
}

double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

}  // namespace hardy::core
