// FaultDomains in one process: every domain a thread with a one-rank communicator, its leader's
// gloo group on loopback, the rendezvous store in a scratch directory and the test playing the
// supervisor (it publishes the generations). A domain fails on demand by leaving: its group's
// connections close, as when its MPI job dies. What is checked is what the job relies on: every
// live domain gets the same verdict and the same summed gradients, a lost domain makes the
// others drop the step in flight together and go on, and a relaunched domain is let in at a step
// boundary and healed to the others' committed state.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "domains/domain_store.hpp"
#include "domains/fault_domains.hpp"
#include "hardy/comm/rendezvous/store.hpp"
#include "hardy/comm/self_communicator.hpp"
#include "hardy/resilience/events.hpp"
#include "in_process_world.hpp"
#include "scratch_directory.hpp"

using namespace hardy;
using namespace hardy::resilience;
using namespace std::chrono_literals;

namespace {

// What every domain of these tests runs with: loopback, and timeouts short enough for a test.
DomainOptions test_options(int index, int count, const std::filesystem::path& store,
                           std::string join = {},
                           DomainExchange exchange = DomainExchange::leader) {
  return {.index = index,
          .count = count,
          .store = store,
          .address = "127.0.0.1",
          .timeout_s = 2,
          .membership_timeout_s = 20,
          .join_token = std::move(join),
          .exchange = exchange};
}

// One domain of one rank: its communicator, its committed "state" (a step and a tensor standing
// for the model) and its leader's FaultDomains.
struct Domain {
  Domain(int index, int count, const std::filesystem::path& store, std::string join = {},
         const std::filesystem::path& events_file = {})
      : comm(std::make_unique<comm::SelfCommunicator>()),
        events(events_file.empty() ? core::EventLog(hardy::resilience::event_kinds())
                                   : core::EventLog(events_file, hardy::resilience::event_kinds())),
        gradient(core::Tensor::host({4})),
        domains(test_options(index, count, store, std::move(join)), comm, events) {
    committed_state.step = 0;
  }

  DomainStateAccess access() {
    return {.committed = [this]() -> const checkpoint::TrainingState& { return committed_state; },
            .restore_in_domain =
                [this](checkpoint::TrainingState& state) {
                  committed_state = state;
                  ++heals;
                },
            .committed_step = [this] { return committed_state.step; },
            .persisted = [this]() -> std::optional<DomainStateAccess::Persisted> {
              if (!on_disk) return std::nullopt;
              return DomainStateAccess::Persisted{*on_disk, on_disk_source, "file", 0.0};
            },
            .committed_lines = [this] { return lines; },
            .adopt_lines = [this](const std::string& text) { adopted = text; }};
  }

  // The step's exchange with this domain's gradient `value` (sent times `weight`); on commit the
  // state moves on.
  DomainStep step(float value, float weight = 1) {
    std::ranges::fill(gradient.f32(), value);
    core::Tensor* gradients[] = {&gradient};
    const float weights[] = {weight};
    const long next = committed_state.step + 1;
    DomainStep outcome = domains.exchange(next, gradients, value, 0, access(), weights);
    if (outcome.verdict == StepVerdict::commit) {
      committed_state.step = next;
      summed.push_back(gradient.f32()[0]);
    }
    return outcome;
  }

  std::unique_ptr<comm::Communicator> comm;
  core::EventLog events;  // not opened unless a file is given: emits go nowhere
  core::Tensor gradient;
  checkpoint::TrainingState committed_state;
  std::optional<checkpoint::TrainingState> on_disk;  // the newest state the leader can read
  std::string on_disk_source = "checkpoint";         // ... and where from
  std::vector<float> summed;                         // the gradient sum of every committed step
  int heals = 0;
  std::string lines;    // this domain's log lines of its committed step
  std::string adopted;  // the lines a resync handed it
  FaultDomains domains;
};

// A job of `count` domains that started and took one step, every domain on its own thread as in
// a job, domain d adding `first_gradient(d)`; the test plays the supervisor through `supervisor`.
struct StartedJob {
  StartedJob(const std::string& name, int count, const std::function<float(int)>& first_gradient)
      : scratch(name),
        store_dir(scratch.path() / "store"),
        supervisor(comm::open_file_store(store_dir)) {
    std::vector<int> members(static_cast<std::size_t>(count));
    std::iota(members.begin(), members.end(), 0);
    supervisor->set(rendezvous_keys::members(0), format_members(members));
    for (int d = 0; d < count; ++d)
      domains.push_back(std::make_unique<Domain>(d, count, store_dir, "", events_file(d)));
    std::vector<std::future<DomainStep>> running;
    for (int d = 0; d < count; ++d)
      running.push_back(std::async(std::launch::async, [&, d] {
        auto& domain = *domains[static_cast<std::size_t>(d)];
        domain.domains.start(domain.access());
        return domain.step(first_gradient(d));
      }));
    for (auto& r : running) first.push_back(r.get());
  }

  // Every domain committed the first step.
  void check_first_committed() const {
    for (const DomainStep& outcome : first) CHECK(outcome.verdict == StepVerdict::commit);
  }

