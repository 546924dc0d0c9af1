#include "watchdog.hpp"

namespace hardy::resilience {

Watchdog::Watchdog(std::function<double(const Committed&)> timeout_for,
                   std::function<void(const Stuck&)> on_stuck)
    : timeout_for_(std::move(timeout_for)), on_stuck_(std::move(on_stuck)) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start() {
  std::lock_guard lock(mutex_);
  if (running_) return;
  running_ = true;
  thread_ = std::thread([this] { watch(); });
}

void Watchdog::stop() {
  {
    std::lock_guard lock(mutex_);
    running_ = false;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::publish(const Committed& committed) {
  std::lock_guard lock(mutex_);
  committed_ = committed;
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (running_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (!running_ || communicating_ == nullptr) continue;
    const double stuck_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    if (stuck_s < timeout_for_(committed_)) continue;
    on_stuck_(Stuck{committed_, communicating_, stuck_s});  // with the lock held: see the header
    running_ = false;  // it returned (a test's callback): the job is not watched twice
  }
}

Watchdog::Scope::Scope(Watchdog& watchdog, const char* what) : watchdog_(watchdog) {
  std::lock_guard lock(watchdog_.mutex_);
  watchdog_.communicating_ = what;
  watchdog_.since_ = std::chrono::steady_clock::now();
}

Watchdog::Scope::~Scope() {
  std::lock_guard lock(watchdog_.mutex_);
  watchdog_.communicating_ = nullptr;
}

}  // namespace hardy::resilience
