#include "session/hang_monitor.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "hardy/checkpoint/node_local_snapshots.hpp"
#include "hardy/core/support/atomic_file.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::resilience {

namespace {

// A heartbeat is rewritten in place: padding to a fixed size means a shorter record never leaves
// the tail of a longer one behind.
constexpr std::size_t kRecordBytes = 1024;

nlohmann::json to_json(const Heartbeat& beat) {
  return {{"world_rank", beat.world_rank},
          {"host", beat.host},
          {"pid", beat.pid},
          {"process_start", beat.process_start},
          {"step", beat.step},
          {"doing", beat.doing},
          {"activity", to_string(beat.activity)},
          {"seconds_in_it", beat.seconds_in_it},
          {"unix_time", beat.unix_time},
          {"timeout_s", beat.timeout_s}};
}

Activity activity_named(const std::string& name) {
  if (auto activity = parse_activity(name)) return *activity;
  throw Error("unknown activity " + name);
}

std::optional<Heartbeat> heartbeat_from(const std::string& text) {
  try {
    const auto json = nlohmann::json::parse(text);
    return Heartbeat{.world_rank = json.at("world_rank").get<int>(),
                     .host = json.at("host").get<std::string>(),
                     .pid = json.at("pid").get<pid_t>(),
                     .process_start = json.at("process_start").get<std::string>(),
                     .step = json.at("step").get<long>(),
                     .doing = json.at("doing").get<std::string>(),
                     .activity = activity_named(json.at("activity").get<std::string>()),
                     .seconds_in_it = json.at("seconds_in_it").get<double>(),
                     .unix_time = json.at("unix_time").get<double>(),
                     .timeout_s = json.at("timeout_s").get<double>()};
  } catch (const std::exception&) {
    return std::nullopt;  // being rewritten, or not one: judged at the next look
  }
}

std::string read_small_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  std::string text(kRecordBytes, '\0');
  const ssize_t got = ::pread(fd, text.data(), text.size(), 0);
  ::close(fd);
  text.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return text;
}

void make_private_directory(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) throw IoError(fmt::format("cannot create {}: {}", path.string(), error.message()));
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != ::geteuid())
    throw core::UnsafeDirectory(fmt::format(
        "{} is not a directory of this user (a link, or another user's)", path.string()));
  ::chmod(path.c_str(), 0700);
}

}  // namespace

double hang_timeout(double fixed_s, double longest_step_s, double collective_timeout_s) {
  if (fixed_s > 0) return fixed_s;
  const double learned = std::max(kHangTimeoutFloorS, kHangTimeoutStepMultiple * longest_step_s);
  return std::min(learned, collective_timeout_s / 2);
}

std::optional<std::string> overrun(Activity activity, const char* doing, double seconds,
                                   double timeout_s, double io_bound_s) {
  double bound = 0;
  switch (activity) {
    case Activity::communicating:
    case Activity::recovering:
      return std::nullopt;  // waiting on peers: whoever it waits for hangs
    case Activity::computing:
      bound = timeout_s;
      break;
    case Activity::loading_data:
    case Activity::writing_state:
      bound = std::max(timeout_s, io_bound_s);  // slow storage is progress of a known kind
      break;
  }
  if (seconds <= bound) return std::nullopt;
  return fmt::format("in {} for {:.1f} s, past the bound of {:.1f} s for {}", doing, seconds, bound,
                     to_string(activity));
}

std::vector<Heartbeat> stopped_members(std::span<const Heartbeat> beats, double now,
                                       double timeout_s) {
  std::vector<Heartbeat> stopped;
  for (const auto& beat : beats)
    if (now - beat.unix_time > timeout_s) stopped.push_back(beat);
  return stopped;
}

std::optional<int> killer_of(const Heartbeat& suspect, std::span<const Heartbeat> beats, double now,
                             double timeout_s) {
  std::optional<int> killer;
  for (const auto& beat : beats) {
    if (beat.host != suspect.host || beat.world_rank == suspect.world_rank) continue;
    if (now - beat.unix_time > timeout_s) continue;  // stopped too
    if (!killer || beat.world_rank < *killer) killer = beat.world_rank;
  }
  return killer;
}

