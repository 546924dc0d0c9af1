#include "hardy/comm/rendezvous/store.hpp"

#include <fmt/format.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/vfs.h>

#include <mutex>
#include <thread>

#include "broken_sockets.hpp"
#include "hardy/core/support/error.hpp"
#include "rendezvous/socket.hpp"

namespace hardy::comm {

namespace {

// gloo's stores answer "is it there yet" only by blocking; FileStore's check() is protected,
// HashStore has none. These give the non-blocking look the protocols poll with.
// gloo's FileStore::set appends to a vector of the paths it wrote, unguarded: two threads that
// set keys at once (the members of a group connecting through one store object) corrupt the heap
// ("double free or corruption", once in a clean-clone CI run of the file store's test). Sets are
// serialized here; looks and reads share no state and need no lock.
class FileStoreWithCheck final : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool has(const std::string& key) { return check({key}); }
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard lock(set_mutex_);
    FileStore::set(key, data);
  }

 private:
  std::mutex set_mutex_;
};

// gloo's RedisStore holds one hiredis connection, which is not safe to use from two threads at
// once, and its wait() sleeps between looks: the lock is held for each request, never across the
// sleep, so one thread's wait does not stall another's set. Recursive because gloo's get() calls
// the virtual wait() first.
class LockedRedisStore final : public gloo::rendezvous::RedisStore {
 public:
  LockedRedisStore(const std::string& host, int port, std::chrono::milliseconds io_timeout,
                   const std::string& password)
      : RedisStore(host, port) {
    // hiredis waits for an answer for ever unless the socket says otherwise.
    const timeval limit{.tv_sec = io_timeout.count() / 1000,
                        .tv_usec = (io_timeout.count() % 1000) * 1000};
    for (const int option : {SO_RCVTIMEO, SO_SNDTIMEO})
      check_posix(::setsockopt(redis_->fd, SOL_SOCKET, option, &limit, sizeof limit) == 0,
                  "setsockopt",
                  fmt::format("cannot limit the wait for redis-server at {}:{}", host, port));
    if (!password.empty()) authenticate(host, port, password);
  }

  bool has(const std::string& key) {
    std::lock_guard lock(mutex_);
    return check({key});
  }
  void set(const std::string& key, const std::vector<char>& data) override {
    std::lock_guard lock(mutex_);
    RedisStore::set(key, data);
  }
  std::vector<char> get(const std::string& key) override {
    wait({key});
    std::lock_guard lock(mutex_);
    return RedisStore::get(key);
  }
  using RedisStore::wait;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (check(keys)) return;
      }
      if (std::chrono::steady_clock::now() >= deadline)
        throw gloo::IoException(
            fmt::format("{} key(s) not set after {} ms in Redis", keys.size(), timeout.count()));
      // gloo's own RedisStore::wait looks every 10 ms too.
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  // gloo's RedisStore knows no AUTH; its connection is ours to send one on first.
  void authenticate(const std::string& host, int port, const std::string& password) {
    auto* reply = static_cast<redisReply*>(::redisCommand(redis_, "AUTH %s", password.c_str()));
    if (reply == nullptr)
      throw IoError(
          fmt::format("redis-server at {}:{} did not answer AUTH: {}", host, port, redis_->errstr));
    const bool accepted = reply->type == REDIS_REPLY_STATUS;
    const std::string answer = reply->str != nullptr ? reply->str : "";
    ::freeReplyObject(reply);
    if (!accepted)
      throw IoError(
          fmt::format("redis-server at {}:{} refused the password: {}", host, port, answer));
  }

  std::recursive_mutex mutex_;
};

template <typename GlooStore>
class GlooBackedStore final : public RendezvousStore {
 public:
  template <typename... Args>
  explicit GlooBackedStore(std::string where, Args&&... args)
      : where_(std::move(where)), store_(std::forward<Args>(args)...) {}

  void set(const std::string& key, const std::string& value) override {
    try {
      store_.set(key, std::vector<char>(value.begin(), value.end()));
    } catch (const std::exception& e) {  // gloo's enforcements are not gloo::Exceptions
      throw IoError(
          fmt::format("cannot set '{}' in the rendezvous store {}: {}", key, where_, e.what()));
    }
  }

