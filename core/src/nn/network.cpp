#include "hardy/core/nn/network.hpp"

#include <fmt/format.h>

#include <set>

#include "hardy/core/support/error.hpp"
#include "hardy/core/support/random.hpp"
#include "nn/network_layers.hpp"

namespace hardy::core {

// ---- layers ----------------------------------------------------------------------------------
namespace layers {

const Tensor& Relu::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  ensure_tensor(backend_, output_, inputs[0]->dims());
  backend_.relu_forward(*inputs[0], output_);
  return output_;
}

void Relu::backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                    CrossRankSum*) {
  if (!need[0]) return;
  ensure_tensor(backend_, input_grad_, dy.dims());
  backend_.relu_backward(output_, dy, input_grad_);
  grads[0] = &input_grad_;
}

const Tensor& Add::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  if (!inputs[0]->same_shape(*inputs[1]))
    throw InvalidArgument(fmt::format("add: inputs {} and {} differ in shape",
                                      inputs[0]->describe(), inputs[1]->describe()));
  ensure_tensor(backend_, output_, inputs[0]->dims());
  backend_.copy(*inputs[0], output_);
  backend_.axpy(1.0f, *inputs[1], output_);
  return output_;
}

void Add::backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                   CrossRankSum*) {
  // The gradient of a sum is dy for both; the network copies before it accumulates into it.
  for (std::size_t i = 0; i < need.size(); ++i)
    if (need[i]) grads[i] = &dy;
}

const Tensor& Concat::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  std::int64_t channels = 0;
  for (const Tensor* t : inputs) channels += t->c();
  const Tensor& first = *inputs[0];
  ensure_tensor(backend_, output_, {first.n(), channels, first.h(), first.w()});
  backend_.concat_channels(inputs, output_);
  input_grads_.resize(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    ensure_tensor(backend_, input_grads_[i], inputs[i]->dims());
  return output_;
}

void Concat::backward(const Tensor& dy, std::span<const bool>, std::span<const Tensor*> grads,
                      CrossRankSum*) {
  std::vector<Tensor*> slices;
  for (Tensor& g : input_grads_) slices.push_back(&g);
  backend_.split_channels(dy, slices);
  for (std::size_t i = 0; i < input_grads_.size(); ++i) grads[i] = &input_grads_[i];
}

const Tensor& Resample::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  const Tensor& x = *inputs[0];
  input_dims_ = x.dims();
  const bool to_second = inputs.size() > 1;
  ensure_tensor(backend_, output_,
                {x.n(), x.c(), to_second ? inputs[1]->h() : 1, to_second ? inputs[1]->w() : 1});
  (backend_.*forward_)(x, output_);
  return output_;
}

void Resample::backward(const Tensor& dy, std::span<const bool> need,
                        std::span<const Tensor*> grads, CrossRankSum*) {
  if (!need[0]) return;
  ensure_tensor(backend_, input_grad_, input_dims_);
  (backend_.*backward_)(dy, input_grad_);
  grads[0] = &input_grad_;
}

ChannelAffine::ChannelAffine(Backend& backend, const std::string& name, int channels)
    : backend_(backend),
      gamma_(make_parameter(backend, name + ".gamma", {channels}, false)),
      beta_(make_parameter(backend, name + ".beta", {channels}, false)),
      zeros_(backend.empty({channels}, DType::f32, Layout::flat)),
      ones_(backend.empty({channels}, DType::f32, Layout::flat)) {
  backend.fill(gamma_.value, 1.0f);
  backend.fill(zeros_, 0.0f);
  backend.fill(ones_, 1.0f);
}

const Tensor& ChannelAffine::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  input_ = *inputs[0];
  ensure_tensor(backend_, output_, input_.dims());
  backend_.batch_norm_apply({.x = input_,
                             .mean = zeros_,
                             .variance = ones_,
                             .gamma = gamma_.value,
                             .beta = beta_.value,
                             .eps = 0.0f},
                            output_);
  return output_;
}

