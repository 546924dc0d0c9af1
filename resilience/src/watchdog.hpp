#pragma once
// A thread that ends the job when the training thread has been stuck in one stretch of
// communication for too long. A peer that hangs (stopped, stuck in a driver, behind a cut link)
// is not dead, so the MPI reports nothing and the survivors would wait forever; the watchdog
// turns that into a failure of the job that the supervisor relaunches from the committed state.
//
// What the watchdog sees of the session is only what the training thread publishes under the
// watchdog's lock: the last committed step and who this rank is. Entering and leaving a stretch
// of communication take the same lock, and the watchdog holds it while it acts, so its action
// runs while the training thread is parked inside that stretch and changes nothing under it.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace hardy::resilience {

class Watchdog {
 public:
  struct Committed {
    long step = 0;  // steps committed
    int rank = 0;   // this rank's current rank
  };
  struct Stuck {
    Committed committed;
    const char* in;  // the stretch of communication, e.g. "gradient allreduce"
    double seconds;
  };
  // on_stuck runs on the watchdog's thread, once; the session's ends the process, and the
  // training thread stays parked in its stretch until on_stuck returns, if it does.
  // timeout_for(committed) is the limit in seconds for this rank.
  Watchdog(std::function<double(const Committed&)> timeout_for,
           std::function<void(const Stuck&)> on_stuck);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void start();
  void stop();
  void publish(const Committed& committed);

  // Marks a stretch of communication for as long as it lives.
  class Scope {
   public:
    Scope(Watchdog& watchdog, const char* what);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog& watchdog_;
  };

 private:
  void watch();

  std::function<double(const Committed&)> timeout_for_;
  std::function<void(const Stuck&)> on_stuck_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool running_ = false;
  Committed committed_;
  const char* communicating_ = nullptr;  // null when not communicating
  std::chrono::steady_clock::time_point since_;
  std::thread thread_;
};

}  // namespace hardy::resilience
