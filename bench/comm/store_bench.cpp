// The rendezvous store of fault domains (docs/resilience.md, "Membership and the store"),
// measured the way the protocol uses it, for each candidate:
//   file-disk:  gloo's FileStore in a directory on the local disk (a stand-in for the run
//               directory; a parallel file system's metadata server is slower than any disk);
//   file-tmpfs: the same in /dev/shm, the best a file system can do;
//   redis:      gloo's RedisStore on a private redis-server on loopback, started here;
//   etcd:       with --etcd, a private etcd; leaders reach it through its v3 HTTP/JSON gateway
//               from a client written here, since gloo has no etcd store (only the poll and the
//               publication are measured; a gloo group cannot connect through it).
// For L leaders, each a separate process (fork: a thread would share the connection and the
// file descriptors a real leader owns alone):
//   poll:   every leader looks for an absent key (`gen.<g+1>.members`) once per simulated step,
//           all at the same time; median and p99 of one look;
//   switch: a supervisor publishes `gen.<g>.members` while every leader waits for it (wait_for);
//           each then writes `ready.<g>.<d>`, polls until it has seen every ready key, and all
//           connect a gloo group through the store (connect_gloo_group). Per round: the time
//           from the publication until the last leader saw it, had seen all ready keys, and was
//           connected; median over the rounds.
// Before each store and L it waits until the TCP sockets that earlier gloo connects left in
// TIME_WAIT have expired (they slow down connect() for whoever runs next).
// Writes bench/results/store-<date>.json (or --output) and prints a markdown table.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/bench_support.hpp"
#include "etcd_gateway.hpp"
#include "hardy/comm/gloo/communicator.hpp"
#include "hardy/comm/rendezvous/redis_server.hpp"
#include "hardy/comm/rendezvous/store.hpp"

using namespace hardy;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kUsage = R"(usage: hardy_store_bench [options]
  --leaders LIST          leader processes, comma-separated (default 4,16,64)
  --stores LIST           from file-disk,file-tmpfs,redis,etcd (default all but etcd)
  --etcd                  add etcd (needs etcd on PATH)
  --polls N               looks per leader for the poll (default 200)
  --step-ms MS            simulated step between two looks (default 10)
  --rounds N              generation switches per store and L (default 7)
  --disk-dir DIR          where file-disk's directories go (default /var/tmp)
  --output FILE           (default bench/results/store-<date>.json)
)";

struct Options {
  std::vector<int> leaders{4, 16, 64};
  std::vector<std::string> stores{"file-disk", "file-tmpfs", "redis"};
  bool etcd = false;
  int polls = 200;
  int step_ms = 10;
  int rounds = 7;
  fs::path disk_dir = "/var/tmp";
  fs::path output;
};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// What the leaders and the supervisor share, in memory mapped before the fork. Clock readings
// are steady_clock's, which is CLOCK_MONOTONIC: one clock for every process on the machine.
struct Shared {
  std::atomic<int> start_polls{0};
  std::atomic<int> polls_done{0};
  std::atomic<int> failures{0};
  static constexpr int kMaxRounds = 64;
  std::atomic<int> waiting[kMaxRounds]{};    // per round: leaders inside wait_for
  std::atomic<int> connected[kMaxRounds]{};  // per round: leaders connected
  std::int64_t set_ns[kMaxRounds]{};
};

// The per-leader arrays, after Shared in the same mapping.
struct Layout {
  int leaders, polls, rounds;
  std::size_t poll_offset() const { return sizeof(Shared); }
  std::size_t rounds_offset() const {
    return poll_offset() + sizeof(double) * static_cast<std::size_t>(leaders * polls);
  }
  std::size_t bytes() const {
    return rounds_offset() + 3 * sizeof(std::int64_t) * static_cast<std::size_t>(leaders * rounds);
  }
};