void ChannelAffine::backward(const Tensor& dy, std::span<const bool> need,
                             std::span<const Tensor*> grads, CrossRankSum*) {
  // With mean 0 and variance 1 the normalized input is x itself: dgamma = sum(dy * x),
  // dbeta = sum(dy).
  backend_.batch_norm_backward_statistics(
      {.x = input_, .y = output_, .dy = dy, .mean = zeros_, .variance = ones_, .eps = 0.0f},
      gamma_.grad, beta_.grad);
  if (!need[0]) return;
  ensure_tensor(backend_, input_grad_, dy.dims());
  backend_.batch_norm_apply({.x = dy,
                             .mean = zeros_,
                             .variance = ones_,
                             .gamma = gamma_.value,
                             .beta = zeros_,
                             .eps = 0.0f},
                            input_grad_);
  grads[0] = &input_grad_;
}

const Tensor& Dropout::forward(std::span<const Tensor* const> inputs, const ForwardPass& pass) {
  const Tensor& x = *inputs[0];
  applied_ = pass.training && rate_ > 0;
  if (!applied_) return x;
  keys_.assign(pass.dropout.samples.begin(), pass.dropout.samples.end());
  if (keys_.empty())
    for (std::int64_t n = 0; n < x.dim(0); ++n) keys_.push_back(static_cast<std::uint64_t>(n));
  seed_ = mix_seed(pass.dropout.seed, 0xd0d0, salt_);
  // x's dtype, not the default for its rank: a dense layer's 2-D activations are bf16 in mixed
  // precision too.
  ensure_tensor(backend_, output_, x.dims(), x.dtype());
  backend_.dropout_forward({.x = x, .rate = rate_, .seed = seed_, .sample_keys = keys_}, output_);
  return output_;
}

void Dropout::backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                       CrossRankSum*) {
  if (!need[0]) return;
  if (!applied_) {
    grads[0] = &dy;
    return;
  }
  ensure_tensor(backend_, input_grad_, dy.dims(), dy.dtype());
  backend_.dropout_backward({.x = output_, .rate = rate_, .seed = seed_, .sample_keys = keys_}, dy,
                            input_grad_);
  grads[0] = &input_grad_;
}

// ---- the volumetric and dense layers ----------------------------------------------------------

namespace {

// The activation tensor a 2-D (N, F) output is kept in: the backend's activation dtype, as the
// 4-D and 5-D ones (ensure_tensor gives other ranks f32).
void ensure_features(Backend& backend, Tensor& t, std::int64_t n, std::int64_t features) {
  ensure_tensor(backend, t, {n, features}, backend.activation_dtype());
}

// (N, C, D, H, W) of a volume pooled by `geometry`.
std::vector<std::int64_t> pooled_dims(const std::vector<std::int64_t>& volume,
                                      const PoolGeometry& geometry) {
  std::vector<std::int64_t> dims{volume[0], volume[1]};
  for (std::size_t i = 2; i < 5; ++i)
    dims.push_back(pool_output_size(static_cast<int>(volume[i]), geometry));
  return dims;
}

}  // namespace

const Tensor& MaxPool3d::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  const Tensor& x = *inputs[0];
  if (x.rank() != 5)
    throw InvalidArgument(
        fmt::format("max pool 3d: expected (N, C, D, H, W), got {}", x.describe()));
  input_ = x;
  ensure_tensor(backend_, output_, pooled_dims(x.dims(), geometry_));
  backend_.max_pool3d_forward(x, geometry_, output_);
  return output_;
}

void MaxPool3d::backward(const Tensor& dy, std::span<const bool> need,
                         std::span<const Tensor*> grads, CrossRankSum*) {
  if (!need[0]) return;
  ensure_tensor(backend_, input_grad_, input_.dims());
  backend_.max_pool3d_backward(input_, dy, geometry_, input_grad_);
  grads[0] = &input_grad_;
}

ConvolutionMaxPool3d::ConvolutionMaxPool3d(Backend& backend, const std::string& name,
                                           int in_channels, int out_channels, int kernel,
                                           ConvGeometry convolution, bool bias,
                                           PoolGeometry pooling)
    : backend_(backend),
      conv_(backend, name, in_channels, out_channels, kernel, convolution, bias, 3),
      convolution_(convolution),
      pooling_(pooling),
      fused_(backend.fuses_conv3d_max_pool(convolution, pooling)) {}