  // Domain `lost` of a job of 2 comes back as the supervisor relaunches it: once the survivor
  // reports its failed exchange, generation 1 lets the relaunched domain in, which starts (and
  // heals). The survivor's next step runs meanwhile.
  std::future<std::unique_ptr<Domain>> relaunch(int lost) {
    return std::async(std::launch::async, [this, lost] {
      REQUIRE(
          supervisor->wait_for(rendezvous_keys::failure(0, 1 - lost), std::chrono::seconds(20)));
      supervisor->set(rendezvous_keys::members(1), "0,1");
      supervisor->set(rendezvous_keys::admit(lost, "1"), "1");
      auto domain = std::make_unique<Domain>(lost, 2, store_dir, "1");
      domain->domains.start(domain->access());
      return domain;
    });
  }

  std::filesystem::path events_file(int domain) const {
    return scratch.path() / fmt::format("events-{}.jsonl", domain);
  }
  // The events domain d's leader logged, by name.
  std::vector<nlohmann::json> events(int domain, const std::string& name) const {
    std::vector<nlohmann::json> found;
    std::ifstream in(events_file(domain));
    for (std::string line; std::getline(in, line);)
      if (auto event = nlohmann::json::parse(line); event.value("event", "") == name)
        found.push_back(std::move(event));
    return found;
  }

  hardy::testing::ScratchDirectory scratch;
  std::filesystem::path store_dir;
  std::unique_ptr<comm::RendezvousStore> supervisor;
  std::vector<std::unique_ptr<Domain>> domains;
  std::vector<DomainStep> first;  // each domain's first step
};

}  // namespace

namespace {

// Every domain that held state was lost; both come back at once (generation 1 lets both in),
// each with what `prepare(index, domain)` gives it to read, and start.
std::vector<std::unique_ptr<Domain>> start_relaunched_alone(
    const std::filesystem::path& store_dir, const std::function<void(int, Domain&)>& prepare) {
  auto supervisor = comm::open_file_store(store_dir);
  supervisor->set(rendezvous_keys::members(1), "0,1");
  std::vector<std::unique_ptr<Domain>> domains;
  for (int d = 0; d < 2; ++d) {
    domains.push_back(std::make_unique<Domain>(d, 2, store_dir, "1"));
    supervisor->set(rendezvous_keys::admit(d, "1"), "1");
    prepare(d, *domains.back());
  }
  std::vector<std::future<void>> running;
  for (auto& domain : domains)
    running.push_back(
        std::async(std::launch::async, [&domain] { domain->domains.start(domain->access()); }));
  for (auto& r : running) r.get();
  return domains;
}

}  // namespace

TEST_CASE(
    "fault domains: relaunched domains alone go on from the newest checkpoint, or the start") {
  for (const bool checkpoint : {true, false}) {
    hardy::testing::ScratchDirectory scratch("persisted");
    auto domains = start_relaunched_alone(scratch.path() / "store", [&](int, Domain& domain) {
      if (!checkpoint) return;
      domain.on_disk.emplace();
      domain.on_disk->step = 40;
    });
    for (const auto& domain : domains) {
      CHECK(domain->committed_state.step == (checkpoint ? 40 : 0));
      CHECK(domain->heals == (checkpoint ? 1 : 0));
    }
    // And they train on together.
    auto first = std::async(std::launch::async, [&] { return domains[0]->step(1); });
    CHECK(domains[1]->step(2).verdict == StepVerdict::commit);
    CHECK(first.get().verdict == StepVerdict::commit);
    CHECK(domains[0]->summed == std::vector<float>{3.0f});
  }
}

TEST_CASE("fault domains: relaunched domains alone go on from the newest state any one reads") {
  // Domain 0 reads the run directory's checkpoint of step 40, domain 1 its node's snapshot of
  // step 57 (the default snapshots, newer than any checkpoint): both go on from step 57, which
  // domain 1 sends; with no checkpoint at all, the snapshot all the same. Before, each took the
  // run directory's alone (a 4-domain job went back from step 2,335 to the start).
  for (const bool checkpoint : {true, false}) {
    hardy::testing::ScratchDirectory scratch("newest-persisted");
    auto domains = start_relaunched_alone(scratch.path() / "store", [&](int d, Domain& domain) {
      if (d == 0 && !checkpoint) return;
      domain.on_disk.emplace();
      domain.on_disk->step = d == 0 ? 40 : 57;
      if (d == 1) domain.on_disk_source = "node-local";
    });
    for (const auto& domain : domains) {
      CHECK(domain->committed_state.step == 57);
      CHECK(domain->heals == 1);
    }
  }
}

TEST_CASE("fault domains: a joiner and a member regrouping after a failed step meet alike") {
  // Domain 0 is lost; domain 1's next exchange fails and it regroups. The generation it finds
  // already lets a relaunched domain 0 back in (the survivor waited out its peer while the
  // supervisor relaunched it): the joiner resyncs from its start, the member from its failed
  // step. Both must run the same collectives (gloo aborted the process when they did not).
  StartedJob job("joiner-meets-regroup", 2, [](int d) { return static_cast<float>(d + 1); });
  // Members by name, not a structured binding: clang before 16 (the sanitizer builds)
  // cannot capture one in a lambda.
  auto& domains = job.domains;
  domains[0].reset();
  auto joiner = job.relaunch(0);
  const DomainStep regrouped = domains[1]->step(5);
  domains[0] = joiner.get();
  CHECK(regrouped.verdict == StepVerdict::rewind);
  CHECK(domains[0]->heals == 1);
  CHECK(domains[0]->committed_state.step == 1);
  // Both train on together.
  auto step0 = std::async(std::launch::async, [&] { return domains[0]->step(1); });
  CHECK(domains[1]->step(2).verdict == StepVerdict::commit);
  CHECK(step0.get().verdict == StepVerdict::commit);
  CHECK(domains[0]->summed.back() == 3.0f);
}

