#pragma once
// A server that this process starts for itself and always stops: redis-server behind the Redis
// rendezvous store (redis_server.hpp) and, in bench/comm/store_bench.cpp, etcd.
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hardy::comm {

class ServerProcess {
 public:
  // Starts `command` (looked up on PATH) with stdout and stderr in `log`, and returns once
  // ready(pid) says it serves. Throws hardy::IoError, with the end of the log, when it cannot be
  // started, exits first, or is not ready within `timeout`. If this process is killed, the
  // server gets SIGTERM (PR_SET_PDEATHSIG: strictly, when the thread that started it ends, so
  // start it from a thread that lives as long as the server should).
  ServerProcess(const std::vector<std::string>& command, std::filesystem::path log,
                const std::function<bool(pid_t)>& ready, std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL when it has not exited after 5 s; waits for it either way.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Its log's last ten lines.
  std::string log_tail() const;

  // The kernel's choice of a free TCP port on `address` (numeric IPv4). Another process may
  // take it before the server binds it. Throws hardy::IoError, hardy::InvalidArgument for an
  // address that is not numeric IPv4.
  static int free_port(const std::string& address);
  // Where `executable` is on PATH, if anywhere: callers that cannot go on without it say so.
  static std::optional<std::filesystem::path> find(const std::string& executable);

 private:
  void stop();

  std::filesystem::path log_;
  pid_t pid_ = -1;
};

}  // namespace hardy::comm
