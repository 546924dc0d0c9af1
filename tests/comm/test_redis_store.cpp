// The Redis rendezvous store against a private redis-server on a free loopback port, started and
// stopped by the test: the contract the fault-domain protocol relies on is the file store's
// (test_gloo_group.cpp), and errors name the server. Without redis-server on PATH each test exits
// with status 77, which CTest reports as skipped, with the reason on stdout.
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "hardy/comm/gloo/communicator.hpp"
#include "hardy/comm/rendezvous/redis_server.hpp"
#include "hardy/comm/rendezvous/store.hpp"
#include "scratch_directory.hpp"

using namespace hardy;
using namespace std::chrono_literals;

namespace {

void skip_without_redis_server() {
  if (comm::RedisServer::find()) return;
  std::printf("redis-server is not on PATH (Debian: apt-get install redis-server): skipped\n");
  std::exit(77);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0; }

}  // namespace

TEST_CASE("the redis store writes each key once, answers without blocking and connects groups") {
  skip_without_redis_server();
  hardy::testing::ScratchDirectory scratch("redis");
  comm::RedisServer server({.directory = scratch.path()});
  auto store = comm::open_redis_store(server.host(), server.port());
  CHECK_FALSE(store->try_get("gen.1.members"));
  store->set("gen.1.members", "0,2,3");
  CHECK(store->try_get("gen.1.members") == "0,2,3");
  CHECK_THROWS_AS(store->set("gen.1.members", "0,1"), IoError);
  CHECK(store->try_get("gen.1.members") == "0,2,3");
  // Binary values survive (gloo's addresses are raw bytes).
  store->set("raw", std::string("a\0b\r\n", 5));
  CHECK(store->try_get("raw") == std::string("a\0b\r\n", 5));
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(store->wait_for("gen.2.members", 100ms));
  CHECK(seconds_since(start) < 1.0);

  // A second connection (another leader) sees what the first wrote, and a key set while it
  // waits.
  auto other = comm::open_redis_store(server.host(), server.port());
  CHECK(other->try_get("gen.1.members") == "0,2,3");
  auto waiting = std::async(std::launch::async, [&] { return other->wait_for("late", 5000ms); });
  std::this_thread::sleep_for(50ms);
  store->set("late", "here");
  CHECK(waiting.get() == "here");

  // Gloo groups rendezvous through it, the members threads sharing one connection.
  std::vector<std::future<double>> members;
  for (int rank = 0; rank < 3; ++rank)
    members.push_back(std::async(std::launch::async, [&, rank] {
      auto group = comm::connect_gloo_group(*store, {.prefix = "g1",
                                                     .rank = rank,
                                                     .size = 3,
                                                     .address = "127.0.0.1",
                                                     .timeout = 5000ms,
                                                     .connect_timeout = 5000ms});
      std::vector<double> one{1.0};
      group->allreduce_sum(one);
      return one[0];
    }));
  for (auto& member : members) CHECK(member.get() == 3.0);
}

TEST_CASE("the redis store says which server it cannot reach") {
  skip_without_redis_server();
  hardy::testing::ScratchDirectory scratch("redis-gone");
  std::unique_ptr<comm::RendezvousStore> store;
  std::string host;
  int port = 0;
  pid_t pid = -1;
  {
    comm::RedisServer server({.directory = scratch.path()});
    host = server.host();
    port = server.port();
    pid = server.pid();
    store = comm::open_redis_store(host, port);
    store->set("before", "1");
  }
  // Stopped and reaped when the server object went.
  CHECK_FALSE(process_exists(pid));
  const std::string where = host + ":" + std::to_string(port);
  CHECK_THROWS_WITH(comm::open_redis_store(host, port), Catch::Contains(where));
  CHECK_THROWS_AS(comm::open_redis_store(host, port), IoError);
  // A store whose server went away fails its next request rather than answering "not set".
  CHECK_THROWS_AS(store->try_get("before"), IoError);
  CHECK_THROWS_AS(comm::open_redis_store(host, 0), InvalidArgument);
  CHECK_THROWS_AS(comm::open_redis_store(host, 70000), InvalidArgument);
}

TEST_CASE("a redis store whose server stops answering fails after its timeout, not never") {
  skip_without_redis_server();
  hardy::testing::ScratchDirectory scratch("redis-hung");
  comm::RedisServer server({.directory = scratch.path()});
  auto store = comm::open_redis_store(server.host(), server.port(), 300ms);
  CHECK_FALSE(store->try_get("gen.2.members"));
  // A stopped server keeps its connections open and answers nothing: a hung batch host.
  REQUIRE(::kill(server.pid(), SIGSTOP) == 0);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(store->try_get("gen.2.members"),
                    Catch::Contains(server.host() + ":" + std::to_string(server.port())));
  const double waited = seconds_since(start);
  ::kill(server.pid(), SIGCONT);
  CHECK(waited >= 0.25);
  CHECK(waited < 3.0);
}

TEST_CASE("a redis-server that cannot start is reported with its log") {
  skip_without_redis_server();
  hardy::testing::ScratchDirectory scratch("redis-bad");
  comm::RedisServer first({.directory = scratch / "first"});
  // The port is taken: the second server exits, and the error carries its reason.
  CHECK_THROWS_WITH(comm::RedisServer({.directory = scratch / "second", .port = first.port()}),
                    Catch::Contains("exited") && Catch::Contains("its log ends"));
  CHECK_THROWS_AS(comm::RedisServer({.directory = scratch / "third", .bind = "localhost"}),
                  InvalidArgument);
  CHECK_THROWS_WITH(comm::RedisServer({.directory = scratch / "fourth",
                                       .executable = scratch / "no-such-server"}),
                    Catch::Contains("cannot execute") && Catch::Contains("no-such-server"));
}

TEST_CASE(
    "a redis-server with a password serves only the clients that send it, and keeps it off "
    "its command line") {
  skip_without_redis_server();
  hardy::testing::ScratchDirectory scratch("redis-password");
  const std::string password = "0123456789abcdef0123456789abcdef";
  comm::RedisServer server({.directory = scratch.path(), .password = password});
  auto store = comm::open_redis_store(server.host(), server.port(), 2000ms, password);
  store->set("gen.0.members", "0,1");
  CHECK(store->try_get("gen.0.members") == "0,1");

  // Whoever else reaches the port (another user of the batch host) gets nothing.
  CHECK_THROWS_WITH(comm::open_redis_store(server.host(), server.port(), 2000ms, "guess"),
                    Catch::Contains("refused the password"));
  auto anonymous = comm::open_redis_store(server.host(), server.port(), 2000ms);
  CHECK_THROWS_AS(anonymous->try_get("gen.0.members"), IoError);
  CHECK_THROWS_AS(anonymous->set("gen.1.members", "0"), IoError);
  CHECK(store->try_get("gen.1.members") == std::nullopt);

  // Every user can read a process's command line; the password is in a file only this one can.
  std::FILE* cmdline = std::fopen(fmt::format("/proc/{}/cmdline", server.pid()).c_str(), "r");
  REQUIRE(cmdline != nullptr);
  std::string arguments(4096, '\0');
  arguments.resize(std::fread(arguments.data(), 1, arguments.size(), cmdline));
  std::fclose(cmdline);
  CHECK(arguments.find(password) == std::string::npos);
  const auto mode = std::filesystem::status(scratch.path() / "redis.conf").permissions();
  CHECK((mode & (std::filesystem::perms::group_all | std::filesystem::perms::others_all)) ==
        std::filesystem::perms::none);
}
