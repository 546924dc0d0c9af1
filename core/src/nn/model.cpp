#include "hardy/core/nn/model.hpp"

#include <fmt/format.h>

#include <cmath>
#include <unordered_map>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"

namespace hardy::core {

void ModelConfig::validate() const {
  auto positive = [](int value, const char* field) {
    if (value <= 0)
      throw InvalidArgument(fmt::format("model {} must be positive, got {}", field, value));
  };
  positive(input_channels, "input channels");
  positive(num_classes, "classes");
  positive(width, "width");
  positive(depth, "depth");
  positive(aspp_channels, "aspp channels");
  positive(low_level_channels, "low-level channels");
  positive(decoder_channels, "decoder channels");
  positive(groups, "groups");
  if (aspp_rates.empty())
    throw InvalidArgument("model aspp rates must name at least one dilation rate");
  for (int rate : aspp_rates) positive(rate, "aspp rate");
  if (!(norm_eps > 0)) throw InvalidArgument("model normalization epsilon must be positive");
}

namespace {
using Block = ConvNormRelu;
ConvGeometry same(int kernel, int stride = 1, int dilation = 1) {
  return {stride, dilation * (kernel - 1) / 2, dilation};
}
}  // namespace

struct DeepLabV3Plus::Layers {
  // Encoder: stride 2, 4, 8, then an atrous stage that keeps stride 8.
  std::vector<Block> stem, stage4x, stage8x, atrous;
  // Atrous spatial pyramid pooling.
  std::vector<Block> pyramid;  // 1x1 branch, then one 3x3 branch per rate
  std::unique_ptr<Block> image_pool_conv, pyramid_projection;
  // Decoder.
  std::unique_ptr<Block> low_level_projection, fuse1, fuse2;
  std::unique_ptr<Conv2d> classifier;