Conv3dMaxPool ConvolutionMaxPool3d::operation(const Tensor& x) {
  const std::vector<Parameter*> parameters = conv_.parameters();
  return {.x = x,
          .weight = parameters[0]->value,
          .bias = parameters.size() > 1 ? &parameters[1]->value : nullptr,
          .convolution = convolution_,
          .pooling = pooling_};
}

const Tensor& ConvolutionMaxPool3d::forward(std::span<const Tensor* const> inputs,
                                            const ForwardPass&) {
  const Tensor& x = *inputs[0];
  if (!fused_) {
    const Tensor& convolved = conv_.forward(x);
    ensure_tensor(backend_, output_, pooled_dims(convolved.dims(), pooling_));
    backend_.max_pool3d_forward(convolved, pooling_, output_);
    convolved_ = convolved;
    return output_;
  }
  if (x.rank() != 5 || x.dim(1) != conv_.in_channels())
    throw InvalidArgument(fmt::format("{}: expected (N, {}, D, H, W), got {}",
                                      conv_.parameters()[0]->name, conv_.in_channels(),
                                      x.describe()));
  input_ = x;
  const Tensor& weight = conv_.parameters()[0]->value;
  std::vector<std::int64_t> convolved{x.dim(0), conv_.out_channels()};
  for (std::size_t i = 2; i < 5; ++i)
    convolved.push_back(conv_output_size(static_cast<int>(x.dim(i)),
                                         static_cast<int>(weight.dim(i)), convolution_));
  const std::vector<std::int64_t> dims = pooled_dims(convolved, pooling_);
  ensure_tensor(backend_, output_, dims);
  if (!window_.defined() || window_.dims() != dims)
    window_ = backend_.empty(dims, DType::u8, backend_.activation_layout());
  backend_.conv3d_max_pool_forward(operation(x), output_, window_);
  return output_;
}

void ConvolutionMaxPool3d::backward(const Tensor& dy, std::span<const bool> need,
                                    std::span<const Tensor*> grads, CrossRankSum*) {
  if (!fused_) {
    ensure_tensor(backend_, convolved_grad_, convolved_.dims());
    backend_.max_pool3d_backward(convolved_, dy, pooling_, convolved_grad_);
    grads[0] = conv_.backward(convolved_grad_, need[0]);
    return;
  }
  const std::vector<Parameter*> parameters = conv_.parameters();
  Tensor* dbias = parameters.size() > 1 ? &parameters[1]->grad : nullptr;
  Tensor* dx = nullptr;
  if (need[0]) {
    ensure_tensor(backend_, input_grad_, input_.dims());
    dx = &input_grad_;
  }
  backend_.conv3d_max_pool_backward(operation(input_), dy, window_, dx, parameters[0]->grad, dbias);
  grads[0] = dx;
}

const Tensor& ActivationFromOutput::forward(std::span<const Tensor* const> inputs,
                                            const ForwardPass&) {
  const Tensor& x = *inputs[0];
  ensure_tensor(backend_, output_, x.dims(), x.dtype());
  (backend_.*forward_)(x, parameter_, output_);
  return output_;
}

void ActivationFromOutput::backward(const Tensor& dy, std::span<const bool> need,
                                    std::span<const Tensor*> grads, CrossRankSum*) {
  if (!need[0]) return;
  ensure_tensor(backend_, input_grad_, dy.dims(), dy.dtype());
  (backend_.*backward_)(output_, dy, parameter_, input_grad_);
  grads[0] = &input_grad_;
}

const Tensor& Flatten::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  const Tensor& x = *inputs[0];
  if (x.rank() < 2 || x.numel() != x.dim(0) * features_)
    throw InvalidArgument(fmt::format(
        "flatten: the description expects {} features per sample, got {} (is the input's size "
        "the one the network was built for?)",
        features_, x.describe()));
  input_dims_ = x.dims();
  ensure_tensor(backend_, output_, {x.dim(0), features_}, x.dtype());
  backend_.flatten_forward(x, output_);
  return output_;
}

void Flatten::backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                       CrossRankSum*) {
  if (!need[0]) return;
  ensure_tensor(backend_, input_grad_, input_dims_);
  backend_.flatten_backward(dy, input_grad_);
  grads[0] = &input_grad_;
}

