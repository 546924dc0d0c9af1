#include "hardy/core/nn/layers.hpp"

#include <fmt/format.h>

#include <cmath>

#include "hardy/core/support/error.hpp"

namespace hardy::core {

NormKind parse_norm_kind(const std::string& name) {
  if (name == "group") return NormKind::group;
  if (name == "batch") return NormKind::batch;
  throw InvalidArgument(fmt::format("unknown normalization '{}' (choose group or batch)", name));
}

std::string to_string(NormKind kind) { return kind == NormKind::group ? "group" : "batch"; }

int group_count(int channels, int wanted) {
  for (int g = std::min(wanted, channels); g > 1; --g)
    if (channels % g == 0) return g;
  return 1;
}

namespace {

// The weight, then the bias where there is one: the order a checkpoint names them in.
std::vector<Parameter*> weight_and_bias(Parameter& weight, Parameter& bias, bool has_bias) {
  if (has_bias) return {&weight, &bias};
  return {&weight};
}

}  // namespace

Parameter make_parameter(Backend& backend, std::string name, std::vector<std::int64_t> dims,
                         bool weight_decay) {
  // Convolution weights are row-major OIHW (OIDHW for volumes); the others flat.
  const Layout layout = dims.size() == 4 || dims.size() == 5 ? Layout::nchw : Layout::flat;
  Parameter p;
  p.name = std::move(name);
  p.value = backend.empty(dims, DType::f32, layout);
  p.grad = backend.empty(dims, DType::f32, layout);
  p.weight_decay = weight_decay;
  return p;
}

// ---------------------------------------------------------------------------------------------
Conv::Conv(Backend& backend, std::string name, int in_channels, int out_channels, int kernel,
           ConvGeometry geometry, bool bias, int spatial_dims)
    : backend_(backend),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel),
      spatial_dims_(spatial_dims),
      geometry_(geometry),
      has_bias_(bias) {
  if (spatial_dims != 2 && spatial_dims != 3)
    throw InvalidArgument(
        fmt::format("{}: a convolution is 2-D or 3-D, not {}-D", name, spatial_dims));
  if (geometry.groups < 1 || in_channels % geometry.groups != 0 ||
      out_channels % geometry.groups != 0)
    throw InvalidArgument(fmt::format("{}: {} groups do not divide {} input and {} output channels",
                                      name, geometry.groups, in_channels, out_channels));
  std::vector<std::int64_t> weight_dims{out_channels, in_channels / geometry.groups};
  weight_dims.insert(weight_dims.end(), spatial_dims, kernel);
  weight_ = make_parameter(backend, name + ".weight", std::move(weight_dims), true);
  if (has_bias_) bias_ = make_parameter(backend, name + ".bias", {out_channels}, false);
}

const Tensor& Conv::forward(const Tensor& x) {
  if (static_cast<int>(x.rank()) != 2 + spatial_dims_ || x.dim(1) != in_channels_)
    throw InvalidArgument(fmt::format("{}: expected (N, {}, {}), got {}", weight_.name,
                                      in_channels_, spatial_dims_ == 3 ? "D, H, W" : "H, W",
                                      x.describe()));
  input_ = x;
  std::vector<std::int64_t> dims{x.dim(0), out_channels_};
  for (std::size_t i = 2; i < x.rank(); ++i)
    dims.push_back(conv_output_size(static_cast<int>(x.dim(i)), kernel_, geometry_));
  ensure_tensor(backend_, output_, dims);
  const Tensor* bias = has_bias_ ? &bias_.value : nullptr;
  if (spatial_dims_ == 3)
    backend_.conv3d_forward(x, weight_.value, bias, geometry_, output_);
  else
    backend_.conv2d_forward(x, weight_.value, bias, geometry_, output_);
  return output_;
}

const Tensor* Conv::backward(const Tensor& dy, bool need_input_grad) {
  Tensor* bias_grad = has_bias_ ? &bias_.grad : nullptr;
  if (spatial_dims_ == 3)
    backend_.conv3d_backward_weights(input_, dy, geometry_, weight_.grad, bias_grad);
  else
    backend_.conv2d_backward_weights(input_, dy, geometry_, weight_.grad, bias_grad);
  if (!need_input_grad) return nullptr;
  ensure_tensor(backend_, input_grad_, input_.dims());
  if (spatial_dims_ == 3)
    backend_.conv3d_backward_data(dy, weight_.value, geometry_, input_grad_);
  else
    backend_.conv2d_backward_data(dy, weight_.value, geometry_, input_grad_);
  return &input_grad_;
}

std::vector<Parameter*> Conv::parameters() { return weight_and_bias(weight_, bias_, has_bias_); }

// ---------------------------------------------------------------------------------------------
ConvTranspose2d::ConvTranspose2d(Backend& backend, std::string name, int in_channels,
                                 int out_channels, int kernel, ConvGeometry geometry, bool bias)
    : backend_(backend),
      in_channels_(in_channels),
      out_channels_(out_channels),
      geometry_(geometry),
      has_bias_(bias) {
  weight_ =
      make_parameter(backend, name + ".weight", {in_channels, out_channels, kernel, kernel}, true);
  if (has_bias_) bias_ = make_parameter(backend, name + ".bias", {out_channels}, false);
}

