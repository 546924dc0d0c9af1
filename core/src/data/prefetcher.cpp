#include "hardy/core/data/prefetcher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::core {

namespace {

std::span<std::byte> bytes_of(Tensor& t) { return {static_cast<std::byte*>(t.raw()), t.bytes()}; }
std::span<std::int32_t> words_of(Tensor& t) {
  return {t.data<std::int32_t>(), static_cast<std::size_t>(t.numel())};
}

}  // namespace

SamplePrefetcher::Lease::Lease(Lease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      buffer_(std::move(other.buffer_)),
      error_(std::move(other.error_)),
      wait_s_(other.wait_s_) {}

SamplePrefetcher::Lease::~Lease() {
  if (owner_ == nullptr) return;
  {
    std::lock_guard lock(owner_->mutex_);
    owner_->release_buffer(std::move(buffer_));
  }
  owner_->work_ready_.notify_all();
}

void SamplePrefetcher::Lease::rethrow_error() const {
  if (error_) std::rethrow_exception(error_);
}

SamplePrefetcher::SamplePrefetcher(const SampleSource& source, int threads, std::size_t depth,
                                   HostMemory memory)
    : source_(source),
      memory_(std::move(memory)),
      concurrency_(std::max(1, source.load_concurrency())),
      depth_(depth) {
  if (threads < 0)
    throw InvalidArgument(fmt::format("{} loader threads: expected 0 or more", threads));
  const int count = std::min(threads, std::max(0, source.load_concurrency()));
  workers_.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) workers_.emplace_back([this] { work(); });
}

SamplePrefetcher::~SamplePrefetcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  sample_done_.notify_all();
  for (auto& worker : workers_) worker.join();
}

std::size_t SamplePrefetcher::depth() const {
  std::lock_guard lock(mutex_);
  return depth_;
}

void SamplePrefetcher::set_depth(std::size_t depth) {
  {
    std::lock_guard lock(mutex_);
    if (depth == depth_) return;
    depth_ = depth;
    if (free_buffers_.size() + buffers_in_use_ > depth_)
      free_buffers_.resize(depth_ > buffers_in_use_ ? depth_ - buffers_in_use_ : 0);
  }
  work_ready_.notify_all();
}

void SamplePrefetcher::announce(std::span<const std::size_t> indices) {
  if (workers_.empty()) return;  // nothing loads ahead: take() loads every sample itself
  {
    std::lock_guard lock(mutex_);
    plan_.assign(indices.begin(), indices.end());
    // A plan of a few steps' samples: a sorted copy answers "still wanted?" cheaply.
    std::vector<std::size_t> wanted(indices.begin(), indices.end());
    std::sort(wanted.begin(), wanted.end());
    for (auto it = slots_.begin(); it != slots_.end();) {
      Slot& slot = it->second;
      slot.wanted = std::binary_search(wanted.begin(), wanted.end(), it->first);
      if (!slot.wanted && !slot.loading) {
        release_buffer(std::move(slot.buffer));
        it = slots_.erase(it);
      } else {
        ++it;
      }
    }
  }
  work_ready_.notify_all();
}

std::deque<std::size_t>::iterator SamplePrefetcher::next_to_load() {
  const auto window = plan_.begin() + static_cast<std::ptrdiff_t>(std::min(depth_, plan_.size()));
  const auto next = std::find_if(plan_.begin(), window,
                                 [&](std::size_t index) { return !slots_.contains(index); });
  // find_if answers `window` when every sample in it has a slot; beyond the window may lie a
  // sample that already has one (planned twice), which a second worker would load into it again.
  return next == window ? plan_.end() : next;
}

SamplePrefetcher::Buffer SamplePrefetcher::acquire_buffer() {
  ++buffers_in_use_;
  if (free_buffers_.empty()) return {};  // allocated by the worker, outside the lock
  Buffer buffer = std::move(free_buffers_.back());
  free_buffers_.pop_back();
  return buffer;
}

void SamplePrefetcher::release_buffer(Buffer&& buffer) {
  --buffers_in_use_;
  if (buffers_in_use_ + free_buffers_.size() < depth_) free_buffers_.push_back(std::move(buffer));
}

void SamplePrefetcher::allocate(Buffer& buffer) const {
  if (buffer.fields.defined()) return;
  const SampleShape shape = source_.shape();
  buffer.fields = memory_(batch_field_dims(shape, 1), source_.stored_dtype(), Layout::nchw);
  buffer.labels = memory_(batch_label_dims(shape, 1), DType::i32,
                          shape.regression() ? Layout::flat : Layout::nchw);
}

