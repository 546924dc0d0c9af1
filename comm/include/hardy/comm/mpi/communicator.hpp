#pragma once
// Communicator over MPI (C API). Errors are returned, never fatal (MPI_ERRORS_RETURN), and every
// MPI call's status goes through mpi_check().
#include <mpi.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hardy/comm/communicator.hpp"

namespace hardy::comm {

// The one place MPI status codes become exceptions: MPI_SUCCESS returns; process failures and
// revoked communicators (ULFM's MPIX_ERR_PROC_FAILED, _PROC_FAILED_PENDING, _REVOKED) throw
// ProcessFailure; anything else throws hardy::Error. Messages name the call and carry
// MPI_Error_string. With comm given, ProcessFailure lists the ranks of comm known to have failed.
void mpi_check(int code, const char* call, MPI_Comm comm = MPI_COMM_NULL);

// The Open MPI settings (environment variable, value) for a process that no launcher started, a
// singleton: a world of one, with no peer to reach. Only the self transport, and ob1 over it
// (which also leaves out btl/ofi, whose second is below: 1.15 s against 0.01 s on the 2-core CI
// machine). Empty for a process that mpirun/prterun or srun (PMIx or PMI-2) started; a variable
// the user set is left out, so his choice stands. `lookup` reads the environment (std::getenv for
// MpiSession).
std::vector<std::pair<std::string, std::string>> singleton_mpi_settings(
    const std::function<const char*(const char*)>& lookup);

// Whether the node under `root` has a device that a libfabric provider drives: an InfiniBand,
// RoCE, Omni-Path or EFA device (ROOT/sys/class/infiniband/*) or an HPE Slingshot NIC
// (ROOT/dev/cxi*). Without one, Open MPI's btl/ofi has nothing to use: it gives up in MPI_Init and
// sleeps a second as it closes (Open MPI 5.0's workaround for libfabric's sockets provider,
// ofiwg/libfabric#4225), which every rank of every launch pays on a TCP cluster or a cloud VM.
// So MpiSession leaves btl/ofi out of the btl list there (btl_list_without_ofi), unless the user
// or the site named the btls to use or chose btl/ofi's providers (in the environment or an
// mca-params.conf: MPI_T reads every source). For the same reason it chooses pml/ob1 there,
// unless a pml was chosen: Open MPI 5.0 first tries pml/cm (whose mtl/ofi fails to start) and
// pml/ucx, which decline on such a node after starting their libraries, and settles on ob1;
// the tries took half of MPI_Init's CPU time (50 of 105 ms a rank, 2026-11-30), which a node of
// an eighth of a CPU, as the goodput bench's, pays 0.4 s on every launch.
bool fabric_device_present(const std::filesystem::path& root = "/");
// The btl list that leaves ofi out, given the list chosen so far (`chosen`: Open MPI's "btl"
// parameter from any source, "" when nobody chose): "^ofi" for none, ofi added to a list of
// exclusions (mpirun --with-ft ulfm sets "^usnic"), nothing for a list of inclusions (ofi is in
// only where it is named, and then it was chosen) or one that excludes ofi already.
std::optional<std::string> btl_list_without_ofi(std::string_view chosen);

// Initializes MPI for the lifetime of the object and finalizes it afterwards, unless MPI was
// already initialized by someone else. Construct one in main(), before any communicator. Under
// Open MPI a singleton gets singleton_mpi_settings() first, and a node without a fabric device
// a btl list without ofi and pml/ob1 (fabric_device_present).
class MpiSession {
 public:
  enum class Threads { funneled, serialized };  // only the main thread / one at a time calls MPI
  MpiSession(int* argc, char*** argv, Threads threads = Threads::funneled);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owned_ = false;
};

// When this process began (the kernel's record, so it counts loading the program and its
// libraries) and when its MpiSession finished MPI_Init_thread, as Unix times: what a launch of
// many ranks costs, phase by phase (bench/cluster/scale_bench.py). mpi_ready is 0 before an
// MpiSession initialized MPI, process_started 0 where /proc cannot tell.
struct StartupTimes {
  double process_started = 0;
  double mpi_ready = 0;
};
StartupTimes startup_times();

// Tells the MpiSession that peers of this process died, so that it must not call MPI_Finalize
// (which can hang on the dead peers in Open MPI 5; see mpi_session.cpp). mpi_check calls it
// whenever it raises ProcessFailure.
void note_peer_failure();

// Ends every process of the job now with `status` (MPI_Abort on MPI_COMM_WORLD, which the
// launcher turns into the job's exit status), for a fatal error that the other ranks may not
// know of: finalizing instead would leave them waiting in their next collective. Without MPI
// (never initialized, or already finalized) it ends this process only.
[[noreturn]] void abort_job(int status);

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD itself (not freed on destruction), with its error handler set to return.
  static std::unique_ptr<MpiCommunicator> world();
  // Wraps comm; frees it on destruction when owned.
  MpiCommunicator(MPI_Comm comm, bool owned);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  MPI_Comm handle() const { return comm_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(std::span<float> data) override;
  void allreduce_sum(std::span<double> data) override;
  void allreduce(std::span<std::int64_t> data, ReduceOp op) override;
  std::vector<std::int64_t> allgather(std::int64_t value) override;
  std::unique_ptr<Request> iallreduce_sum(std::span<float> data) override;
  std::unique_ptr<Request> ireduce_sum(std::span<float> data, int root) override;
  void broadcast(std::span<std::byte> data, int root) override;
  std::unique_ptr<Request> ibroadcast(std::span<std::byte> data, int root) override;
  std::unique_ptr<Request> iallgather_blocks(std::span<const std::byte> mine,
                                             std::span<std::byte> all) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  std::vector<std::string> hostnames() override;

  bool fault_tolerant() const override { return fault_tolerant_; }
  void revoke() override;
  int agree(int flag) override;
  std::vector<int> failed_ranks() override;
  Survivors shrink() override;

 private:
  void require_fault_tolerance(const char* operation) const;
  void check_root(int root, const char* call) const;
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0;
  int size_ = 0;
  bool fault_tolerant_ = false;
};

// Whether this process runs with ULFM enabled: built with it, and Open MPI's predefined MPI_FT
// attribute on MPI_COMM_WORLD is true (it is while `mpirun --with-ft ulfm` sets
// mpi_ft_enable). MPI must be initialized.
bool ulfm_enabled();

}  // namespace hardy::comm
