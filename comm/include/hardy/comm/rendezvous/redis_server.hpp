#pragma once
// A private redis-server: the server behind the Redis rendezvous store (rendezvous/store.hpp) in
// its tests and in bench/comm/store_bench.cpp. Nothing is persisted (no snapshots, no
// append-only file): the keys of a rendezvous live only as long as the job that uses them.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "hardy/comm/rendezvous/server_process.hpp"

namespace hardy::comm {

class RedisServer {
 public:
  struct Options {
    // Its working directory; its output goes to redis-server.log there.
    std::filesystem::path directory;
    // A numeric IPv4 address to listen on.
    std::string bind = "127.0.0.1";
    // 0: a free port, chosen here.
    int port = 0;
    std::string executable = "redis-server";
    // Clients must AUTH with it (requirepass) when not empty. It reaches the server through a
    // configuration file of mode 0600 in `directory`, never on the command line, which every
    // user of the host can read.
    std::string password = "";
    std::chrono::milliseconds start_timeout{10'000};
  };

  // Returns once the server accepts connections. Throws hardy::IoError, with the end of its log,
  // when it cannot be started, exits, or does not answer within the start timeout;
  // hardy::InvalidArgument for an address that is not numeric IPv4. Stopped when destroyed.
  explicit RedisServer(Options options);

  // The address clients connect to (the loopback address when it listens on all of them).
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  pid_t pid() const { return process_->pid(); }

  static std::optional<std::filesystem::path> find(const std::string& executable = "redis-server") {
    return ServerProcess::find(executable);
  }

 private:
  std::string host_;
  int port_ = 0;
  std::optional<std::filesystem::path> config_file_;
  std::unique_ptr<ServerProcess> process_;
};

}  // namespace hardy::comm