TEST_CASE(
    "fault domains: a joiner takes the agreed step's log lines from the member it heals from") {
  // The domain that wrote the run directory's files (0) dies after a step's vote and before
  // logging it; it is relaunched and let in before the survivor notices. The joiner writes the
  // run files again, and never computed that step: the lines come with the heal, or the step
  // would be missing from metrics.jsonl and the audit (found by the soak).
  StartedJob job("joiner-lines", 2, [](int d) { return static_cast<float>(d + 1); });
  auto& domains = job.domains;
  domains[1]->lines = R"({"metrics":{"step":1}})";
  domains[0].reset();
  auto joiner = job.relaunch(0);
  CHECK(domains[1]->step(5).verdict == StepVerdict::rewind);
  domains[0] = joiner.get();
  CHECK(domains[0]->heals == 1);
  CHECK(domains[0]->adopted == domains[1]->lines);
}

TEST_CASE("fault domains: weights apply to what is sent, never to the live tensors") {
  StartedJob job("weights", 2, [](int) { return 1.0f; });
  auto& domains = job.domains;
  // Each domain's state weighted by its share: the sum is the average.
  auto first = std::async(std::launch::async, [&] { return domains[0]->step(8, 0.25f); });
  const DomainStep second = domains[1]->step(4, 0.5f);
  CHECK(first.get().verdict == StepVerdict::commit);
  CHECK(second.verdict == StepVerdict::commit);
  CHECK(domains[0]->summed.back() == 4.0f);
  CHECK(domains[1]->summed.back() == 4.0f);
  // Domain 0 lost a rank in the next step and votes against it: domain 1 drops the step, and its
  // tensor is what it was, not its weighted share (it redoes the step from there).
  auto against = std::async(std::launch::async, [&] {
    Domain& lost_rank = *domains[0];
    core::Tensor* tensors[] = {&lost_rank.gradient};
    return lost_rank.domains.after_local_recovery(lost_rank.committed_state.step + 1, true, tensors,
                                                  lost_rank.access());
  });
  const DomainStep dropped = domains[1]->step(6, 0.5f);
  CHECK(against.get().verdict == StepVerdict::abandon);
  CHECK(dropped.verdict == StepVerdict::abandon);
  CHECK(domains[1]->gradient.f32()[0] == 6.0f);
}

