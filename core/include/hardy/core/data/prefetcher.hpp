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
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hardy/core/compute/tensor.hpp"
#include "hardy/core/data/sample_source.hpp"

namespace hardy::core {

class SamplePrefetcher {
  struct Buffer {
    Tensor fields;  // (1, C, [D,] H, W) as the source stores them, channels second
    Tensor labels;  // i32 (1, 1, H, W), or (1, K) for regression targets' bits
  };

 public:
  // Where the loaders' buffers come from: host memory of the given dims, dtype and layout
  // (Tensor::host, or a GPU backend's page-locked Backend::empty_host, from which a leased
  // sample goes to the device without another copy).
  using HostMemory = std::function<Tensor(std::vector<std::int64_t>, DType, Layout)>;

  // A taken sample in the loader's own buffer, which goes back to the prefetcher when the lease
  // ends: no copy on the way (BatchAssembler::stage hands it to the device's upload as it is).
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    // The sample's fields and label words; writable, e.g. to blank a sample left out.
    Tensor& fields() { return buffer_.fields; }
    Tensor& labels() { return buffer_.labels; }
    // Rethrows the load's exception (BadSample, IoError, ...) unchanged, if it failed: the
    // buffer's contents are then undefined.
    void rethrow_error() const;
    // The seconds the caller spent in lease().
    double wait_s() const { return wait_s_; }

   private:
    friend class SamplePrefetcher;
    Lease(SamplePrefetcher& owner, Buffer buffer, std::exception_ptr error, double wait_s)
        : owner_(&owner), buffer_(std::move(buffer)), error_(std::move(error)), wait_s_(wait_s) {}
    SamplePrefetcher* owner_;
    Buffer buffer_;
    std::exception_ptr error_;
    double wait_s_;
  };

  // `threads` background workers, fewer when the source allows fewer (load_concurrency() 0: none,
  // every sample loads synchronously in take()). `depth`: at most this many samples loaded or
  // loading ahead of consumption, each in a buffer of one sample that is reused; leased buffers
  // count until their leases end.
  SamplePrefetcher(const SampleSource& source, int threads, std::size_t depth,
                   HostMemory memory = Tensor::host);
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
  // The same without the copy: the sample in its loader's buffer, as the source stores it. A
  // sample that take() would load synchronously loads into a buffer of its own; its error, if
  // any, is the lease's (Lease::rethrow_error).
  Lease lease(std::size_t index);

  // Changes the depth (e.g. when a shrink makes each rank's share of the batch larger). Loads
  // already running complete; buffers beyond the new depth are freed as they come back.
  void set_depth(std::size_t depth);

  std::size_t depth() const;
  int workers() const { return static_cast<int>(workers_.size()); }
  const SampleSource& source() const { return source_; }

 private:
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
  void allocate(Buffer& buffer) const;   // a buffer acquired empty, outside the lock
  // The slot of a planned sample, once loaded, taken out of slots_; none when this thread is to
  // load the sample itself (never announced, or announced but not started).
  std::optional<Slot> wait_for_slot(std::size_t index);
  // Exactly one of `widened` and `stored` is given.
  double take_into(std::size_t index, std::span<float> widened, std::span<std::byte> stored,
                   std::span<std::int32_t> labels_hw);
  void load_synchronously(std::size_t index, std::span<float> widened, std::span<std::byte> stored,
                          std::span<std::int32_t> labels_hw);

  const SampleSource& source_;
  const HostMemory memory_;
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
