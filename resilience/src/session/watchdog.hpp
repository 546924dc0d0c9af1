#pragma once
// A thread beside the training thread that knows what the training thread is doing and since
// when. It serves two purposes:
// - the last resort: it ends the job when the training thread has been stuck in one stretch of
//   communication for too long (--collective-timeout). A peer that hangs (stopped, stuck in a
//   driver, behind a cut link) is not dead, so the MPI reports nothing and the survivors would
//   wait forever; the watchdog turns that into a failure of the job that the supervisor
//   relaunches from the committed state;
// - every tick (100 ms) it hands what it knows to a listener (the hang monitor,
//   hang_monitor.hpp), which heartbeats and looks for a hung rank long before that.
// Because it is a thread of its own, a training thread that spins or blocks cannot silence it.
//
// What the watchdog sees of the session is only what the training thread publishes under the
// watchdog's lock: the last committed step, who this rank is and who its peers are. Entering
// and leaving a stretch take the same lock, and the watchdog holds it while it acts on a stuck
// job, so that action runs while the training thread is parked inside that stretch and changes
// nothing under it. The listener runs without the lock.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <vector>

namespace hardy::resilience {

// What the training thread is doing. Waiting on peers (communicating, recovering) is never a
// hang of this rank's own; each of the others has a bound (hang_monitor.hpp).
enum class Activity { computing, communicating, loading_data, writing_state, recovering };
std::string_view to_string(Activity activity);
std::optional<Activity> parse_activity(std::string_view name);

class Watchdog {
 public:
  struct Committed {
    long step = 0;             // steps committed
    int rank = 0;              // this rank's current rank
    std::vector<int> members;  // the original world ranks of the current ranks
    bool training = false;     // inside the training loop, past this launch's first step
  };
  struct Stuck {
    Committed committed;
    const char* in;  // the stretch of communication, e.g. "gradient allreduce"
    double seconds;
  };
  // What the training thread is doing now: `doing` names the stretch ("compute" between them).
  struct Progress {
    Committed committed;
    const char* doing;
    Activity activity;
    double seconds;  // in it
  };
  // on_stuck runs on the watchdog's thread, once; the session's ends the process, and the
  // training thread stays parked in its stretch until on_stuck returns, if it does.
  // timeout_for(committed) is the limit in seconds for this rank.
  Watchdog(std::function<double(const Committed&)> timeout_for,
           std::function<void(const Stuck&)> on_stuck);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Called on the watchdog's thread every tick, without the lock; set before start().
  void on_tick(std::function<void(const Progress&)> listener);
  void start();
  void stop();
  void publish(const Committed& committed);

  // Marks a stretch for as long as it lives. Only communication counts toward the collective
  // timeout. Stretches may nest; the innermost is what the thread is doing.
  class Scope {
   public:
    Scope(Watchdog& watchdog, const char* what, Activity activity = Activity::communicating);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& watchdog_;
    const char* outer_what_;
    Activity outer_activity_;
  };

 private:
  void watch();
  Progress progress_locked() const;

  std::function<double(const Committed&)> timeout_for_;
  std::function<void(const Stuck&)> on_stuck_;
  std::function<void(const Progress&)> listener_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool running_ = false;
  bool watching_stuck_ = true;
  Committed committed_;
  const char* doing_ = nullptr;  // null between stretches (computing)
  Activity activity_ = Activity::computing;
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  std::thread thread_;
};

}  // namespace hardy::resilience
