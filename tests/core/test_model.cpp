#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <set>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/model.hpp"
#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"
#include "model_fixtures.hpp"

using namespace hardy;
using namespace hardy::core;

namespace {

ModelConfig tiny_config(NormKind norm = NormKind::group) {
  return testing::small_model_config(4, norm);
}

ModelConfig tiny_tiramisu() { return testing::small_tiramisu_config(); }

// `config` with `change` applied is refused, naming `field`.
void check_refused(Backend& backend, ModelConfig config,
                   const std::function<void(ModelConfig&)>& change, const std::string& field) {
  change(config);
  CHECK_THROWS_WITH(Model(backend, config), Catch::Contains(field));
}

Tensor random_input(Backend& backend, std::vector<std::int64_t> dims, std::uint64_t seed) {
  Tensor host = Tensor::host(dims, DType::f32, backend.activation_layout());
  SplitMix64 rng(seed);
  for (float& v : host.f32()) v = static_cast<float>(rng.normal());
  Tensor t = backend.empty(dims, DType::f32, backend.activation_layout());
  backend.copy(host, t);
  return t;
}

Tensor random_labels(Backend& backend, std::vector<std::int64_t> dims, std::uint64_t seed) {
  Tensor labels = backend.empty(dims, DType::i32, backend.activation_layout());
  SplitMix64 rng(seed);
  for (std::int64_t i = 0; i < labels.numel(); ++i)
    labels.data<std::int32_t>()[i] = static_cast<int>(rng.next() % 3);
  return labels;
}

double loss_of(Model& model, Backend& backend, const Tensor& x, const Tensor& labels,
               Tensor& dlogits) {
  const Tensor& logits = model.forward(x, true);
  if (!dlogits.defined()) dlogits = backend.empty(logits.dims(), DType::f32, logits.layout());
  const std::vector<float> weights{1.0f, 2.0f, 3.0f};
  return backend.softmax_cross_entropy(
      {.logits = logits, .labels = labels, .class_weights = weights, .grad_scale = 1.0f}, dlogits);
}

}  // namespace

TEST_CASE("model: logits have the input's spatial size for square and non-square inputs",
          "[core]") {
  auto backend = make_backend("cpu");
  Model model(*backend, tiny_config());
  model.initialize(1);
  for (auto dims :
       {std::vector<std::int64_t>{2, 16, 32, 32}, std::vector<std::int64_t>{1, 16, 24, 40}}) {
    const Tensor& logits = model.forward(random_input(*backend, dims, 3), true);
    CHECK(logits.dims() == std::vector<std::int64_t>{dims[0], 3, dims[2], dims[3]});
  }
}

TEST_CASE("model: inputs whose size does not divide by the output stride are rejected", "[core]") {
  auto backend = make_backend("cpu");
  Model model(*backend, tiny_config());
  CHECK_THROWS_AS(model.forward(random_input(*backend, {1, 16, 30, 32}, 3), true), InvalidArgument);
  CHECK_THROWS_AS(model.forward(random_input(*backend, {1, 8, 32, 32}, 3), true), InvalidArgument);
}

TEST_CASE("model: invalid configurations name the bad field", "[core]") {
  auto backend = make_backend("cpu");
  check_refused(
      *backend, tiny_config(), [](ModelConfig& c) { c.aspp_rates = {}; }, "aspp rates");
  check_refused(
      *backend, tiny_config(), [](ModelConfig& c) { c.width = 0; }, "width");
}

TEST_CASE("model: the same seed gives the same weights, another seed other weights", "[core]") {
  auto backend = make_backend("cpu");
  Model a(*backend, tiny_config()), b(*backend, tiny_config()), c(*backend, tiny_config());
  a.initialize(5);
  b.initialize(5);
  c.initialize(6);
  const auto& pa = a.parameters();
  bool all_equal = true, any_differs_from_c = false;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    auto va = pa[i]->value.f32(), vb = b.parameters()[i]->value.f32(),
         vc = c.parameters()[i]->value.f32();
    all_equal = all_equal && std::equal(va.begin(), va.end(), vb.begin());
    any_differs_from_c = any_differs_from_c || !std::equal(va.begin(), va.end(), vc.begin());
  }
  CHECK(all_equal);
  CHECK(any_differs_from_c);
}

