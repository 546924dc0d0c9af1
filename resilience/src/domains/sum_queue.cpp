#include "domains/sum_queue.hpp"

namespace hardy::resilience {

void SumQueue::queue(std::span<float> values) {
  {
    const std::lock_guard lock(mutex_);
    waiting_.push_back(values);
  }
  changed_.notify_one();
}

void SumQueue::close() {
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
  }
  changed_.notify_one();
}

void SumQueue::stop() {
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
    waiting_.clear();
  }
  changed_.notify_one();
}

void SumQueue::run(comm::Communicator& group) {
  for (;;) {
    std::span<float> next;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return closed_ || !waiting_.empty(); });
      if (waiting_.empty()) return;  // closed, and every sum sent
      next = waiting_.front();
      waiting_.pop_front();
    }
    group.allreduce_sum(next);
  }
}

}  // namespace hardy::resilience