Dense::Dense(Backend& backend, const std::string& name, int in_features, int out_features)
    : backend_(backend),
      in_features_(in_features),
      out_features_(out_features),
      weight_(make_parameter(backend, name + ".weight", {out_features, in_features}, true)),
      bias_(make_parameter(backend, name + ".bias", {out_features}, false)) {}

const Tensor& Dense::forward(std::span<const Tensor* const> inputs, const ForwardPass&) {
  const Tensor& x = *inputs[0];
  if (x.rank() != 2 || x.dim(1) != in_features_)
    throw InvalidArgument(
        fmt::format("{}: expected (N, {}), got {}", weight_.name, in_features_, x.describe()));
  input_ = x;
  ensure_features(backend_, output_, x.dim(0), out_features_);
  backend_.dense_forward(x, weight_.value, &bias_.value, output_);
  return output_;
}

void Dense::backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                     CrossRankSum*) {
  backend_.dense_backward_weights(input_, dy, weight_.grad, &bias_.grad);
  if (!need[0]) return;
  ensure_features(backend_, input_grad_, input_.dim(0), in_features_);
  backend_.dense_backward_data(dy, weight_.value, input_grad_);
  grads[0] = &input_grad_;
}

}  // namespace layers

// ---- the network -----------------------------------------------------------------------------
Network::Network(Backend& backend, std::vector<Step> steps, int output)
    : backend_(&backend), steps_(std::move(steps)), output_(output) {
  const std::size_t nodes = steps_.size() + 1;
  readers_.assign(nodes, 0);
  for (Step& step : steps_) {
    for (std::size_t i = 0; i < step.inputs.size(); ++i)
      if (step.layer->takes_gradient(i)) ++readers_[step.inputs[i]];
    for (Parameter* p : step.layer->parameters()) {
      step.parameter_indices.push_back(parameters_.size());
      parameters_.push_back(p);
    }
  }
  outputs_.assign(nodes, nullptr);
  gradient_sums_.resize(nodes);
  wide_sums_.resize(nodes);
  wide_parts_.resize(nodes);
  input_grads_.assign(nodes, nullptr);
}

Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
Network::~Network() = default;

std::vector<std::pair<std::string, Tensor*>> Network::buffers() {
  std::vector<std::pair<std::string, Tensor*>> all;
  for (Step& step : steps_)
    for (auto& entry : step.layer->buffers()) all.push_back(entry);
  return all;
}

const Tensor& Network::forward(const Tensor& x, const ForwardPass& pass) {
  outputs_[0] = &x;
  std::vector<const Tensor*> inputs;
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    inputs.clear();
    for (int node : steps_[s].inputs) inputs.push_back(outputs_[node]);
    outputs_[s + 1] = &steps_[s].layer->forward(inputs, pass);
  }
  forward_done_ = true;
  return *outputs_[output_];
}