TEST_CASE("model: parameter names are unique layer paths", "[core]") {
  auto backend = make_backend("cpu");
  Model model(*backend, tiny_config(NormKind::batch));
  std::set<std::string> names;
  for (auto* p : model.parameters()) names.insert(p->name);
  for (auto& [name, tensor] : model.buffers()) names.insert(name);
  CHECK(names.size() == model.parameters().size() + model.buffers().size());
  CHECK(names.count("encoder.stem.0.conv.weight") == 1);
  CHECK(names.count("aspp.image_pool.norm.running_mean") == 1);
  CHECK(names.count("decoder.classifier.bias") == 1);
}

TEST_CASE("model: every gradient is announced exactly once, after it is final", "[core]") {
  auto backend = make_backend("cpu");
  Model model(*backend, tiny_config());
  model.initialize(2);
  const Tensor x = random_input(*backend, {2, 16, 16, 16}, 4);
  const Tensor labels = random_labels(*backend, {2, 1, 16, 16}, 5);
  Tensor dlogits;
  loss_of(model, *backend, x, labels, dlogits);
  std::vector<int> announced(model.parameters().size(), 0);
  std::vector<std::vector<float>> at_announcement(model.parameters().size());
  model.backward(dlogits, [&](std::size_t i) {
    ++announced[i];
    auto g = model.parameters()[i]->grad.f32();
    at_announcement[i].assign(g.begin(), g.end());
  });
  for (std::size_t i = 0; i < announced.size(); ++i) {
    INFO(model.parameters()[i]->name);
    CHECK(announced[i] == 1);
    auto g = model.parameters()[i]->grad.f32();
    CHECK(std::equal(g.begin(), g.end(), at_announcement[i].begin()));
  }
}

// The whole network against central differences: this checks how the layers are wired (the
// pyramid's parallel branches, the concatenations, the skip connection whose gradients add up),
// on top of the per-operation checks of the backend tests.
// The tiramisu's dropout draws the same masks in every pass here (the same keys), so the loss
// stays a smooth function of the weights.
TEST_CASE("model: gradients match finite differences through the whole network", "[core]") {
  const std::vector<std::pair<std::string, ModelConfig>> networks{
      {"compact, group norm", tiny_config(NormKind::group)},
      {"compact, batch norm", tiny_config(NormKind::batch)},
      {"tiramisu", tiny_tiramisu()}};
  for (const auto& [what, config] : networks) {
    DYNAMIC_SECTION(what) {
      auto backend = make_backend("cpu");
      Model model(*backend, config);
      model.initialize(11);
      const Tensor x = random_input(*backend, {2, 16, 16, 16}, 12);
      const Tensor labels = random_labels(*backend, {2, 1, 16, 16}, 13);
      Tensor dlogits;
      loss_of(model, *backend, x, labels, dlogits);
      model.backward(dlogits);
      // Per parameter tensor, the derivative along the analytic gradient's direction must be
      // the gradient's norm. Moving whole tensors keeps the signal far above the f32 noise of
      // a single-element difference, so one tolerance fits every layer.
      double largest_norm = 0;
      for (auto* p : model.parameters())
        largest_norm = std::max(largest_norm, std::sqrt(backend->sum_squares(p->grad)));
      int checked = 0;
      for (auto* p : model.parameters()) {
        auto values = p->value.f32();
        const std::vector<float> grad(p->grad.f32().begin(), p->grad.f32().end());
        const std::vector<float> saved(values.begin(), values.end());
        double norm = 0;
        for (float g : grad) norm += static_cast<double>(g) * g;
        norm = std::sqrt(norm);
        if (norm == 0) continue;
        const double h = 1e-4;  // the network is strongly curved at initialisation
        auto shifted_loss = [&](double step) {
          for (std::size_t i = 0; i < values.size(); ++i)
            values[i] = static_cast<float>(saved[i] + step * grad[i] / norm);
          Tensor scratch;
          return loss_of(model, *backend, x, labels, scratch);
        };
        const double numeric = (shifted_loss(h) - shifted_loss(-h)) / (2 * h);
        std::copy(saved.begin(), saved.end(), values.begin());
        INFO(p->name << ": gradient norm " << norm << ", directional derivative " << numeric);
        // f32 rounding in the forward pass bounds what a difference can resolve; gradients far
        // below the largest one are checked only to that absolute floor.
        CHECK(std::abs(numeric - norm) <= 5e-2 * norm + 2e-3 * largest_norm);
        ++checked;
      }
      CHECK(checked >= static_cast<int>(model.parameters().size()) - 2);
    }
  }
}

