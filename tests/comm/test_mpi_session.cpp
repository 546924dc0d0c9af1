// What MpiSession sets before MPI_Init for a process no launcher started (a singleton): only the
// self transport and ob1 over it, unless a launcher's variables say otherwise or the user chose.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hardy/comm/mpi/communicator.hpp"

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
