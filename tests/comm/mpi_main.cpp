// Main of hardy_comm_tests: starts MPI once for all test cases (as LBANN's MPI tests do). Run
// it under mpirun; every rank runs the same test cases in the same order, so a test case is a
// sequence of collectives. Tags: [mpi] any launch, [ft] needs `--with-ft ulfm`, [noft] needs
// it off, [kill] kills a rank (hidden: run it alone, see run_kill_test.sh).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "hardy/comm/mpi/communicator.hpp"

int main(int argc, char** argv) {
  hardy::comm::MpiSession mpi(&argc, &argv);
  return Catch::Session().run(argc, argv);
}
