#include "hardy/batch/command.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "hardy/core/support/error.hpp"

extern char** environ;

namespace hardy::batch {

namespace {

class Pipe {
 public:
  Pipe() {
    // Close-on-exec: only the ends dup2'ed onto 0, 1 and 2 reach the child.
    if (pipe2(fds_.data(), O_CLOEXEC) != 0)
      throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  int read_end() const { return fds_[0]; }
  int write_end() const { return fds_[1]; }
  void close_read() { close_fd(fds_[0]); }
  void close_write() { close_fd(fds_[1]); }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  std::array<int, 2> fds_{-1, -1};
};

// Writing to a child that exited without reading its input raises SIGPIPE, which would kill
// hardy; blocked for this thread, the write fails with EPIPE instead, and a pending SIGPIPE is
// consumed before the mask is restored.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeBlocked() {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_{}, previous_{};
};

pid_t spawn(const std::vector<std::string>& argv, const Pipe& in, const Pipe& out,
            const Pipe& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in.read_end(), STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out.write_end(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err.write_end(), STDERR_FILENO);
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int failed = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (failed != 0)
    throw Error(fmt::format("{}: {}", argv[0],
                            failed == ENOENT ? "not found on PATH" : std::strerror(failed)));
  return pid;
}

}  // namespace

CommandResult run_command(const std::vector<std::string>& argv, std::string_view input) {
  if (argv.empty()) throw InvalidArgument("run_command: no program given");
  Pipe in, out, err;
  const pid_t pid = spawn(argv, in, out, err);
  in.close_read();
  out.close_write();
  err.close_write();
  if (input.empty()) in.close_write();

  const SigpipeBlocked no_sigpipe;
  CommandResult result;
  std::size_t written = 0;
  std::array<char, 4096> buffer{};
  while (out.read_end() >= 0 || err.read_end() >= 0) {
    std::array<pollfd, 3> watch = {pollfd{out.read_end(), POLLIN, 0},
                                   pollfd{err.read_end(), POLLIN, 0},
                                   pollfd{in.write_end(), POLLOUT, 0}};
    if (poll(watch.data(), watch.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("poll: {}", std::strerror(errno)));
    }
    if (watch[2].revents != 0) {
      const ssize_t n = ::write(in.write_end(), input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if (n < 0 || written == input.size()) in.close_write();  // done, or the child stopped reading
    }
    for (int i = 0; i < 2; ++i) {
      if (watch[i].revents == 0) continue;
      const ssize_t n = ::read(watch[i].fd, buffer.data(), buffer.size());
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buffer.data(), static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        i == 0 ? out.close_read() : err.close_read();
      }
    }
  }
  in.close_write();
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string first_line(const CommandResult& result) {
  const std::string& text =
      result.err.find_first_not_of(" \n") != std::string::npos ? result.err : result.out;
  const auto start = text.find_first_not_of(" \n");
  if (start == std::string::npos) return fmt::format("exit status {}", result.status);
  return text.substr(start, text.find('\n', start) - start);
}

}  // namespace hardy::batch