class SharedMemory {
 public:
  explicit SharedMemory(const Layout& layout) : layout_(layout) {
    base_ =
        ::mmap(nullptr, layout.bytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base_ == MAP_FAILED)
      throw std::runtime_error(fmt::format("mmap of {} bytes failed", layout.bytes()));
    new (base_) Shared();
  }
  ~SharedMemory() { ::munmap(base_, layout_.bytes()); }
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  Shared& shared() { return *static_cast<Shared*>(base_); }
  double& poll_us(int leader, int i) {
    return at<double>(layout_.poll_offset())[leader * layout_.polls + i];
  }
  // what: 0 saw the generation, 1 saw every ready key, 2 connected.
  std::int64_t& stamp(int what, int round, int leader) {
    return at<std::int64_t>(
        layout_.rounds_offset())[(what * layout_.rounds + round) * layout_.leaders + leader];
  }

 private:
  template <typename T>
  T* at(std::size_t offset) {
    return reinterpret_cast<T*>(static_cast<char*>(base_) + offset);
  }
  Layout layout_;
  void* base_;
};

void spin_until(const std::atomic<int>& value, int target) {
  while (value.load() < target) std::this_thread::sleep_for(200us);
}

// One candidate: how each process opens its own connection to it, and whether gloo groups can
// connect through it.
struct Candidate {
  std::string name;
  std::string where;
  std::function<std::unique_ptr<comm::RendezvousStore>()> open;
  bool connects_groups = true;
};

std::string members_of(int leaders) {
  std::string text;
  for (int d = 0; d < leaders; ++d) text += fmt::format("{}{}", d ? "," : "", d);
  return text;
}

// One leader, in its own process.
void lead(const Candidate& candidate, SharedMemory& memory, const Options& options, int me,
          int leaders) {
  auto store = candidate.open();
  Shared& shared = memory.shared();
  spin_until(shared.start_polls, 1);
  for (int i = 0; i < options.polls; ++i) {
    const auto before = Clock::now();
    if (store->try_get("gen.1.members"))
      throw std::runtime_error("gen.1.members is set before the supervisor published it");
    memory.poll_us(me, i) =
        std::chrono::duration<double, std::micro>(Clock::now() - before).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(options.step_ms));
  }
  shared.polls_done.fetch_add(1);
  for (int round = 0; round < options.rounds; ++round) {
    const int generation = round + 1;
    shared.waiting[round].fetch_add(1);
    const auto members = store->wait_for(fmt::format("gen.{}.members", generation), 120s);
    if (!members)
      throw std::runtime_error(fmt::format("generation {} was never published", generation));
    if (*members != members_of(leaders))
      throw std::runtime_error(fmt::format("generation {} reads '{}'", generation, *members));
    memory.stamp(0, round, me) = now_ns();
    store->set(fmt::format("ready.{}.{}", generation, me), "1");
    std::set<int> unseen;
    for (int d = 0; d < leaders; ++d) unseen.insert(d);
    const auto deadline = Clock::now() + 120s;
    while (!unseen.empty()) {
      for (auto d = unseen.begin(); d != unseen.end();)
        d = store->try_get(fmt::format("ready.{}.{}", generation, *d)) ? unseen.erase(d)
                                                                       : std::next(d);
      if (unseen.empty()) break;
      if (Clock::now() > deadline) throw std::runtime_error("ready keys missing after 120 s");
      std::this_thread::sleep_for(5ms);  // wait_for's pace
    }
    memory.stamp(1, round, me) = now_ns();
    std::unique_ptr<comm::Communicator> group;
    if (candidate.connects_groups)
      group = comm::connect_gloo_group(*store, {.prefix = fmt::format("gen{}", generation),
                                                .rank = me,
                                                .size = leaders,
                                                .address = "127.0.0.1",
                                                .timeout = 120s,
                                                .connect_timeout = 120s});
    memory.stamp(2, round, me) = now_ns();
    shared.connected[round].fetch_add(1);
    // Closing before everyone has connected would fail a peer still connecting.
    spin_until(shared.connected[round], leaders);
  }
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(index, values.size() - 1)];
}

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }

// Runs L leaders against one candidate and returns its figures.
nlohmann::json measure(const Candidate& candidate, int leaders, const Options& options) {
  const Layout layout{leaders, options.polls, options.rounds};
  SharedMemory memory(layout);
  Shared& shared = memory.shared();
  auto supervisor = candidate.open();
  std::vector<pid_t> children;
  for (int me = 0; me < leaders; ++me) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error(fmt::format("fork failed: {}", std::strerror(errno)));
    if (pid == 0) {
      int status = 0;
      try {
        lead(candidate, memory, options, me, leaders);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "leader %d of %d (%s): %s\n", me, leaders, candidate.name.c_str(),
                     e.what());
        shared.failures.fetch_add(1);
        status = 1;
      }
      std::fflush(stderr);
      std::_Exit(status);
    }
    children.push_back(pid);
  }
  // Every child is waited for on every way out: a failed measurement must not leave leaders.
  struct Reaper {
    std::vector<pid_t>& children;
    ~Reaper() {
      for (pid_t child : children) {
        int raw = 0;
        if (::waitpid(child, &raw, WNOHANG) == 0) ::kill(child, SIGKILL);
        ::waitpid(child, &raw, 0);
      }
    }
  } reaper{children};
  auto check_leaders = [&] {
    if (shared.failures.load() > 0)
      throw std::runtime_error(
          fmt::format("{} leader(s) failed against {}", shared.failures.load(), candidate.name));
  };
  auto await = [&](const std::atomic<int>& value, int target) {
    const auto deadline = Clock::now() + 300s;
    while (value.load() < target) {
      check_leaders();
      if (Clock::now() > deadline) throw std::runtime_error("leaders stuck for 300 s");
      std::this_thread::sleep_for(200us);
    }
  };

  shared.start_polls.store(1);
  await(shared.polls_done, leaders);
  std::vector<double> polls;
  for (int d = 0; d < leaders; ++d)
    for (int i = 0; i < options.polls; ++i) polls.push_back(memory.poll_us(d, i));

  std::mt19937 random(12345);
  // The supervisor publishes at a random moment of the leaders' look-and-sleep cycle.
  std::uniform_int_distribution<int> phase_us(0, 5000);
  const std::string members = members_of(leaders);
  for (int round = 0; round < options.rounds; ++round) {
    await(shared.waiting[round], leaders);
    std::this_thread::sleep_for(std::chrono::microseconds(20'000 + phase_us(random)));
    shared.set_ns[round] = now_ns();
    supervisor->set(fmt::format("gen.{}.members", round + 1), members);
    await(shared.connected[round], leaders);
  }
  check_leaders();

  std::vector<double> seen_each, seen_all, ready_all, connected_all;
  for (int round = 0; round < options.rounds; ++round) {
    const std::int64_t set = shared.set_ns[round];
    std::int64_t last[3] = {0, 0, 0};
    for (int d = 0; d < leaders; ++d) {
      seen_each.push_back(ms(memory.stamp(0, round, d) - set));
      for (int what = 0; what < 3; ++what)
        last[what] = std::max(last[what], memory.stamp(what, round, d) - set);
    }
    seen_all.push_back(ms(last[0]));
    ready_all.push_back(ms(last[1]));
    connected_all.push_back(ms(last[2]));
  }
  nlohmann::json result = {
      {"store", candidate.name},
      {"where", candidate.where},
      {"leaders", leaders},
      {"poll_us",
       {{"median", percentile(polls, 0.5)},
        {"p99", percentile(polls, 0.99)},
        {"max", percentile(polls, 1.0)},
        {"samples", polls.size()}}},
      {"switch_ms",
       {{"seen_each_median", bench::median(seen_each)},
        {"seen_each_p99", percentile(seen_each, 0.99)},
        {"all_seen_median", bench::median(seen_all)},
        {"all_ready_median", bench::median(ready_all)},
        {"all_connected_median", candidate.connects_groups
                                     ? nlohmann::json(bench::median(connected_all))
                                     : nlohmann::json(nullptr)},
        {"all_connected_rounds",
         candidate.connects_groups ? nlohmann::json(connected_all) : nlohmann::json(nullptr)}}}};
  return result;
}

// Sockets in TIME_WAIT on this machine (IPv4 and IPv6). Each gloo connect of 64 leaders leaves
// 2,016 of them for a minute, and connect() slows down as they pile up, so a configuration that
// ran after another would pay for its predecessor's connections.
int sockets_in_time_wait() {
  int count = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state == "06") ++count;
    }
  }
  return count;
}