TEST_CASE("model: batch normalization keeps running statistics for inference", "[core]") {
  auto backend = make_backend("cpu");
  Model model(*backend, tiny_config(NormKind::batch));
  model.initialize(3);
  const Tensor x = random_input(*backend, {4, 16, 16, 16}, 7);
  auto buffers = model.buffers();
  REQUIRE(!buffers.empty());
  std::vector<float> before(buffers[0].second->f32().begin(), buffers[0].second->f32().end());
  model.forward(x, true);
  auto after = buffers[0].second->f32();
  CHECK_FALSE(std::equal(before.begin(), before.end(), after.begin()));
  // Inference uses the running statistics, so its output differs from training mode's.
  std::vector<float> train_logits(model.forward(x, true).f32().begin(),
                                  model.forward(x, true).f32().end());
  const auto eval_logits = model.forward(x, false).f32();
  CHECK_FALSE(std::equal(train_logits.begin(), train_logits.end(), eval_logits.begin()));
}

TEST_CASE("model: the published networks have their published parameter counts", "[core]") {
  auto backend = make_backend("cpu");
  // The Gordon Bell run's Tiramisu (--blocks 2 2 2 4 5 --growth 32 --filter-sz 5): hardy's
  // defaults for --model tiramisu.
  ModelConfig tiramisu;
  tiramisu.architecture = Architecture::tiramisu;
  CHECK(Model(*backend, tiramisu).parameter_count() == 7'504'835);
  CHECK(tiramisu.input_multiple() == 16);
  // MLPerf HPC DeepCAM's DeepLabv3+ (16 channels in, 3 classes).
  ModelConfig deepcam;
  deepcam.architecture = Architecture::deepcam;
  CHECK(Model(*backend, deepcam).parameter_count() == 56'454'720);
  CHECK(deepcam.input_multiple() == 16);
  // The compact network at bench/gpu's climate size (the figure docs/gpu.md quotes).
  ModelConfig compact;
  compact.width = 64;
  compact.aspp_channels = 128;
  compact.decoder_channels = 128;
  compact.low_level_channels = 48;
  CHECK(Model(*backend, compact).parameter_count() == 2'360'163);
  CHECK(compact.input_multiple() == 8);
  // MLPerf HPC CosmoFlow at its published 4 x 128^3 input, 4 targets.
  ModelConfig cosmoflow;
  cosmoflow.architecture = Architecture::cosmoflow;
  cosmoflow.input_channels = 4;
  cosmoflow.num_classes = 4;
  CHECK(Model(*backend, cosmoflow).parameter_count() == 8'907'556);
  CHECK(cosmoflow.input_multiple() == 32);
}

