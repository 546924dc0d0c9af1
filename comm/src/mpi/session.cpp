#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "broken_sockets.hpp"
#include "hardy/comm/mpi/communicator.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/event_log.hpp"
#include "hardy/core/support/process_info.hpp"

namespace hardy::comm {

namespace {
std::atomic<double> mpi_ready_unix_time{0};

// The process's start (core::process_start_ticks, clock ticks after boot) as Unix time: its age
// on CLOCK_BOOTTIME, taken from now, gives it to a tick; /proc/stat's btime is rounded to whole
// seconds.
double process_started_unix_time() {
  const std::string ticks = core::process_start_ticks(::getpid());
  if (ticks.empty()) return 0;
  timespec since_boot{};
  if (::clock_gettime(CLOCK_BOOTTIME, &since_boot) != 0) return 0;
  const double age = static_cast<double>(since_boot.tv_sec) + since_boot.tv_nsec * 1e-9 -
                     std::stod(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
  return core::unix_time() - age;
}
}  // namespace

std::vector<std::pair<std::string, std::string>> singleton_mpi_settings(
    const std::function<const char*(const char*)>& lookup) {
  const auto set = [&](const char* name) {
    const char* value = lookup(name);
    return value != nullptr && *value != '\0';
  };
  // What the launchers give each process they start: Open MPI's mpirun and prterun (PMIx and
  // OMPI_COMM_WORLD_*), srun --mpi=pmix (PMIx) and --mpi=pmi2 (PMI).
  for (const char* launched :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMIX_NAMESPACE", "PMI_RANK", "PMI_FD"})
    if (set(launched)) return {};
  std::vector<std::pair<std::string, std::string>> settings;
  for (const auto& [name, value] : {std::pair{"OMPI_MCA_btl", "self"}, {"OMPI_MCA_pml", "ob1"}})
    if (!set(name)) settings.emplace_back(name, value);
  return settings;
}

bool fabric_device_present(const std::filesystem::path& root) {
  std::error_code error;
  if (std::filesystem::directory_iterator(root / "sys/class/infiniband", error) !=
      std::filesystem::directory_iterator())
    return true;  // an entry: a device
  for (const auto& entry : std::filesystem::directory_iterator(root / "dev", error))
    if (entry.path().filename().string().starts_with("cxi")) return true;
  return false;
}

std::optional<std::string> btl_list_without_ofi(std::string_view chosen) {
  if (chosen.empty()) return "^ofi";
  if (!chosen.starts_with('^')) return std::nullopt;
  // Open MPI's lists are comma-separated component names.
  for (std::size_t at = 1; at <= chosen.size();) {
    const std::size_t end = std::min(chosen.find(',', at), chosen.size());
    if (chosen.substr(at, end - at) == "ofi") return std::nullopt;
    at = end + 1;
  }
  return std::string(chosen) + ",ofi";
}

namespace {

#if defined(OPEN_MPI)
// On a node without a fabric device, leaves btl/ofi out of Open MPI's btl list and chooses
// pml/ob1 (fabric_device_present says why), each when nobody chose it, through the MPI tool
// interface, which sees the environment and the parameter files alike and may set a control
// variable before MPI_Init. It stays initialized until after MPI_Init: Open MPI 5.0.11's MPI_Init
// crashes (in opal_common_ucx_support_level) after an MPI_T_finalize. A failure here only leaves
// Open MPI's own choice.
class FabricFreeDefaults {
 public:
  FabricFreeDefaults() {
    if (fabric_device_present()) return;
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return;
    initialized_ = true;
    if (chosen("pml").empty()) write("pml", "ob1");
    if (!chosen("opal_common_ofi_provider_include").empty()) return;
    if (const auto list = btl_list_without_ofi(chosen("btl"))) write("btl", *list);
  }
  ~FabricFreeDefaults() {
    if (initialized_) MPI_T_finalize();
  }

  // A string control variable's value from whatever source set it, "" when unset or unknown
  // (a provider list the user gave btl/ofi is a choice of it too).
  static std::string chosen(const char* name) {
    int index = 0;
    MPI_T_cvar_handle handle{};
    int count = 0;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS)
      return "";
    std::string value(static_cast<std::size_t>(std::max(count, 0)) + 1, '\0');
    if (MPI_T_cvar_read(handle, value.data()) != MPI_SUCCESS) value.clear();
    MPI_T_cvar_handle_free(&handle);
    return value.c_str();  // up to its terminator
  }
  FabricFreeDefaults(const FabricFreeDefaults&) = delete;
  FabricFreeDefaults& operator=(const FabricFreeDefaults&) = delete;

 private:
  static void write(const char* name, const std::string& value) {
    int index = 0;
    MPI_T_cvar_handle handle{};
    int count = 0;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS)
      return;
    MPI_T_cvar_write(handle, value.c_str());
    MPI_T_cvar_handle_free(&handle);
  }

  bool initialized_ = false;
};
#endif

}  // namespace

StartupTimes startup_times() {
  static const double process_started = process_started_unix_time();
  return {process_started, mpi_ready_unix_time.load()};
}

MpiSession::MpiSession(int* argc, char*** argv, Threads threads) {
  int initialized = 0;
  mpi_check(MPI_Initialized(&initialized), "MPI_Initialized");
  if (initialized) return;
#if HARDY_HAVE_ULFM && defined(OPEN_MPI)
  // coll/han (hierarchical collectives) is not fault tolerant in Open MPI 5.0: when a second
  // rank dies during a recovery, survivors segfault in mca_coll_han_comm_create while the
  // shrunken communicator is built (one random-fault soak run in six); tuned's collectives
  // recover. Only under `--with-ft ulfm` (which exports mpi_ft_enable), and only when the user
  // has not chosen the collective components himself. Set here, not on the launch line, so that
  // every launch path (hardy run, mpirun, srun) gets it.
  if (const char* ft = std::getenv("OMPI_MCA_mpi_ft_enable"); ft && std::string_view(ft) == "1")
    ::setenv("OMPI_MCA_coll", "^han", /*overwrite=*/0);
#endif
#if defined(OPEN_MPI)
  for (const auto& [name, value] : singleton_mpi_settings(&std::getenv))
    ::setenv(name.c_str(), value.c_str(), /*overwrite=*/0);
#endif
  const int required = threads == Threads::funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_SERIALIZED;
  int provided = MPI_THREAD_SINGLE;
  {
#if defined(OPEN_MPI)
    const FabricFreeDefaults fabric_free;  // after the settings above: MPI_T reads them once
#endif
    mpi_check(MPI_Init_thread(argc, argv, required, &provided), "MPI_Init_thread");
  }
  owned_ = true;
  mpi_ready_unix_time.store(core::unix_time());
  // Open MPI's TCP transport writes without MSG_NOSIGNAL: a survivor that sent to a rank the
  // hang monitor had just killed died of SIGPIPE, one rank in three of cluster/rank_stop's runs.
  survive_broken_sockets("MPI");
  // Errors on MPI_COMM_WORLD (and on communicators derived from it later) are returned to
  // mpi_check rather than aborting the job.
  mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  if (provided < required) {
    MPI_Finalize();
    owned_ = false;
    throw hardy::Error("MPI_Init_thread: the MPI library provides thread level " +
                       std::to_string(provided) + ", hardy needs " + std::to_string(required));
  }
}

namespace {
std::atomic<bool> peers_failed{false};
}  // namespace

void note_peer_failure() { peers_failed.store(true); }

void abort_job(int status) {
  int initialized = 0, finalized = 1;
  if (MPI_Initialized(&initialized) == MPI_SUCCESS && initialized &&
      MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized)
    MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort should not return; without MPI there is nobody else to end
}

MpiSession::~MpiSession() {
  // After a peer died, Open MPI 5's MPI_Finalize can wait forever in a PMIx fence that still
  // counts the dead process (open-mpi/ompi#11404). Survivors have finished their work and
  // flushed their files by now, so they leave without it; ULFM's launcher accepts that.
  if (peers_failed.load()) return;
  int finalized = 1;
  if (owned_ && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Finalize();
}

}  // namespace hardy::comm