TEST_CASE("fault domains: a lost domain's peers drop the step in flight together, then train on") {
  StartedJob job("domains", 3, [](int d) { return static_cast<float>(d + 1); });
  auto& store_dir = job.store_dir;
  auto& supervisor = job.supervisor;
  auto& domains = job.domains;
  auto& first = job.first;
  for (const DomainStep& outcome : first) {
    CHECK(outcome.verdict == StepVerdict::commit);
    CHECK(outcome.loss == 6.0);  // every domain's loss summed: 1 + 2 + 3
  }
  for (const auto& domain : domains) CHECK(domain->summed == std::vector<float>{6.0f});
  // Every domain splits the batch alike; each takes a slice of it, together all of it once (what
  // a domain's staged placement and a lagged step computed ahead rely on).
  const std::uint64_t three_domains = domains[0]->domains.split_digest();
  for (std::size_t d = 0; d < 3; ++d) {
    CHECK(domains[d]->domains.split_digest() == three_domains);
    const core::Shard slice = domains[d]->domains.my_domain_slice(12);
    CHECK(slice.begin == 4 * d);
    CHECK(slice.end == 4 * d + 4);
  }
  std::vector<std::future<void>> running;
  CHECK(domains[0]->domains.owns_run_files());
  CHECK_FALSE(domains[1]->domains.owns_run_files());

  // Domain 0, the one that writes the run directory's files, dies between steps. The others'
  // next exchange fails, they report it, the supervisor publishes generation 1 without it.
  domains[0].reset();
  std::atomic<bool> published{false};
  auto watcher = std::async(std::launch::async, [&] {
    for (int i = 0; i < 2000 && !published; ++i) {
      if (supervisor->try_get(rendezvous_keys::failure(0, 1)) ||
          supervisor->try_get(rendezvous_keys::failure(0, 2))) {
        supervisor->set(rendezvous_keys::members(1), "1,2");
        published = true;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  running.clear();
  std::vector<DomainStep> outcomes(3);
  for (int d = 1; d < 3; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      outcomes[static_cast<std::size_t>(d)] =
          domains[static_cast<std::size_t>(d)]->step(static_cast<float>(10 * d));
    }));
  for (auto& r : running) r.get();
  watcher.get();
  REQUIRE(published);
  // Nobody's vote completed: the step is dropped by both, and both go back to the last step
  // every domain committed together.
  for (int d = 1; d < 3; ++d) {
    CHECK(outcomes[static_cast<std::size_t>(d)].verdict == StepVerdict::rewind);
    CHECK(domains[static_cast<std::size_t>(d)]->committed_state.step == 1);
    CHECK(domains[static_cast<std::size_t>(d)]->domains.generation() == 1);
  }
  // The lowest survivor writes the run directory's files now, and the job trains on, the batch
  // split over the survivors' ranks alone.
  CHECK(domains[1]->domains.owns_run_files());
  CHECK(domains[1]->domains.job_world_size() == 2);
  running.clear();
  for (int d = 1; d < 3; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      CHECK(domains[static_cast<std::size_t>(d)]->step(static_cast<float>(10 * d)).verdict ==
            StepVerdict::commit);
    }));
  for (auto& r : running) r.get();
  CHECK(domains[1]->summed == std::vector<float>{6.0f, 30.0f});
  CHECK(domains[2]->summed == std::vector<float>{6.0f, 30.0f});
  CHECK(domains[1]->domains.my_slice(12).size() + domains[2]->domains.my_slice(12).size() == 12);
  // The split changed with the members, alike for both survivors: a step either computed ahead
  // over the old one is computed again.
  const std::uint64_t two_domains = domains[1]->domains.split_digest();
  CHECK(two_domains != three_domains);
  CHECK(domains[2]->domains.split_digest() == two_domains);
  CHECK(domains[1]->domains.my_domain_slice(12).begin == 0);
  CHECK(domains[1]->domains.my_domain_slice(12).end == 6);
  CHECK(domains[2]->domains.my_domain_slice(12).begin == 6);
  CHECK(domains[2]->domains.my_domain_slice(12).end == 12);

  // Domain 0 comes back: it asks to join, the supervisor lets it in (generation 2), the members
  // see it waiting in their next vote and admit it after that step; it heals to their state.
  auto rejoining = std::async(std::launch::async, [&] {
    auto domain = std::make_unique<Domain>(0, 3, store_dir, "2");
    domain->domains.start(domain->access());
    return domain;
  });
  auto admitter = std::async(std::launch::async, [&] {
    REQUIRE(supervisor->wait_for(rendezvous_keys::join(0, "2"), 20s));
    supervisor->set(rendezvous_keys::members(2), "0,1,2");
    supervisor->set(rendezvous_keys::admit(0, "2"), "2");
  });
  admitter.get();
  running.clear();
  for (int d = 1; d < 3; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      auto& domain = *domains[static_cast<std::size_t>(d)];
      const DomainStep outcome = domain.step(1.0f);
      CHECK(outcome.verdict == StepVerdict::commit);
      CHECK(outcome.admit_pending);
      domain.domains.admit_if_pending(domain.access());
      CHECK(domain.domains.generation() == 2);
    }));
  for (auto& r : running) r.get();
  domains[0] = rejoining.get();
  CHECK(domains[0]->heals == 1);
  CHECK(domains[0]->committed_state.step == 3);
  CHECK(domains[0]->domains.owns_run_files());
  CHECK_FALSE(domains[1]->domains.owns_run_files());
  // The joiner and the members split the batch alike again, as at the start.
  for (std::size_t d = 0; d < 3; ++d) CHECK(domains[d]->domains.split_digest() == three_domains);
  // All three at full strength again, with the same sums.
  running.clear();
  for (int d = 0; d < 3; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      CHECK(domains[static_cast<std::size_t>(d)]->step(2.0f).verdict == StepVerdict::commit);
    }));
  for (auto& r : running) r.get();
  // The relaunched domain's first step since its heal, and the others' whole history.
  CHECK(domains[0]->summed == std::vector<float>{6.0f});
  for (int d = 1; d < 3; ++d)
    CHECK(domains[static_cast<std::size_t>(d)]->summed ==
          std::vector<float>{6.0f, 30.0f, 2.0f, 6.0f});
}

TEST_CASE(
    "fault domains: a generation published without a domain that still voted is adopted at a step "
    "boundary, and logged as a quorum change") {
  // The supervisor saw domain 2's MPI job end (a node of it died) and published generation 1
  // without it, while domain 2's leader, on another node, still took part in the next vote.
  StartedJob job("domains-left-out", 3, [](int d) { return static_cast<float>(d + 1); });
  auto& domains = job.domains;
  job.supervisor->set("gen.1.members", "0,1");
  std::vector<std::future<void>> running;
  std::atomic<int> excluded{0};
  for (int d = 0; d < 3; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      auto& domain = *domains[static_cast<std::size_t>(d)];
      const DomainStep outcome = domain.step(static_cast<float>(d + 1));
      // Every domain's vote completed: the step is committed by all three, domain 2 included.
      CHECK(outcome.verdict == StepVerdict::commit);
      CHECK(outcome.admit_pending);
      try {
        domain.domains.admit_if_pending(domain.access());
        CHECK(domain.domains.generation() == 1);
      } catch (const DomainExcluded&) {
        ++excluded;
        CHECK(d == 2);
      }
    }));
  for (auto& r : running) r.get();
  CHECK(excluded == 1);
  for (int d = 0; d < 2; ++d) {
    CHECK(domains[static_cast<std::size_t>(d)]->summed == std::vector<float>{6.0f, 6.0f});
    const auto changed = job.events(d, "domain_quorum_changed");
    REQUIRE(changed.size() == 1);
    CHECK(changed[0]["lost_domains"] == nlohmann::json::array({2}));
    CHECK(changed[0]["members"] == nlohmann::json::array({0, 1}));
    CHECK(changed[0]["generation"] == 1);
    CHECK(changed[0]["agreed_step"] == 2);
    // Nobody was let in.
    CHECK(job.events(d, "domain_admitted").empty());
  }
  // The two train on alone, the batch split over their ranks.
  running.clear();
  for (int d = 0; d < 2; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      CHECK(domains[static_cast<std::size_t>(d)]->step(1.0f).verdict == StepVerdict::commit);
    }));
  for (auto& r : running) r.get();
  CHECK(domains[0]->summed == std::vector<float>{6.0f, 6.0f, 2.0f});
  CHECK(domains[0]->domains.job_world_size() == 2);
}

