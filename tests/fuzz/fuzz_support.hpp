#pragma once
// What the fuzz targets share: a reader that cuts the fuzzer's bytes into the pieces a
// structured input needs, a scratch directory, and the two outcomes a target allows. A parser
// either accepts its input or throws one of hardy's errors with a message; anything else (another
// exception, a crash, a sanitizer report, an allocation past libFuzzer's -malloc_limit_mb) ends
// the run and libFuzzer keeps the input.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "hardy/core/support/error.hpp"

namespace hardy::fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool empty() const { return size_ == 0; }
  // The next byte, 0 once the input is used up.
  std::uint8_t byte() { return size_ ? (--size_, *data_++) : 0; }
  // An unsigned value from the next eight bytes (fewer when the input ends), little-endian.
  std::uint64_t u64() {
    std::uint64_t value = 0;
    for (int i = 0; i < 8 && size_; ++i) value |= std::uint64_t{byte()} << (8 * i);
    return value;
  }
  // A value in [low, high] from one or two bytes: small choices stay cheap for the fuzzer.
  std::uint64_t pick(std::uint64_t low, std::uint64_t high) {
    const std::uint64_t span = high - low + 1;
    const std::uint64_t raw = span <= 256 ? byte() : (std::uint64_t{byte()} << 8) | byte();
    return low + raw % span;
  }
  // A string of up to `limit` bytes, its length given by the first byte.
  std::string text(std::size_t limit = 255) {
    const std::size_t length = std::min<std::size_t>({byte(), limit, size_});
    std::string out(reinterpret_cast<const char*>(data_), length);
    data_ += length;
    size_ -= length;
    return out;
  }
  // Everything left.
  std::string rest() {
    std::string out(reinterpret_cast<const char*>(data_), size_);
    data_ += size_;
    size_ = 0;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
};

// A directory of this process's own (the fuzzer runs several processes with -jobs), under
// /dev/shm when it exists so that file-reading targets do not wear a disk.
// Removed when the process exits normally. (An atexit handler registered while the static was
// being made ran after the static was destroyed, so it removed nothing: every replay left its
// directory in /dev/shm.)
inline const std::filesystem::path& scratch_directory() {
  struct Owned {
    std::filesystem::path path;
    ~Owned() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Owned dir = [] {
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? "/dev/shm"
                                           : std::filesystem::temp_directory_path();
    auto path = base / ("hardy-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return Owned{path};
  }();
  return dir.path;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

// HARDY_FUZZ_VERBOSE=1: targets say what they built from an input (for replaying a finding).
inline bool verbose() {
  static const bool on = std::getenv("HARDY_FUZZ_VERBOSE") != nullptr;
  return on;
}

// A promise the code under test broke: print it and abort, so libFuzzer saves the input.
[[noreturn]] inline void broken_promise(std::string_view what) {
  std::fprintf(stderr, "hardy fuzz: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

// Runs `parse`; true when it accepted the input, false when it rejected it with one of hardy's
// errors. Any other exception escapes and ends the run.
template <class Parse>
bool accepts(Parse&& parse) {
  try {
    parse();
    return true;
  } catch (const hardy::Error& error) {
    if (std::string_view(error.what()).empty()) broken_promise("an error without a message");
    return false;
  }
}

// accepts(), saying what happened to `what` under HARDY_FUZZ_VERBOSE=1.
template <class Action>
bool accepts(const char* what, Action&& action) {
  return accepts([&] {
    try {
      action();
      if (verbose()) std::fprintf(stderr, "  %s: accepted\n", what);
    } catch (const hardy::Error& error) {
      if (verbose()) std::fprintf(stderr, "  %s: rejected: %s\n", what, error.what());
      throw;
    }
  });
}

}  // namespace hardy::fuzz