const Tensor& ConvTranspose2d::forward(const Tensor& x, std::int64_t out_height,
                                       std::int64_t out_width) {
  if (x.c() != in_channels_)
    throw InvalidArgument(fmt::format("{}: expected {} input channels, got {}", weight_.name,
                                      in_channels_, x.describe()));
  input_ = x;
  ensure_tensor(backend_, output_, {x.n(), out_channels_, out_height, out_width});
  backend_.conv2d_transpose_forward(x, weight_.value, has_bias_ ? &bias_.value : nullptr, geometry_,
                                    output_);
  return output_;
}

const Tensor* ConvTranspose2d::backward(const Tensor& dy, bool need_input_grad) {
  backend_.conv2d_transpose_backward_weights(input_, dy, geometry_, weight_.grad,
                                             has_bias_ ? &bias_.grad : nullptr);
  if (!need_input_grad) return nullptr;
  ensure_tensor(backend_, input_grad_, input_.dims());
  backend_.conv2d_transpose_backward_data(dy, weight_.value, geometry_, input_grad_);
  return &input_grad_;
}

std::vector<Parameter*> ConvTranspose2d::parameters() {
  return weight_and_bias(weight_, bias_, has_bias_);
}

// ---------------------------------------------------------------------------------------------
Norm::Norm(Backend& backend, std::string name, int channels, NormKind kind, int groups, float eps,
           bool relu)
    : backend_(backend),
      name_(std::move(name)),
      channels_(channels),
      kind_(kind),
      groups_(group_count(channels, groups)),
      eps_(eps),
      relu_(relu) {
  gamma_ = make_parameter(backend, name_ + ".gamma", {channels}, false);
  beta_ = make_parameter(backend, name_ + ".beta", {channels}, false);
  backend.fill(gamma_.value, 1.0f);
  if (kind_ == NormKind::batch) {
    running_mean_ = backend.empty({channels}, DType::f32, Layout::flat);
    running_var_ = backend.empty({channels}, DType::f32, Layout::flat);
    backend.fill(running_var_, 1.0f);
  }
}

namespace {

// Moves a small device or host tensor's values into doubles and back, for cross-rank sums.
void append_values(Backend& backend, const Tensor& t, std::vector<double>& out) {
  Tensor host = Tensor::host(t.dims(), DType::f32, t.layout());
  backend.copy(t, host);
  for (float v : host.f32()) out.push_back(v);
}

void assign_values(Backend& backend, std::span<const double> values, Tensor& t) {
  Tensor host = Tensor::host(t.dims(), DType::f32, t.layout());
  auto dst = host.f32();
  for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = static_cast<float>(values[i]);
  backend.copy(host, t);
}

}  // namespace

const Tensor& Norm::forward(const Tensor& x, bool training, CrossRankSum* cross_rank) {
  if (x.c() != channels_)
    throw InvalidArgument(
        fmt::format("{}: expected {} channels, got {}", name_, channels_, x.describe()));
  training_ = training;
  input_ = x;
  ensure_tensor(backend_, output_, x.dims());
  if (kind_ == NormKind::group) {
    ensure_tensor(backend_, mean_, {x.n(), groups_});
    ensure_tensor(backend_, second_stat_, {x.n(), groups_});
    backend_.group_norm_forward({.x = x,
                                 .gamma = gamma_.value,
                                 .beta = beta_.value,
                                 .groups = groups_,
                                 .eps = eps_,
                                 .fuse_relu = relu_},
                                output_, mean_, second_stat_);
    return output_;
  }
  ensure_tensor(backend_, mean_, {channels_});
  ensure_tensor(backend_, second_stat_, {channels_});
  auto normalize = [&](const Tensor& mean, const Tensor& variance) {
    backend_.batch_norm_apply({.x = x,
                               .mean = mean,
                               .variance = variance,
                               .gamma = gamma_.value,
                               .beta = beta_.value,
                               .eps = eps_,
                               .fuse_relu = relu_},
                              output_);
  };
  if (!training) {
    normalize(running_mean_, running_var_);
    return output_;
  }
  // Batch statistics over the *global* batch: local sums, summed across ranks, then moments.
  Tensor& sum = mean_;
  Tensor& sum_squares = second_stat_;
  backend_.batch_norm_statistics(x, sum, sum_squares);
  std::vector<double> stats;
  stats.reserve(2 * channels_ + 1);
  append_values(backend_, sum, stats);
  append_values(backend_, sum_squares, stats);
  stats.push_back(static_cast<double>(x.n() * x.h() * x.w()));
  if (cross_rank) cross_rank->sum(stats);
  count_ = stats.back();
  std::vector<double> moments(2 * channels_);
  for (int c = 0; c < channels_; ++c) {
    const double mean = stats[c] / count_;
    moments[c] = mean;
    moments[channels_ + c] = std::max(0.0, stats[channels_ + c] / count_ - mean * mean);
  }
  assign_values(backend_, std::span(moments).first(channels_), mean_);
  assign_values(backend_, std::span(moments).subspan(channels_), second_stat_);
  normalize(mean_, second_stat_);

  // Running statistics as in PyTorch: momentum 0.1, unbiased variance.
  constexpr double momentum = 0.1;
  Tensor host_mean = Tensor::host({channels_}, DType::f32, Layout::flat);
  Tensor host_var = Tensor::host({channels_}, DType::f32, Layout::flat);
  backend_.copy(running_mean_, host_mean);
  backend_.copy(running_var_, host_var);
  const double unbias = count_ > 1 ? count_ / (count_ - 1) : 1.0;
  for (int c = 0; c < channels_; ++c) {
    host_mean.f32()[c] =
        static_cast<float>((1 - momentum) * host_mean.f32()[c] + momentum * moments[c]);
    host_var.f32()[c] = static_cast<float>((1 - momentum) * host_var.f32()[c] +
                                           momentum * moments[channels_ + c] * unbias);
  }
  backend_.copy(host_mean, running_mean_);
  backend_.copy(host_var, running_var_);
  return output_;
}

