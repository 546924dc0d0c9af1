// What the fault domains are told of their rendezvous store: redis://HOST:PORT read strictly, and
// the password file read only when it is this user's alone (a batch host has other users).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "domains/domain_store.hpp"
#include "hardy/core/support/error.hpp"
#include "scratch_directory.hpp"

using namespace hardy;
using namespace hardy::resilience;

TEST_CASE("a domain store address is a directory or redis://HOST:PORT") {
  CHECK_FALSE(parse_redis_address("/scratch/run/rendezvous/12-34"));
  const auto redis = parse_redis_address("redis://batch01.cluster:6380");
  REQUIRE(redis);
  CHECK(redis->host == "batch01.cluster");
  CHECK(redis->port == 6380);
  CHECK(format_redis_address(*redis) == "redis://batch01.cluster:6380");
  for (const char* bad : {"redis://", "redis://host", "redis://host:", "redis://:6379",
                          "redis://host:0", "redis://host:70000", "redis://host:63x9"})
    CHECK_THROWS_WITH(parse_redis_address(bad), Catch::Contains("redis://HOST:PORT"));
}

TEST_CASE("the store's password file is read only when nobody else can read it") {
  hardy::testing::ScratchDirectory scratch("domain-store-token");
  const auto token = scratch.path() / "redis.token";
  write_store_token(token, "secret-token");
  CHECK((std::filesystem::status(token).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));
  CHECK(read_store_token(token) == "secret-token");

  // Readable by the group: refused, naming the mode.
  ::chmod(token.c_str(), 0640);
  CHECK_THROWS_WITH(read_store_token(token),
                    Catch::Contains("nobody else") && Catch::Contains("640"));
  ::chmod(token.c_str(), 0600);
  // A link is not followed, wherever it points.
  const auto link = scratch.path() / "link.token";
  std::filesystem::create_symlink(token, link);
  CHECK_THROWS_WITH(read_store_token(link), Catch::Contains("cannot open"));
  // An empty file holds no password.
  const auto empty = scratch.path() / "empty.token";
  write_store_token(empty, "");
  CHECK_THROWS_WITH(read_store_token(empty), Catch::Contains("holds no password"));
  // A redis store without a password file is refused before anything connects.
  CHECK_THROWS_AS(open_domain_store("redis://127.0.0.1:1", ""), InvalidArgument);
}
