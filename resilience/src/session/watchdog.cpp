#include "session/watchdog.hpp"

#include "hardy/core/support/enum_names.hpp"

namespace hardy::resilience {

namespace {
constexpr std::string_view kActivityNames[] = {"computing", "communicating", "loading data",
                                               "writing state", "recovering"};
static_assert(std::size(kActivityNames) == static_cast<std::size_t>(Activity::recovering) + 1);
}  // namespace

std::string_view to_string(Activity activity) { return core::name_of(kActivityNames, activity); }

std::optional<Activity> parse_activity(std::string_view name) {
  return core::value_named<Activity>(kActivityNames, name);
}

Watchdog::Watchdog(std::function<double(const Committed&)> timeout_for,
                   std::function<void(const Stuck&)> on_stuck)
    : timeout_for_(std::move(timeout_for)), on_stuck_(std::move(on_stuck)) {}

Watchdog::~Watchdog() { stop(); }

void Watchdog::on_tick(std::function<void(const Progress&)> listener) {
  std::lock_guard lock(mutex_);
  listener_ = std::move(listener);
}

void Watchdog::start() {
  std::lock_guard lock(mutex_);
  if (running_) return;
  running_ = true;
  watching_stuck_ = true;
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

Watchdog::Progress Watchdog::progress_locked() const {
  return {committed_, doing_ ? doing_ : "compute", activity_,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count()};
}

void Watchdog::watch() {
  std::unique_lock lock(mutex_);
  while (running_) {
    wake_.wait_for(lock, std::chrono::milliseconds(100));
    if (!running_) break;
    const Progress progress = progress_locked();
    // A recovery may read a checkpoint from disk for as long as that takes; it is not timed.
    const bool communicating = doing_ != nullptr && activity_ == Activity::communicating;
    if (watching_stuck_ && communicating && progress.seconds >= timeout_for_(committed_)) {
      on_stuck_(Stuck{committed_, doing_, progress.seconds});  // with the lock held: see header
      watching_stuck_ = false;  // it returned (a test's callback): the job is not ended twice
    }
    if (listener_) {
      lock.unlock();  // a heartbeat may write to a slow file system
      listener_(progress);
      lock.lock();
    }
  }
}

Watchdog::Scope::Scope(Watchdog& watchdog, const char* what, Activity activity)
    : watchdog_(watchdog) {
  std::lock_guard lock(watchdog_.mutex_);
  outer_what_ = watchdog_.doing_;
  outer_activity_ = watchdog_.activity_;
  watchdog_.doing_ = what;
  watchdog_.activity_ = activity;
  watchdog_.since_ = std::chrono::steady_clock::now();
}

Watchdog::Scope::~Scope() {
  std::lock_guard lock(watchdog_.mutex_);
  watchdog_.doing_ = outer_what_;
  watchdog_.activity_ = outer_activity_;
  // Back to what it did before (computing between stretches): a new stretch of it starts now.
  watchdog_.since_ = std::chrono::steady_clock::now();
}

}  // namespace hardy::resilience
