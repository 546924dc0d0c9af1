// The next step's batch staged on a GPU (core::BatchAssembler::stage): leased from the
// prefetcher's buffers (page-locked or not) on a thread of its own, each sample copied from its
// buffer on the upload's stream and handed to the compute stream, it equals the batch a synchronous
// load gives, bit for bit, in f32 from an f32 source and in bf16 as a bf16 source stores it.
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "gpu_test_support.hpp"
#include "hardy/core/data/batch_assembler.hpp"
#include "hardy/core/data/prefetcher.hpp"

using namespace hardy;
using namespace hardy::core;
using namespace hardy::gpu_test;

namespace {

constexpr SampleShape kShape{16, 48, 64};

// Sample i's field value k: i % 64 + (k % 64) / 64, stored as bf16 (rounded: load() widens
// what load_stored() gives, as a source must) or as f32.
class Fields final : public SampleSource {
 public:
  explicit Fields(DType stored) : stored_(stored) {}
  std::size_t size() const override { return 256; }
  SampleShape shape() const override { return kShape; }
  std::string describe() const override { return "fields"; }
  int load_concurrency() const override { return 8; }
  DType stored_dtype() const override { return stored_; }
  void load(std::size_t index, std::span<float> fields,
            std::span<std::int32_t> labels) const override {
    check_load_arguments(index, fields, labels);
    if (stored_ == DType::bf16) {
      std::vector<std::byte> stored(2 * fields.size());
      load_stored(index, stored, labels);
      widen_to_f32(DType::bf16, stored, fields);
      return;
    }
    for (std::size_t k = 0; k < fields.size(); ++k) fields[k] = value(index, k);
    for (std::size_t k = 0; k < labels.size(); ++k)
      labels[k] = static_cast<std::int32_t>((index + k) % 3);
  }
  void load_stored(std::size_t index, std::span<std::byte> fields,
                   std::span<std::int32_t> labels) const override {
    if (stored_ == DType::f32) return SampleSource::load_stored(index, fields, labels);
    check_stored_arguments(index, fields, labels);
    auto* words = reinterpret_cast<std::uint16_t*>(fields.data());
    for (std::size_t k = 0; k < fields.size() / 2; ++k)
      words[k] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(value(index, k)) >> 16);
    for (std::size_t k = 0; k < labels.size(); ++k)
      labels[k] = static_cast<std::int32_t>((index + k) % 3);
  }

 private:
  static float value(std::size_t index, std::size_t k) {
    return static_cast<float>(index % 64) + static_cast<float>(k % 64) / 64.0f;
  }
  DType stored_;
};

}  // namespace

TEST_CASE("staged input on the gpu: a staged batch equals a synchronous load, bit for bit",
          "[gpu]") {
  for (DType activations : {DType::f32, DType::bf16}) {
    for (DType stored : {DType::f32, DType::bf16}) {
      // The loaders' buffers page-locked (as training has them), or pageable.
      for (bool pinned : {true, false}) {
        CAPTURE(to_string(activations), to_string(stored), pinned);
        CudaOptions options;
        options.activation_dtype = activations;
        CudaBackend cuda(options);
        const Fields source(stored);
        SamplePrefetcher prefetcher(
            source, 4, 16, [&](std::vector<std::int64_t> dims, DType dtype, Layout layout) {
              return pinned ? cuda.empty_host(std::move(dims), dtype, layout)
                            : Tensor::host(std::move(dims), dtype, layout);
            });
        BatchAssembler staged_assembler(cuda, kShape), direct_assembler(cuda, kShape);
        Tensor fields, labels, direct_fields, direct_labels;
        std::vector<std::vector<std::size_t>> batches{{1, 2, 3, 4}, {9, 8, 7, 6}, {5, 5, 10, 11}};
        std::vector<std::size_t> plan;
        for (const auto& b : batches) plan.insert(plan.end(), b.begin(), b.end());
        prefetcher.announce(plan);
        staged_assembler.load(prefetcher, batches[0], fields, labels);
        for (std::size_t b = 1; b < batches.size(); ++b) {
          staged_assembler.stage(prefetcher, batches[b]);
          // The step that reads the current batch runs meanwhile.
          Tensor doubled = cuda.empty(fields.dims(), fields.dtype(), Layout::nhwc);
          cuda.fill(doubled, 0.0f);
          cuda.axpy(2.0f, fields, doubled);
          const BatchLoad load = staged_assembler.load(prefetcher, batches[b], fields, labels);
          CHECK(load.staged);
          CHECK(load.input_device_s > 0);
          direct_assembler.load(source, batches[b], direct_fields, direct_labels);
          const Tensor got = to_host_f32(cuda, fields), want = to_host_f32(cuda, direct_fields);
          for (std::int64_t i = 0; i < got.numel(); ++i)
            REQUIRE(got.data<float>()[i] == want.data<float>()[i]);
          Tensor got_labels = Tensor::host(labels.dims(), DType::i32, labels.layout());
          Tensor want_labels = Tensor::host(labels.dims(), DType::i32, labels.layout());
          cuda.copy(labels, got_labels);
          cuda.copy(direct_labels, want_labels);
          for (std::int64_t i = 0; i < got_labels.numel(); ++i)
            REQUIRE(got_labels.data<std::int32_t>()[i] == want_labels.data<std::int32_t>()[i]);
        }
      }
    }
  }
}
