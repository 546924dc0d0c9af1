#include "hardy/comm/rendezvous_store.hpp"

#include <fmt/format.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <sys/stat.h>

#include <thread>

#include "hardy/core/support/error.hpp"

namespace hardy::comm {

namespace {

// gloo's stores answer "is it there yet" only by blocking; FileStore's check() is protected,
// HashStore has none. These give the non-blocking look the protocols poll with.
class FileStoreWithCheck final : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool has(const std::string& key) { return check({key}); }
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
    if constexpr (std::is_same_v<GlooStore, FileStoreWithCheck>) {
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

std::unique_ptr<RendezvousStore> make_memory_store() {
  return std::make_unique<GlooBackedStore<gloo::rendezvous::HashStore>>("in memory");
}

}  // namespace hardy::comm
