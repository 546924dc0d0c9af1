// The sample prefetcher against fake sources that count, sleep, throw and note their threads.
#include <algorithm>
#include <atomic>
#include <bit>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/compute/forwarding_backend.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/prefetcher.hpp"
#include "hardy/core/support/error.hpp"

using namespace hardy;
using namespace hardy::core;
using namespace std::chrono_literals;

namespace {

constexpr SampleShape kShape{2, 4, 4};

// Sample i: every field value i + c / 10, every label i % 3. Loads take `delay`; the source
// counts loads started and finished and notes the threads that called it.
class FakeSource final : public SampleSource {
 public:
  explicit FakeSource(int concurrency = 4, std::chrono::milliseconds delay = 0ms,
                      std::set<std::size_t> bad = {})
      : concurrency_(concurrency), delay_(delay), bad_(std::move(bad)) {}
  std::size_t size() const override { return 1000; }
  SampleShape shape() const override { return kShape; }
  std::string describe() const override { return "fake"; }
  int load_concurrency() const override { return concurrency_; }
  void load(std::size_t index, std::span<float> fields,
            std::span<std::int32_t> labels) const override {
    check_load_arguments(index, fields, labels);
    started.fetch_add(1);
    const int inside_now = inside.fetch_add(1) + 1;
    {
      std::lock_guard lock(mutex_);
      threads_.insert(std::this_thread::get_id());
      most_inside_ = std::max(most_inside_, inside_now);
      order_.push_back(index);
    }
    std::this_thread::sleep_for(delay_);
    inside.fetch_sub(1);
    finished.fetch_add(1);
    if (bad_.contains(index)) throw BadSample(index, "file.h5", "fields are NaN");
    if (index == 999) throw IoError("disk gone");
    for (std::size_t k = 0; k < fields.size(); ++k)
      fields[k] = static_cast<float>(index) + static_cast<float>(k / 16) / 10.0f;
    std::fill(labels.begin(), labels.end(), static_cast<std::int32_t>(index % 3));
  }
  std::set<std::thread::id> threads() const {
    std::lock_guard lock(mutex_);
    return threads_;
  }
  std::vector<std::size_t> order() const {
    std::lock_guard lock(mutex_);
    return order_;
  }
  int most_inside() const {
    std::lock_guard lock(mutex_);
    return most_inside_;
  }
  mutable std::atomic<int> started{0}, finished{0}, inside{0};

 private:
  int concurrency_;
  std::chrono::milliseconds delay_;
  std::set<std::size_t> bad_;
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> threads_;
  mutable std::vector<std::size_t> order_;
  mutable int most_inside_ = 0;
};

struct Sample {
  std::vector<float> fields = std::vector<float>(kShape.field_elements());
  std::vector<std::int32_t> labels = std::vector<std::int32_t>(kShape.label_elements());
  bool operator==(const Sample&) const = default;
};

// Sample `index` loaded directly, from a source of its own (the sources under test count).
Sample direct(std::size_t index) {
  static const FakeSource reference;
  Sample s;
  reference.load(index, s.fields, s.labels);
  return s;
}

double take(SamplePrefetcher& prefetcher, std::size_t index, Sample& out) {
  return prefetcher.take(index, out.fields, out.labels);
}

// Waits (up to 10 s) until `condition` holds.
template <class Condition>
bool eventually(Condition condition) {
  for (int i = 0; i < 1000 && !condition(); ++i) std::this_thread::sleep_for(10ms);
  return condition();
}

}  // namespace

TEST_CASE("prefetcher: samples are those of direct loads, announced or not", "[core]") {
  const FakeSource source;
  for (int threads : {0, 1, 3}) {
    SamplePrefetcher prefetcher(source, threads, 4);
    CHECK(prefetcher.workers() == std::min(threads, 4));
    const std::vector<std::size_t> plan{5, 3, 8, 3, 1, 9};  // 3 twice: once per epoch
    prefetcher.announce(plan);
    for (std::size_t index : plan) {
      Sample s;
      take(prefetcher, index, s);
      CHECK(s == direct(index));
    }
    Sample never_announced;
    take(prefetcher, 42, never_announced);
    CHECK(never_announced == direct(42));
  }
}