// Waits (up to two TIME_WAIT periods) until earlier configurations' sockets have expired.
int drain_time_wait(int at_most) {
  const auto deadline = Clock::now() + 130s;
  int left = sockets_in_time_wait();
  if (left > at_most)
    std::fprintf(stderr, "  waiting for %d sockets in TIME_WAIT to expire...\n", left);
  while (left > at_most && Clock::now() < deadline) {
    std::this_thread::sleep_for(1s);
    left = sockets_in_time_wait();
  }
  return left;
}

std::string read_first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string command_output(const char* command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command, "r"), ::pclose);
  if (!pipe) return {};
  char buffer[256] = {};
  std::string text = std::fgets(buffer, sizeof buffer, pipe.get()) ? buffer : "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

nlohmann::json machine() {
  utsname name{};
  ::uname(&name);
  return {{"hostname", name.nodename},
          {"kernel", name.release},
          {"cpu", cpu_model()},
          {"cpus_online", std::thread::hardware_concurrency()},
          {"git_commit", command_output("git describe --always --dirty --abbrev=40 2>/dev/null")},
          {"redis_server", command_output("redis-server --version 2>/dev/null")},
          {"etcd", command_output("etcd --version 2>/dev/null")}};
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[16];
  std::strftime(text, sizeof text, "%Y-%m-%d", &utc);
  return text;
}

