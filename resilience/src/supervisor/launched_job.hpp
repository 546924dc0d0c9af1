#pragma once
// One launch of the job's ranks, as the supervisor sees it: a child process group (the launcher
// and everything it starts) whose output is relayed to the supervisor's own stdout and stderr,
// appended to a log file, and kept for the supervisor to read (the launcher names the nodes it
// lost only there). Signals the supervisor receives for the job (SIGUSR1 from a scheduler's
// time-limit warning, SIGTERM from a cancel) are forwarded to the whole group; those that arrive
// between launches are kept for the next one.
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace hardy::resilience {

class LaunchedJob {
 public:
  // Starts `command` in its own process group; throws hardy::Error when it cannot.
  LaunchedJob(const std::vector<std::string>& command, const std::filesystem::path& log_file);
  // Kills what is left of the group (SIGKILL) and reaps the launcher.
  ~LaunchedJob();
  LaunchedJob(const LaunchedJob&) = delete;
  LaunchedJob& operator=(const LaunchedJob&) = delete;

  // Relays output for up to `timeout`; returns the launcher's exit status (128 + signal when a
  // signal ended it) once it has exited and its output is drained, nullopt while it runs.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  // Sends the group the signals that arrived while no launch could take them (during the probes
  // and the backoff before this launch), once. Call it when the job handles them: a rank that
  // has not yet installed its SIGUSR1 handler would die of the signal.
  void deliver_pending_signals();
  // SIGTERM to the group, then SIGKILL after `grace`; returns the exit status.
  int terminate(std::chrono::milliseconds grace);

  // Everything the launcher printed (stdout and stderr interleaved), up to its last 4 MiB.
  const std::string& output() const { return output_; }
  // How the launcher ended, in words ("exit status 0", "killed by signal 9 (Killed)").
  std::string how() const;

 private:
  void relay(int fd, int to);
  void close_pipes();

  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  std::optional<int> raw_status_;
  std::ofstream log_;
  std::string output_;
};

// Runs `command` for each host (`{host}` in it replaced by the host) at the same time (a probe, a
// node's cleanup at the end of the run) and
// returns, per host, nullopt when it exited 0 within `timeout`, or what went wrong in words.
// Hosts marked in `settled` (when given, one flag per host) are those whose answer decides
// nothing: once only they are left, the wait ends and they count as not answering.
// `answer_grace` (when positive): once a host has answered, the wait also ends when no other has
// for as long as the answers so far took, and at least `answer_grace`; those left count as not
// answering. A node that is frozen or cut off answers never, and its peers within a fraction of
// a second: waiting out the timeout for it (5 s by default) would only add to its cost.
std::vector<std::optional<std::string>> run_on_hosts(
    const std::vector<std::string>& command, const std::vector<std::string>& hosts,
    std::chrono::milliseconds timeout, const std::vector<bool>& settled = {},
    std::chrono::milliseconds answer_grace = std::chrono::milliseconds(0));

}  // namespace hardy::resilience
