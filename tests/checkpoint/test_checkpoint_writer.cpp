#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "checkpoint_fixtures.hpp"
#include "hardy/checkpoint/checkpoint_file.hpp"
#include "hardy/checkpoint/checkpoint_writer.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::checkpoint;
using namespace hardy::checkpoint::testing;
using namespace std::chrono_literals;

namespace {

// Collects reports and watches that no two writes ever overlap.
struct Observer {
  std::mutex mutex;
  std::vector<WriteReport> reports;
  std::atomic<int> writing{0};
  std::atomic<int> most_at_once{0};

  CheckpointWriter::Report report() {
    return [this](const WriteReport& report) {
      std::lock_guard lock(mutex);
      reports.push_back(report);
    };
  }
  // A progress hook that makes each write take a while and records the overlap.
  WriteProgress slow(std::chrono::milliseconds delay) {
    return [this, delay](double fraction) {
      if (fraction == 1.0) {
        const int now = ++writing;
        most_at_once = std::max(most_at_once.load(), now);
        std::this_thread::sleep_for(delay);
        --writing;
      }
    };
  }
  std::vector<long> steps(bool skipped) {
    std::lock_guard lock(mutex);
    std::vector<long> steps;
    for (const WriteReport& r : reports)
      if (r.skipped == skipped) steps.push_back(r.step);
    return steps;
  }
};

}  // namespace

TEST_CASE("checkpoint writer: asynchronous submit returns before the write, and flush waits for it",
          "[checkpoint]") {
  ScratchDirectory dir("async");
  Observer observer;
  CheckpointWriter writer(dir.path(), {}, observer.report());
  REQUIRE(writer.asynchronous());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  const auto start = std::chrono::steady_clock::now();
  CHECK(writer.submit(synthetic_state(1), 0.25, [released](double) { released.wait(); }));
  CHECK(std::chrono::steady_clock::now() - start < 1s);
  CHECK(writer.busy());
  CHECK(observer.steps(false).empty());
  release.set_value();
  writer.flush();
  CHECK_FALSE(writer.busy());
  REQUIRE(observer.reports.size() == 1);
  const WriteReport& report = observer.reports.front();
  CHECK(report.error.empty());
  CHECK(report.step == 1);
  CHECK(report.path == dir / "ckpt-1.h5");
  CHECK(report.bytes == std::filesystem::file_size(report.path));
  CHECK(report.stall_s == 0.25);
  CHECK(report.write_s > 0);
}

TEST_CASE("checkpoint writer: the wait policy writes every checkpoint, one at a time, in order",
          "[checkpoint]") {
  ScratchDirectory dir("wait");
  Observer observer;
  {
    CheckpointWriter writer(
        dir.path(), {.asynchronous = true, .skip_when_busy = false, .retention = {.keep_last = 10}},
        observer.report());
    for (long step = 1; step <= 4; ++step)
      CHECK(writer.submit(synthetic_state(step), 0.0, observer.slow(50ms)));
    // A synchronous write in between waits for its turn as well.
    writer.write_now(synthetic_state(5), 0.0, observer.slow(50ms));
  }  // the destructor flushes
  CHECK(observer.steps(false) == std::vector<long>{1, 2, 3, 4, 5});
  CHECK(observer.most_at_once == 1);
  CHECK(list_checkpoints(dir.path()).size() == 5);
}

TEST_CASE("checkpoint writer: the skip policy drops a checkpoint submitted while one is written",
          "[checkpoint]") {
  ScratchDirectory dir("skip");
  Observer observer;
  CheckpointWriter::Options options;
  options.skip_when_busy = true;
  CheckpointWriter writer(dir.path(), options, observer.report());
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  CHECK(writer.submit(synthetic_state(1), 0.0, [released](double) { released.wait(); }));
  CHECK_FALSE(writer.submit(synthetic_state(2), 0.0));
  CHECK_FALSE(writer.submit(synthetic_state(3), 0.0));
  release.set_value();
  writer.flush();
  CHECK(writer.submit(synthetic_state(4), 0.0));
  writer.flush();
  CHECK(observer.steps(false) == std::vector<long>{1, 4});
  CHECK(observer.steps(true) == std::vector<long>{2, 3});
  for (const WriteReport& r : observer.reports)
    if (r.skipped) CHECK_THAT(r.error, Catch::Contains("still being written"));
  CHECK_FALSE(std::filesystem::exists(dir / "ckpt-2.h5"));
}

TEST_CASE("checkpoint writer: synchronous mode writes before submit returns", "[checkpoint]") {
  ScratchDirectory dir("sync");
  Observer observer;
  CheckpointWriter::Options options;
  options.asynchronous = false;
  CheckpointWriter writer(dir.path(), options, observer.report());
  CHECK_FALSE(writer.asynchronous());
  CHECK(writer.submit(synthetic_state(7), 0.0));
  CHECK(std::filesystem::exists(dir / "ckpt-7.h5"));
  CHECK(observer.steps(false) == std::vector<long>{7});
}

TEST_CASE("checkpoint writer: a failed write is reported, training goes on, write_now also throws",
          "[checkpoint]") {
  ScratchDirectory dir("failure");
  Observer observer;
  CheckpointWriter writer(dir.path(), {}, observer.report());
  writer.submit(synthetic_state(1), 0.0);
  writer.flush();
  inject_write_failure_after(10);
  CHECK(writer.submit(synthetic_state(2), 0.0));
  writer.flush();
  CHECK_THROWS_AS(writer.write_now(synthetic_state(3), 0.0), IoError);
  inject_write_failure_after(std::nullopt);
  writer.submit(synthetic_state(4), 0.0);
  writer.flush();
  REQUIRE(observer.reports.size() == 4);
  CHECK(observer.reports[0].error.empty());
  CHECK_THAT(observer.reports[1].error,
             Catch::Contains("ckpt-2.h5") && Catch::Contains("No space left on device"));
  CHECK_FALSE(observer.reports[1].skipped);
  CHECK_THAT(observer.reports[2].error, Catch::Contains("ckpt-3.h5"));
  CHECK(observer.reports[3].error.empty());
  CHECK(read_latest(dir.path()) == dir / "ckpt-4.h5");
}

TEST_CASE("checkpoint writer: the last written state comes back as a spare to capture into",
          "[checkpoint]") {
  ScratchDirectory dir("spare");
  CheckpointWriter writer(dir.path(), {});
  CHECK(writer.take_spare().model.empty());  // nothing written yet
  TrainingState first = synthetic_state(1, 5000);
  const float* memory = first.model.front().values.data();
  writer.submit(std::move(first), 0.0);
  writer.flush();
  TrainingState spare = writer.take_spare();
  CHECK(spare.model.front().values.data() == memory);
  CHECK(writer.take_spare().model.empty());  // handed out once
}