const Tensor& Norm::backward(const Tensor& dy, CrossRankSum* cross_rank) {
  ensure_tensor(backend_, input_grad_, input_.dims());
  if (kind_ == NormKind::group) {
    backend_.group_norm_backward({.x = input_,
                                  .y = output_,
                                  .dy = dy,
                                  .gamma = gamma_.value,
                                  .mean = mean_,
                                  .rstd = second_stat_,
                                  .groups = groups_,
                                  .fuse_relu = relu_},
                                 input_grad_, gamma_.grad, beta_.grad);
    return input_grad_;
  }
  if (!training_) throw Error(fmt::format("{}: backward after an inference-mode forward", name_));
  backend_.batch_norm_backward_statistics({.x = input_,
                                           .y = output_,
                                           .dy = dy,
                                           .mean = mean_,
                                           .variance = second_stat_,
                                           .eps = eps_,
                                           .fuse_relu = relu_},
                                          gamma_.grad, beta_.grad);
  // The parameter gradients stay local (the gradient allreduce sums them once); the input
  // gradient needs the global sums.
  ensure_tensor(backend_, global_dgamma_, {channels_});
  ensure_tensor(backend_, global_dbeta_, {channels_});
  backend_.copy(gamma_.grad, global_dgamma_);
  backend_.copy(beta_.grad, global_dbeta_);
  if (cross_rank) {
    std::vector<double> sums;
    sums.reserve(2 * channels_);
    append_values(backend_, gamma_.grad, sums);
    append_values(backend_, beta_.grad, sums);
    cross_rank->sum(sums);
    assign_values(backend_, std::span(sums).first(channels_), global_dgamma_);
    assign_values(backend_, std::span(sums).subspan(channels_), global_dbeta_);
  }
  backend_.batch_norm_backward_data({.x = input_,
                                     .y = output_,
                                     .dy = dy,
                                     .mean = mean_,
                                     .variance = second_stat_,
                                     .gamma = gamma_.value,
                                     .dgamma = global_dgamma_,
                                     .dbeta = global_dbeta_,
                                     .eps = eps_,
                                     .fuse_relu = relu_,
                                     .count = count_},
                                    input_grad_);
  return input_grad_;
}

std::vector<Parameter*> Norm::parameters() { return {&gamma_, &beta_}; }

std::vector<std::pair<std::string, Tensor*>> Norm::buffers() {
  if (kind_ != NormKind::batch) return {};
  return {{name_ + ".running_mean", &running_mean_}, {name_ + ".running_var", &running_var_}};
}

// ---------------------------------------------------------------------------------------------
ConvNormRelu::ConvNormRelu(Backend& backend, const std::string& name, int in_channels,
                           int out_channels, int kernel, ConvGeometry geometry, NormKind norm,
                           int groups, float eps)
    : conv_(backend, name + ".conv", in_channels, out_channels, kernel, geometry, false),
      norm_(backend, name + ".norm", out_channels, norm, groups, eps, true) {}

const Tensor& ConvNormRelu::forward(const Tensor& x, bool training, CrossRankSum* cross_rank) {
  return norm_.forward(conv_.forward(x), training, cross_rank);
}

const Tensor* ConvNormRelu::backward(const Tensor& dy, bool need_input_grad,
                                     CrossRankSum* cross_rank) {
  return conv_.backward(norm_.backward(dy, cross_rank), need_input_grad);
}

std::vector<Parameter*> ConvNormRelu::parameters() {
  auto params = conv_.parameters();
  for (auto* p : norm_.parameters()) params.push_back(p);
  return params;
}

}  // namespace hardy::core