TEST_CASE("fault domains: a generation that names a member already gone is left for the next") {
  // Two domains lost at once: the supervisor publishes generation 1 without the first before it
  // learns of the second, then generation 2. The survivor must not wait on the dead member of
  // generation 1 (gloo's full-mesh connect would, for its own 30 s store timeout).
  StartedJob job("domains-twice", 3, [](int) { return 1.0f; });
  auto& domains = job.domains;
  job.check_first_committed();

  domains[0].reset();
  domains[1].reset();
  auto watcher = std::async(std::launch::async, [&] {
    REQUIRE(job.supervisor->wait_for("fail.0.2", 20s));
    job.supervisor->set(rendezvous_keys::members(1), "1,2");
    std::this_thread::sleep_for(300ms);
    job.supervisor->set("gen.2.members", "2");
  });
  const auto started = std::chrono::steady_clock::now();
  const DomainStep outcome = domains[2]->step(5.0f);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  watcher.get();
  CHECK(outcome.verdict == StepVerdict::rewind);
  CHECK(domains[2]->domains.generation() == 2);
  // Replaced by generation 2, not given up after the domain timeout (2 s here).
  CHECK(seconds < 1.5);
  CHECK(domains[2]->step(7.0f).verdict == StepVerdict::commit);
  CHECK(domains[2]->summed == std::vector<float>{3.0f, 7.0f});
}

TEST_CASE("fault domains: a generation that a member left for a newer one is not connected") {
  // Domain 2 dies. Domain 1 reports it, says it is ready for generation 1, and sees generation 2
  // published before domain 0 said so: it moves on. Domain 0 comes to generation 1 late and finds
  // every member's ready mark there. It must not connect a generation that was left: gloo's
  // full-mesh connect would wait for domain 1 as long as connecting may (20 s here); seen on the
  // emulated cluster under load, where it cascaded past the test's 300 s.
  StartedJob job("domains-left", 3, [](int) { return 1.0f; });
  auto& supervisor = job.supervisor;
  auto& domains = job.domains;
  job.check_first_committed();

  domains[2].reset();
  auto one = std::async(std::launch::async, [&] { return domains[1]->step(2.0f); });
  REQUIRE(supervisor->wait_for("fail.0.1", 20s));
  supervisor->set("gen.1.members", "0,1");
  REQUIRE(supervisor->wait_for(rendezvous_keys::ready(1, 1), 20s));
  supervisor->set("gen.2.members", "0,1");
  REQUIRE(supervisor->wait_for(rendezvous_keys::ready(2, 1), 20s));  // domain 1 left generation 1

  const auto started = std::chrono::steady_clock::now();
  const DomainStep zero = domains[0]->step(3.0f);
  const DomainStep other = one.get();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  CHECK(zero.verdict == StepVerdict::rewind);
  CHECK(other.verdict == StepVerdict::rewind);
  CHECK(domains[0]->domains.generation() == 2);
  CHECK(domains[1]->domains.generation() == 2);
  // Straight to generation 2, not after a connect timeout (the domain timeout is 2 s here).
  CHECK(seconds < 1.5);
  auto next = std::async(std::launch::async, [&] { return domains[1]->step(20.0f); });
  CHECK(domains[0]->step(10.0f).verdict == StepVerdict::commit);
  CHECK(next.get().verdict == StepVerdict::commit);
  CHECK(domains[0]->summed == std::vector<float>{3.0f, 30.0f});
}

TEST_CASE("fault domains: a recovery inside a domain settles its step without the others") {
  StartedJob job("domains-settle", 2, [](int d) { return static_cast<float>(d + 1); });
  auto& domains = job.domains;
  job.check_first_committed();

  SECTION("between meetings (--domain-sync-every): nothing is in flight with the others") {
    // Domain 1 lost a rank at step 2, where the domains do not meet; domain 0 trains alone and
    // is in no exchange. Asking it anything would block until the domain timeout (2 s here).
    core::Tensor* tensors[] = {&domains[1]->gradient};
    const auto started = std::chrono::steady_clock::now();
    const DomainStep outcome = domains[1]->domains.after_local_recovery(
        2, /*synchronized=*/false, tensors, domains[1]->access());
    CHECK(outcome.verdict == StepVerdict::abandon);
    CHECK(std::chrono::steady_clock::now() - started < 500ms);
    CHECK(domains[1]->domains.generation() == 0);
  }

  SECTION("at a meeting whose vote completed: the leader's held sums roll it forward") {
    // Both exchange step 2; domain 1 loses a rank before committing it, and its recovery puts
    // its committed state (here: the tensor) back. The sums come from what its leader held.
    std::vector<std::future<DomainStep>> running;
    std::vector<float> seen(2);
    for (int d = 0; d < 2; ++d)
      running.push_back(std::async(std::launch::async, [&, d] {
        auto& domain = *domains[static_cast<std::size_t>(d)];
        std::ranges::fill(domain.gradient.f32(), 10.0f * static_cast<float>(d + 1));
        core::Tensor* tensors[] = {&domain.gradient};
        const DomainStep outcome = domain.domains.exchange(2, tensors, 1, 0, domain.access());
        seen[static_cast<std::size_t>(d)] = domain.gradient.f32()[0];
        return outcome;
      }));
    for (auto& r : running) CHECK(r.get().verdict == StepVerdict::commit);
    CHECK(seen == std::vector<float>{30.0f, 30.0f});
    std::ranges::fill(domains[1]->gradient.f32(), -1.0f);  // restored by the recovery
    core::Tensor* tensors[] = {&domains[1]->gradient};
    const DomainStep outcome = domains[1]->domains.after_local_recovery(
        2, /*synchronized=*/true, tensors, domains[1]->access());
    CHECK(outcome.verdict == StepVerdict::commit);
    CHECK(outcome.loss == 2.0);
    CHECK(std::ranges::all_of(domains[1]->gradient.f32(), [](float v) { return v == 30.0f; }));
  }
}