void Network::backward(const Tensor& dy, const std::function<void(std::size_t)>& on_grad_ready,
                       CrossRankSum* cross_rank) {
  if (!forward_done_) throw Error("network backward called before forward");
  std::fill(input_grads_.begin(), input_grads_.end(), nullptr);
  std::vector<int> contributions(readers_.size(), 0);
  input_grads_[output_] = &dy;
  // A node read by one layer takes that layer's gradient as it is; a node read by several sums
  // them, in the order the readers run backward (so the sum is the same on every rank and run).
  auto receive = [&](int node, const Tensor& grad) {
    if (readers_[node] == 1) {
      input_grads_[node] = &grad;
      return;
    }
    Tensor& sum = gradient_sums_[node];
    if (grad.dtype() == DType::f32) {
      if (contributions[node]++ == 0) {
        ensure_tensor(*backend_, sum, grad.dims());
        backend_->copy(grad, sum);
        input_grads_[node] = &sum;
      } else {
        backend_->axpy(1.0f, grad, sum);
      }
      return;
    }
    // bf16 or f16 gradients: summed in f32, rounded once after the last reader's part. Rounding
    // after every addition would lose a rounding per branch (the compact network's ASPP input
    // takes five), which PyTorch's autocast does not.
    Tensor& wide = wide_sums_[node];
    if (contributions[node]++ == 0) {
      ensure_tensor(*backend_, wide, grad.dims(), DType::f32);
      backend_->copy(grad, wide);
    } else {
      Tensor& part = wide_parts_[node];
      ensure_tensor(*backend_, part, grad.dims(), DType::f32);
      backend_->copy(grad, part);
      backend_->axpy(1.0f, part, wide);
    }
    if (contributions[node] == readers_[node]) {
      ensure_tensor(*backend_, sum, grad.dims(), grad.dtype());
      backend_->copy(wide, sum);
      input_grads_[node] = &sum;
    }
  };
  std::vector<const Tensor*> grads;
  bool need[NetworkBuilder::max_inputs];
  for (std::size_t s = steps_.size(); s-- > 0;) {
    Step& step = steps_[s];
    const Tensor* dy_here = input_grads_[s + 1];
    if (dy_here == nullptr)
      throw Error(fmt::format("network layer {} got no gradient (it reaches no output)", s));
    // The network's input takes no gradient.
    for (std::size_t i = 0; i < step.inputs.size(); ++i)
      need[i] = step.inputs[i] != 0 && step.layer->takes_gradient(i);
    grads.assign(step.inputs.size(), nullptr);
    step.layer->backward(*dy_here, std::span<const bool>(need, step.inputs.size()), grads,
                         cross_rank);
    if (on_grad_ready)  // in reverse order within a layer too: backward finishes them together
      for (auto it = step.parameter_indices.rbegin(); it != step.parameter_indices.rend(); ++it)
        on_grad_ready(*it);
    for (std::size_t i = 0; i < step.inputs.size(); ++i) {
      if (!need[i]) continue;
      if (grads[i] == nullptr)
        throw Error(fmt::format("network layer {} gave no gradient for its input {}", s, i));
      receive(step.inputs[i], *grads[i]);
    }
  }
}

// ---- the builder -----------------------------------------------------------------------------
NetworkBuilder::NetworkBuilder(Backend& backend, NormSettings norm, WeightInit init)
    : backend_(backend), norm_(norm), init_(init) {}

void NetworkBuilder::check(Node node) const {
  if (node.index < 0 || node.index > static_cast<int>(steps_.size()) || !has_input_)
    throw InvalidArgument(fmt::format("network description: node {} does not exist", node.index));
}

Node NetworkBuilder::append(std::unique_ptr<Layer> layer, std::vector<Node> inputs, int channels) {
  if (inputs.size() > max_inputs)
    throw InvalidArgument(
        fmt::format("network description: a layer reads at most {} inputs", max_inputs));
  for (Parameter* p : layer->parameters()) p->init = init_;
  Network::Step step;
  step.layer = std::move(layer);
  for (Node n : inputs) {
    check(n);
    step.inputs.push_back(n.index);
  }
  steps_.push_back(std::move(step));
  return {static_cast<int>(steps_.size()), channels};
}

Node NetworkBuilder::input(int channels) {
  if (has_input_) throw InvalidArgument("network description: a network has one input");
  has_input_ = true;
  return {0, channels};
}

Node NetworkBuilder::conv(const std::string& name, Node x, int out_channels, int kernel,
                          ConvGeometry geometry, bool bias) {
  return append(std::make_unique<layers::Convolution>(backend_, name, x.channels, out_channels,
                                                      kernel, geometry, bias),
                {x}, out_channels);
}

Node NetworkBuilder::conv_norm_relu(const std::string& name, Node x, int out_channels, int kernel,
                                    ConvGeometry geometry) {
  return append(std::make_unique<layers::ConvolutionNormRelu>(
                    backend_, name, x.channels, out_channels, kernel, geometry, norm_),
                {x}, out_channels);
}

Node NetworkBuilder::norm(const std::string& name, Node x, bool relu) {
  return append(std::make_unique<layers::Normalization>(backend_, name, x.channels, norm_, relu),
                {x}, x.channels);
}

Node NetworkBuilder::channel_affine(const std::string& name, Node x) {
  return append(std::make_unique<layers::ChannelAffine>(backend_, name, x.channels), {x},
                x.channels);
}

Node NetworkBuilder::relu(Node x) {
  return append(std::make_unique<layers::Relu>(backend_), {x}, x.channels);
}

Node NetworkBuilder::conv_transpose(const std::string& name, Node x, Node like, int out_channels,
                                    int kernel, ConvGeometry geometry, bool bias) {
  return append(std::make_unique<layers::TransposedConvolution>(
                    backend_, name, x.channels, out_channels, kernel, geometry, bias),
                {x, like}, out_channels);
}