TEST_CASE("prefetcher: loading overlaps with the consumer's work", "[core]") {
  const FakeSource source(4, 50ms);
  SamplePrefetcher prefetcher(source, 2, 4);
  const std::vector<std::size_t> plan{1, 2, 3, 4};
  prefetcher.announce(plan);
  // The "step": long enough for two threads to load all four samples (200 ms of loads).
  REQUIRE(eventually([&] { return source.finished.load() == 4; }));
  double waited = 0;
  for (std::size_t index : plan) {
    Sample s;
    waited += take(prefetcher, index, s);
    CHECK(s == direct(index));
  }
  CHECK(waited < 0.04);  // a synchronous load alone takes 0.05 s
  Sample s;
  CHECK(take(prefetcher, 7, s) >= 0.045);  // not announced: loaded while the caller waits
}

TEST_CASE("prefetcher: never more than the depth loads ahead of consumption", "[core]") {
  const FakeSource source(8, 5ms);
  const std::size_t depth = 3;
  SamplePrefetcher prefetcher(source, 4, depth);
  std::vector<std::size_t> plan(40);
  for (std::size_t i = 0; i < plan.size(); ++i) plan[i] = i;
  prefetcher.announce(plan);
  int taken = 0, most_ahead = 0;
  for (std::size_t index : plan) {
    std::this_thread::sleep_for(10ms);  // slower than the workers: they would race ahead
    most_ahead = std::max(most_ahead, source.started.load() - taken);
    Sample s;
    take(prefetcher, index, s);
    ++taken;
  }
  CHECK(most_ahead <= static_cast<int>(depth));
  CHECK(most_ahead >= 2);  // it does load ahead
  auto order = source.order();
  std::sort(order.begin(), order.end());
  CHECK(order == plan);  // each sample once
}

TEST_CASE("prefetcher: a sample planned twice loads once per slot, and no buffer is lost",
          "[core]") {
  const FakeSource source(4, 100ms);
  const std::size_t depth = 2;
  SamplePrefetcher prefetcher(source, 3, depth);
  // The window (the first two entries) holds sample 1 twice: once it loads there is nothing
  // else to load ahead, and the third entry, 1 again, already has its slot.
  const std::vector<std::size_t> plan{1, 1, 1};
  prefetcher.announce(plan);
  REQUIRE(eventually([&] { return source.started.load() >= 1; }));
  std::this_thread::sleep_for(50ms);  // time for an idle worker to (wrongly) load 1 again
  CHECK(source.started.load() == 1);
  // Every load ends before the first take(), so a second load into the slot would replace its
  // buffer, and that buffer would never come back.
  REQUIRE(eventually([&] { return source.finished.load() == source.started.load(); }));
  for (std::size_t index : plan) {
    Sample s;
    take(prefetcher, index, s);
    CHECK(s == direct(index));
  }
  // All `depth` buffers are free again: a plan of `depth` new samples loads ahead in full.
  const int before = source.started.load();
  prefetcher.announce(std::vector<std::size_t>{10, 11});
  CHECK(eventually([&] { return source.started.load() == before + static_cast<int>(depth); }));
  const auto order = source.order();
  CHECK(std::count(order.begin(), order.end(), 10) == 1);
  CHECK(std::count(order.begin(), order.end(), 11) == 1);
}