  std::optional<std::string> try_get(const std::string& key) override {
    try {
      if (!present(key)) return std::nullopt;
      const std::vector<char> bytes = store_.get(key);
      return std::string(bytes.begin(), bytes.end());
    } catch (const std::exception& e) {
      throw IoError(
          fmt::format("cannot read '{}' from the rendezvous store {}: {}", key, where_, e.what()));
    }
  }

  gloo::rendezvous::Store& gloo_store() override { return store_; }

 private:
  bool present(const std::string& key) {
    if constexpr (requires { store_.has(key); }) {
      return store_.has(key);
    } else {
      // HashStore's wait returns at once for a present key and throws after the timeout.
      try {
        store_.wait({key}, std::chrono::milliseconds(1));
        return true;
      } catch (const gloo::IoException&) {
        return false;
      }
    }
  }

  std::string where_;
  GlooStore store_;
};

}  // namespace

std::optional<std::string> RendezvousStore::wait_for(const std::string& key,
                                                     std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto value = try_get(key)) return value;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // FileStore's own wait polls every 10 ms too (inotify does not work on shared file systems).
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::unique_ptr<RendezvousStore> open_file_store(const std::filesystem::path& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || !std::filesystem::is_directory(directory))
    throw IoError(fmt::format("cannot use {} as the rendezvous store: {}", directory.string(),
                              error ? error.message() : "not a directory"));
  ::chmod(directory.c_str(), 0700);
  try {
    return std::make_unique<GlooBackedStore<FileStoreWithCheck>>(directory.string(),
                                                                 directory.string());
  } catch (const std::exception& e) {
    throw IoError(
        fmt::format("cannot use {} as the rendezvous store: {}", directory.string(), e.what()));
  }
}

std::optional<std::string> file_store_caveat(long file_system_type) {
  // The magic numbers of statfs(2) (linux/magic.h; Lustre's and GPFS's from their clients).
  constexpr long kNfs = 0x6969, kLustre = 0x0BD00BD0, kGpfs = 0x47504653;
  switch (file_system_type) {
    case kNfs:
      return "it is on NFS, whose clients may see a new key (a lost domain, a new generation) only "
             "when their cached directory attributes expire, 30 to 60 s by default: mount the run "
             "directory with lookupcache=positive (or none), or expect regrouping that late";
    case kLustre:
    case kGpfs:
      return "it is on a parallel file system: every key created sends the leaders' next looks "
             "to the metadata server, so measure a lookup's p99 there (hardy_store_bench "
             "--disk-dir DIR --stores file-disk); above about 1 ms it costs more than 1% of a "
             "100 ms step";
    default:
      return std::nullopt;
  }
}

std::optional<std::string> file_store_caveat(const std::filesystem::path& directory) {
  struct statfs info {};
  if (::statfs(directory.c_str(), &info) != 0) return std::nullopt;
  return file_store_caveat(static_cast<long>(info.f_type));
}

std::unique_ptr<RendezvousStore> open_redis_store(const std::string& host, int port,
                                                  std::chrono::milliseconds io_timeout,
                                                  const std::string& password) {
  if (port < 1 || port > 65535)
    throw InvalidArgument(fmt::format("redis-server port {} is outside 1..65535", port));
  const std::string where = fmt::format("redis-server at {}:{}", host, port);
  survive_broken_sockets("the rendezvous store's connection");  // hiredis writes with write()
  try {
    return std::make_unique<GlooBackedStore<LockedRedisStore>>(where, host, port, io_timeout,
                                                               password);
  } catch (const IoError&) {
    throw;
  } catch (const std::exception& e) {  // gloo's enforcements are not gloo::Exceptions
    throw IoError(fmt::format("cannot reach the rendezvous store {}: {}", where, e.what()));
  }
}

std::unique_ptr<RendezvousStore> make_memory_store() {
  return std::make_unique<GlooBackedStore<gloo::rendezvous::HashStore>>("in memory");
}

}  // namespace hardy::comm
