#include "supervisor/launched_job.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "hardy/core/support/error.hpp"

namespace hardy::resilience {

namespace {

constexpr std::size_t kKeptOutput = 4u << 20;

std::atomic<pid_t> forwarding_to{0};
// One bit per signal that arrived while no launch could take it (during the probes and the
// backoff between launches, or as the launcher exited): LaunchedJob::deliver_pending_signals.
std::atomic<unsigned> pending_signals{0};
static_assert(decltype(pending_signals)::is_always_lock_free, "set in a signal handler");

void forward_signal(int signal) {
  const int saved_errno = errno;
  const pid_t group = forwarding_to.load();
  if (group <= 0 || ::kill(-group, signal) != 0) pending_signals.fetch_or(1u << signal);
  errno = saved_errno;
}

void install_forwarding() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_handler = forward_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int signal : {SIGUSR1, SIGUSR2, SIGTERM, SIGINT}) sigaction(signal, &action, nullptr);
    return true;
  }();
  (void)installed;
}

// fork + exec in a new process group; the child's stdout/stderr go to the given descriptors (or
// stay the parent's when -1). Returns the pid.
pid_t spawn(const std::vector<std::string>& command, int out_fd, int err_fd) {
  std::vector<char*> argv;
  for (const auto& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child < 0)
    throw Error(fmt::format("cannot start {}: {}", command.front(), std::strerror(errno)));
  if (child == 0) {
    ::setpgid(0, 0);
    // A supervisor killed with SIGKILL (a scheduler's cancel, a test's timeout) must not leave
    // its launcher running a job nobody watches.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "hardy run: cannot execute %s: %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  ::setpgid(child, child);
  return child;
}

int decode(int raw) { return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw); }

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;  // a closed terminal must not stop the supervisor
    data += written;
    size -= static_cast<std::size_t>(written);
  }
}

}  // namespace

LaunchedJob::LaunchedJob(const std::vector<std::string>& command,
                         const std::filesystem::path& log_file)
    : log_(log_file, std::ios::app) {
  install_forwarding();
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  try {
    pid_ = spawn(command, out[1], err[1]);
  } catch (...) {
    for (int fd : {out[0], out[1], err[0], err[1]}) ::close(fd);
    throw;
  }
  ::close(out[1]);
  ::close(err[1]);
  out_ = out[0];
  err_ = err[0];
  forwarding_to.store(pid_);
}

LaunchedJob::~LaunchedJob() {
  if (pid_ > 0 && !raw_status_) {
    ::kill(-pid_, SIGKILL);
    int raw = 0;
    while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
    }
  }
  forwarding_to.store(0);
  close_pipes();
}

void LaunchedJob::deliver_pending_signals() {
  const unsigned pending = pending_signals.exchange(0);
  for (int signal = 1; signal < 32; ++signal)
    if (pending & (1u << signal)) ::kill(-pid_, signal);
}

