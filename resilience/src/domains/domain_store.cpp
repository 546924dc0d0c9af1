#include "domains/domain_store.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"

namespace hardy::resilience {

namespace {
constexpr std::string_view kRedisScheme = "redis://";
}

std::optional<RedisAddress> parse_redis_address(const std::string& store) {
  if (!store.starts_with(kRedisScheme)) return std::nullopt;
  const std::string rest = store.substr(kRedisScheme.size());
  const auto colon = rest.rfind(':');
  RedisAddress address;
  if (colon != std::string::npos && colon > 0) {
    address.host = rest.substr(0, colon);
    const char* first = rest.data() + colon + 1;
    const char* last = rest.data() + rest.size();
    const auto [end, error] = std::from_chars(first, last, address.port);
    if (error != std::errc() || end != last) address.port = 0;
  }
  if (address.host.empty() || address.port < 1 || address.port > 65535)
    throw InvalidArgument(fmt::format(
        "rendezvous store '{}' is not redis://HOST:PORT with a port in 1..65535", store));
  return address;
}

std::string format_redis_address(const RedisAddress& address) {
  return fmt::format("{}{}:{}", kRedisScheme, address.host, address.port);
}

std::string read_store_token(const std::filesystem::path& token_file) {
  const int fd = ::open(token_file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    throw IoError(fmt::format("cannot open the rendezvous store's password file {}: {}",
                              token_file.string(), std::strerror(errno)));
  struct stat info {};
  std::string token(256, '\0');
  const bool stated = ::fstat(fd, &info) == 0;
  const ssize_t got = stated ? ::read(fd, token.data(), token.size()) : -1;
  ::close(fd);
  if (!stated || got < 0) throw IoError(fmt::format("cannot read {}", token_file.string()));
  if (!S_ISREG(info.st_mode) || info.st_uid != ::geteuid() || (info.st_mode & 077) != 0)
    throw IoError(fmt::format(
        "the rendezvous store's password file {} must be a regular file of this user's (uid {}) "
        "that nobody else can read; it is mode {:o}, owned by uid {}",
        token_file.string(), ::geteuid(), info.st_mode & 0777, info.st_uid));
  token.resize(static_cast<std::size_t>(got));
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) throw IoError(fmt::format("{} holds no password", token_file.string()));
  return token;
}

void write_store_token(const std::filesystem::path& token_file, const std::string& token) {
  core::write_private_file(token_file, token + "\n");
}

std::unique_ptr<comm::RendezvousStore> open_domain_store(const std::string& store,
                                                         const std::filesystem::path& token_file) {
  const auto redis = parse_redis_address(store);
  if (!redis) return comm::open_file_store(store);
  if (token_file.empty())
    throw InvalidArgument(fmt::format("the rendezvous store {} needs --domain-store-token", store));
  return comm::open_redis_store(redis->host, redis->port, std::chrono::milliseconds(30'000),
                                read_store_token(token_file));
}

namespace rendezvous_keys {

std::string members(std::size_t generation) { return fmt::format("gen.{}.members", generation); }

std::string ready(std::size_t generation, int domain) {
  return fmt::format("ready.{}.{}", generation, domain);
}

std::string failure(std::size_t generation, int domain) {
  return fmt::format("fail.{}.{}", generation, domain);
}

std::string join(int domain, const std::string& token) {
  return fmt::format("join.{}.{}", domain, token);
}

std::string admit(int domain, const std::string& token) {
  return fmt::format("admit.{}.{}", domain, token);
}

std::string spares_gone() { return "spares.gone"; }

}  // namespace rendezvous_keys

}  // namespace hardy::resilience