// ---- ProgressBoard ----

ProgressBoard::ProgressBoard(BoardPlaces places, std::string launch)
    : places_(std::move(places)), launch_(std::move(launch)) {}

ProgressBoard::~ProgressBoard() {
  if (own_fd_ >= 0) ::close(own_fd_);
}

void ProgressBoard::make_beats_directory() const {
  // Throws UnsafeDirectory for a tree another user owns or planted links in.
  core::check_private_tree(places_.node_root, places_.beats / launch_, /*create=*/true);
}

void ProgressBoard::publish(const Heartbeat& beat) {
  if (own_fd_ < 0) {
    make_beats_directory();
    own_file_ = beats_dir() / launch_ / fmt::format("rank-{}", beat.world_rank);
    own_fd_ = core::create_exclusive_file(own_file_, 0600);
  }
  std::string record = to_json(beat).dump();
  if (record.size() + 1 > kRecordBytes) throw Error("heartbeat record too long");
  record.resize(kRecordBytes - 1, ' ');
  record.push_back('\n');
  if (::pwrite(own_fd_, record.data(), record.size(), 0) != static_cast<ssize_t>(record.size()))
    throw IoError(
        fmt::format("cannot write the heartbeat {}: {}", own_file_.string(), std::strerror(errno)));
}

std::vector<Heartbeat> ProgressBoard::read(std::span<const int> world_ranks) const {
  std::vector<Heartbeat> beats;
  for (int rank : world_ranks)
    if (auto beat =
            heartbeat_from(read_small_file(beats_dir() / launch_ / fmt::format("rank-{}", rank))))
      if (beat->world_rank == rank) beats.push_back(std::move(*beat));
  return beats;
}

void ProgressBoard::decide(const HangDecision& decision) {
  make_private_directory(places_.shared / launch_);
  const nlohmann::json json = {{"world_rank", decision.world_rank},
                               {"host", decision.host},
                               {"pid", decision.pid},
                               {"doing", decision.doing},
                               {"seconds_without_progress", decision.seconds_without_progress},
                               {"timeout_s", decision.timeout_s},
                               {"detected_by", decision.detected_by},
                               {"reason", decision.reason},
                               {"unix_time", decision.unix_time}};
  const auto path = places_.shared / launch_ / fmt::format("decision-{}", decision.world_rank);
  core::write_private_file(path, json.dump() + "\n");
}

std::optional<HangDecision> ProgressBoard::decision_for(int world_rank) const {
  std::ifstream file(places_.shared / launch_ / fmt::format("decision-{}", world_rank));
  if (!file) return std::nullopt;
  try {
    const auto json = nlohmann::json::parse(file);
    return HangDecision{
        .world_rank = json.at("world_rank").get<int>(),
        .host = json.at("host").get<std::string>(),
        .pid = json.at("pid").get<pid_t>(),
        .doing = json.at("doing").get<std::string>(),
        .seconds_without_progress = json.at("seconds_without_progress").get<double>(),
        .timeout_s = json.at("timeout_s").get<double>(),
        .detected_by = json.at("detected_by").get<std::string>(),
        .reason = json.at("reason").get<std::string>(),
        .unix_time = json.at("unix_time").get<double>()};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

double ProgressBoard::longest_step() const {
  std::ifstream file(places_.shared / "longest-step.json");
  if (!file) return 0;
  try {
    return std::max(0.0, nlohmann::json::parse(file).at("longest_step_s").get<double>());
  } catch (const std::exception&) {
    return 0;  // damaged: learned again
  }
}

void ProgressBoard::keep_longest_step(double seconds) {
  make_private_directory(places_.shared);
  core::write_atomically(
      places_.shared / "longest-step.json", [&](const std::filesystem::path& tmp) {
        std::ofstream(tmp) << nlohmann::json{{"longest_step_s", seconds}}.dump() << "\n";
      });
}

namespace {
void remove_directories_but(const std::filesystem::path& parent, const std::string& keep) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(parent, error))
    if (entry.is_directory() && !entry.is_symlink() && entry.path().filename() != keep)
      std::filesystem::remove_all(entry.path(), error);
}
}  // namespace