void LaunchedJob::close_pipes() {
  for (int* fd : {&out_, &err_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

void LaunchedJob::relay(int fd, int to) {
  char buffer[1 << 14];
  const ssize_t got = ::read(fd, buffer, sizeof buffer);
  if (got < 0 && errno == EINTR) return;
  if (got <= 0) {
    ::close(fd);
    (fd == out_ ? out_ : err_) = -1;
    return;
  }
  const auto size = static_cast<std::size_t>(got);
  write_all(to, buffer, size);
  log_.write(buffer, got);
  log_.flush();
  output_.append(buffer, size);
  if (output_.size() > kKeptOutput) output_.erase(0, output_.size() - kKeptOutput / 2);
}

std::optional<int> LaunchedJob::wait_for(std::chrono::milliseconds timeout) {
  if (raw_status_ && out_ < 0 && err_ < 0) return decode(*raw_status_);
  const auto begun = std::chrono::steady_clock::now();
  const auto deadline = begun + timeout;
  std::optional<std::chrono::steady_clock::time_point> last_answer;
  while (true) {
    if (!raw_status_) {
      int raw = 0;
      const pid_t done = ::waitpid(pid_, &raw, WNOHANG);
      if (done == pid_) raw_status_ = raw;
    }
    // Daemons the launcher left behind may hold the pipes open: after it exited, drain for a
    // short while only.
    if (out_ < 0 && err_ < 0) {
      if (raw_status_) return decode(*raw_status_);
      std::this_thread::sleep_for(std::min(std::chrono::milliseconds(50), timeout));
    } else {
      pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
      const int wait_ms = raw_status_ ? 200 : 50;
      const int ready = ::poll(fds, 2, wait_ms);
      if (ready > 0) {
        if (out_ >= 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
          relay(out_, STDOUT_FILENO);
        if (err_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
          relay(err_, STDERR_FILENO);
      } else if (ready == 0 && raw_status_) {
        close_pipes();  // the launcher is gone and nothing more came
        return decode(*raw_status_);
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
  }
}

int LaunchedJob::terminate(std::chrono::milliseconds grace) {
  if (!raw_status_) ::kill(-pid_, SIGTERM);
  if (const auto status = wait_for(grace)) return *status;
  ::kill(-pid_, SIGKILL);
  while (true)
    if (const auto status = wait_for(std::chrono::milliseconds(1000))) return *status;
}

std::string LaunchedJob::how() const {
  if (!raw_status_) return "still running";
  if (WIFEXITED(*raw_status_)) return fmt::format("exit status {}", WEXITSTATUS(*raw_status_));
  const int signal = WTERMSIG(*raw_status_);
  return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
}

std::vector<std::optional<std::string>> run_on_hosts(const std::vector<std::string>& command,
                                                     const std::vector<std::string>& hosts,
                                                     std::chrono::milliseconds timeout,
                                                     const std::vector<bool>& settled,
                                                     std::chrono::milliseconds answer_grace) {
  std::vector<std::optional<std::string>> verdicts(hosts.size());
  std::vector<pid_t> children(hosts.size(), -1);
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    std::vector<std::string> argv = command;
    for (auto& word : argv)
      for (std::size_t at; (at = word.find("{host}")) != std::string::npos;)
        word.replace(at, 6, hosts[i]);
    try {
      children[i] = spawn(argv, null, null);
    } catch (const Error& e) {
      verdicts[i] = e.what();
    }
  }
  if (null >= 0) ::close(null);
  const auto begun = std::chrono::steady_clock::now();
  const auto deadline = begun + timeout;
  std::optional<std::chrono::steady_clock::time_point> last_answer;
  const auto is_settled = [&](std::size_t i) { return i < settled.size() && settled[i]; };
  std::size_t pending = 0, pending_unsettled = 0;
  for (std::size_t i = 0; i < hosts.size(); ++i)
    if (children[i] > 0) {
      ++pending;
      if (!is_settled(i)) ++pending_unsettled;
    }
  bool gave_up_early = false, outwaited = false;
  while (pending > 0 && std::chrono::steady_clock::now() < deadline) {
    if (pending_unsettled == 0) {
      gave_up_early = true;
      break;
    }
    if (answer_grace.count() > 0 && last_answer &&
        std::chrono::steady_clock::now() - *last_answer >
            std::max<std::chrono::steady_clock::duration>(answer_grace, *last_answer - begun)) {
      outwaited = true;
      break;
    }
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      int raw = 0;
      if (children[i] <= 0 || ::waitpid(children[i], &raw, WNOHANG) != children[i]) continue;
      children[i] = -1;
      last_answer = std::chrono::steady_clock::now();
      --pending;
      if (!is_settled(i)) --pending_unsettled;
      if (decode(raw) != 0)
        verdicts[i] = fmt::format("`{}` failed ({})", fmt::join(command, " "),
                                  WIFEXITED(raw) ? fmt::format("exit status {}", WEXITSTATUS(raw))
                                                 : fmt::format("signal {}", WTERMSIG(raw)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (children[i] <= 0) continue;
    ::kill(-children[i], SIGKILL);
    int raw = 0;
    ::waitpid(children[i], &raw, 0);
    const auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - begun);
    verdicts[i] =
        gave_up_early ? fmt::format("no answer to `{}` by the time the other hosts had answered",
                                    fmt::join(command, " "))
        : outwaited   ? fmt::format(
                            "no answer to `{}` within {:.2f} s; the other hosts answered within "
                              "{:.2f} s",
                            fmt::join(command, " "), waited.count(),
                            std::chrono::duration<double>(*last_answer - begun).count())
                    : fmt::format("no answer to `{}` within {:.1f} s", fmt::join(command, " "),
                                  static_cast<double>(timeout.count()) / 1000.0);
  }
  return verdicts;
}

}  // namespace hardy::resilience
