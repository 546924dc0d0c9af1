#include "hardy/checkpoint/checkpoint_writer.hpp"

#include <fmt/format.h>

#include <chrono>

#include "hardy/core/support/hdf5.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::checkpoint {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

CheckpointWriter::CheckpointWriter(std::filesystem::path dir, Options options, Report report,
                                   Write write)
    : dir_(std::move(dir)),
      options_(options),
      report_(std::move(report)),
      write_(std::move(write)) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error)
    throw IoError(fmt::format("cannot create the checkpoint directory {}: {}", dir_.string(),
                              error.message()));
  if (options_.asynchronous && (write_ || core::h5::library_is_thread_safe()))
    thread_ = std::thread([this] { run_thread(); });
}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();  // the thread writes what is queued before it ends
}

bool CheckpointWriter::busy() const {
  std::lock_guard lock(mutex_);
  return queued_.has_value() || writing_;
}

bool CheckpointWriter::submit(TrainingState&& state, double stall_s, WriteProgress progress) {
  std::unique_lock lock(mutex_);
  if (queued_ || writing_) {
    if (options_.skip_when_busy) {
      lock.unlock();
      WriteReport skipped;
      skipped.step = state.step;
      skipped.path = write_ ? dir_ : checkpoint_path(dir_, state.step);
      skipped.stall_s = stall_s;
      skipped.skipped = true;
      skipped.error = "the previous checkpoint was still being written (policy: skip when busy)";
      deliver(skipped);
      return false;
    }
    changed_.wait(lock, [&] { return !queued_ && !writing_; });
  }
  Job job{std::move(state), stall_s, std::move(progress)};
  if (asynchronous()) {
    queued_ = std::move(job);
    changed_.notify_all();
    return true;
  }
  writing_ = true;
  lock.unlock();
  write_and_report(job);  // failures are reported, not thrown
  return true;
}

void CheckpointWriter::deliver(const WriteReport& report) const {
  if (!report_) return;
  try {
    report_(report);
  } catch (...) {  // see the header: the writer's thread has nobody to give it to
  }
}

TrainingState CheckpointWriter::take_spare() {
  std::lock_guard lock(mutex_);
  TrainingState spare = spare_ ? std::move(*spare_) : TrainingState{};
  spare_.reset();
  return spare;
}

void CheckpointWriter::write_now(TrainingState&& state, double stall_s, WriteProgress progress) {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !queued_ && !writing_; });
    writing_ = true;
  }
  Job job{std::move(state), stall_s, std::move(progress)};
  const Outcome outcome = write_and_report(job);
  if (outcome.error) std::rethrow_exception(outcome.error);
}

void CheckpointWriter::flush() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !queued_ && !writing_; });
}

CheckpointWriter::Outcome CheckpointWriter::write_and_report(Job& job) {
  const auto start = Clock::now();
  const double cpu_start = core::thread_cpu_seconds();
  Outcome outcome;
  WriteReport& report = outcome.report;
  report.step = job.state.step;
  report.path = write_ ? dir_ : checkpoint_path(dir_, job.state.step);
  report.stall_s = job.stall_s;
  try {
    const SavedCheckpoint saved = write_ ? write_(job.state, job.progress)
                                         : save_checkpoint(job.state, dir_, options_.retention,
                                                           job.progress, options_.access);
    report.path = saved.path;
    report.bytes = saved.bytes;
    report.removed = saved.removed;
  } catch (const std::exception& e) {
    report.error = e.what();
    outcome.error = std::current_exception();
  }
  report.write_s = std::chrono::duration<double>(Clock::now() - start).count();
  report.cpu_s = core::thread_cpu_seconds() - cpu_start;
  deliver(report);  // before the next write may start: reports come one at a time, in order
  {
    std::lock_guard lock(mutex_);
    writing_ = false;
    if (!spare_) spare_ = std::move(job.state);
  }
  changed_.notify_all();
  return outcome;
}

void CheckpointWriter::run_thread() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return (queued_ && !writing_) || (!queued_ && stopping_); });
    if (!queued_) return;
    Job job = std::move(*queued_);
    queued_.reset();
    writing_ = true;
    lock.unlock();
    write_and_report(job);
    lock.lock();
  }
}

}  // namespace hardy::checkpoint