void ProgressBoard::remove_other_launches(bool node, bool shared) const {
  if (node) remove_directories_but(beats_dir(), launch_);
  if (shared) remove_directories_but(places_.shared, launch_);
}

void ProgressBoard::remove_launch(bool node, bool shared) {
  if (own_fd_ >= 0) {
    ::close(own_fd_);
    own_fd_ = -1;
  }
  std::error_code error;
  if (!own_file_.empty()) std::filesystem::remove(own_file_, error);
  if (node) {
    std::filesystem::remove_all(beats_dir() / launch_, error);
    // Left empty, the run's node-local directory goes too, as the snapshots' end leaves it.
    std::filesystem::remove(beats_dir(), error);
    std::filesystem::remove(beats_dir().parent_path(), error);
  }
  if (shared) std::filesystem::remove_all(places_.shared / launch_, error);
}

// ---- HangMonitor ----

HangMonitor::HangMonitor(Options options)
    : options_(std::move(options)),
      board_(options_.board, options_.launch),
      own_start_(core::process_start_ticks(::getpid())) {
  longest_step_s_ = board_.longest_step();  // a relaunch starts from what the run learned
  kept_longest_s_ = longest_step_s_;
  board_.remove_other_launches(options_.first_on_host, options_.keeps_longest_step);
}

void HangMonitor::step_took(double seconds) {
  if (seconds <= longest_step_s_) return;
  longest_step_s_ = seconds;
  // Kept when it grew by a tenth: a relaunch need not learn it again, and the lead does not
  // rewrite the file every step while it creeps up.
  if (options_.keeps_longest_step && seconds > 1.1 * kept_longest_s_) {
    try {
      board_.keep_longest_step(seconds);
      kept_longest_s_ = seconds;
    } catch (const Error&) {
      // Only a relaunch's first steps lose by it.
    }
  }
}

double HangMonitor::timeout_s() const {
  return hang_timeout(options_.fixed_timeout_s, longest_step_s_, options_.collective_timeout_s);
}

double HangMonitor::io_bound_s() const {
  // A checkpoint of a large model may take minutes on a slow file system, every time: what it
  // took before is what it may take again.
  return std::max(options_.io_timeout_s, kHangTimeoutStepMultiple * longest_io_s_);
}

Heartbeat HangMonitor::own_beat(const Watchdog::Progress& progress, double now) const {
  return {.world_rank = options_.world_rank,
          .host = options_.hosts.at(static_cast<std::size_t>(options_.world_rank)),
          .pid = ::getpid(),
          .process_start = own_start_,
          .step = progress.committed.step,
          .doing = progress.doing,
          .activity = progress.activity,
          .seconds_in_it = progress.seconds,
          .unix_time = now,
          .timeout_s = timeout_s()};
}

void HangMonitor::tick(const Watchdog::Progress& progress) {
  const double now = core::unix_time();
  if (now - last_beat_ >= kHeartbeatPeriodS && !board_failed_) {
    try {
      board_.publish(own_beat(progress, now));
      last_beat_ = now;
    } catch (const Error& e) {
      // Without a heartbeat, peers on this host would take this rank for stopped: it stops
      // heartbeating for good, and the host's peers judge no one (they see no beat at all).
      board_failed_ = true;
      std::cerr << fmt::format("hardy: rank {}: heartbeats off: {}\n", options_.world_rank,
                               e.what());
    }
  }
  const bool in_io =
      progress.activity == Activity::loading_data || progress.activity == Activity::writing_state;
  if (!in_io && io_stretch_s_ > 0) longest_io_s_ = std::max(longest_io_s_, io_stretch_s_);
  io_stretch_s_ = in_io ? progress.seconds : 0;
  if (!progress.committed.training) return;
  const double timeout = timeout_s();
  if (auto reason =
          overrun(progress.activity, progress.doing, progress.seconds, timeout, io_bound_s()))
    end_own_process(progress, *reason);
  if (progress.activity == Activity::communicating && progress.seconds > timeout / 2 &&
      now - last_look_ >= kHeartbeatPeriodS && !board_failed_) {
    last_look_ = now;
    look_at_host_peers(progress, now);
  }
}