void SamplePrefetcher::work() {
  std::unique_lock lock(mutex_);
  for (;;) {
    std::deque<std::size_t>::iterator next;
    work_ready_.wait(lock, [&] {
      if (stopping_) return true;
      if (buffers_in_use_ >= depth_ || loads_running_ >= concurrency_) return false;
      next = next_to_load();
      return next != plan_.end();
    });
    if (stopping_) return;
    const std::size_t index = *next;
    slots_[index];  // loading, its buffer with this worker until the load ends
    Buffer buffer = acquire_buffer();
    ++loads_running_;
    lock.unlock();
    std::exception_ptr error;
    try {
      allocate(buffer);
      source_.load_stored(index, bytes_of(buffer.fields), words_of(buffer.labels));
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    --loads_running_;
    // The slot is still here, and this worker is its only loader: next_to_load() never hands
    // out a sample that has a slot, take() waits while a slot loads and announce() keeps loading
    // slots.
    Slot& slot = slots_.at(index);
    slot.loading = false;
    if (slot.wanted) {
      slot.buffer = std::move(buffer);
      slot.error = error;
    } else {
      release_buffer(std::move(buffer));
      slots_.erase(index);
    }
    sample_done_.notify_all();
    work_ready_.notify_all();  // a load slot (and maybe a buffer) is free again
  }
}

void SamplePrefetcher::load_synchronously(std::size_t index, std::span<float> widened,
                                          std::span<std::byte> stored,
                                          std::span<std::int32_t> labels_hw) {
  const auto load = [&] {
    if (stored.empty())
      source_.load(index, widened, labels_hw);
    else
      source_.load_stored(index, stored, labels_hw);
  };
  if (workers_.empty()) {  // no worker can be inside load(): this thread owns the source
    load();
    return;
  }
  {
    std::unique_lock lock(mutex_);
    work_ready_.wait(lock, [&] { return loads_running_ < concurrency_; });
    ++loads_running_;
  }
  struct Done {
    SamplePrefetcher& self;
    ~Done() {
      {
        std::lock_guard lock(self.mutex_);
        --self.loads_running_;
      }
      self.work_ready_.notify_all();
    }
  } done{*this};
  load();
}

double SamplePrefetcher::take(std::size_t index, std::span<float> fields_chw,
                              std::span<std::int32_t> labels_hw) {
  return take_into(index, fields_chw, {}, labels_hw);
}

double SamplePrefetcher::take_stored(std::size_t index, std::span<std::byte> fields_chw,
                                     std::span<std::int32_t> labels_hw) {
  return take_into(index, {}, fields_chw, labels_hw);
}

std::optional<SamplePrefetcher::Slot> SamplePrefetcher::wait_for_slot(std::size_t index) {
  std::unique_lock lock(mutex_);
  const auto planned = std::find(plan_.begin(), plan_.end(), index);
  const auto slot_it = slots_.find(index);
  if (planned == plan_.end() || slot_it == slots_.end() || !slot_it->second.wanted) {
    // Never announced, or announced but not started: the caller loads it.
    if (planned != plan_.end()) plan_.erase(planned);
    lock.unlock();
    work_ready_.notify_all();  // the plan's window moved on
    return std::nullopt;
  }
  plan_.erase(planned);
  sample_done_.wait(lock, [&] { return stopping_ || !slots_.at(index).loading; });
  if (stopping_) throw Error("the sample prefetcher is shutting down");
  return std::move(slots_.extract(index).mapped());
}

double SamplePrefetcher::take_into(std::size_t index, std::span<float> widened,
                                   std::span<std::byte> stored, std::span<std::int32_t> labels_hw) {
  const auto start = std::chrono::steady_clock::now();
  const std::size_t values =
      stored.empty() ? widened.size() : stored.size() / dtype_size(source_.stored_dtype());
  if (values != source_.shape().field_elements() ||
      labels_hw.size() != source_.shape().label_elements())
    throw InvalidArgument(
        fmt::format("sample {} of {}: spans of {} and {} elements, expected {} "
                    "and {}",
                    index, source_.describe(), values, labels_hw.size(),
                    source_.shape().field_elements(), source_.shape().label_elements()));
  std::optional<Slot> slot = wait_for_slot(index);
  if (!slot) {
    load_synchronously(index, widened, stored, labels_hw);
    return seconds_since(start);
  }
  if (!slot->error) {  // copied outside the lock: the workers go on meanwhile
    const auto fields = bytes_of(slot->buffer.fields);
    if (stored.empty())
      widen_to_f32(source_.stored_dtype(), fields, widened);
    else
      std::copy(fields.begin(), fields.end(), stored.begin());
    const auto labels = words_of(slot->buffer.labels);
    std::copy(labels.begin(), labels.end(), labels_hw.begin());
  }
  {
    std::lock_guard lock(mutex_);
    release_buffer(std::move(slot->buffer));
  }
  work_ready_.notify_all();
  if (slot->error) std::rethrow_exception(slot->error);
  return seconds_since(start);
}

SamplePrefetcher::Lease SamplePrefetcher::lease(std::size_t index) {
  const auto start = std::chrono::steady_clock::now();
  if (std::optional<Slot> slot = wait_for_slot(index))
    return Lease(*this, std::move(slot->buffer), slot->error, seconds_since(start));
  Buffer buffer;
  {
    std::lock_guard lock(mutex_);
    buffer = acquire_buffer();  // counted from here: the lease gives it back
  }
  Lease lease(*this, std::move(buffer), nullptr, 0);
  try {
    allocate(lease.buffer_);
    load_synchronously(index, {}, bytes_of(lease.buffer_.fields), words_of(lease.buffer_.labels));
  } catch (...) {
    lease.error_ = std::current_exception();
  }
  lease.wait_s_ = seconds_since(start);
  return lease;
}

}  // namespace hardy::core
