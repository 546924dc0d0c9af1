#pragma once
// The fault domains' rendezvous store, as `hardy run --rendezvous` chose it: gloo's FileStore in a
// directory of the run directory (the default), or a redis-server that the supervisor starts on
// the batch host (docs/resilience.md: where a parallel file system's metadata path would make
// the file store slow). The supervisor hands it to every domain as `--domain-store`: the
// directory, or redis://HOST:PORT with the password in a file of mode 0600 beside it
// (`--domain-store-token`), which only this user can read.
#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "hardy/comm/rendezvous/store.hpp"

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

// The keys under which `hardy run`'s supervisor and the domains' leaders meet in that store: the
// protocol, spelled here only (docs/resilience.md, "Fault domains").
//   gen.G.members   the domains of generation G, published by the supervisor ("0,2,3")
//   ready.G.D       domain D's leader has connected to generation G's group
//   fail.G.D        domain D's leader says generation G failed (its reason)
//   join.D.T        domain D, relaunched with join token T, is ready (its leader's pid)
//   admit.D.T       the supervisor lets it in: the generation it joins
namespace rendezvous_keys {
std::string members(std::size_t generation);
std::string ready(std::size_t generation, int domain);
std::string failure(std::size_t generation, int domain);
std::string join(int domain, const std::string& token);
std::string admit(int domain, const std::string& token);
// Set once hardy run has no spare node left for the domains (a store's keys are written once;
// spares are never given back): a domain told at its launch that one was left looks for it
// before it evicts a node, since another domain's relaunch may have taken the spare since.
std::string spares_gone();
}  // namespace rendezvous_keys

}  // namespace hardy::resilience
