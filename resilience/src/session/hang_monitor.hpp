#pragma once
// Hang detection inside the job (docs/resilience.md, "Hangs"). A rank that hangs is alive, so the
// MPI reports nothing and its peers wait for it in the next collective until the watchdog's
// --collective-timeout ends the whole job. The hang monitor finds the hung rank and kills it,
// which turns the hang into a process failure that ULFM survives inside the job: shrink, roll
// back from memory, rebalance, go on.
//
// It runs on every rank's watchdog thread (watchdog.hpp), not the training thread, and each tick
// - heartbeats: writes what the training thread is doing, and since when, to the rank's file on
//   the progress board: node-local (under the node-local root, private to the user), because only
//   ranks of the same host ever read a heartbeat, so a heartbeat costs the shared file system
//   nothing;
// - watches its own rank: a training thread that computes for longer than the hang timeout
//   spins, one that waits on data or writes state for longer than the I/O bound (the larger of
//   --hang-io-timeout and 5 x the longest such stretch seen) is stuck in a sick file system;
//   either way its own monitor names it and kills its process;
// - watches its host's peers while it waits for them: a peer whose heartbeat is older than the
//   hang timeout is stopped (SIGSTOP, a process frozen by the OS or a debugger), because even its
//   monitor thread no longer runs. The lowest rank on that host whose heartbeat is fresh kills it.
//   Only a rank on the same host can (a signal does not cross nodes), and the same host means
//   the same clock, so a heartbeat's age never depends on clock skew between nodes. A stopped
//   rank alone on its host is left to the watchdog (the job ends and is relaunched).
// Waiting on peers (communication, recovery) is never a rank's own hang: whoever it waits for is.
//
// The timeout learns: 5 x the longest step seen (the first step after a start or a recovery
// left out), at least kHangTimeoutFloorS, at most half --collective-timeout, so that it acts
// well before the watchdog. The lead keeps the longest step in the run directory, and a
// relaunch starts from it. --hang-timeout S fixes it instead.
//
// The killer leaves its decision in the run directory before the kill (the lead, on another
// host, reads it); the lead logs it (hang_detected) when the recovery names the rank that left.
#include <sys/types.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hardy/resilience/training_config.hpp"
#include "session/membership.hpp"
#include "session/watchdog.hpp"

namespace hardy::resilience {

inline constexpr double kHangTimeoutFloorS = 5.0;
inline constexpr double kHangTimeoutStepMultiple = 5.0;
inline constexpr double kHeartbeatPeriodS = 1.0;

// One rank's heartbeat, as its monitor last wrote it.
struct Heartbeat {
  int world_rank = -1;
  std::string host;
  pid_t pid = 0;
  std::string process_start;  // /proc/PID/stat's start time: a reused pid is another process
  long step = 0;              // steps committed
  std::string doing;          // the stretch, e.g. "gradient allreduce", "compute"
  Activity activity = Activity::computing;
  double seconds_in_it = 0;  // at `unix_time`
  double unix_time = 0;      // when it was written
  double timeout_s = 0;      // the hang timeout in force
};

// A monitor's verdict on a hung rank, written before the kill.
struct HangDecision {
  int world_rank = -1;
  std::string host;
  pid_t pid = 0;
  std::string doing;
  double seconds_without_progress = 0;
  double timeout_s = 0;
  std::string detected_by;  // "its own monitor" or "rank N on its host"
  std::string reason;
  double unix_time = 0;
};

// The hang timeout: `fixed_s` when positive, else learned from the longest step.
double hang_timeout(double fixed_s, double longest_step_s, double collective_timeout_s);

// Why a rank that has been `seconds` in `activity` hangs, or nullopt while it does not.
// `io_bound_s` bounds data waits and state writes (never below the hang timeout).
std::optional<std::string> overrun(Activity activity, const char* doing, double seconds,
                                   double timeout_s, double io_bound_s);

// The members (by world rank) among `beats` whose heartbeat is older than `timeout_s` at `now`.
// `beats` holds only members; a member without a beat yet is not judged.
std::vector<Heartbeat> stopped_members(std::span<const Heartbeat> beats, double now,
                                       double timeout_s);

// The member that kills `suspect`: the lowest world rank among `beats` on its host whose own
// heartbeat is fresh; nullopt when there is none.
std::optional<int> killer_of(const Heartbeat& suspect, std::span<const Heartbeat> beats, double now,
                             double timeout_s);

// Where a launch's heartbeats and decisions go. Heartbeats: NODE_ROOT/BEATS/LAUNCH/rank-N, in
// the node-local root's checked private tree (core/support/private_tree.hpp). Decisions and the
// longest step: SHARED/LAUNCH/decision-N and SHARED/longest-step.json, in the run directory.
// Directories 0700, files 0600, created without following links.
struct BoardPlaces {
  std::filesystem::path node_root;  // the node-local root (--snapshot-dir)
  std::filesystem::path beats;      // relative to it: RUN_KEY/.heartbeats
  std::filesystem::path shared;     // RUN_DIR/heartbeats[/domain-K]
};

class ProgressBoard {
 public:
  ProgressBoard(BoardPlaces places, std::string launch);
  ~ProgressBoard();
  ProgressBoard(const ProgressBoard&) = delete;
  ProgressBoard& operator=(const ProgressBoard&) = delete;