TEST_CASE("fault domains: an exchange left in flight travels while the domain computes on") {
  // With --gradient-lag 1 the next step computes while a step's sums cross the domains: the
  // leader's start_exchange() returns with its collective in flight, the caller reuses the
  // tensors, and settle_exchange() ends it.
  StartedJob job("domains-in-flight", 2, [](int d) { return static_cast<float>(d + 1); });
  auto& supervisor = job.supervisor;
  auto& domains = job.domains;
  job.check_first_committed();
  Domain& computing = *domains[0];
  core::Tensor* tensors[] = {&computing.gradient};

  SECTION("the step commits with the sums, as a whole exchange would") {
    std::ranges::fill(computing.gradient.f32(), 10.0f);
    computing.domains.start_exchange(2, tensors, 1, 0);
    CHECK(computing.domains.exchange_in_flight());
    std::ranges::fill(computing.gradient.f32(), -1.0f);  // the next step's backward
    // While domain 0 computes (it calls nothing here), its sums travel: domain 1's exchange of
    // the step completes. One that waited for settle_exchange() would not (within the 2 s the
    // domains give a collective).
    auto peer = std::async(std::launch::async, [&] { return domains[1]->step(20); });
    const bool travelled = peer.wait_for(1500ms) == std::future_status::ready;
    const DomainStep outcome = computing.domains.settle_exchange(tensors, computing.access());
    CHECK(travelled);
    CHECK(peer.get().verdict == StepVerdict::commit);
    CHECK_FALSE(computing.domains.exchange_in_flight());
    CHECK(outcome.verdict == StepVerdict::commit);
    CHECK(outcome.loss == 21.0);
    CHECK(std::ranges::all_of(computing.gradient.f32(), [](float v) { return v == 30.0f; }));
    CHECK(domains[1]->summed.back() == 30.0f);
  }

  SECTION("a rank lost while it travels: the recovery settles it, and the domain rolls forward") {
    // Domain 0 loses a rank in the next step's backward; its recovery finds the exchange in
    // flight and takes its outcome: domain 1 committed the step, so domain 0 does too.
    std::ranges::fill(computing.gradient.f32(), 10.0f);
    computing.domains.start_exchange(2, tensors, 1, 0);
    auto peer = std::async(std::launch::async, [&] { return domains[1]->step(20); });
    std::ranges::fill(computing.gradient.f32(), -1.0f);  // restored by the recovery
    const DomainStep outcome = computing.domains.after_local_recovery(2, /*synchronized=*/true,
                                                                      tensors, computing.access());
    CHECK(peer.get().verdict == StepVerdict::commit);
    CHECK(outcome.verdict == StepVerdict::commit);
    CHECK(std::ranges::all_of(computing.gradient.f32(), [](float v) { return v == 30.0f; }));
    // Nothing is left in flight: the next step's exchange starts afresh.
    computing.committed_state.step = 2;
    auto next = std::async(std::launch::async, [&] { return domains[1]->step(2); });
    CHECK(computing.step(1).verdict == StepVerdict::commit);
    CHECK(next.get().verdict == StepVerdict::commit);
    CHECK(computing.summed.back() == 3.0f);
  }

  SECTION("a peer domain lost while it travels: the settle regroups like a whole exchange") {
    std::atomic<bool> published{false};
    auto watcher = std::async(std::launch::async, [&] {
      for (int i = 0; i < 2000 && !published; ++i) {
        if (supervisor->try_get(rendezvous_keys::failure(0, 0))) {
          supervisor->set(rendezvous_keys::members(1), "0");
          published = true;
        }
        std::this_thread::sleep_for(5ms);
      }
    });
    computing.domains.start_exchange(2, tensors, 1, 0);
    domains[1].reset();  // its MPI job died: its group's connections close
    const DomainStep outcome = computing.domains.settle_exchange(tensors, computing.access());
    watcher.get();
    REQUIRE(published);
    CHECK(outcome.verdict == StepVerdict::rewind);
    CHECK(computing.domains.generation() == 1);
    CHECK(computing.step(4).verdict == StepVerdict::commit);  // alone now
    CHECK(computing.summed.back() == 4.0f);
  }
}

// --domain-exchange sharded: every domain is an in-process world of `ranks` threads, and rank i of
// every domain sums the i-th shard with the others' rank i over a gloo group of its own.
struct ShardedRank {
  ShardedRank(std::unique_ptr<comm::Communicator> comm, int index, int count,
              const std::filesystem::path& store)
      : comm(std::move(comm)),
        events(hardy::resilience::event_kinds()),
        gradient(core::Tensor::host({5})),
        domains(test_options(index, count, store, {}, DomainExchange::sharded), this->comm,
                events) {}

