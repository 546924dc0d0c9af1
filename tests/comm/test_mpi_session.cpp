// What MpiSession sets before MPI_Init for a process no launcher started (a singleton): only the
// self transport and ob1 over it, unless a launcher's variables say otherwise or the user chose.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hardy/comm/mpi/communicator.hpp"
#include "scratch_directory.hpp"

using hardy::comm::singleton_mpi_settings;
using Settings = std::vector<std::pair<std::string, std::string>>;

namespace {

Settings settings_in(const std::map<std::string, std::string>& environment) {
  return singleton_mpi_settings([&](const char* name) -> const char* {
    const auto found = environment.find(name);
    return found == environment.end() ? nullptr : found->second.c_str();
  });
}

}  // namespace

TEST_CASE("mpi session: a singleton reaches only itself, over the self transport") {
  CHECK(settings_in({}) == Settings{{"OMPI_MCA_btl", "self"}, {"OMPI_MCA_pml", "ob1"}});
  // Inside a batch allocation but started by hand: still a world of one.
  CHECK(settings_in({{"SLURM_JOB_ID", "42"}, {"LSB_JOBID", "7"}}).size() == 2);
  // An empty variable is not a launcher's.
  CHECK(settings_in({{"PMIX_RANK", ""}}).size() == 2);
}

TEST_CASE("mpi session: a launched rank keeps every transport") {
  for (const char* launched :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMIX_NAMESPACE", "PMI_RANK", "PMI_FD"}) {
    INFO(launched);
    CHECK(settings_in({{launched, "0"}}).empty());
  }
}

TEST_CASE("mpi session: the user's own transport choice stands") {
  CHECK(settings_in({{"OMPI_MCA_btl", "self,tcp"}}) == Settings{{"OMPI_MCA_pml", "ob1"}});
  CHECK(settings_in({{"OMPI_MCA_pml", "ucx"}}) == Settings{{"OMPI_MCA_btl", "self"}});
  CHECK(settings_in({{"OMPI_MCA_btl", "tcp,self"}, {"OMPI_MCA_pml", "cm"}}).empty());
}

TEST_CASE("mpi session: a fabric device is an RDMA device or a Slingshot NIC") {
  hardy::testing::ScratchDirectory root("fabric");
  const auto& r = root.path();
  std::filesystem::create_directories(r / "dev");
  std::filesystem::create_directories(r / "sys/class/infiniband");
  std::ofstream(r / "dev/null").put('\n');
  CHECK_FALSE(hardy::comm::fabric_device_present(r));  // a TCP node: ethernet only
  std::filesystem::create_directories(r / "sys/class/infiniband/mlx5_0");
  CHECK(hardy::comm::fabric_device_present(r));
  std::filesystem::remove(r / "sys/class/infiniband/mlx5_0");
  std::ofstream(r / "dev/cxi0").put('\n');
  CHECK(hardy::comm::fabric_device_present(r));
  CHECK_FALSE(hardy::comm::fabric_device_present(r / "no-such-root"));
}

TEST_CASE("mpi session: btl/ofi is left out of an unchosen list or a list of exclusions") {
  using hardy::comm::btl_list_without_ofi;
  CHECK(btl_list_without_ofi("") == "^ofi");
  CHECK(btl_list_without_ofi("^usnic") == "^usnic,ofi");  // mpirun --with-ft ulfm's
  CHECK(btl_list_without_ofi("^usnic,tcp") == "^usnic,tcp,ofi");
  CHECK_FALSE(btl_list_without_ofi("^ofi"));
  CHECK_FALSE(btl_list_without_ofi("^tcp,ofi"));
  CHECK(btl_list_without_ofi("^ofix") == "^ofix,ofi");  // another component's name
  CHECK_FALSE(btl_list_without_ofi("self,tcp"));        // the btls named are the btls used
  CHECK_FALSE(btl_list_without_ofi("self,ofi"));
}
