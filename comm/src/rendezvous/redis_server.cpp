#include "hardy/comm/rendezvous/redis_server.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <vector>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "rendezvous/socket.hpp"

namespace hardy::comm {

namespace {

// True once the server listening at host:port is the process `pid`: a server that could not
// bind the port exits, but another one that holds it (someone else's) answers in its place.
bool serves_from(const std::string& host, int port, pid_t pid, const std::string& password) {
  Socket client(fmt::format("cannot reach redis-server at {}:{}", host, port));
  sockaddr_in where = ipv4(host, port);
  if (::connect(client.fd(), reinterpret_cast<sockaddr*>(&where), sizeof where) != 0) return false;
  const timeval patience{.tv_sec = 1, .tv_usec = 0};
  ::setsockopt(client.fd(), SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  const std::string request =
      (password.empty() ? std::string() : fmt::format("AUTH {}\r\n", password)) + "INFO server\r\n";
  if (::write(client.fd(), request.data(), request.size()) != static_cast<ssize_t>(request.size()))
    return false;
  const std::string wanted = fmt::format("\r\nprocess_id:{}\r\n", pid);
  std::string reply;
  char buffer[4096];
  while (reply.size() < 65536) {
    const ssize_t got = ::read(client.fd(), buffer, sizeof buffer);
    if (got <= 0) return false;
    reply.append(buffer, static_cast<std::size_t>(got));
    if (reply.find(wanted) != std::string::npos) return true;
    const auto other = reply.find("\r\nprocess_id:");
    if (other != std::string::npos && reply.find("\r\n", other + 2) != std::string::npos)
      return false;
  }
  return false;
}

// The server's configuration file, private to this user: only the password is in it.
std::filesystem::path write_private_config(const std::filesystem::path& directory,
                                           const std::string& password) {
  if (password.find_first_of(" \t\r\n\"'") != std::string::npos)
    throw InvalidArgument("a redis-server password must not hold spaces or quotes");
  const auto path = directory / "redis.conf";
  core::write_private_file(path, fmt::format("requirepass {}\n", password));
  return path;
}

}  // namespace

RedisServer::RedisServer(Options options) {
  std::error_code error;
  std::filesystem::create_directories(options.directory, error);
  if (error)
    throw IoError(fmt::format("cannot make {} for redis-server: {}", options.directory.string(),
                              error.message()));
  ipv4(options.bind, 0);  // an InvalidArgument before anything starts
  host_ = options.bind == "0.0.0.0" ? "127.0.0.1" : options.bind;
  // A port chosen here can be taken by someone else before the server binds it: try again.
  const int attempts = options.port == 0 ? 3 : 1;
  for (int attempt = 1;; ++attempt) {
    port_ = options.port != 0 ? options.port : ServerProcess::free_port(options.bind);
    // No snapshots and no append-only file: a rendezvous outlives nothing. Protected mode stays
    // on, so a server bound beyond loopback refuses other hosts' clients until given a password.
    std::vector<std::string> command{options.executable,
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     options.bind,
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     options.directory.string(),
                                     "--daemonize",
                                     "no"};
    if (!options.password.empty()) {
      // The file comes first: redis-server reads it, then the options after it.
      if (!config_file_) config_file_ = write_private_config(options.directory, options.password);
      command.insert(command.begin() + 1, config_file_->string());
    }
    try {
      process_ = std::make_unique<ServerProcess>(
          command, options.directory / "redis-server.log",
          [&](pid_t pid) { return serves_from(host_, port_, pid, options.password); },
          options.start_timeout);
      return;
    } catch (const IoError&) {
      if (attempt >= attempts) throw;
    }
  }
}

}  // namespace hardy::comm