  // Rewrites this rank's file in place (one write of a fixed-size record, no metadata traffic
  // after the first); throws IoError.
  void publish(const Heartbeat& beat);
  // The heartbeats of these world ranks that can be read now (a rank not yet started has none).
  std::vector<Heartbeat> read(std::span<const int> world_ranks) const;
  void decide(const HangDecision& decision);
  std::optional<HangDecision> decision_for(int world_rank) const;
  // The longest step the lead saw in this run (0 when none was kept), and keeping it.
  double longest_step() const;
  void keep_longest_step(double seconds);
  // Earlier launches of this job are over: their heartbeats on this node (`node`), their
  // decisions in the run directory (`shared`) go. At the end, this launch's.
  void remove_other_launches(bool node, bool shared) const;
  void remove_launch(bool node, bool shared);

 private:
  std::filesystem::path beats_dir() const { return places_.node_root / places_.beats; }
  void make_beats_directory() const;

  BoardPlaces places_;
  std::string launch_;
  int own_fd_ = -1;
  std::filesystem::path own_file_;
};

class HangMonitor {
 public:
  struct Options {
    BoardPlaces board;
    std::string launch;  // the same on every rank of this launch
    int world_rank = 0;
    std::vector<std::string> hosts;  // by world rank
    double fixed_timeout_s = 0;      // --hang-timeout; 0: learned
    double io_timeout_s = 60;        // --hang-io-timeout
    double collective_timeout_s = 300;
    bool keeps_longest_step = false;  // the lead
    bool first_on_host = false;       // clears this host's heartbeats of earlier launches
  };
  explicit HangMonitor(Options options);

  // Training thread: a committed step took `seconds` (not the first after a start or recovery).
  void step_took(double seconds);
  double timeout_s() const;
  double io_bound_s() const;
  // The lead, after a recovery: the decision about a rank that left, if its killer wrote one.
  std::optional<HangDecision> decision_for(int world_rank) const {
    return board_.decision_for(world_rank);
  }
  // At the job's end, after every rank's watchdog stopped.
  void finish() { board_.remove_launch(options_.first_on_host, options_.keeps_longest_step); }

  // Watchdog thread, every tick.
  void tick(const Watchdog::Progress& progress);

 private:
  Heartbeat own_beat(const Watchdog::Progress& progress, double now) const;
  void end_own_process(const Watchdog::Progress& progress, const std::string& reason);
  void look_at_host_peers(const Watchdog::Progress& progress, double now);

  Options options_;
  ProgressBoard board_;
  std::string own_start_;
  std::atomic<double> longest_step_s_{0};
  double kept_longest_s_ = 0;  // training thread only
  double last_beat_ = 0, last_look_ = 0;
  // The data wait or state write in progress at the last tick, and the longest one that ended.
  double io_stretch_s_ = 0, longest_io_s_ = 0;
  bool board_failed_ = false;
};

// The session's monitor (--hang-timeout; null when off), on the board of `launch`. Null too where
// ranks share a process (threads, in tests): it kills processes. Collective over the membership.
std::unique_ptr<HangMonitor> make_hang_monitor(const TrainingConfig& config,
                                               const Membership& membership,
                                               const std::string& launch);

}  // namespace hardy::resilience
