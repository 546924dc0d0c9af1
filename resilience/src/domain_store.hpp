#pragma once
// The fault domains' rendezvous store, as `hardy run --rendezvous` chose it: gloo's FileStore in a
// directory of the run directory (the default), or a redis-server that the supervisor starts on
// the batch host (docs/resilience.md: where a parallel file system's metadata path would make
// the file store slow). The supervisor hands it to every domain as `--domain-store`: the
// directory, or redis://HOST:PORT with the password in a file of mode 0600 beside it
// (`--domain-store-token`), which only this user can read.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "hardy/comm/rendezvous_store.hpp"

namespace hardy::resilience {

struct RedisAddress {
  std::string host;
  int port = 0;
};

// "redis://HOST:PORT" as host and port; nothing for anything else (a file store's directory).
// Throws InvalidArgument for a redis:// address without a valid port.
std::optional<RedisAddress> parse_redis_address(const std::string& store);
std::string format_redis_address(const RedisAddress& address);

// The password in `token_file`, which must be a regular file of this user's that nobody else may
// read (not a link): IoError naming what is wrong otherwise.
std::string read_store_token(const std::filesystem::path& token_file);
// Writes a new file of mode 0600 (refusing to follow a link).
void write_store_token(const std::filesystem::path& token_file, const std::string& token);

// The store `store` names (a directory or redis://HOST:PORT, authenticating with the password in
// `token_file`); IoError when it cannot be opened.
std::unique_ptr<comm::RendezvousStore> open_domain_store(const std::string& store,
                                                         const std::filesystem::path& token_file);

}  // namespace hardy::resilience
