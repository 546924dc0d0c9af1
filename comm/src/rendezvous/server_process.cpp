#include "hardy/comm/rendezvous/server_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "hardy/core/support/error.hpp"
#include "rendezvous/socket.hpp"

namespace hardy::comm {

using namespace std::chrono_literals;

ServerProcess::ServerProcess(const std::vector<std::string>& command, std::filesystem::path log,
                             const std::function<bool(pid_t)>& ready,
                             std::chrono::milliseconds timeout)
    : log_(std::move(log)) {
  const std::string context = fmt::format("cannot start `{}`", fmt::join(command, " "));
  std::vector<char*> argv;
  for (const auto& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  const int out = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  check_posix(out >= 0, "open", fmt::format("{}: its log {}", context, log_.string()));
  pid_ = ::fork();
  if (pid_ == 0) {
    // A test or job killed with SIGKILL must not leave its server running.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot execute %s: %s\n", argv[0], std::strerror(errno));
    std::_Exit(127);
  }
  const int saved = errno;
  ::close(out);
  errno = saved;
  check_posix(pid_ > 0, "fork", context);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int raw = 0;
    if (::waitpid(pid_, &raw, WNOHANG) == pid_) {
      pid_ = -1;
      throw IoError(fmt::format("{}: it exited with status {} before serving; its log ends:\n{}",
                                context, WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw),
                                log_tail()));
    }
    if (ready(pid_)) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      stop();
      throw IoError(fmt::format("{}: not serving after {} ms; its log ends:\n{}", context,
                                timeout.count(), log_tail()));
    }
    std::this_thread::sleep_for(10ms);
  }
}

ServerProcess::~ServerProcess() { stop(); }

void ServerProcess::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int raw = 0;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (::waitpid(pid_, &raw, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(5ms);
  }
  pid_ = -1;
}

std::string ServerProcess::log_tail() const {
  std::ifstream in(log_);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  const std::size_t first = lines.size() > 10 ? lines.size() - 10 : 0;
  std::string tail;
  for (std::size_t i = first; i < lines.size(); ++i) tail += lines[i] + "\n";
  return tail.empty() ? "(empty)\n" : tail;
}

int ServerProcess::free_port(const std::string& address) {
  const std::string context = fmt::format("cannot find a free port on {}", address);
  Socket probe(context);
  sockaddr_in where = ipv4(address, 0);
  check_posix(::bind(probe.fd(), reinterpret_cast<sockaddr*>(&where), sizeof where) == 0, "bind",
              context);
  socklen_t length = sizeof where;
  check_posix(::getsockname(probe.fd(), reinterpret_cast<sockaddr*>(&where), &length) == 0,
              "getsockname", context);
  return ntohs(where.sin_port);
}

std::optional<std::filesystem::path> ServerProcess::find(const std::string& executable) {
  if (executable.find('/') != std::string::npos)
    return ::access(executable.c_str(), X_OK) == 0 ? std::optional(executable) : std::nullopt;
  const char* path = std::getenv("PATH");
  std::istringstream directories(path ? path : "/usr/bin:/bin");
  for (std::string directory; std::getline(directories, directory, ':');) {
    const auto candidate = std::filesystem::path(directory.empty() ? "." : directory) / executable;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

}  // namespace hardy::comm