TEST_CASE("prefetcher: a new plan drops queued work no longer wanted and keeps the rest",
          "[core]") {
  const FakeSource source(4, 20ms);
  SamplePrefetcher prefetcher(source, 1, 2);
  prefetcher.announce(std::vector<std::size_t>{10, 11, 12, 13, 14, 15});
  REQUIRE(eventually([&] { return source.finished.load() == 2; }));  // 10 and 11 loaded
  // A "rebalance": this rank now needs 11, 20 and 21; 10 is no longer wanted, 12.. never start.
  prefetcher.announce(std::vector<std::size_t>{11, 20, 21});
  REQUIRE(eventually([&] { return source.finished.load() == 3; }));
  std::this_thread::sleep_for(100ms);  // time enough to load anything else it (wrongly) queued
  Sample s;
  take(prefetcher, 11, s);  // kept from the first plan: not loaded again (below)
  CHECK(s == direct(11));
  take(prefetcher, 20, s);
  take(prefetcher, 21, s);
  CHECK(s == direct(21));
  const auto order = source.order();
  CHECK(std::vector<std::size_t>(order.begin(), order.begin() + 4) ==
        std::vector<std::size_t>{10, 11, 20, 21});
  CHECK(std::count(order.begin(), order.end(), 12) == 0);
  CHECK(std::count(order.begin(), order.end(), 11) == 1);
}

TEST_CASE("prefetcher: a background load's exception comes out of that sample's take()", "[core]") {
  const FakeSource source(4, 0ms, {6});
  SamplePrefetcher prefetcher(source, 2, 4);
  prefetcher.announce(std::vector<std::size_t>{5, 6, 7, 999});
  REQUIRE(eventually([&] { return source.finished.load() == 4; }));
  Sample s;
  CHECK_NOTHROW(take(prefetcher, 5, s));
  try {
    take(prefetcher, 6, s);
    FAIL("no exception");
  } catch (const BadSample& bad) {
    CHECK(bad.index() == 6);
    CHECK(bad.file() == "file.h5");
    CHECK(std::string(bad.what()) == "file.h5: fields are NaN");
  }
  CHECK_NOTHROW(take(prefetcher, 7, s));
  CHECK(s == direct(7));
  CHECK_THROWS_AS(take(prefetcher, 999, s), IoError);
}

TEST_CASE("prefetcher: destroyed while loads run, with work queued", "[core]") {
  const FakeSource source(4, 100ms);
  {
    SamplePrefetcher prefetcher(source, 2, 8);
    prefetcher.announce(std::vector<std::size_t>{1, 2, 3, 4, 5, 6});
    REQUIRE(eventually([&] { return source.inside.load() == 2; }));
  }  // joins after the two running loads; the queued ones never start
  CHECK(source.inside.load() == 0);
  CHECK(source.started.load() < 6);
  {
    SamplePrefetcher prefetcher(source, 2, 8);
    prefetcher.announce(std::vector<std::size_t>{1, 2, 3});
    Sample s;
    take(prefetcher, 1, s);  // then the consumer leaves (an exception mid-step)
  }
}

