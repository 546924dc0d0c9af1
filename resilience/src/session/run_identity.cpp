#include "hardy/resilience/run_identity.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "hardy/core/nn/layers.hpp"
#include "hardy/core/support/digest.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"

namespace hardy::resilience {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kRunIdDigits = 32;

std::string random_run_id() {
  std::random_device entropy;  // the kernel's random source
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", entropy());
  return id;
}

}  // namespace

std::string random_launch_token() { return random_run_id().substr(0, 16); }

namespace {

bool is_run_id(const std::string& text) {
  return text.size() == kRunIdDigits && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

void write_all(int fd, const std::string& text, const fs::path& path) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw IoError(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
}

// Writes a new id under a temporary name and links it into place; another job that got there
// first wins (link fails with EEXIST), and its id is the run's.
void create_run_id(const fs::path& file) {
  const fs::path temporary =
      file.parent_path() / fmt::format(".{}.{}.{}.tmp", kRunIdFile, ::getpid(), random_run_id());
  const int fd = core::create_exclusive_file(temporary, 0644);
  try {
    write_all(fd, random_run_id() + "\n", temporary);
    if (::fsync(fd) != 0)
      throw IoError(fmt::format("cannot sync {}: {}", temporary.string(), std::strerror(errno)));
    if (::close(fd) != 0)
      throw IoError(fmt::format("cannot write {}: {}", temporary.string(), std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  const int linked = ::link(temporary.c_str(), file.c_str());
  const int error = errno;
  ::unlink(temporary.c_str());
  if (linked != 0 && error != EEXIST)
    throw IoError(fmt::format("cannot create {}: {}", file.string(), std::strerror(error)));
}

}  // namespace

std::optional<std::string> read_run_id(const fs::path& run_dir) {
  const fs::path file = run_dir / kRunIdFile;
  std::error_code error;
  if (!fs::exists(fs::symlink_status(file, error))) return std::nullopt;
  std::ifstream in(file);
  std::string id;
  if (!(in >> id)) throw IoError(fmt::format("cannot read the run id from {}", file.string()));
  if (!is_run_id(id))
    throw InvalidArgument(fmt::format(
        "{} holds '{}', not a run id ({} hexadecimal digits); remove it to give the run a new "
        "one",
        file.string(), id.substr(0, 64), kRunIdDigits));
  return id;
}

std::string ensure_run_id(const fs::path& run_dir) {
  if (auto id = read_run_id(run_dir)) return *id;
  create_run_id(run_dir / kRunIdFile);
  if (auto id = read_run_id(run_dir)) return *id;
  throw IoError(fmt::format("cannot read the run id from {}", (run_dir / kRunIdFile).string()));
}

std::string resume_identity(const TrainingConfig& config, const core::SampleShape& sample_shape,
                            std::size_t train_samples) {
  std::ostringstream text;
  text << config.model.identity()
       << fmt::format("optimizer={}\n", core::to_string(config.optimizer.kind));
  if (config.data.synthetic) {
    text << fmt::format("data=synthetic seed {}\n", config.data.seed);
  } else {
    std::error_code error;
    const fs::path canonical = fs::weakly_canonical(config.data.dataset, error);
    text << fmt::format("data={}\n", (error ? config.data.dataset : canonical).string());
  }
  text << fmt::format("data.train_samples={}\ndata.sample_shape={}x{}x{}\n", train_samples,
                      sample_shape.channels, sample_shape.height, sample_shape.width);
  return text.str();
}

std::string config_hash(const std::string& identity) {
  return fmt::format("{:016x}",
                     core::xxhash64(std::as_bytes(std::span(identity.data(), identity.size()))));
}

std::optional<std::string> config_mismatch(const checkpoint::TrainingState& state,
                                           const RunIdentity& mine) {
  if (state.config_hash.empty() || state.config_hash == mine.config_hash) return std::nullopt;
  // The network is named in the state's configuration (`model = ...`; written before hardy had
  // other networks, none: the compact one).
  std::string network = "compact";
  std::istringstream ini(state.config_ini);
  for (std::string line; std::getline(ini, line);)
    if (line.starts_with("model = ")) network = line.substr(8);
  if (network != mine.network)
    return fmt::format(
        "it holds the weights of another network (--model {}; this job trains --model {})", network,
        mine.network);
  return fmt::format(
      "it was written for another configuration (configuration hash {}, this job's is {}: the "
      "model's shape, the optimizer, the dataset or its size differ)",
      state.config_hash, mine.config_hash);
}

std::optional<std::string> snapshot_mismatch(const checkpoint::TrainingState& state,
                                             const RunIdentity& mine) {
  if (state.run_id.empty())
    return std::string(
        "it records no run id (written before hardy recorded one), so it may be "
        "another run's");
  if (state.run_id != mine.run_id)
    return fmt::format("it belongs to run {}, not to this run directory's run {}", state.run_id,
                       mine.run_id);
  if (state.config_hash.empty()) return std::string("it records no configuration hash");
  return config_mismatch(state, mine);
}

bool is_foreign(const checkpoint::TrainingState& state, const RunIdentity& mine) {
  return state.run_id != mine.run_id;
}

RunIdentity establish_run_identity(comm::Communicator& comm, const TrainingConfig& config,
                                   const core::SampleSource& train) {
  // A fixed-size message: the run id's 32 digits, the hash's 16 and this launch's token's 16, or
  // zeros when rank 0 failed.
  std::string message(64, '\0');
  std::exception_ptr failure;
  if (comm.rank() == 0) {
    try {
      const std::string run_id = ensure_run_id(config.run_dir);
      const std::string hash = config_hash(resume_identity(config, train.shape(), train.size()));
      message = run_id + hash + random_launch_token();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  comm.broadcast(std::as_writable_bytes(std::span(message.data(), message.size())), 0);
  if (failure) std::rethrow_exception(failure);
  if (message.front() == '\0')
    throw Error(
        fmt::format("rank 0 could not read or create the run id of {}", config.run_dir.string()));
  return {message.substr(0, 32), message.substr(32, 16), message.substr(48),
          core::to_string(config.model.architecture)};
}

}  // namespace hardy::resilience
