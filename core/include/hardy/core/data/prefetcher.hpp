#pragma once
// Loads samples ahead of the training step on background threads, so that the step does not wait
// for its data. Keyed by sample index: a sample's content is a pure function of its index, so a
// loaded sample stays valid across rollbacks and world-size changes, and a new plan after a
// recovery keeps what was already loaded and still wanted.
//
// Thread-safety: announce(), take() and set_depth() are meant for one consumer thread (the
// training thread); they are nevertheless safe to call from several threads. The workers only
// call source.load(), never more threads at once than source.load_concurrency() allows (take()'s
// own synchronous loads included). The source must outlive the prefetcher and must not change
// while it exists.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

class SamplePrefetcher {
 public:
  // `threads` background workers, fewer when the source allows fewer (load_concurrency() 0: none,
  // every sample loads synchronously in take()). `depth`: at most this many samples loaded or
  // loading ahead of consumption, each in a buffer of one sample that is reused.
  SamplePrefetcher(const SampleSource& source, int threads, std::size_t depth);
  // Joins the workers after their current loads; whatever they load is dropped.
  ~SamplePrefetcher();
  SamplePrefetcher(const SamplePrefetcher&) = delete;
  SamplePrefetcher& operator=(const SamplePrefetcher&) = delete;

  // The samples the consumer will take next, in the order it will take them (an index may occur
  // more than once). Replaces the previous plan: loaded or loading samples that are still
  // planned are kept, the others dropped; samples not yet started load in the new order.
  void announce(std::span<const std::size_t> indices);

  // Writes sample `index` (as SampleSource::load does) and returns the seconds the caller spent
  // in take(). A planned sample comes from its buffer, after waiting for its load if it is still
  // running; one never announced, or not yet started, loads synchronously on the caller's thread.
  // An exception of a background load (BadSample, IoError, ...) is rethrown here, unchanged.
  double take(std::size_t index, std::span<float> fields_chw, std::span<std::int32_t> labels_hw);
  // The same with the fields as the source stores them (SampleSource::load_stored): the loaders
  // load them so, and take() widens them.
  double take_stored(std::size_t index, std::span<std::byte> fields_chw,
                     std::span<std::int32_t> labels_hw);

  // Changes the depth (e.g. when a shrink makes each rank's share of the batch larger). Loads
  // already running complete; buffers beyond the new depth are freed as they come back.
  void set_depth(std::size_t depth);

  std::size_t depth() const;
  int workers() const { return static_cast<int>(workers_.size()); }
  const SampleSource& source() const { return source_; }

 private:
  struct Buffer {
    std::vector<std::byte> fields;  // as the source stores them
    std::vector<std::int32_t> labels;
  };
  struct Slot {
    bool loading = true;
    bool wanted = true;  // still in the plan (or being taken); a finished unwanted load is dropped
    Buffer buffer;
    std::exception_ptr error;
  };

  void work();
  // The first of the first depth_ planned samples that has no slot yet; plan_.end() if none.
  std::deque<std::size_t>::iterator next_to_load();
  Buffer acquire_buffer();               // mutex_ held
  void release_buffer(Buffer&& buffer);  // mutex_ held
  // Exactly one of `widened` and `stored` is given.
  double take_into(std::size_t index, std::span<float> widened, std::span<std::byte> stored,
                   std::span<std::int32_t> labels_hw);
  void load_synchronously(std::size_t index, std::span<float> widened, std::span<std::byte> stored,
                          std::span<std::int32_t> labels_hw);

  const SampleSource& source_;
  const int concurrency_;  // source's load_concurrency(), at least 1 for the synchronous path
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;   // workers: a plan entry, a buffer or a load slot freed
  std::condition_variable sample_done_;  // take(): a load finished
  std::deque<std::size_t> plan_;
  std::unordered_map<std::size_t, Slot> slots_;  // loaded or loading, not yet taken
  std::vector<Buffer> free_buffers_;
  std::size_t depth_;
  std::size_t buffers_in_use_ = 0;  // held by slots
  int loads_running_ = 0;           // workers' and take()'s together
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // last: started once everything above exists
};

}  // namespace hardy::core