TEST_CASE("prefetcher: a source that only its owner may call loads on the caller's thread",
          "[core]") {
  const FakeSource source(0);
  SamplePrefetcher prefetcher(source, 4, 8);
  CHECK(prefetcher.workers() == 0);
  prefetcher.announce(std::vector<std::size_t>{1, 2, 3});
  std::this_thread::sleep_for(20ms);
  CHECK(source.started.load() == 0);
  Sample s;
  for (std::size_t index : {1, 2, 3}) {
    take(prefetcher, index, s);
    CHECK(s == direct(index));
  }
  CHECK(source.threads() == std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST_CASE("prefetcher: a source of concurrency 1 is never entered by two threads", "[core]") {
  const FakeSource source(1, 2ms);
  SamplePrefetcher prefetcher(source, 3, 6);
  CHECK(prefetcher.workers() == 1);
  std::vector<std::size_t> plan;
  for (std::size_t i = 0; i < 30; ++i) plan.push_back(i % 2 == 0 ? i : 500 + i);
  // Every other sample is announced: the consumer loads those itself, beside the worker.
  std::vector<std::size_t> announced;
  for (std::size_t index : plan)
    if (index < 500) announced.push_back(index);
  prefetcher.announce(announced);
  std::vector<Sample> taken(plan.size());
  for (std::size_t i = 0; i < plan.size(); ++i) take(prefetcher, plan[i], taken[i]);
  CHECK(source.most_inside() == 1);
  for (std::size_t i = 0; i < plan.size(); ++i) CHECK(taken[i] == direct(plan[i]));
}

TEST_CASE("batch assembler: skip fills a bad sample with ignored pixels and reports it", "[core]") {
  const FakeSource source(4, 0ms, {6});
  auto backend = make_backend("cpu");
  BatchAssembler assembler(*backend, kShape);
  SamplePrefetcher prefetcher(source, 1, 4);
  const std::vector<std::size_t> batch{5, 6, 7};
  prefetcher.announce(batch);
  Tensor fields, labels;
  CHECK_THROWS_AS(assembler.load(prefetcher, batch, fields, labels, BadSamplePolicy::fail),
                  BadSample);

  prefetcher.announce(batch);
  const BatchLoad load = assembler.load(prefetcher, batch, fields, labels, BadSamplePolicy::skip);
  REQUIRE(load.skipped.size() == 1);
  CHECK(load.skipped[0].index == 6);
  CHECK(load.skipped[0].file == "file.h5");
  CHECK(load.skipped[0].reason == "fields are NaN");
  CHECK(load.data_wait_s >= 0);
  // Against the direct path on a batch without the bad sample: 5 and 7 are the same, 6 empty.
  Tensor good_fields, good_labels;
  assembler.load(source, std::vector<std::size_t>{5, 5, 7}, good_fields, good_labels);
  Tensor host_fields = Tensor::host(fields.dims(), DType::f32, Layout::nchw);
  Tensor host_good = Tensor::host(fields.dims(), DType::f32, Layout::nchw);
  backend->copy(fields, host_fields);
  backend->copy(good_fields, host_good);
  const auto per_sample = static_cast<std::ptrdiff_t>(kShape.field_elements());
  const auto f = host_fields.f32(), g = host_good.f32();
  CHECK(std::equal(f.begin(), f.begin() + per_sample, g.begin()));
  CHECK(std::all_of(f.begin() + per_sample, f.begin() + 2 * per_sample,
                    [](float v) { return v == 0.0f; }));
  CHECK(std::equal(f.begin() + 2 * per_sample, f.end(), g.begin() + 2 * per_sample));
  const auto* label = labels.data<std::int32_t>();
  const auto plane = static_cast<std::ptrdiff_t>(kShape.label_elements());
  CHECK(std::all_of(label + plane, label + 2 * plane,
                    [](std::int32_t l) { return l == kIgnoreLabel; }));
  CHECK(label[0] == 5 % 3);
  CHECK(label[2 * plane] == 7 % 3);
  CHECK(parse_bad_sample_policy("skip") == BadSamplePolicy::skip);
  CHECK(to_string(BadSamplePolicy::fail) == "fail");
  CHECK_THROWS_AS(parse_bad_sample_policy("ignore"), InvalidArgument);
}

namespace {

std::vector<float> host_values(Backend& backend, const Tensor& t) {
  Tensor host = Tensor::host(t.dims(), DType::f32, Layout::nchw);
  backend.copy(t, host);
  return {host.f32().begin(), host.f32().end()};
}

}  // namespace

TEST_CASE("batch assembler: a staged batch is the one a load gives, taken without loading again",
          "[core]") {
  const FakeSource source(4, 5ms);
  auto backend = make_backend("cpu");
  SamplePrefetcher prefetcher(source, 2, 8);
  BatchAssembler assembler(*backend, kShape);
  const std::vector<std::size_t> first{1, 2, 3}, second{4, 5, 6};
  prefetcher.announce(first);
  Tensor fields, labels;
  const BatchLoad loaded = assembler.load(prefetcher, first, fields, labels);
  CHECK_FALSE(loaded.staged);
  const Tensor first_fields = fields;  // shares its memory: the step that reads it may still run
  const auto first_values = host_values(*backend, fields);

  assembler.stage(prefetcher, second);
  CHECK(assembler.is_staged(second));
  CHECK_FALSE(assembler.is_staged(first));
  const BatchLoad staged = assembler.load(prefetcher, second, fields, labels);
  CHECK(staged.staged);
  CHECK(staged.skipped.empty());
  CHECK_FALSE(assembler.is_staged(second));  // taken
  const auto order = source.order();
  for (std::size_t index : second) CHECK(std::count(order.begin(), order.end(), index) == 1);
  // The staged batch went into other memory than the batch before it, which is untouched.
  CHECK(host_values(*backend, first_fields) == first_values);
  const FakeSource reference;
  Tensor direct_fields, direct_labels;
  assembler.load(reference, second, direct_fields, direct_labels);
  CHECK(host_values(*backend, fields) == host_values(*backend, direct_fields));
  for (std::int64_t i = 0; i < labels.numel(); ++i)
    REQUIRE(labels.data<std::int32_t>()[i] == direct_labels.data<std::int32_t>()[i]);
}

TEST_CASE(
    "batch assembler: a staged batch of other samples is dropped, with its error; taken, its "
    "error and its bad samples are the load's",
    "[core]") {
  const FakeSource source(4, 1ms, {6});
  auto backend = make_backend("cpu");
  SamplePrefetcher prefetcher(source, 2, 8);
  BatchAssembler assembler(*backend, kShape);
  Tensor fields, labels;
  // 999 cannot be read: nobody takes this batch, so nobody hears of it.
  assembler.stage(prefetcher, {997, 998, 999});
  const std::vector<std::size_t> other{7, 8};
  prefetcher.announce(other);
  const BatchLoad fresh = assembler.load(prefetcher, other, fields, labels);
  CHECK_FALSE(fresh.staged);
  CHECK(host_values(*backend, fields)[0] == 7.0f);

  assembler.stage(prefetcher, {998, 999});
  CHECK_THROWS_AS(assembler.load(prefetcher, std::vector<std::size_t>{998, 999}, fields, labels),
                  IoError);

  const std::vector<std::size_t> with_bad{5, 6, 7};
  assembler.stage(prefetcher, with_bad, BadSamplePolicy::skip);
  const BatchLoad load = assembler.load(prefetcher, with_bad, fields, labels);
  CHECK(load.staged);
  REQUIRE(load.skipped.size() == 1);
  CHECK(load.skipped[0].index == 6);
  CHECK(load.skipped[0].reason == "fields are NaN");
  const auto values = host_values(*backend, fields);
  const auto per_sample = static_cast<std::ptrdiff_t>(kShape.field_elements());
  CHECK(values[0] == 5.0f);
  CHECK(std::all_of(values.begin() + per_sample, values.begin() + 2 * per_sample,
                    [](float v) { return v == 0.0f; }));
  CHECK(values[2 * per_sample] == 7.0f);
}

TEST_CASE("batch assembler: destroyed while a staged batch still loads", "[core]") {
  const FakeSource source(2, 50ms);
  auto backend = make_backend("cpu");
  SamplePrefetcher prefetcher(source, 1, 4);
  {
    BatchAssembler assembler(*backend, kShape);
    assembler.stage(prefetcher, {1, 2, 3, 4});
  }  // waits for the loads it started, before the prefetcher goes
  CHECK(source.inside.load() == 0);
}

namespace {

// Fields held as bf16 words: sample i's value k is i + k / 8 (exact in bf16 for small i, k).
class Bf16Source final : public SampleSource {
 public:
  std::size_t size() const override { return 64; }
  SampleShape shape() const override { return kShape; }
  std::string describe() const override { return "bf16 fake"; }
  int load_concurrency() const override { return 4; }
  DType stored_dtype() const override { return DType::bf16; }
  void load(std::size_t index, std::span<float> fields,
            std::span<std::int32_t> labels) const override {
    check_load_arguments(index, fields, labels);
    std::vector<std::byte> stored(2 * fields.size());
    load_stored(index, stored, labels);
    widen_to_f32(DType::bf16, stored, fields);
  }
  void load_stored(std::size_t index, std::span<std::byte> fields,
                   std::span<std::int32_t> labels) const override {
    check_stored_arguments(index, fields, labels);
    stored_loads.fetch_add(1);
    auto* words = reinterpret_cast<std::uint16_t*>(fields.data());
    for (std::size_t k = 0; k < fields.size() / 2; ++k) {
      const float value = static_cast<float>(index) + static_cast<float>(k % 8) / 8.0f;
      words[k] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(value) >> 16);
    }
    std::fill(labels.begin(), labels.end(), static_cast<std::int32_t>(index % 3));
  }
  mutable std::atomic<int> stored_loads{0};
};

}  // namespace

TEST_CASE("prefetcher: a source's stored fields are loaded so, taken so or widened", "[core]") {
  const Bf16Source source;
  SamplePrefetcher prefetcher(source, 2, 4);
  const std::vector<std::size_t> plan{3, 4};
  prefetcher.announce(plan);
  std::vector<std::byte> stored(2 * kShape.field_elements());
  std::vector<std::int32_t> labels(kShape.label_elements());
  prefetcher.take_stored(3, stored, labels);
  std::vector<float> widened(kShape.field_elements());
  widen_to_f32(DType::bf16, stored, widened);
  Sample direct_sample;
  source.load(3, direct_sample.fields, direct_sample.labels);
  CHECK(widened == direct_sample.fields);
  CHECK(labels == direct_sample.labels);
  Sample taken;
  take(prefetcher, 4, taken);  // loaded as stored by a worker, widened by take()
  Sample expected;
  source.load(4, expected.fields, expected.labels);
  CHECK(taken == expected);
  CHECK(widened[1] == 3.125f);
  CHECK_THROWS_AS(prefetcher.take_stored(5, std::span<std::byte>(stored).first(10), labels),
                  InvalidArgument);
}

namespace {

// The prefetcher's memory, noting every block it hands out.
struct NotedMemory {
  std::shared_ptr<std::mutex> mutex = std::make_shared<std::mutex>();
  std::shared_ptr<std::vector<const void*>> blocks = std::make_shared<std::vector<const void*>>();
  Tensor operator()(std::vector<std::int64_t> dims, DType dtype, Layout layout) const {
    Tensor t = Tensor::host(std::move(dims), dtype, layout);
    std::lock_guard lock(*mutex);
    blocks->push_back(t.raw());
    return t;
  }
  bool handed_out(const void* block) const {
    std::lock_guard lock(*mutex);
    return std::find(blocks->begin(), blocks->end(), block) != blocks->end();
  }
  std::size_t count() const {
    std::lock_guard lock(*mutex);
    return blocks->size();
  }
};

Sample contents(SamplePrefetcher::Lease& lease) {
  Sample s;
  widen_to_f32(lease.fields().dtype(),
               {static_cast<const std::byte*>(lease.fields().raw()), lease.fields().bytes()},
               s.fields);
  std::copy_n(lease.labels().data<std::int32_t>(), s.labels.size(), s.labels.begin());
  return s;
}

}  // namespace

TEST_CASE("prefetcher: a lease is the loader's own buffer, and it goes back when the lease ends",
          "[core]") {
  const FakeSource source(4, 1ms);
  const NotedMemory memory;
  SamplePrefetcher prefetcher(source, 1, 1, memory);
  prefetcher.announce(std::vector<std::size_t>{4, 5});
  const void* first_block = nullptr;
  {
    SamplePrefetcher::Lease lease = prefetcher.lease(4);
    lease.rethrow_error();
    CHECK(contents(lease) == direct(4));
    CHECK(lease.fields().dims() == std::vector<std::int64_t>{1, 2, 4, 4});
    CHECK(lease.labels().dims() == std::vector<std::int64_t>{1, 1, 4, 4});
    CHECK(memory.handed_out(lease.fields().raw()));
    CHECK(memory.handed_out(lease.labels().raw()));
    first_block = lease.fields().raw();
    // Depth 1: while the lease holds the only buffer, sample 5 cannot start.
    std::this_thread::sleep_for(30ms);
    CHECK(source.started.load() == 1);
  }
  SamplePrefetcher::Lease next = prefetcher.lease(5);
  CHECK(contents(next) == direct(5));
  CHECK(next.fields().raw() == first_block);  // the same buffer, back in the pool
  CHECK(memory.count() == 2);                 // one buffer: its fields and its labels
  CHECK(source.started.load() == 2);
}

TEST_CASE("prefetcher: a lease of a sample not loaded ahead loads it; a failed load is the lease's",
          "[core]") {
  const FakeSource source(4, 0ms, {6});
  const NotedMemory memory;
  SamplePrefetcher prefetcher(source, 2, 2, memory);
  SamplePrefetcher::Lease unplanned = prefetcher.lease(3);  // never announced: loaded here
  unplanned.rethrow_error();
  CHECK(contents(unplanned) == direct(3));
  CHECK(memory.handed_out(unplanned.fields().raw()));
  SamplePrefetcher::Lease bad = prefetcher.lease(6);
  CHECK_THROWS_AS(bad.rethrow_error(), BadSample);
  prefetcher.announce(std::vector<std::size_t>{999});
  SamplePrefetcher::Lease lost = prefetcher.lease(999);  // loaded by a worker, which failed
  CHECK_THROWS_WITH(lost.rethrow_error(), Catch::Contains("disk gone"));
  SamplePrefetcher::Lease moved = std::move(unplanned);
  CHECK(contents(moved) == direct(3));
}

namespace {

// A backend whose uploads note the host memory they copy from.
class NotingBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::vector<const void*> sources;  // every host tensor an upload copied from

 protected:
  std::unique_ptr<InputUpload> do_start_upload() override {
    return std::make_unique<NotingUpload>(*this, ForwardingBackend::do_start_upload());
  }

 private:
  class NotingUpload final : public InputUpload {
   public:
    NotingUpload(NotingBackend& owner, std::unique_ptr<InputUpload> inner)
        : InputUpload(owner.operand_rules()), owner_(owner), inner_(std::move(inner)) {}
    double finish() override { return inner_->finish(); }
    void hand_over() override { inner_->hand_over(); }

   protected:
    void do_copy(const Tensor& src, Tensor& dst) override {
      owner_.sources.push_back(src.raw());
      inner_->copy(src, dst);
    }
    void do_copy_samples(std::span<const Tensor* const> samples, Tensor& dst) override {
      for (const Tensor* sample : samples) owner_.sources.push_back(sample->raw());
      inner_->copy_samples(samples, dst);
    }

   private:
    NotingBackend& owner_;
    std::unique_ptr<InputUpload> inner_;
  };
};

}  // namespace

