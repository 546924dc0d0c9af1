#include "broken_sockets.hpp"

#include <fmt/format.h>

#include <csignal>

#include "hardy/core/support/error.hpp"

namespace hardy::comm {

void survive_broken_sockets(const char* transport) {
  static const bool ignored = [] { return std::signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  if (!ignored)
    throw Error(
        fmt::format("{}: cannot ignore SIGPIPE, so a lost peer's socket would end this "
                    "process",
                    transport));
}

}  // namespace hardy::comm