void HangMonitor::end_own_process(const Watchdog::Progress& progress, const std::string& reason) {
  const Heartbeat beat = own_beat(progress, core::unix_time());
  const HangDecision decision{.world_rank = beat.world_rank,
                              .host = beat.host,
                              .pid = beat.pid,
                              .doing = beat.doing,
                              .seconds_without_progress = progress.seconds,
                              .timeout_s = beat.timeout_s,
                              .detected_by = "its own monitor",
                              .reason = reason,
                              .unix_time = beat.unix_time};
  try {
    board_.decide(decision);
  } catch (const Error&) {
    // The kill matters more than its record: the recovery still names the rank.
  }
  std::cerr << fmt::format("hardy: rank {} on {} hangs ({}); ending it\n", beat.world_rank,
                           beat.host, reason);
  ::kill(::getpid(), SIGKILL);
}

void HangMonitor::look_at_host_peers(const Watchdog::Progress& progress, double now) {
  const std::string& host = options_.hosts.at(static_cast<std::size_t>(options_.world_rank));
  std::vector<int> on_host;
  for (int member : progress.committed.members)
    if (member != options_.world_rank &&
        options_.hosts.at(static_cast<std::size_t>(member)) == host)
      on_host.push_back(member);
  if (on_host.empty()) return;
  std::vector<Heartbeat> beats = board_.read(on_host);
  beats.push_back(own_beat(progress, now));
  const double timeout = timeout_s();
  for (const Heartbeat& suspect : stopped_members(beats, now, timeout)) {
    if (killer_of(suspect, beats, now, timeout) != options_.world_rank) continue;
    // The pid names the process that wrote the beat only while its start time matches.
    if (suspect.process_start.empty() ||
        core::process_start_ticks(suspect.pid) != suspect.process_start)
      continue;
    const double silent = now - suspect.unix_time;
    const HangDecision decision{
        .world_rank = suspect.world_rank,
        .host = suspect.host,
        .pid = suspect.pid,
        .doing = suspect.doing,
        .seconds_without_progress = silent + suspect.seconds_in_it,
        .timeout_s = timeout,
        .detected_by = fmt::format("rank {} on its host", options_.world_rank),
        .reason = fmt::format("no heartbeat for {:.1f} s (last seen in {}): stopped", silent,
                              suspect.doing),
        .unix_time = now};
    try {
      board_.decide(decision);
    } catch (const Error&) {
    }
    std::cerr << fmt::format("hardy: rank {} on {} hangs ({}); rank {} ends it\n",
                             suspect.world_rank, suspect.host, decision.reason,
                             options_.world_rank);
    ::kill(suspect.pid, SIGKILL);
  }
}

std::unique_ptr<HangMonitor> make_hang_monitor(const TrainingConfig& config,
                                               const Membership& membership,
                                               const std::string& launch) {
  if (config.hang_timeout_s < 0) return nullptr;
  const auto pids = membership.comm().allgather(static_cast<std::int64_t>(::getpid()));
  std::set<std::pair<std::string, std::int64_t>> processes;
  for (int r = 0; r < membership.size(); ++r)
    processes.emplace(membership.host_of(r), pids[static_cast<std::size_t>(r)]);
  if (processes.size() != pids.size()) return nullptr;
  auto shared = config.run_dir / "heartbeats";
  if (config.domain >= 0) shared /= fmt::format("domain-{}", config.domain);
  return std::make_unique<HangMonitor>(HangMonitor::Options{
      .board = {.node_root = config.snapshot_dir,
                .beats = std::filesystem::path(checkpoint::run_key(config.run_dir)) /
                         checkpoint::kHeartbeatDirectory,
                .shared = shared},
      // a relaunch's ranks never read the last launch's beats
      .launch = launch,
      .world_rank = membership.world_rank(),
      .hosts = membership.original_hosts(),
      .fixed_timeout_s = config.hang_timeout_s,
      .io_timeout_s = config.hang_io_timeout_s,
      .collective_timeout_s = config.collective_timeout_s,
      .keeps_longest_step = membership.lead(),
      .first_on_host = membership.first_on_host()});
}

}  // namespace hardy::resilience