// A directory removed with everything in it on every way out.
class ScratchDirectory {
 public:
  explicit ScratchDirectory(fs::path path) : path_(std::move(path)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  ScratchDirectory(const ScratchDirectory&) = delete;
  ScratchDirectory& operator=(const ScratchDirectory&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void print_table(const nlohmann::json& results) {
  std::printf(
      "\n| store | L | poll median (us) | poll p99 (us) | each saw gen (median ms) | all saw gen "
      "(ms) | all ready (ms) | all connected (ms) |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : results) {
    const auto& s = r["switch_ms"];
    std::printf("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %s |\n",
                r["store"].get<std::string>().c_str(), r["leaders"].get<int>(),
                r["poll_us"]["median"].get<double>(), r["poll_us"]["p99"].get<double>(),
                s["seen_each_median"].get<double>(), s["all_seen_median"].get<double>(),
                s["all_ready_median"].get<double>(),
                s["all_connected_median"].is_null()
                    ? "n/a"
                    : fmt::format("{:.1f}", s["all_connected_median"].get<double>()).c_str());
  }
}

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> words;
  while (!text.empty()) {
    const auto comma = text.find(',');
    words.emplace_back(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return words;
}

Options parse(int argc, char** argv) {
  const bench::Command command{"hardy_store_bench", kUsage};
  Options options;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::fputs(kUsage, stdout);
        std::exit(0);
      }
      if (flag == "--etcd") {
        options.etcd = true;
        continue;
      }
      if (i + 1 >= argc) bench::usage_error(command, fmt::format("{} needs a value", flag));
      const std::string_view value = argv[++i];
      if (flag == "--leaders")
        options.leaders = bench::parse_rates(flag, value);
      else if (flag == "--stores")
        options.stores = split(value);
      else if (flag == "--polls")
        options.polls = bench::parse_number<int>(flag, value);
      else if (flag == "--step-ms")
        options.step_ms = bench::parse_number<int>(flag, value);
      else if (flag == "--rounds")
        options.rounds = bench::parse_number<int>(flag, value);
      else if (flag == "--disk-dir")
        options.disk_dir = value;
      else if (flag == "--output")
        options.output = value;
      else
        bench::usage_error(command, fmt::format("unknown option {}", flag));
    }
  } catch (const bench::UsageError& e) {
    bench::usage_error(command, e.what());
  }
  if (options.etcd &&
      std::find(options.stores.begin(), options.stores.end(), "etcd") == options.stores.end())
    options.stores.push_back("etcd");
  for (int leaders : options.leaders)
    if (leaders < 1) bench::usage_error(command, "--leaders: at least 1 each");
  // Shared holds a fixed number of per-round counters.
  if (options.rounds < 1 || options.rounds > Shared::kMaxRounds)
    bench::usage_error(command, fmt::format("--rounds must be 1..{}", +Shared::kMaxRounds));
  if (options.polls < 1) bench::usage_error(command, "--polls must be at least 1");
  for (const auto& store : options.stores)
    if (store != "file-disk" && store != "file-tmpfs" && store != "redis" && store != "etcd")
      bench::usage_error(command, fmt::format("unknown store {}", store));
  if (options.output.empty())
    options.output = fs::path("bench/results") / ("store-" + today() + ".json");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  // A leader that dies mid-request must not take the supervisor with it.
  ::signal(SIGPIPE, SIG_IGN);
  try {
    const std::string run = fmt::format("hardy-store-bench-{}", ::getpid());
    nlohmann::json results = nlohmann::json::array();
    const std::string load_before = read_first_line("/proc/loadavg");
    for (const auto& store : options.stores) {
      for (int leaders : options.leaders) {
        const int time_wait = drain_time_wait(200);
        std::fprintf(stderr, "%s, %d leaders...\n", store.c_str(), leaders);
        if (store == "file-disk" || store == "file-tmpfs") {
          const fs::path base = store == "file-disk" ? options.disk_dir : fs::path("/dev/shm");
          ScratchDirectory scratch(base / run);
          const fs::path directory = scratch.path() / "rendezvous";
          results.push_back(
              measure({.name = store,
                       .where = directory.string(),
                       .open = [directory] { return comm::open_file_store(directory); }},
                      leaders, options));
        } else if (store == "redis") {
          ScratchDirectory scratch(fs::temp_directory_path() / run);
          comm::RedisServer server({.directory = scratch.path()});
          const std::string host = server.host();
          const int port = server.port();
          results.push_back(
              measure({.name = store,
                       .where = fmt::format("redis-server on {}:{}", host, port),
                       .open = [host, port] { return comm::open_redis_store(host, port); }},
                      leaders, options));
        } else {
          ScratchDirectory scratch(options.disk_dir / run);
          bench::EtcdServer server(scratch.path());
          const int port = server.port();
          results.push_back(measure({.name = store,
                                     .where = fmt::format("etcd on 127.0.0.1:{}, HTTP/JSON", port),
                                     .open = [port] { return bench::open_etcd_gateway(port); },
                                     .connects_groups = false},
                                    leaders, options));
        }
        results.back()["time_wait_sockets_before"] = time_wait;
      }
    }
    const nlohmann::json report = {{"machine", machine()},
                                   {"load_before", load_before},
                                   {"load_after", read_first_line("/proc/loadavg")},
                                   {"params",
                                    {{"leaders", options.leaders},
                                     {"polls_per_leader", options.polls},
                                     {"step_ms", options.step_ms},
                                     {"rounds", options.rounds},
                                     {"disk_dir", options.disk_dir.string()},
                                     {"wait_for_sleep_ms", 5},
                                     {"gloo_store_wait_sleep_ms", 10}}},
                                   {"results", results}};
    fs::create_directories(options.output.parent_path().empty() ? "."
                                                                : options.output.parent_path());
    std::ofstream(options.output) << report.dump(2) << "\n";
    print_table(results);
    std::printf("\nload average before: %s; after: %s\nwritten to %s\n", load_before.c_str(),
                report["load_after"].get<std::string>().c_str(), options.output.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hardy_store_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
