// hardy's launchers (jobs/launchers.hpp): the command line each builds around the program, how
// each asks one node whether it answers, the launch agent split as Open MPI splits plm_ssh_agent,
// the hosts a launcher's output reports lost, and where Open MPI keeps its session directories.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/private_tree.hpp"
#include "hardy/core/support/process_info.hpp"
#include "hardy/jobs/launchers.hpp"

using hardy::jobs::launch_agent_argv;
using hardy::jobs::launcher_traits;
using hardy::jobs::make_launcher;
using hardy::resilience::LauncherSettings;

namespace {

using Args = std::vector<std::string>;

constexpr const char* kLauncherNames[] = {"mpirun", "mpiexec", "srun", "jsrun"};

const Args kProgram{"/bin/hardy", "train", "--steps", "9"};
const Args kRemote{"n0", "n1", "n2"};

LauncherSettings settings_for(const std::string& name) {
  LauncherSettings settings;
  settings.executable = "/opt/" + name;
  return settings;
}

Args joined(Args head, const Args& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// Open MPI refuses to run as root without it; the tests may run as either.
Args as_root_if_root() { return ::geteuid() == 0 ? Args{"--allow-run-as-root"} : Args{}; }

}  // namespace

TEST_CASE("launchers by name", "[launcher]") {
  for (const char* name : kLauncherNames) CHECK(make_launcher(name, {}, "")->name() == name);
  CHECK(launcher_traits("mpirun").starts_mpi_runtime);
  CHECK(launcher_traits("mpirun").offers_ulfm);
  CHECK(launcher_traits("mpiexec").starts_mpi_runtime);
  CHECK_FALSE(launcher_traits("mpiexec").offers_ulfm);
  CHECK_FALSE(launcher_traits("srun").starts_mpi_runtime);
  CHECK_FALSE(launcher_traits("jsrun").starts_mpi_runtime);
  CHECK_THROWS_MATCHES(
      make_launcher("pbs", {}, ""), hardy::InvalidArgument,
      Catch::Message("unknown launcher 'pbs' (choose mpirun, mpiexec, srun or jsrun)"));
  CHECK_THROWS_AS(launcher_traits("pbs"), hardy::InvalidArgument);
}

TEST_CASE("each launcher's command line on this host", "[launcher]") {
  const Args local{"localhost", "localhost"};
  auto settings = settings_for("mpirun");
  settings.extra_args = {"--extra", "x"};
  CHECK(make_launcher("mpirun", settings, "")->command(local, 2, kProgram) ==
        joined(joined({"/opt/mpirun", "-n", "4", "--oversubscribe", "--bind-to", "none"},
                      as_root_if_root()),
               joined({"--extra", "x"}, kProgram)));
  CHECK(make_launcher("mpiexec", settings_for("mpiexec"), "")->command(local, 2, kProgram) ==
        joined({"/opt/mpiexec", "-n", "4"}, kProgram));
  CHECK(make_launcher("srun", settings_for("srun"), "slurm")->command(local, 2, kProgram) ==
        joined({"/opt/srun", "--ntasks", "4", "--ntasks-per-node", "2", "--kill-on-bad-exit=1",
                "--overlap"},
               kProgram));
}

TEST_CASE("each launcher's command line on other nodes", "[launcher]") {
  SECTION("Open MPI: ULFM, its detectors, the launch agent, and srun's --overlap under Slurm") {
    auto settings = settings_for("mpirun");
    settings.ulfm = true;
    settings.detection.heartbeat_timeout_s = 2.5;
    settings.launch_agent = "ssh -x";
    CHECK(make_launcher("mpirun", settings, "slurm")->command(kRemote, 2, kProgram) ==
          joined(joined({"/opt/mpirun",
                         "-n",
                         "6",
                         "--with-ft",
                         "ulfm",
                         "--mca",
                         "mpi_preconnect_mpi",
                         "1",
                         "--mca",
                         "mpi_ft_detector",
                         "true",
                         "--mca",
                         "mpi_ft_detector_thread",
                         "true",
                         "--mca",
                         "mpi_ft_detector_period",
                         "0.25",
                         "--mca",
                         "mpi_ft_detector_timeout",
                         "2.5",
                         "--host",
                         "n0:2,n1:2,n2:2",
                         "--prtemca",
                         "oob_tcp_keepalive_time",
                         "1",
                         "--prtemca",
                         "oob_tcp_keepalive_intvl",
                         "1",
                         "--prtemca",
                         "oob_tcp_keepalive_probes",
                         "3",
                         "--prtemca",
                         "plm_ssh_agent",
                         "ssh -x",
                         "--prtemca",
                         "plm_slurm_args",
                         "--overlap"},
                        as_root_if_root()),
                 kProgram));
    // Without ULFM its detector is not asked for; keepalive 0 leaves the runtime's own.
    settings.ulfm = false;
    settings.launch_agent.clear();
    settings.detection.keepalive_time_s = 0;
    CHECK(make_launcher("mpirun", settings, "lsf")->command(kRemote, 1, kProgram) ==
          joined(joined({"/opt/mpirun", "-n", "3", "--host", "n0:1,n1:1,n2:1"}, as_root_if_root()),
                 kProgram));
  }
  SECTION("MPICH's hydra") {
    auto settings = settings_for("mpiexec");
    settings.launch_agent = "ssh -x";
    CHECK(make_launcher("mpiexec", settings, "")->command(kRemote, 2, kProgram) ==
          joined({"/opt/mpiexec", "-n", "6", "-hosts", "n0,n1,n2", "-ppn", "2", "-launcher", "ssh",
                  "-launcher-exec", "ssh -x"},
                 kProgram));
  }
  SECTION("srun") {
    CHECK(make_launcher("srun", settings_for("srun"), "slurm")->command(kRemote, 2, kProgram) ==
          joined({"/opt/srun", "--ntasks", "6", "--ntasks-per-node", "2", "--kill-on-bad-exit=1",
                  "--overlap", "--nodelist", "n0,n1,n2", "--nodes", "3"},
                 kProgram));
  }
  SECTION("srun: a rank's cores and GPUs, which srun no longer takes from the allocation") {
    auto settings = settings_for("srun");
    settings.cpus_per_rank = 7;
    settings.gpus_per_rank = 1;
    CHECK(make_launcher("srun", settings, "slurm")->command(kRemote, 2, kProgram) ==
          joined({"/opt/srun", "--ntasks", "6", "--ntasks-per-node", "2", "--kill-on-bad-exit=1",
                  "--overlap", "--cpus-per-task=7", "--gpus-per-task=1", "--nodelist", "n0,n1,n2",
                  "--nodes", "3"},
                 kProgram));
  }
  SECTION("jsrun: one resource set per rank") {
    CHECK(make_launcher("jsrun", settings_for("jsrun"), "lsf")->command(kRemote, 2, kProgram) ==
          joined({"/opt/jsrun", "--nrs", "6", "--tasks_per_rs", "1", "--rs_per_host", "2"},
                 kProgram));
    // Without --cpu_per_rs and --gpu_per_rs a resource set has one core and no GPU.
    auto settings = settings_for("jsrun");
    settings.cpus_per_rank = 7;
    settings.gpus_per_rank = 1;
    CHECK(make_launcher("jsrun", settings, "lsf")->command(kRemote, 6, kProgram) ==
          joined({"/opt/jsrun", "--nrs", "18", "--tasks_per_rs", "1", "--rs_per_host", "6",
                  "--cpu_per_rs", "7", "--gpu_per_rs", "1"},
                 kProgram));
  }
}

TEST_CASE("each launcher's way to ask one node whether it answers", "[launcher]") {
  const Args ssh{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "{host}", "true"};
  const Args srun{"srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist={host}", "true"};
  for (const char* name : kLauncherNames) {
    INFO(name);
    // This host alone: nothing to ask.
    CHECK(make_launcher(name, settings_for(name), "slurm")
              ->probe_command({"localhost", "localhost"}, 5)
              .empty());
  }
  CHECK(make_launcher("mpirun", settings_for("mpirun"), "")->probe_command(kRemote, 5) == ssh);
  CHECK(make_launcher("mpiexec", settings_for("mpiexec"), "lsf")->probe_command(kRemote, 5.9) ==
        ssh);
  // ssh waits whole seconds, at least one.
  CHECK(make_launcher("mpirun", settings_for("mpirun"), "")->probe_command(kRemote, 0.5)[4] ==
        "ConnectTimeout=1");
  // Inside a Slurm allocation the nodes need not run sshd: srun reaches them.
  CHECK(make_launcher("mpirun", settings_for("mpirun"), "slurm")->probe_command(kRemote, 5) ==
        srun);
  CHECK(make_launcher("jsrun", settings_for("jsrun"), "slurm")->probe_command(kRemote, 5) == srun);
  // srun probes with itself, wherever it is.
  CHECK(make_launcher("srun", settings_for("srun"), "")->probe_command(kRemote, 5) ==
        Args{"/opt/srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist={host}", "true"});
  // jsrun cannot aim at one host: LSF's health checks decide.
  CHECK(make_launcher("jsrun", settings_for("jsrun"), "lsf")->probe_command(kRemote, 5).empty());
}

TEST_CASE("each launcher's way to run a program on one node", "[launcher]") {
  const Args program{"/opt/hardy", "clean", "--node-local"};
  for (const char* name : kLauncherNames) {
    INFO(name);
    // This host alone: the program runs here.
    CHECK(make_launcher(name, settings_for(name), "")->node_command({"localhost"}, 5, program) ==
          program);
  }
  CHECK(make_launcher("mpirun", settings_for("mpirun"), "")->node_command(kRemote, 30, program) ==
        Args{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "{host}", "/opt/hardy",
             "clean", "--node-local"});
  CHECK(make_launcher("mpiexec", settings_for("mpiexec"), "slurm")
            ->node_command(kRemote, 30, program) == Args{"srun", "--overlap", "--nodes=1",
                                                         "--ntasks=1", "--nodelist={host}",
                                                         "/opt/hardy", "clean", "--node-local"});
  LauncherSettings settings;
  settings.launch_agent = "/bin/sh -x";
  CHECK(make_launcher("mpirun", settings, "")->node_command({"n0", "n1"}, 5, program) ==
        Args{"/bin/sh", "-x", "{host}", "/opt/hardy", "clean", "--node-local"});
  // jsrun cannot aim at one host.
  CHECK(make_launcher("jsrun", settings_for("jsrun"), "lsf")
            ->node_command(kRemote, 5, program)
            .empty());
}

TEST_CASE("a launch agent with arguments is a program and its arguments", "[launcher]") {
  CHECK(launch_agent_argv("ssh -x") == Args{"ssh", "-x"});
  CHECK(launch_agent_argv("  ssh\t-x  -q ") == Args{"ssh", "-x", "-q"});
  CHECK(launch_agent_argv("").empty());
  CHECK(launch_agent_argv(" : ").empty());
  // Alternatives: the first found, as a path or on PATH; none found, the first.
  CHECK(launch_agent_argv("/nonexistent/agent -a : sh -c") == Args{"sh", "-c"});
  CHECK(launch_agent_argv("/nonexistent/agent -a : /also/missing") ==
        Args{"/nonexistent/agent", "-a"});

  LauncherSettings settings;
  settings.launch_agent = "/bin/sh -x";
  CHECK(make_launcher("mpirun", settings, "")->probe_command({"n0", "n1"}, 5) ==
        Args{"/bin/sh", "-x", "{host}", "true"});
  // The launch agent is the launch path, inside a Slurm allocation too.
  CHECK(make_launcher("mpiexec", settings, "slurm")->probe_command({"n0", "n1"}, 5) ==
        Args{"/bin/sh", "-x", "{host}", "true"});
}

TEST_CASE("the nodes the launcher reports lost", "[relaunch]") {
  // Every launcher reads every runtime's messages: they come from whatever started the processes.
  for (const char* name : kLauncherNames) {
    INFO(name);
    const auto launcher = make_launcher(name, {}, "");
    const auto hosts_reported_lost = [&](std::string_view output) {
      return launcher->hosts_reported_lost(output);
    };
    const std::string prrte =
        R"(--------------------------------------------------------------------------
PRTE has lost communication with a remote daemon.

  HNP daemon   : [prterun-vm-12345@0,0] on node vm
  Remote daemon: [prterun-vm-12345@0,3] on node hdy-node2

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------
)";
    CHECK(hosts_reported_lost(prrte) == std::vector<std::string>{"hdy-node2"});
    CHECK(hosts_reported_lost("srun: error: Node failure on nid0007\n"
                              "srun: error: nid0003: task 5: Killed\n"
                              "srun: error: nid0003: tasks 6-7: Killed\n") ==
          std::vector<std::string>{"nid0007", "nid0003"});
    const std::string unstarted = R"(A daemon failed to report back after being spawned.

  Local host:    vm
  Remote host:   hdy-node2
  Daemon exit status: 255
)";
    CHECK(hosts_reported_lost(unstarted) == std::vector<std::string>{"hdy-node2"});
    // Only a daemon that never started is one; a lost one is not (the supervisor keeps a node
    // whose daemon failed to start once).
    CHECK(launcher->hosts_not_started(unstarted) == std::vector<std::string>{"hdy-node2"});
    CHECK(launcher->hosts_not_started(prrte).empty());
    CHECK(
        hosts_reported_lost("step 10/600 | loss 0.5\nRemote daemon: x on node y\nRemote host: z\n")
            .empty());
  }
}

