// h5::Exclusive: one HDF5 operation at a time in the process when the library is not thread-safe
// (a DeepCAM loader thread inspecting a file while the training thread writes a checkpoint).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "hardy/core/support/hdf5.hpp"

using namespace hardy::core;
using namespace std::chrono_literals;

TEST_CASE("h5::Exclusive serializes operations where the library does not", "[core]") {
  h5::Exclusive::force_for_testing(true);
  struct Unforce {
    ~Unforce() { h5::Exclusive::force_for_testing(false); }
  } unforce;
  std::atomic<bool> second_inside{false};
  std::thread second;
  {
    const h5::Exclusive first;
    CHECK(first.engaged());
    const h5::Exclusive nested;  // an operation that calls another (a write that reads back)
    CHECK(nested.engaged());
    second = std::thread([&] {
      const h5::Exclusive mine;
      second_inside = true;
    });
    std::this_thread::sleep_for(100ms);
    CHECK_FALSE(second_inside.load());  // waits for the first operation to end
  }
  second.join();
  CHECK(second_inside.load());

  h5::Exclusive::force_for_testing(false);
  CHECK(h5::Exclusive().engaged() == !h5::library_is_thread_safe());
}