  DomainStateAccess access() {
    return {.committed = [this]() -> const checkpoint::TrainingState& { return state; },
            .restore_in_domain = [this](checkpoint::TrainingState& s) { state = s; },
            .committed_step = [this] { return state.step; },
            .persisted = [] { return std::optional<DomainStateAccess::Persisted>(); },
            .committed_lines = [] { return std::string(); },
            .adopt_lines = [](const std::string&) {}};
  }
  // The step's exchange: `values` is the domain's sum of the step (every rank holds it, as after
  // the in-domain allreduce); on commit the state moves on. `relayed`: the values go bucket by
  // bucket before the exchange, as a reducer's listener hears them (values 3-4, then 0-2 given
  // as two gradients in backward's order), at twice their size with a scale of 1/2.
  DomainStep step(const std::vector<float>& values, bool relayed = false) {
    std::ranges::copy(values, gradient.f32().begin());
    if (relayed) {
      std::vector<float> unscaled(values);
      for (float& v : unscaled) v *= 2;
      const std::span<const float> sums(unscaled);
      domains.start_relay(state.step + 1, values.size(), 0.5f);
      const FaultDomains::RelayedPart last[] = {{.offset = 3, .sums = sums.subspan(3, 2)}};
      domains.relay_bucket(last);
      const FaultDomains::RelayedPart first[] = {{.offset = 1, .sums = sums.subspan(1, 2)},
                                                 {.offset = 0, .sums = sums.subspan(0, 1)}};
      domains.relay_bucket(first);
      std::ranges::fill(gradient.f32(), -1.0f);  // what the exchange holds is not sent again
    }
    core::Tensor* gradients[] = {&gradient};
    const DomainStep outcome = domains.exchange(state.step + 1, gradients, values[0], 0, access());
    if (outcome.verdict == StepVerdict::commit) ++state.step;
    return outcome;
  }

  std::unique_ptr<comm::Communicator> comm;
  core::EventLog events;
  core::Tensor gradient;
  checkpoint::TrainingState state;
  FaultDomains domains;
};

TEST_CASE("fault domains: sharded, every rank of every domain gets the whole sum") {
  hardy::testing::ScratchDirectory scratch("sharded");
  const auto store_dir = scratch.path() / "store";
  auto supervisor = comm::open_file_store(store_dir);
  supervisor->set(rendezvous_keys::members(0), "0,1");
  constexpr int kDomains = 2, kRanks = 2;
  // What each rank of each domain held after each step: the sums (or nothing on another verdict).
  std::vector<std::vector<std::vector<float>>> seen(kDomains * kRanks);
  std::vector<std::vector<StepVerdict>> verdicts(kDomains * kRanks);
  // Domain d's sum at step s: d+1 times (s, 2s, 3s, 4s, 5s): 5 values over 2 ranks, shards of 3
  // and 2.
  const auto domain_sum = [](int d, int s) {
    std::vector<float> values(5);
    for (int i = 0; i < 5; ++i)
      values[static_cast<std::size_t>(i)] = static_cast<float>((d + 1) * s * (i + 1));
    return values;
  };
  // Domain 1 leaves after step `leaves_after` (its MPI job died: every rank's groups close); the
  // test plays the supervisor, publishing generation 1 without it once domain 0 reports.
  const int leaves_after = GENERATE(0, 2);
  // Relayed: each bucket's shard leaves as the domain has it (FaultDomains::start_relay).
  const bool relayed = GENERATE(false, true);
  std::vector<std::unique_ptr<hardy::testing::InProcessWorld>> worlds;
  for (int d = 0; d < kDomains; ++d)
    worlds.push_back(std::make_unique<hardy::testing::InProcessWorld>(kRanks));
  std::vector<std::future<std::vector<std::exception_ptr>>> running;
  for (int d = 0; d < kDomains; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      return worlds[static_cast<std::size_t>(d)]->run(
          [&, d](std::unique_ptr<comm::Communicator> c) {
            const int slot = d * kRanks + c->rank();
            ShardedRank rank(std::move(c), d, kDomains, store_dir);
            rank.domains.start(rank.access());
            const int steps = d == 1 && leaves_after > 0 ? leaves_after : 4;
            for (int s = 1; s <= steps; ++s) {
              const DomainStep outcome = rank.step(domain_sum(d, s), relayed);
              verdicts[static_cast<std::size_t>(slot)].push_back(outcome.verdict);
              seen[static_cast<std::size_t>(slot)].push_back(
                  outcome.verdict == StepVerdict::commit
                      ? std::vector<float>(rank.gradient.f32().begin(), rank.gradient.f32().end())
                      : std::vector<float>());
              if (outcome.verdict != StepVerdict::commit) --s;  // redone
            }
          });
    }));
  std::atomic<bool> done{false};
  auto watcher = std::async(std::launch::async, [&] {
    while (!done) {
      if (supervisor->try_get(rendezvous_keys::failure(0, 0)) &&
          !supervisor->try_get(rendezvous_keys::members(1)))
        supervisor->set(rendezvous_keys::members(1), "0");
      std::this_thread::sleep_for(5ms);
    }
  });
  for (auto& r : running)
    for (const auto& outcome : r.get()) CHECK(hardy::testing::describe(outcome).empty());
  done = true;
  watcher.get();
  for (int slot = 0; slot < kDomains * kRanks; ++slot) {
    const int d = slot / kRanks;
    INFO("domain " << d << " rank " << slot % kRanks << ", domain 1 leaves after step "
                   << leaves_after << (relayed ? ", relayed" : ""));
    const auto& mine = seen[static_cast<std::size_t>(slot)];
    if (leaves_after == 0) {
      // Both domains, every step: the sum of both, at every rank.
      REQUIRE(mine.size() == 4);
      for (int s = 1; s <= 4; ++s) {
        std::vector<float> expected = domain_sum(0, s);
        for (std::size_t i = 0; i < 5; ++i) expected[i] += domain_sum(1, s)[i];
        CHECK(mine[static_cast<std::size_t>(s - 1)] == expected);
      }
      continue;
    }
    if (d == 1) continue;
    // Domain 0: steps 1 and 2 with both, then the step in flight dropped (rank 1's shard peer
    // was gone: the leader regroups although its own shard arrived), then steps 3 and 4 alone.
    const auto& verdict = verdicts[static_cast<std::size_t>(slot)];
    REQUIRE(verdict.size() == 5);
    CHECK(verdict[2] == StepVerdict::rewind);
    CHECK(mine[4] == domain_sum(0, 4));
  }
}