TEST_CASE("Open MPI's session directories go where hardy run puts them", "[launcher]") {
  const Args local{"localhost"};
  auto settings = settings_for("mpirun");
  settings.runtime_dir = "/tmp/hardy-openmpi-7";
  CHECK(make_launcher("mpirun", settings, "")->command(local, 1, kProgram) ==
        joined(joined({"/opt/mpirun", "-n", "1", "--oversubscribe", "--bind-to", "none",
                       "--prtemca", "prte_tmpdir_base", "/tmp/hardy-openmpi-7"},
                      as_root_if_root()),
               kProgram));
  CHECK(launcher_traits("mpirun").keeps_session_dirs);
  for (const char* name : {"mpiexec", "srun", "jsrun"})
    CHECK_FALSE(launcher_traits(name).keeps_session_dirs);
}

namespace {

// A pid whose process is gone: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

struct ScratchDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("hardy-test-runtime-" + std::to_string(::getpid()));
  ScratchDir() {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("what killed launches left in the runtime directory is removed, nothing else",
          "[launcher]") {
  ScratchDir scratch;
  const auto& dir = scratch.path;
  const pid_t gone = dead_pid(), gone_too = dead_pid(), gone_third = dead_pid();
  const auto mkdir = [&](const std::string& name) {
    std::filesystem::create_directories(dir / name / "0");
    std::ofstream(dir / name / "pmix.vm.tool") << "leftover\n";
  };
  mkdir("ompi." + std::to_string(gone));
  mkdir("prted." + std::to_string(gone_too));
  mkdir("ompi." + std::to_string(::getpid()));  // a live launch's
  mkdir("notes");
  mkdir("ompi." + std::to_string(gone) + "x");
  std::ofstream(dir / ("prted." + std::to_string(gone_third))) << "a file, not a session\n";
  // A link named like a leftover, to a directory elsewhere: neither it nor its target goes.
  const auto elsewhere = dir / "elsewhere";
  std::filesystem::create_directories(elsewhere / "keep");
  std::filesystem::create_directory_symlink(elsewhere,
                                            dir / ("ompi." + std::to_string(gone_third)));

  auto removed = hardy::jobs::remove_dead_session_dirs(dir);
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{"ompi." + std::to_string(gone),
                                            "prted." + std::to_string(gone_too)});
  CHECK_FALSE(std::filesystem::exists(dir / ("ompi." + std::to_string(gone))));
  CHECK(std::filesystem::exists(dir / ("ompi." + std::to_string(::getpid())) / "pmix.vm.tool"));
  CHECK(std::filesystem::exists(dir / "notes"));
  CHECK(std::filesystem::exists(dir / ("ompi." + std::to_string(gone) + "x")));
  CHECK(std::filesystem::is_regular_file(dir / ("prted." + std::to_string(gone_third))));
  CHECK(std::filesystem::is_symlink(dir / ("ompi." + std::to_string(gone_third))));
  CHECK(std::filesystem::exists(elsewhere / "keep"));
  // A directory that is not there is nothing to tidy.
  CHECK(hardy::jobs::remove_dead_session_dirs(dir / "missing").empty());
}

// Sets (or, given nullptr, unsets) an environment variable for one scope.
class ScopedEnvironmentVariable {
 public:
  ScopedEnvironmentVariable(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* before = std::getenv(name_.c_str())) before_ = before;
    if (value)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }
  ~ScopedEnvironmentVariable() {
    if (before_)
      ::setenv(name_.c_str(), before_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnvironmentVariable(const ScopedEnvironmentVariable&) = delete;
  ScopedEnvironmentVariable& operator=(const ScopedEnvironmentVariable&) = delete;

 private:
  std::string name_;
  std::optional<std::string> before_;
};

TEST_CASE("hardy run's runtime directory is private to the user, unless one was chosen",
          "[launcher]") {
  ScratchDir scratch;
  // Shared like /tmp: writable by all, with the sticky bit.
  std::filesystem::permissions(scratch.path,
                               std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  ScopedEnvironmentVariable tmpdir("TMPDIR", scratch.path.c_str());
  ScopedEnvironmentVariable base("PRTE_MCA_prte_tmpdir_base", nullptr);
  const auto dir = hardy::jobs::private_runtime_dir();
  CHECK(dir == scratch.path / ("hardy-openmpi-" + std::to_string(::geteuid())));
  struct stat info {};
  REQUIRE(::lstat(dir.c_str(), &info) == 0);
  CHECK(S_ISDIR(info.st_mode));
  CHECK((info.st_mode & 0777) == 0700);
  CHECK(info.st_uid == ::geteuid());
  // A link planted in its place is refused, never followed.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directory_symlink(scratch.path, dir);
  CHECK_THROWS_AS(hardy::jobs::private_runtime_dir(), hardy::core::UnsafeDirectory);
  ::setenv("PRTE_MCA_prte_tmpdir_base", "/somewhere/chosen", 1);
  CHECK(hardy::jobs::private_runtime_dir().empty());
}

TEST_CASE("a rank refuses a runtime directory on its node that another user could change",
          "[launcher]") {
  ScratchDir scratch;
  std::filesystem::permissions(scratch.path,
                               std::filesystem::perms::all | std::filesystem::perms::sticky_bit);
  const auto base = scratch.path / ("hardy-openmpi-" + std::to_string(::geteuid()));
  const auto session = base / "prted.4242";
  std::filesystem::create_directories(session);
  std::filesystem::permissions(base, std::filesystem::perms::owner_all);
  std::filesystem::permissions(session, std::filesystem::perms::owner_all);
  ScopedEnvironmentVariable server_dir("PMIX_SERVER_TMPDIR", session.c_str());
  // As Open MPI creates it on a node that had none: mode 0700, this user's.
  CHECK_NOTHROW(hardy::jobs::check_node_runtime_dir());
  ::setenv("PMIX_SERVER_TMPDIR", (session.string() + "/").c_str(), 1);
  CHECK_NOTHROW(hardy::jobs::check_node_runtime_dir());

  // Made by someone else before the job came (here: writable by all, which Open MPI accepts).
  std::filesystem::permissions(base, std::filesystem::perms::all);
  try {
    hardy::jobs::check_node_runtime_dir();
    FAIL("a world-writable runtime directory passed");
  } catch (const hardy::core::UnsafeDirectory& e) {
    const std::string message = e.what();
    CHECK(message.find(hardy::core::host_name()) != std::string::npos);
    CHECK(message.find(base.string()) != std::string::npos);
    CHECK(message.find("not private to this user") != std::string::npos);
  }
  std::filesystem::permissions(base, std::filesystem::perms::owner_all);
  // The session directory below it counts too.
  std::filesystem::permissions(session, std::filesystem::perms::all);
  CHECK_THROWS_AS(hardy::jobs::check_node_runtime_dir(), hardy::core::UnsafeDirectory);
  std::filesystem::permissions(session, std::filesystem::perms::owner_all);
  // A link in the runtime directory's place is refused, not followed.
  const auto elsewhere = scratch.path / "elsewhere";
  std::filesystem::rename(base, elsewhere);
  std::filesystem::create_directory_symlink(elsewhere, base);
  CHECK_THROWS_AS(hardy::jobs::check_node_runtime_dir(), hardy::core::UnsafeDirectory);

  // Not hardy's directory (Open MPI's default, a scheduler's PMIx, the user's choice): unjudged.
  const auto other = scratch.path / "chosen" / "ompi.4242";
  std::filesystem::create_directories(other);
  std::filesystem::permissions(other.parent_path(), std::filesystem::perms::all);
  ::setenv("PMIX_SERVER_TMPDIR", other.c_str(), 1);
  CHECK_NOTHROW(hardy::jobs::check_node_runtime_dir());
  ::unsetenv("PMIX_SERVER_TMPDIR");
  CHECK_NOTHROW(hardy::jobs::check_node_runtime_dir());
}
