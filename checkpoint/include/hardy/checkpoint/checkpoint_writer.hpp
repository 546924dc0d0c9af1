#pragma once
// Writes checkpoints into one directory, by default on a background thread: the training thread
// only captures the state into host memory (the stall) and hands it over, and training goes on
// while the file is written. At most one write runs at a time. When a checkpoint is handed over
// while the previous one is still being written, the policy decides: wait (block until it is
// done; nothing is lost) or skip (drop the new one; reported as skipped).
//
// Every checkpoint handed over ends in exactly one report: written, failed, or skipped. Written
// and failed reports come from the thread that wrote (the writer's thread in asynchronous mode),
// one at a time and in order, skipped ones from submit()'s caller; the report callback must not
// call back into the writer (it would wait for itself), and an exception it throws is dropped (the
// writer's thread has nobody to give it to).
//
// Asynchronous writing of HDF5 files needs an HDF5 built thread-safe (Debian's is), because the
// training thread may read HDF5 data meanwhile; with any other HDF5 the default writer writes
// synchronously. A Write of the caller's (node-local snapshots) may do anything that is safe on
// another thread.
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hardy/checkpoint/checkpoint_directory.hpp"
#include "hardy/checkpoint/training_state.hpp"

namespace hardy::checkpoint {

struct WriteReport {
  long step = 0;
  std::filesystem::path path;  // the checkpoint file (as it would have been named, on failure)
  std::uint64_t bytes = 0;     // file size
  double stall_s = 0;          // as given to submit(): the training thread's capture time
  double write_s = 0;          // writing, fsyncs, rename, `latest` and retention
  double cpu_s = 0;            // CPU time the writing thread spent on it (what it took from others)
  std::vector<std::filesystem::path> removed;  // deleted by retention
  bool skipped = false;                        // dropped by the skip policy; error says why
  std::string error;                           // empty when written
};

class CheckpointWriter {
 public:
  struct Options {
    bool asynchronous = true;     // false: submit() writes before it returns
    bool skip_when_busy = false;  // false: submit() waits for the previous write
    Retention retention;
    FileAccess access = FileAccess::shared;  // owner_only for node-local snapshots
  };
  using Report = std::function<void(const WriteReport&)>;
  // How a state is written; by default save_checkpoint into dir with the options' retention and
  // access. Throws IoError on failure.
  using Write = std::function<SavedCheckpoint(const TrainingState&, const WriteProgress&)>;

  // Creates dir when needed (throws IoError when it cannot).
  CheckpointWriter(std::filesystem::path dir, Options options, Report report = {},
                   Write write = {});
  // Waits for the write in progress (flush()).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Hands a captured state over to be written as ckpt-<state.step>.h5. Returns false when the
  // skip policy dropped it, true otherwise. Write failures do not throw: they are reported.
  // `progress` (may be empty) is called on the writing thread while the data is being written.
  bool submit(TrainingState&& state, double stall_s, WriteProgress progress = {});
  // Waits for any write in progress, then writes on the calling thread regardless of the mode
  // (a final checkpoint before exit). Reports like submit(), and also throws the IoError when
  // the write failed.
  void write_now(TrainingState&& state, double stall_s, WriteProgress progress = {});
  // Returns once no write is queued or running.
  void flush();

  // A state whose buffers the writer no longer needs (the last one written), or an empty state.
  // Capturing into it with capture_into() reuses its memory: for a large model, allocating and
  // first touching fresh buffers costs several times the copy itself, and it is all stall.
  //   TrainingState state = writer.take_spare();
  //   capture_into(model, optimizer, state);  state.step = ...;  writer.submit(std::move(state),
  //   ...);
  TrainingState take_spare();

  const std::filesystem::path& directory() const { return dir_; }
  bool asynchronous() const { return thread_.joinable(); }
  // Whether a write is queued or running.
  bool busy() const;

 private:
  struct Job {
    TrainingState state;
    double stall_s = 0;
    WriteProgress progress;
  };
  struct Outcome {
    WriteReport report;
    std::exception_ptr error;
  };
  // Writes a job; the caller has set writing_. Delivers the report, then clears writing_ and
  // keeps the job's state as the spare.
  Outcome write_and_report(Job& job);
  void deliver(const WriteReport& report) const;
  void run_thread();

  std::filesystem::path dir_;
  Options options_;
  Report report_;
  Write write_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<Job> queued_;  // handed over, not yet started
  std::optional<TrainingState> spare_;
  bool writing_ = false;  // a write is running (on either thread)
  bool stopping_ = false;
  std::thread thread_;  // only in asynchronous mode
};

}  // namespace hardy::checkpoint