TEST_CASE("fault domains: the rendezvous keys are spelled as the protocol says") {
  // A supervisor and leaders of different builds must still meet: the spelling is the protocol.
  CHECK(rendezvous_keys::members(3) == "gen.3.members");
  CHECK(rendezvous_keys::ready(3, 1) == "ready.3.1");
  CHECK(rendezvous_keys::failure(3, 1) == "fail.3.1");
  CHECK(rendezvous_keys::join(2, "7") == "join.2.7");
  CHECK(rendezvous_keys::admit(2, "7") == "admit.2.7");
}

TEST_CASE(
    "fault domains: the leaders stop waiting for a silent domain once one without it is out") {
  // Domain 2's node freezes: its leader stops stepping but its sockets stay open, so the others'
  // exchange would wait for it until the domain timeout (2 s here). The supervisor publishes a
  // generation without it as soon as its launch ends (the stall watch's probe, or the keepalive):
  // the others leave the collective then, regroup and train on.
  StartedJob job("domains-silent-leader", 3, [](int) { return 1.0f; });
  auto& domains = job.domains;
  job.check_first_committed();
  std::vector<std::future<DomainStep>> running;
  for (int d = 0; d < 2; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      return domains[static_cast<std::size_t>(d)]->step(static_cast<float>(d + 1));
    }));
  std::this_thread::sleep_for(300ms);
  const auto published = std::chrono::steady_clock::now();
  job.supervisor->set(rendezvous_keys::members(1), "0,1");
  for (auto& r : running) CHECK(r.get().verdict == StepVerdict::rewind);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - published).count();
  CHECK(seconds < 1.0);  // not at the domain timeout, 1.7 s after the publication
  for (int d = 0; d < 2; ++d)
    CHECK(domains[static_cast<std::size_t>(d)]->domains.generation() == 1);
  running.clear();
  for (int d = 0; d < 2; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      return domains[static_cast<std::size_t>(d)]->step(static_cast<float>(10 * (d + 1)));
    }));
  for (auto& r : running) CHECK(r.get().verdict == StepVerdict::commit);
  CHECK(domains[0]->summed == std::vector<float>{3.0f, 30.0f});
}

TEST_CASE("fault domains: a connect that waits for a member gone silent is left for a newer one") {
  // Domain 2 dies; the supervisor publishes generation 1 with it still in (its node is cut off:
  // it said it was ready before its link went, and its address never answers). The others'
  // full-mesh connect waits for it, until the domain timeout (2 s here) unless a generation
  // without it, published once its launch ended, ends the wait.
  StartedJob job("domains-silent-connect", 3, [](int) { return 1.0f; });
  auto& supervisor = job.supervisor;
  auto& domains = job.domains;
  job.check_first_committed();
  domains[2].reset();
  std::vector<std::future<DomainStep>> running;
  for (int d = 0; d < 2; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      return domains[static_cast<std::size_t>(d)]->step(static_cast<float>(d + 1));
    }));
  REQUIRE(supervisor->wait_for(rendezvous_keys::failure(0, 0), 20s));
  supervisor->set(rendezvous_keys::ready(1, 2), "ready");
  supervisor->set(rendezvous_keys::members(1), "0,1,2");
  for (int d = 0; d < 2; ++d) REQUIRE(supervisor->wait_for(rendezvous_keys::ready(1, d), 20s));
  std::this_thread::sleep_for(300ms);
  const auto published = std::chrono::steady_clock::now();
  supervisor->set(rendezvous_keys::members(2), "0,1");
  for (auto& r : running) CHECK(r.get().verdict == StepVerdict::rewind);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - published).count();
  CHECK(seconds < 1.0);  // not at the connect's timeout, 1.7 s after the publication
  for (int d = 0; d < 2; ++d)
    CHECK(domains[static_cast<std::size_t>(d)]->domains.generation() == 2);
  running.clear();
  for (int d = 0; d < 2; ++d)
    running.push_back(std::async(std::launch::async, [&, d] {
      return domains[static_cast<std::size_t>(d)]->step(static_cast<float>(10 * (d + 1)));
    }));
  for (auto& r : running) CHECK(r.get().verdict == StepVerdict::commit);
  CHECK(domains[1]->summed == std::vector<float>{3.0f, 30.0f});
}