  // Intermediate activations and gradients that no single layer owns.
  Tensor pooled, pooled_up, pyramid_concat, pyramid_up, decoder_concat, logits;
  Tensor pooled_grad, pooled_conv_grad, pyramid_grad, pyramid_concat_grad_slices[16];
  Tensor decoder_concat_grad, pyramid_up_grad, low_projection_grad, classifier_grad;
  Tensor high_grad, low_grad;
  const Tensor* input = nullptr;
};

DeepLabV3Plus::DeepLabV3Plus(Backend& backend, ModelConfig config)
    : backend_(backend), config_(std::move(config)), layers_(std::make_unique<Layers>()) {
  config_.validate();
  if (config_.aspp_rates.size() + 2 > std::size(layers_->pyramid_concat_grad_slices))
    throw InvalidArgument("model has too many aspp rates (at most 14)");
  const auto& c = config_;
  const NormKind nk = c.norm;
  const int w = c.width;
  auto stage = [&](std::vector<Block>& blocks, const std::string& name, int in, int out, int stride,
                   int dilation) {
    blocks.reserve(c.depth);
    for (int i = 0; i < c.depth; ++i) {
      blocks.emplace_back(backend, fmt::format("{}.{}", name, i), i == 0 ? in : out, out, 3,
                          same(3, i == 0 ? stride : 1, dilation), nk, c.groups, c.norm_eps);
    }
  };
  auto& L = *layers_;
  stage(L.stem, "encoder.stem", c.input_channels, w, 2, 1);
  stage(L.stage4x, "encoder.stage4x", w, 2 * w, 2, 1);
  stage(L.stage8x, "encoder.stage8x", 2 * w, 4 * w, 2, 1);
  stage(L.atrous, "encoder.atrous", 4 * w, 4 * w, 1, 2);
  const int high = 4 * w, a = c.aspp_channels;
  L.pyramid.reserve(c.aspp_rates.size() + 1);
  L.pyramid.emplace_back(backend, "aspp.branch1x1", high, a, 1, same(1), nk, c.groups, c.norm_eps);
  for (int rate : c.aspp_rates)
    L.pyramid.emplace_back(backend, fmt::format("aspp.rate{}", rate), high, a, 3, same(3, 1, rate),
                           nk, c.groups, c.norm_eps);
  L.image_pool_conv = std::make_unique<Block>(backend, "aspp.image_pool", high, a, 1, same(1), nk,
                                              c.groups, c.norm_eps);
  const int pyramid_out = a * static_cast<int>(L.pyramid.size() + 1);
  L.pyramid_projection = std::make_unique<Block>(backend, "aspp.projection", pyramid_out, a, 1,
                                                 same(1), nk, c.groups, c.norm_eps);
  L.low_level_projection =
      std::make_unique<Block>(backend, "decoder.low_level", 2 * w, c.low_level_channels, 1, same(1),
                              nk, c.groups, c.norm_eps);
  L.fuse1 = std::make_unique<Block>(backend, "decoder.fuse1", a + c.low_level_channels,
                                    c.decoder_channels, 3, same(3), nk, c.groups, c.norm_eps);
  L.fuse2 = std::make_unique<Block>(backend, "decoder.fuse2", c.decoder_channels,
                                    c.decoder_channels, 3, same(3), nk, c.groups, c.norm_eps);
  L.classifier = std::make_unique<Conv2d>(backend, "decoder.classifier", c.decoder_channels,
                                          c.num_classes, 1, same(1), true);

  auto add = [&](std::vector<Parameter*> ps) {
    parameters_.insert(parameters_.end(), ps.begin(), ps.end());
  };
  for (auto* blocks : {&L.stem, &L.stage4x, &L.stage8x, &L.atrous, &L.pyramid})
    for (auto& b : *blocks) add(b.parameters());
  for (auto* b : {L.image_pool_conv.get(), L.pyramid_projection.get(), L.low_level_projection.get(),
                  L.fuse1.get(), L.fuse2.get()})
    add(b->parameters());
  add(L.classifier->parameters());
}

DeepLabV3Plus::~DeepLabV3Plus() = default;

void DeepLabV3Plus::initialize(std::uint64_t seed) {
  for (std::size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = *parameters_[i];
    Tensor host = Tensor::host(p.value.dims(), DType::f32, p.value.layout());
    auto values = host.f32();
    const bool is_weight = p.value.rank() == 4;
    const bool is_scale = p.name.ends_with(".gamma");
    if (is_weight) {
      // Kaiming-normal for ReLU networks: std = sqrt(2 / fan_in).
      const double fan_in = static_cast<double>(p.value.dim(1) * p.value.dim(2) * p.value.dim(3));
      const double stddev = std::sqrt(2.0 / fan_in);
      SplitMix64 rng(mix_seed(seed, 0x5eed, i));
      for (float& v : values) v = static_cast<float>(stddev * rng.normal());
    } else {
      std::fill(values.begin(), values.end(), is_scale ? 1.0f : 0.0f);
    }
    backend_.copy(host, p.value);
  }
}

std::size_t DeepLabV3Plus::parameter_count() const {
  std::size_t count = 0;
  for (auto* p : parameters_) count += static_cast<std::size_t>(p->value.numel());
  return count;
}

std::vector<std::pair<std::string, Tensor*>> DeepLabV3Plus::buffers() {
  std::vector<std::pair<std::string, Tensor*>> all;
  auto& L = *layers_;
  auto add = [&](Block& b) {
    for (auto& entry : b.buffers()) all.push_back(entry);
  };
  for (auto* blocks : {&L.stem, &L.stage4x, &L.stage8x, &L.atrous, &L.pyramid})
    for (auto& b : *blocks) add(b);
  for (auto* b : {L.image_pool_conv.get(), L.pyramid_projection.get(), L.low_level_projection.get(),
                  L.fuse1.get(), L.fuse2.get()})
    add(*b);
  return all;
}

const Tensor& DeepLabV3Plus::forward(const Tensor& x, bool training, CrossRankSum* cross_rank) {
  auto& L = *layers_;
  const auto os = ModelConfig::output_stride;
  if (x.rank() != 4 || x.c() != config_.input_channels || x.h() % os != 0 || x.w() % os != 0 ||
      x.h() == 0 || x.w() == 0)
    throw InvalidArgument(
        fmt::format("model input must be (N, {}, H, W) with H and W divisible by {}; got {}",
                    config_.input_channels, os, x.describe()));
  L.input = &x;
  auto run = [&](std::vector<Block>& blocks, const Tensor& in) -> const Tensor& {
    const Tensor* t = &in;
    for (auto& b : blocks) t = &b.forward(*t, training, cross_rank);
    return *t;
  };
  const Tensor& low = run(L.stage4x, run(L.stem, x));
  const Tensor& high = run(L.atrous, run(L.stage8x, low));

  // Pyramid: parallel branches over the same stride-8 features, plus the image-level branch.
  std::vector<const Tensor*> branches;
  for (auto& b : L.pyramid) branches.push_back(&b.forward(high, training, cross_rank));
  ensure_tensor(backend_, L.pooled, {high.n(), high.c(), 1, 1});
  backend_.global_avg_pool_forward(high, L.pooled);
  const Tensor& pooled_conv = L.image_pool_conv->forward(L.pooled, training, cross_rank);
  ensure_tensor(backend_, L.pooled_up, {high.n(), pooled_conv.c(), high.h(), high.w()});
  backend_.upsample_bilinear_forward(pooled_conv, L.pooled_up);
  branches.push_back(&L.pooled_up);
  std::int64_t pyramid_channels = 0;
  for (auto* b : branches) pyramid_channels += b->c();
  ensure_tensor(backend_, L.pyramid_concat, {high.n(), pyramid_channels, high.h(), high.w()});
  backend_.concat_channels(branches, L.pyramid_concat);
  const Tensor& pyramid = L.pyramid_projection->forward(L.pyramid_concat, training, cross_rank);

  // Decoder at stride 4.
  ensure_tensor(backend_, L.pyramid_up, {low.n(), pyramid.c(), low.h(), low.w()});
  backend_.upsample_bilinear_forward(pyramid, L.pyramid_up);
  const Tensor& low_projected = L.low_level_projection->forward(low, training, cross_rank);
  const Tensor* decoder_inputs[] = {&L.pyramid_up, &low_projected};
  ensure_tensor(backend_, L.decoder_concat,
                {low.n(), L.pyramid_up.c() + low_projected.c(), low.h(), low.w()});
  backend_.concat_channels(decoder_inputs, L.decoder_concat);
  const Tensor& fused = L.fuse2->forward(L.fuse1->forward(L.decoder_concat, training, cross_rank),
                                         training, cross_rank);
  const Tensor& small_logits = L.classifier->forward(fused);
  ensure_tensor(backend_, L.logits, {x.n(), config_.num_classes, x.h(), x.w()});
  backend_.upsample_bilinear_forward(small_logits, L.logits);
  return L.logits;
}

void DeepLabV3Plus::backward(const Tensor& dlogits,
                             const std::function<void(std::size_t)>& on_grad_ready,
                             CrossRankSum* cross_rank) {
  auto& L = *layers_;
  if (L.input == nullptr) throw Error("model backward called before forward");
  if (!dlogits.same_shape(L.logits))
    throw InvalidArgument(fmt::format("dlogits {} does not match logits {}", dlogits.describe(),
                                      L.logits.describe()));

  std::unordered_map<const Parameter*, std::size_t> index;
  if (on_grad_ready)
    for (std::size_t i = 0; i < parameters_.size(); ++i) index[parameters_[i]] = i;
  auto ready = [&](std::vector<Parameter*> params) {
    if (!on_grad_ready) return;
    // Report in reverse construction order within a layer too: backward finishes them together.
    for (auto it = params.rbegin(); it != params.rend(); ++it) on_grad_ready(index.at(*it));
  };
  // Runs a block's backward and announces its parameters.
  auto back = [&](Block& b, const Tensor& dy, bool need_dx = true) -> const Tensor* {
    const Tensor* dx = b.backward(dy, need_dx, cross_rank);
    ready(b.parameters());
    return dx;
  };
  auto back_chain = [&](std::vector<Block>& blocks, const Tensor& dy,
                        bool need_first_dx) -> const Tensor* {
    const Tensor* d = &dy;
    for (std::size_t i = blocks.size(); i-- > 0;) d = back(blocks[i], *d, i > 0 || need_first_dx);
    return d;
  };
  auto accumulate_into = [&](Tensor& acc, const Tensor& grad, bool first) {
    if (first) {
      ensure_tensor(backend_, acc, grad.dims());
      backend_.copy(grad, acc);
    } else {
      backend_.axpy(1.0f, grad, acc);
    }
  };

  // Decoder.
  // The classifier runs at stride 4, the decoder's resolution.
  ensure_tensor(backend_, L.classifier_grad,
                {dlogits.n(), config_.num_classes, L.decoder_concat.h(), L.decoder_concat.w()});
  backend_.upsample_bilinear_backward(dlogits, L.classifier_grad);
  const Tensor* d = L.classifier->backward(L.classifier_grad, true);
  ready(L.classifier->parameters());
  d = back(*L.fuse2, *d);
  d = back(*L.fuse1, *d);
  ensure_tensor(backend_, L.pyramid_up_grad, L.pyramid_up.dims());
  ensure_tensor(backend_, L.low_projection_grad,
                {L.decoder_concat.n(), L.decoder_concat.c() - L.pyramid_up.c(),
                 L.decoder_concat.h(), L.decoder_concat.w()});
  Tensor* decoder_slices[] = {&L.pyramid_up_grad, &L.low_projection_grad};
  backend_.split_channels(*d, decoder_slices);
  const Tensor* low_from_decoder = back(*L.low_level_projection, L.low_projection_grad);
  accumulate_into(L.low_grad, *low_from_decoder, true);

  // Pyramid.
  ensure_tensor(
      backend_, L.pyramid_grad,
      {L.pyramid_concat.n(), config_.aspp_channels, L.pyramid_concat.h(), L.pyramid_concat.w()});
  backend_.upsample_bilinear_backward(L.pyramid_up_grad, L.pyramid_grad);
  d = back(*L.pyramid_projection, L.pyramid_grad);
  std::vector<Tensor*> slices;
  const std::size_t branch_count = L.pyramid.size() + 1;
  for (std::size_t i = 0; i < branch_count; ++i) {
    ensure_tensor(
        backend_, L.pyramid_concat_grad_slices[i],
        {L.pyramid_concat.n(), config_.aspp_channels, L.pyramid_concat.h(), L.pyramid_concat.w()});
    slices.push_back(&L.pyramid_concat_grad_slices[i]);
  }
  backend_.split_channels(*d, slices);
  ensure_tensor(backend_, L.pooled_conv_grad, {L.pooled.n(), config_.aspp_channels, 1, 1});
  backend_.upsample_bilinear_backward(*slices.back(), L.pooled_conv_grad);
  d = back(*L.image_pool_conv, L.pooled_conv_grad);
  ensure_tensor(backend_, L.high_grad,
                {L.pooled.n(), L.pooled.c(), L.pyramid_concat.h(), L.pyramid_concat.w()});
  backend_.global_avg_pool_backward(*d, L.high_grad);
  for (std::size_t i = L.pyramid.size(); i-- > 0;)
    accumulate_into(L.high_grad, *back(L.pyramid[i], *slices[i]), false);

  // Encoder: the stride-4 features also fed the decoder, so their gradients add up.
  d = back_chain(L.atrous, L.high_grad, true);
  d = back_chain(L.stage8x, *d, true);
  accumulate_into(L.low_grad, *d, false);
  d = back_chain(L.stage4x, L.low_grad, true);
  back_chain(L.stem, *d, false);
}

}  // namespace hardy::core