TEST_CASE("batch assembler: a staged batch goes to the upload from the loaders' own buffers",
          "[core]") {
  const FakeSource source(4, 1ms, {6});
  auto cpu = make_backend("cpu");
  NotingBackend backend(*cpu);
  const NotedMemory memory;
  SamplePrefetcher prefetcher(source, 2, 8, memory);
  BatchAssembler assembler(backend, kShape);
  const std::vector<std::size_t> batch{5, 6, 7};
  prefetcher.announce(batch);
  assembler.stage(prefetcher, batch, BadSamplePolicy::skip);
  Tensor fields, labels;
  const BatchLoad load = assembler.load(prefetcher, batch, fields, labels);
  REQUIRE(load.staged);
  REQUIRE(load.skipped.size() == 1);
  // Fields and labels of each sample, copied from nowhere but the prefetcher's buffers.
  CHECK(backend.sources.size() == 2 * batch.size());
  for (const void* source_memory : backend.sources) CHECK(memory.handed_out(source_memory));
  const auto values = host_values(backend, fields);
  const auto per_sample = static_cast<std::ptrdiff_t>(kShape.field_elements());
  CHECK(std::equal(values.begin(), values.begin() + per_sample, direct(5).fields.begin()));
  CHECK(std::all_of(values.begin() + per_sample, values.begin() + 2 * per_sample,
                    [](float v) { return v == 0.0f; }));  // the bad sample, blanked in its lease
  CHECK(std::equal(values.begin() + 2 * per_sample, values.end(), direct(7).fields.begin()));
  const auto plane = static_cast<std::ptrdiff_t>(kShape.label_elements());
  CHECK(labels.data<std::int32_t>()[plane] == kIgnoreLabel);
  CHECK(labels.data<std::int32_t>()[2 * plane] == 7 % 3);
}

