#pragma once
// What comm's own POSIX socket code shares (starting servers and asking them whether they serve,
// the Redis store's connection limits): the status check and a socket closed on every way out.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "hardy/core/support/error.hpp"

namespace hardy::comm {

// Every POSIX call that can fail goes through this, so the message names the call.
inline void check_posix(bool ok, const char* call, const std::string& context) {
  if (!ok) throw IoError(fmt::format("{}: {} failed: {}", context, call, std::strerror(errno)));
}

class Socket {
 public:
  explicit Socket(const std::string& context) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    check_posix(fd_ >= 0, "socket", context);
  }
  ~Socket() { ::close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

inline sockaddr_in ipv4(const std::string& address, int port) {
  sockaddr_in where{};
  where.sin_family = AF_INET;
  where.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &where.sin_addr) != 1)
    throw InvalidArgument(fmt::format("'{}' is not a numeric IPv4 address", address));
  return where;
}

}  // namespace hardy::comm
