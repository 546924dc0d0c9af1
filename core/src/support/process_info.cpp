#include "hardy/core/support/process_info.hpp"

#include <fstream>
#include <iterator>
#include <sstream>

namespace hardy::core {

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

}  // namespace hardy::core
