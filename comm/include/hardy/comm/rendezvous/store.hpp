#pragma once
// A key-value store that independent jobs share: how the leaders of hardy's fault domains find
// one another and learn who is in the job. Three of gloo's stores stand behind it: FileStore on a
// directory that every node sees (the run directory), RedisStore on a redis-server
// (redis_server.hpp), and HashStore in memory for tests that run every party in one process.
// docs/resilience.md says which one the fault domains use and why, from
// bench/comm/store_bench.cpp. Keys are written once each (gloo's stores refuse a second write),
// so the protocols on top name every key after its generation.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace gloo::rendezvous {
class Store;
}

namespace hardy::comm {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // Throws hardy::IoError when the key exists already or the store cannot be written.
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value, or nothing while the key is unset. Never blocks.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // The value once the key is set, or nothing after `timeout`.
  std::optional<std::string> wait_for(const std::string& key, std::chrono::milliseconds timeout);
  // The gloo store that connects peer groups (gloo/communicator.hpp).
  virtual gloo::rendezvous::Store& gloo_store() = 0;
};

// gloo's FileStore in `directory` (created 0700 if missing). Every process of every domain must
// see the same directory: put it on the shared file system. Throws hardy::IoError when the
// directory cannot be made or is not a directory.
std::unique_ptr<RendezvousStore> open_file_store(const std::filesystem::path& directory);
// What a file store on this kind of file system (statfs's f_type) costs the fault domains, or
// nothing where there is nothing to say. NFS clients trust a cached "no such file" until the
// directory's cached attributes expire (30 to 60 s by default), so a leader may see a new
// generation that late; Lustre and GPFS answer from the client's cache only until a key is
// created, then every look is a metadata server round trip (docs/resilience.md).
std::optional<std::string> file_store_caveat(long file_system_type);
// The same for the file system that holds `directory` (nothing when statfs fails).
std::optional<std::string> file_store_caveat(const std::filesystem::path& directory);
// gloo's RedisStore on the redis-server at host:port, one connection per store object (safe to
// share between threads). A request that gets no answer within `io_timeout` (a server whose host
// hangs) throws instead of blocking for ever; the store is unusable after that. Throws
// hardy::IoError naming host:port when the server cannot be reached or refuses `password` (sent
// with AUTH first when not empty), hardy::InvalidArgument for a port outside 1..65535.
std::unique_ptr<RendezvousStore> open_redis_store(
    const std::string& host, int port,
    std::chrono::milliseconds io_timeout = std::chrono::milliseconds(30'000),
    const std::string& password = "");
// gloo's HashStore: one process only (tests).
std::unique_ptr<RendezvousStore> make_memory_store();

}  // namespace hardy::comm