TEST_CASE("batch assembler: a staged batch of bf16 samples on the cpu is widened, as a load is",
          "[core]") {
  const Bf16Source source;
  auto backend = make_backend("cpu");
  SamplePrefetcher prefetcher(source, 2, 8);
  BatchAssembler assembler(*backend, kShape);
  const std::vector<std::size_t> batch{3, 9};
  prefetcher.announce(batch);
  assembler.stage(prefetcher, batch);
  Tensor fields, labels;
  REQUIRE(assembler.load(prefetcher, batch, fields, labels).staged);
  Tensor direct_fields, direct_labels;
  assembler.load(source, batch, direct_fields, direct_labels);
  CHECK(host_values(*backend, fields) == host_values(*backend, direct_fields));
  CHECK(host_values(*backend, fields)[1] == 3.125f);
}

TEST_CASE("input upload: samples that lie apart are copied as their stack would be", "[core]") {
  auto backend = make_backend("cpu");
  Tensor stacked = Tensor::host({3, 2, 2, 2}, DType::f32, Layout::nchw);
  for (std::int64_t i = 0; i < stacked.numel(); ++i) stacked.f32()[i] = static_cast<float>(i);
  std::vector<Tensor> samples;
  for (std::int64_t n = 0; n < 3; ++n) {
    Tensor& sample = samples.emplace_back(Tensor::host({1, 2, 2, 2}, DType::f32, Layout::nchw));
    std::copy_n(stacked.f32().begin() + n * 8, 8, sample.f32().begin());
  }
  const std::vector<const Tensor*> parts{&samples[0], &samples[1], &samples[2]};
  Tensor expected = backend->empty({3, 2, 2, 2}, DType::f32, backend->activation_layout());
  backend->copy(stacked, expected);
  Tensor dst = backend->empty({3, 2, 2, 2}, DType::f32, backend->activation_layout());
  {
    auto upload = backend->start_upload();
    upload->copy_samples(parts, dst);
    upload->finish();
    samples.clear();  // free once finished: the copy does not read them later
    upload->hand_over();
  }
  CHECK(host_values(*backend, dst) == host_values(*backend, expected));

  auto upload = backend->start_upload();
  const Tensor other = Tensor::host({1, 2, 2, 1}, DType::f32, Layout::nchw);
  const Tensor wrong_type = Tensor::host({1, 2, 2, 2}, DType::i32, Layout::nchw);
  CHECK_THROWS_AS(upload->copy_samples(std::vector<const Tensor*>{&other, &other, &other}, dst),
                  InvalidArgument);
  CHECK_THROWS_AS(upload->copy_samples(std::vector<const Tensor*>{&wrong_type}, dst),
                  InvalidArgument);
  CHECK_THROWS_WITH(
      upload->copy_samples(std::vector<const Tensor*>{&wrong_type, &wrong_type, &wrong_type}, dst),
      Catch::Contains("differ in dtype"));
}