TEST_CASE("model: cosmoflow regresses its targets from cubes of its volume", "[core]") {
  auto backend = make_backend("cpu");
  ModelConfig config;
  config.architecture = Architecture::cosmoflow;
  config.input_channels = 4;
  config.num_classes = 4;
  config.volume = 32;
  Model model(*backend, config);
  model.initialize(3);
  // Glorot-uniform weights, as the reference's Keras layers: within sqrt(6 / (fan_in + fan_out)).
  const Parameter& first = *model.parameters().front();
  CHECK(first.name == "conv0.weight");
  const double limit = std::sqrt(6.0 / (4 * 27 + 32 * 27));
  const auto values = first.value.f32();
  CHECK(*std::max_element(values.begin(), values.end()) <= limit);
  CHECK(*std::min_element(values.begin(), values.end()) >= -limit);
  CHECK(*std::max_element(values.begin(), values.end()) > 0.9 * limit);
  Tensor x = backend->empty({2, 4, 32, 32, 32}, DType::f32, backend->activation_layout());
  backend->fill(x, 1.0f);
  const Tensor& y = model.forward(x, true);
  CHECK(y.dims() == std::vector<std::int64_t>{2, 4});
  for (float v : y.f32()) CHECK(std::abs(v) < 1.2f);  // 1.2 tanh
  CHECK_THROWS_WITH(model.forward(random_input(*backend, {1, 4, 32, 32}, 3), true),
                    Catch::Contains("(N, 4, 32, 32, 32)"));
  config.volume = 48;
  CHECK_THROWS_WITH(config.validate(), Catch::Contains("multiple of 32"));
}

TEST_CASE("model: the tiramisu takes inputs whose size divides by its downsampling", "[core]") {
  auto backend = make_backend("cpu");
  Model model(*backend, tiny_tiramisu());  // two transitions down: multiples of 4
  model.initialize(1);
  const Tensor& logits = model.forward(random_input(*backend, {2, 16, 12, 20}, 3), true);
  CHECK(logits.dims() == std::vector<std::int64_t>{2, 3, 12, 20});
  CHECK_THROWS_WITH(model.forward(random_input(*backend, {1, 16, 12, 18}, 3), true),
                    Catch::Contains("divisible by 4"));
  check_refused(
      *backend, tiny_tiramisu(), [](ModelConfig& c) { c.dropout = 1.0f; }, "dropout");
  check_refused(
      *backend, tiny_tiramisu(), [](ModelConfig& c) { c.dense_kernel = 4; }, "dense kernel");
}

// A sample's dropout masks depend on its key and the step's seed only: a rank that computes it
// in another batch (a rebalance) or again (a rollback) gets the same logits.
TEST_CASE("model: dropout follows the sample and the step, not the batch", "[core]") {
  auto backend = make_backend("cpu");
  Model model(*backend, tiny_tiramisu());
  model.initialize(4);
  const Tensor pair = random_input(*backend, {2, 16, 8, 8}, 21);
  Tensor second = backend->empty({1, 16, 8, 8}, DType::f32, backend->activation_layout());
  const std::size_t per_sample = static_cast<std::size_t>(second.numel());
  std::copy_n(pair.f32().begin() + static_cast<std::ptrdiff_t>(per_sample), per_sample,
              second.f32().begin());
  auto logits_of = [&](const Tensor& x, std::vector<std::uint64_t> keys, std::uint64_t seed) {
    const Tensor& logits = model.forward(x, true, nullptr, {.seed = seed, .samples = keys});
    const auto values = logits.f32();
    const std::size_t last = values.size() / static_cast<std::size_t>(x.n());
    return std::vector<float>(values.end() - static_cast<std::ptrdiff_t>(last), values.end());
  };
  const auto in_pair = logits_of(pair, {40, 41}, 7);
  CHECK(logits_of(second, {41}, 7) == in_pair);            // the same sample alone
  CHECK(logits_of(second, {40}, 7) != in_pair);            // another sample's masks
  CHECK(logits_of(second, {41}, 8) != in_pair);            // another step's masks
  const auto eval_a = model.forward(second, false).f32();  // no dropout in inference
  const std::vector<float> eval(eval_a.begin(), eval_a.end());
  CHECK(std::vector<float>(model.forward(second, false).f32().begin(),
                           model.forward(second, false).f32().end()) == eval);
  CHECK_THROWS_WITH(
      model.forward(pair, true, nullptr, {.seed = 1, .samples = std::vector<std::uint64_t>{1}}),
      Catch::Contains("dropout keys"));
}