Node NetworkBuilder::dropout(Node x, float rate) {
  if (!(rate >= 0 && rate < 1))
    throw InvalidArgument(
        fmt::format("network description: dropout rate {} is not in [0, 1)", rate));
  return append(std::make_unique<layers::Dropout>(backend_, rate,
                                                  static_cast<std::uint64_t>(dropout_layers_++)),
                {x}, x.channels);
}

Node NetworkBuilder::add(Node a, Node b) {
  if (a.channels != b.channels)
    throw InvalidArgument(
        fmt::format("network description: add of {} and {} channels", a.channels, b.channels));
  return append(std::make_unique<layers::Add>(backend_), {a, b}, a.channels);
}

Node NetworkBuilder::concat(const std::vector<Node>& inputs) {
  if (inputs.size() < 2) throw InvalidArgument("network description: concat needs two inputs");
  int channels = 0;
  for (Node n : inputs) channels += n.channels;
  return append(std::make_unique<layers::Concat>(backend_), inputs, channels);
}

Node NetworkBuilder::upsample_like(Node x, Node like) {
  return append(layers::Resample::upsample_like(backend_), {x, like}, x.channels);
}

Node NetworkBuilder::global_avg_pool(Node x) {
  return append(layers::Resample::global_avg_pool(backend_), {x}, x.channels);
}

Node NetworkBuilder::conv3d(const std::string& name, Node x, int out_channels, int kernel,
                            ConvGeometry geometry, bool bias) {
  return append(std::make_unique<layers::Convolution>(backend_, name, x.channels, out_channels,
                                                      kernel, geometry, bias, 3),
                {x}, out_channels);
}

Node NetworkBuilder::max_pool3d(Node x, PoolGeometry geometry) {
  return append(std::make_unique<layers::MaxPool3d>(backend_, geometry), {x}, x.channels);
}

Node NetworkBuilder::conv3d_max_pool(const std::string& name, Node x, int out_channels, int kernel,
                                     ConvGeometry geometry, bool bias, PoolGeometry pooling) {
  return append(std::make_unique<layers::ConvolutionMaxPool3d>(
                    backend_, name, x.channels, out_channels, kernel, geometry, bias, pooling),
                {x}, out_channels);
}

Node NetworkBuilder::leaky_relu(Node x, float slope) {
  if (!(slope >= 0))
    throw InvalidArgument(fmt::format("network description: leaky relu slope {} < 0", slope));
  return append(layers::ActivationFromOutput::leaky_relu(backend_, slope), {x}, x.channels);
}

Node NetworkBuilder::flatten(Node x, int features) {
  if (features <= 0 || features % x.channels != 0)
    throw InvalidArgument(fmt::format(
        "network description: flatten of {} channels into {} features", x.channels, features));
  return append(std::make_unique<layers::Flatten>(backend_, features), {x}, features);
}

Node NetworkBuilder::dense(const std::string& name, Node x, int out_features) {
  return append(std::make_unique<layers::Dense>(backend_, name, x.channels, out_features), {x},
                out_features);
}

Node NetworkBuilder::scaled_tanh(Node x, float scale) {
  return append(layers::ActivationFromOutput::scaled_tanh(backend_, scale), {x}, x.channels);
}

Network NetworkBuilder::finish(Node output) {
  check(output);
  // Every layer must lead to the output, and parameter names must be unique: checkpoints
  // address tensors by name.
  std::vector<bool> used(steps_.size() + 1, false);
  used[output.index] = true;
  for (std::size_t s = steps_.size(); s-- > 0;)
    if (used[s + 1])
      for (int in : steps_[s].inputs) used[in] = true;
  for (std::size_t s = 0; s < steps_.size(); ++s)
    if (!used[s + 1])
      throw InvalidArgument(fmt::format("network description: layer {} reaches no output", s));
  std::set<std::string> names;
  for (auto& step : steps_) {
    for (Parameter* p : step.layer->parameters())
      if (!names.insert(p->name).second)
        throw InvalidArgument(
            fmt::format("network description: two parameters are named {}", p->name));
  }
  return Network(backend_, std::move(steps_), output.index);
}

}  // namespace hardy::core
