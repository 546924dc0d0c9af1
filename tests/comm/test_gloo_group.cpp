// The fault domains' leaders talk through gloo groups that rendezvous in a store. These tests run
// every member as a thread of this process over loopback TCP, with the store in memory or in a
// directory, and check what the fault-domain protocol relies on: identical results everywhere,
// and a prompt GroupFailure (never a hang) when a member leaves or stops answering.
#include <fmt/format.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <thread>

#include "hardy/comm/gloo/communicator.hpp"
#include "hardy/comm/rendezvous/store.hpp"
#include "scratch_directory.hpp"

using namespace hardy;
using namespace std::chrono_literals;

namespace {

comm::GlooGroupOptions member(const std::string& prefix, int rank, int size,
                              std::chrono::milliseconds timeout = 5000ms) {
  return {.prefix = prefix,
          .rank = rank,
          .size = size,
          .address = "127.0.0.1",
          .timeout = timeout,
          .connect_timeout = timeout};
}

// Runs body(rank, communicator) on `size` threads, each connected to the same group.
template <typename Body>
void run_group(comm::RendezvousStore& store, const std::string& prefix, int size, Body body) {
  std::vector<std::future<void>> members;
  for (int rank = 0; rank < size; ++rank)
    members.push_back(std::async(std::launch::async, [&, rank] {
      auto group = comm::connect_gloo_group(store, member(prefix, rank, size));
      body(rank, *group);
    }));
  for (auto& m : members) m.get();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a gloo group reduces and broadcasts to the same result on every member") {
  auto store = comm::make_memory_store();
  std::vector<std::vector<float>> sums(3);
  std::vector<std::vector<std::int64_t>> mins(3), maxs(3), gathered(3);
  std::vector<std::string> broadcast(3);
  run_group(*store, "g0", 3, [&](int rank, comm::Communicator& group) {
    CHECK(group.size() == 3);
    CHECK(group.rank() == rank);
    // Values whose float sum depends on the order of addition: every member must still agree.
    std::vector<float> values(1000);
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = 1.0f / static_cast<float>(i + 1 + 7 * rank) + 1e7f * static_cast<float>(rank);
    group.allreduce_sum(values);
    sums[static_cast<std::size_t>(rank)] = values;
    std::vector<std::int64_t> v{rank, -rank};
    group.allreduce(v, comm::ReduceOp::min);
    mins[static_cast<std::size_t>(rank)] = v;
    v = {rank, -rank};
    group.allreduce(v, comm::ReduceOp::max);
    maxs[static_cast<std::size_t>(rank)] = v;
    gathered[static_cast<std::size_t>(rank)] = group.allgather(10 * rank);
    std::string text = rank == 2 ? "from two" : "........";
    group.broadcast(std::as_writable_bytes(std::span(text.data(), text.size())), 2);
    broadcast[static_cast<std::size_t>(rank)] = text;
  });
  for (int r = 0; r < 3; ++r) {
    const auto i = static_cast<std::size_t>(r);
    CHECK(std::memcmp(sums[i].data(), sums[0].data(), sums[0].size() * sizeof(float)) == 0);
    CHECK(mins[i] == std::vector<std::int64_t>{0, -2});
    CHECK(maxs[i] == std::vector<std::int64_t>{2, 0});
    CHECK(gathered[i] == std::vector<std::int64_t>{0, 10, 20});
    CHECK(broadcast[i] == "from two");
  }
  CHECK(sums[0][0] == Approx(1.0f + 1.0f / 8 + 1.0f / 15 + 3e7f));
}

TEST_CASE("gloo sums agree to the bit on every member, for any group size and buffer length") {
  // The domains' leaders sum everything in one allreduce; after a loss the group can have any
  // size, and a buffer may hold fewer values than there are members.
  for (int size : {2, 3, 4, 5, 6}) {
    for (std::size_t length :
         {std::size_t{1}, std::size_t{5}, std::size_t{1000}, std::size_t{100003}}) {
      auto store = comm::make_memory_store();
      std::vector<std::vector<float>> sums(static_cast<std::size_t>(size));
      run_group(*store, fmt::format("s{}-{}", size, length), size,
                [&](int rank, comm::Communicator& group) {
                  std::vector<float> values(length);
                  for (std::size_t i = 0; i < length; ++i)
                    values[i] = 1.0f / static_cast<float>(i + 1 + 7 * rank) + 1e5f * rank;
                  group.allreduce_sum(values);
                  sums[static_cast<std::size_t>(rank)] = values;
                });
      for (std::size_t i = 0; i < length; i += 997) {
        double expected = 0;
        for (int rank = 0; rank < size; ++rank)
          expected += 1.0f / static_cast<float>(i + 1 + 7 * rank) + 1e5f * rank;
        CHECK(sums[0][i] == Approx(expected).epsilon(1e-5));
      }
      for (const auto& sum : sums)
        CHECK(std::memcmp(sum.data(), sums[0].data(), length * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("a member that leaves makes the others' collectives fail at once, not hang") {
  auto store = comm::make_memory_store();
  std::vector<double> failed_after(3, -1);
  std::vector<std::string> messages(3);
  run_group(*store, "leave", 3, [&](int rank, comm::Communicator& group) {
    std::vector<float> warmup(16, 1.0f);
    group.allreduce_sum(warmup);
    if (rank == 1) return;  // its connections close when the thread's group is destroyed
    std::this_thread::sleep_for(100ms);
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> values(1 << 16, 1.0f);
    try {
      group.allreduce_sum(values);
    } catch (const comm::GroupFailure& e) {
      failed_after[static_cast<std::size_t>(rank)] = seconds_since(start);
      messages[static_cast<std::size_t>(rank)] = e.what();
      // Unusable afterwards, and says so rather than trying again.
      CHECK_THROWS_AS(group.barrier(), comm::GroupFailure);
    }
  });
  for (int rank : {0, 2}) {
    INFO(messages[static_cast<std::size_t>(rank)]);
    CHECK(failed_after[static_cast<std::size_t>(rank)] >= 0);
    CHECK(failed_after[static_cast<std::size_t>(rank)] < 2.0);  // the timeout is 5 s
  }
}

TEST_CASE("a member whose operation failed closes its connections at once") {
  // Member 1 leaves. Member 0's next allreduce fails on it; member 2, which has not noticed,
  // then waits for a broadcast from member 0 alone. Member 0 has closed its side by then, so
  // member 2 fails at once with the reset, not after the group's 5 s timeout. Open, member 0's
  // connection would have taken what member 2 sent for the abandoned operation.
  auto store = comm::make_memory_store();
  std::promise<void> member0_failed, member2_done;
  auto failed = member0_failed.get_future().share();
  auto done = member2_done.get_future().share();
  double member2_failed_after = -1;
  std::string member2_message;
  run_group(*store, "closes", 3, [&](int rank, comm::Communicator& group) {
    std::vector<float> warmup(16, 1.0f);
    group.allreduce_sum(warmup);
    if (rank == 1) return;
    if (rank == 0) {
      std::this_thread::sleep_for(100ms);
      std::vector<float> values(1 << 10, 1.0f);
      CHECK_THROWS_AS(group.allreduce_sum(values), comm::GroupFailure);
      member0_failed.set_value();
      done.wait();  // the group stays alive meanwhile: what closes it is the failure alone
      return;
    }
    failed.wait();
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::byte> data(64);
    try {
      group.broadcast(data, /*root=*/0);
    } catch (const comm::GroupFailure& e) {
      member2_failed_after = seconds_since(start);
      member2_message = e.what();
    }
    member2_done.set_value();
  });
  INFO(member2_message);
  CHECK(member2_failed_after >= 0);
  CHECK(member2_failed_after < 2.0);
}

TEST_CASE("a member that stops answering fails the others after the group's timeout") {
  auto store = comm::make_memory_store();
  std::promise<void> release;
  auto released = release.get_future().share();
  std::vector<std::future<double>> members;
  for (int rank = 0; rank < 2; ++rank)
    members.push_back(std::async(std::launch::async, [&, rank]() -> double {
      auto group = comm::connect_gloo_group(*store, member("silent", rank, 2, 400ms));
      if (rank == 1) {  // alive, connected, never joins the collective
        released.wait();
        return 0;
      }
      const auto start = std::chrono::steady_clock::now();
      std::vector<float> values(8, 1.0f);
      CHECK_THROWS_AS(group->allreduce_sum(values), comm::GroupFailure);
      const double waited = seconds_since(start);
      release.set_value();
      return waited;
    }));
  const double waited = members[0].get();
  members[1].get();
  CHECK(waited >= 0.35);
  CHECK(waited < 3.0);
}

TEST_CASE("connecting fails after the timeout when a member never shows up") {
  auto store = comm::make_memory_store();
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(comm::connect_gloo_group(*store, member("absent", 0, 2, 300ms)),
                  comm::GroupFailure);
  CHECK(seconds_since(start) < 5.0);
  CHECK_THROWS_AS(comm::connect_gloo_group(*store, member("bad", 2, 2)), InvalidArgument);
}

TEST_CASE("the file store is private, writes each key once and answers without blocking") {
  hardy::testing::ScratchDirectory scratch("rendezvous");
  const auto directory = scratch.path() / "store";
  auto store = comm::open_file_store(directory);
  struct stat info {};
  REQUIRE(::stat(directory.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0700);
  CHECK_FALSE(store->try_get("gen.1.members"));
  store->set("gen.1.members", "0,2,3");
  CHECK(store->try_get("gen.1.members") == "0,2,3");
  CHECK_THROWS_AS(store->set("gen.1.members", "0,1"), IoError);
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(store->wait_for("gen.2.members", 100ms));
  CHECK(seconds_since(start) < 1.0);
  // Another process's view of the same directory sees the key (a second store object).
  auto other = comm::open_file_store(directory);
  CHECK(other->wait_for("gen.1.members", 100ms) == "0,2,3");
  // And gloo groups rendezvous through it as through the memory store.
  run_group(*store, "files", 2, [](int, comm::Communicator& group) {
    std::vector<double> one{1.0};
    group.allreduce_sum(one);
    CHECK(one[0] == 2.0);
  });
  std::ofstream(scratch.path() / "plain") << "not a directory";
  CHECK_THROWS_AS(comm::open_file_store(scratch.path() / "plain"), IoError);
  CHECK_THROWS_AS(comm::open_file_store(scratch.path() / "plain" / "below"), IoError);
}

TEST_CASE("one file store object takes keys from several threads at once") {
  // The members of a group connect through one store object from their own threads.
  hardy::testing::ScratchDirectory scratch("rendezvous-threads");
  auto store = comm::open_file_store(scratch.path() / "store");
  constexpr int kThreads = 8, kKeys = 150;
  std::vector<std::future<void>> writers;
  for (int t = 0; t < kThreads; ++t)
    writers.push_back(std::async(std::launch::async, [&, t] {
      for (int k = 0; k < kKeys; ++k) store->set(fmt::format("t{}.k{}", t, k), std::to_string(k));
    }));
  for (auto& writer : writers) writer.get();
  int found = 0;
  for (int t = 0; t < kThreads; ++t)
    for (int k = 0; k < kKeys; ++k)
      found += store->try_get(fmt::format("t{}.k{}", t, k)) == std::to_string(k) ? 1 : 0;
  CHECK(found == kThreads * kKeys);
}

TEST_CASE("a file store on NFS or a parallel file system is named with what it costs") {
  const auto nfs = comm::file_store_caveat(0x6969L);
  REQUIRE(nfs);
  CHECK_THAT(*nfs, Catch::Contains("NFS") && Catch::Contains("lookupcache"));
  const auto lustre = comm::file_store_caveat(0x0BD00BD0L);
  REQUIRE(lustre);
  CHECK_THAT(*lustre, Catch::Contains("metadata server"));
  CHECK_FALSE(comm::file_store_caveat(0xEF53L));      // ext4: a local disk, nothing to say
  CHECK_FALSE(comm::file_store_caveat(0x01021994L));  // tmpfs
  hardy::testing::ScratchDirectory scratch("caveat");
  CHECK_FALSE(comm::file_store_caveat(scratch.path() / "missing"));  // statfs fails: nothing
}
