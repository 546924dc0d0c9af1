#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "hardy/resilience/run_identity.hpp"
#include "scratch_directory.hpp"

using namespace hardy;
using namespace hardy::resilience;
using hardy::testing::ScratchDirectory;
namespace fs = std::filesystem;

namespace {

std::string identity_of(const TrainingConfig& config, std::size_t samples = 100) {
  return config_hash(resume_identity(config, core::SampleShape{16, 32, 32}, samples));
}

}  // namespace

TEST_CASE("run identity: a run directory gets one random id, kept from then on") {
  ScratchDirectory scratch("run-id");
  const std::string id = ensure_run_id(scratch.path());
  CHECK(id.size() == 32);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(fs::is_regular_file(scratch / kRunIdFile));
  CHECK(ensure_run_id(scratch.path()) == id);
  // No temporary left behind.
  CHECK(std::distance(fs::directory_iterator(scratch.path()), fs::directory_iterator()) == 1);

  ScratchDirectory other("run-id-other");
  CHECK(ensure_run_id(other.path()) != id);
}

TEST_CASE("run identity: jobs creating the id at once agree on one") {
  ScratchDirectory scratch("run-id-race");
  std::vector<std::string> ids(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ids.size(); ++i)
    threads.emplace_back([&, i] { ids[i] = ensure_run_id(scratch.path()); });
  for (auto& thread : threads) thread.join();
  CHECK(std::set<std::string>(ids.begin(), ids.end()).size() == 1);
}

TEST_CASE("run identity: a run_id file that holds something else is named as bad input") {
  ScratchDirectory scratch("run-id-bad");
  std::ofstream(scratch / kRunIdFile) << "not an id\n";
  try {
    ensure_run_id(scratch.path());
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK_THAT(e.what(),
               Catch::Contains((scratch / kRunIdFile).string()) && Catch::Contains("not a run id"));
  }
}

TEST_CASE("run identity: the hash follows the model, optimizer and dataset, not the schedule") {
  TrainingConfig config;
  const std::string base = identity_of(config);
  CHECK(base.size() == 16);
  TrainingConfig changed = config;
  changed.model.width = 32;
  CHECK(identity_of(changed) != base);
  changed = config;
  changed.optimizer.kind = core::OptimizerKind::adam;
  CHECK(identity_of(changed) != base);
  changed = config;
  changed.data.seed = 2;  // another synthetic dataset
  CHECK(identity_of(changed) != base);
  changed = config;
  changed.data.synthetic = false;
  changed.data.dataset = "/data/deepcam";
  CHECK(identity_of(changed) != base);
  CHECK(identity_of(config, 101) != base);  // the training split's size
  CHECK(config_hash(resume_identity(config, core::SampleShape{16, 64, 32}, 100)) != base);
  // What a resumed run may change.
  changed = config;
  changed.steps = 1000;
  changed.global_batch = 64;
  changed.seed = 7;
  changed.schedule.base_lr = 0.5f;
  changed.run_dir = "/elsewhere";
  CHECK(identity_of(changed) == base);
}

TEST_CASE("run identity: which saved states a run restores") {
  const RunIdentity mine{.run_id = "0123456789abcdef0123456789abcdef",
                         .config_hash = "00000000000000aa",
                         .launch = "0000000000000001"};
  checkpoint::TrainingState state;
  state.run_id = mine.run_id;
  state.config_hash = mine.config_hash;
  CHECK_FALSE(snapshot_mismatch(state, mine));
  CHECK_FALSE(config_mismatch(state, mine));
  CHECK_FALSE(is_foreign(state, mine));

  state.config_hash = "00000000000000bb";
  REQUIRE(snapshot_mismatch(state, mine));
  CHECK_THAT(*snapshot_mismatch(state, mine), Catch::Contains("another configuration"));
  CHECK(config_mismatch(state, mine));

  state.config_hash = mine.config_hash;
  state.run_id = "ffffffffffffffffffffffffffffffff";
  REQUIRE(snapshot_mismatch(state, mine));
  CHECK_THAT(*snapshot_mismatch(state, mine), Catch::Contains(state.run_id));
  CHECK_FALSE(config_mismatch(state, mine));  // a fork of a fitting checkpoint is fine
  CHECK(is_foreign(state, mine));

  // Written before run ids: never a snapshot of this run, still a checkpoint that may fit.
  const checkpoint::TrainingState old;
  REQUIRE(snapshot_mismatch(old, mine));
  CHECK_THAT(*snapshot_mismatch(old, mine), Catch::Contains("no run id"));
  CHECK_FALSE(config_mismatch(old, mine));
  CHECK(is_foreign(old, mine));
}
