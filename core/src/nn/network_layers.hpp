#pragma once
// The layers a NetworkBuilder records: each wraps one backend operation (or a unit of
// layers.hpp) behind the Layer interface, with the tensors its backward pass needs.
#include <memory>
#include <string>
#include <vector>

#include "hardy/core/nn/network.hpp"

namespace hardy::core::layers {

class Convolution final : public Layer {
 public:
  Convolution(Backend& backend, std::string name, int in_channels, int out_channels, int kernel,
              ConvGeometry geometry, bool bias, int spatial_dims = 2)
      : conv_(backend, std::move(name), in_channels, out_channels, kernel, geometry, bias,
              spatial_dims) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override {
    return conv_.forward(*inputs[0]);
  }
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override {
    grads[0] = conv_.backward(dy, need[0]);
  }
  std::vector<Parameter*> parameters() override { return conv_.parameters(); }

 private:
  Conv conv_;
};

class ConvolutionNormRelu final : public Layer {
 public:
  ConvolutionNormRelu(Backend& backend, const std::string& name, int in_channels, int out_channels,
                      int kernel, ConvGeometry geometry, const NormSettings& n)
      : block_(backend, name, in_channels, out_channels, kernel, geometry, n.kind, n.groups,
               n.eps) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass& pass) override {
    return block_.forward(*inputs[0], pass.training, pass.cross_rank);
  }
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum* cross_rank) override {
    grads[0] = block_.backward(dy, need[0], cross_rank);
  }
  std::vector<Parameter*> parameters() override { return block_.parameters(); }
  std::vector<std::pair<std::string, Tensor*>> buffers() override { return block_.buffers(); }

 private:
  ConvNormRelu block_;
};

class Normalization final : public Layer {
 public:
  Normalization(Backend& backend, std::string name, int channels, const NormSettings& n, bool relu)
      : norm_(backend, std::move(name), channels, n.kind, n.groups, n.eps, relu) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass& pass) override {
    return norm_.forward(*inputs[0], pass.training, pass.cross_rank);
  }
  void backward(const Tensor& dy, std::span<const bool>, std::span<const Tensor*> grads,
                CrossRankSum* cross_rank) override {
    grads[0] = &norm_.backward(dy, cross_rank);
  }
  std::vector<Parameter*> parameters() override { return norm_.parameters(); }
  std::vector<std::pair<std::string, Tensor*>> buffers() override { return norm_.buffers(); }

 private:
  Norm norm_;
};

class Relu final : public Layer {
 public:
  explicit Relu(Backend& backend) : backend_(backend) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;

 private:
  Backend& backend_;
  Tensor output_, input_grad_;
};

// y = a + b (a residual connection); both inputs get dy itself.
class Add final : public Layer {
 public:
  explicit Add(Backend& backend) : backend_(backend) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;

 private:
  Backend& backend_;
  Tensor output_, input_grad_;
};

class Concat final : public Layer {
 public:
  explicit Concat(Backend& backend) : backend_(backend) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;

 private:
  Backend& backend_;
  Tensor output_;
  std::vector<Tensor> input_grads_;
};

// A resampling of inputs[0]'s height and width whose backward needs only its shape: bilinear
// to inputs[1]'s height and width, or the average over the whole image (1x1).
class Resample final : public Layer {
 public:
  using Forward = void (Backend::*)(const Tensor& x, Tensor& y);
  using Backward = void (Backend::*)(const Tensor& dy, Tensor& dx);
  static std::unique_ptr<Resample> upsample_like(Backend& backend) {
    return std::make_unique<Resample>(backend, &Backend::upsample_bilinear_forward,
                                      &Backend::upsample_bilinear_backward);
  }
  static std::unique_ptr<Resample> global_avg_pool(Backend& backend) {
    return std::make_unique<Resample>(backend, &Backend::global_avg_pool_forward,
                                      &Backend::global_avg_pool_backward);
  }

  Resample(Backend& backend, Forward forward, Backward backward)
      : backend_(backend), forward_(forward), backward_(backward) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;
  bool takes_gradient(std::size_t input) const override { return input == 0; }

 private:
  Backend& backend_;
  Forward forward_;
  Backward backward_;
  Tensor output_, input_grad_;
  std::vector<std::int64_t> input_dims_;
};

// y = gamma[c] * x + beta[c] (DeepCAM's TrainableAffine on the pooled image features): batch
// norm's apply with unit statistics, whose backward statistics are exactly these parameters'
// gradients, and dx = gamma[c] * dy the same apply on dy.
class ChannelAffine final : public Layer {
 public:
  ChannelAffine(Backend& backend, const std::string& name, int channels);
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;
  std::vector<Parameter*> parameters() override { return {&gamma_, &beta_}; }

 private:
  Backend& backend_;
  Parameter gamma_, beta_;
  Tensor zeros_, ones_;  // the unit statistics (and beta's stand-in in backward)
  Tensor input_, output_, input_grad_;
};

// PyTorch's ConvTranspose2d; the output takes inputs[1]'s height and width.
class TransposedConvolution final : public Layer {
 public:
  TransposedConvolution(Backend& backend, std::string name, int in_channels, int out_channels,
                        int kernel, ConvGeometry geometry, bool bias)
      : conv_(backend, std::move(name), in_channels, out_channels, kernel, geometry, bias) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override {
    return conv_.forward(*inputs[0], inputs[1]->h(), inputs[1]->w());
  }
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override {
    grads[0] = conv_.backward(dy, need[0]);
  }
  bool takes_gradient(std::size_t input) const override { return input == 0; }
  std::vector<Parameter*> parameters() override { return conv_.parameters(); }

 private:
  ConvTranspose2d conv_;
};

// Inverted dropout in training (identity otherwise), its masks drawn from the pass's keys and
// this layer's own salt, so that no two dropout layers share a mask.
class Dropout final : public Layer {
 public:
  Dropout(Backend& backend, float rate, std::uint64_t salt)
      : backend_(backend), rate_(rate), salt_(salt) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass& pass) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;

 private:
  Backend& backend_;
  float rate_;
  std::uint64_t salt_;
  bool applied_ = false;  // in the last forward (training with a positive rate)
  std::uint64_t seed_ = 0;
  std::vector<std::uint64_t> keys_;
  Tensor output_, input_grad_;
};

// ---- the volumetric and dense layers (CosmoFlow) ----

class MaxPool3d final : public Layer {
 public:
  MaxPool3d(Backend& backend, PoolGeometry geometry) : backend_(backend), geometry_(geometry) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;

 private:
  Backend& backend_;
  PoolGeometry geometry_;
  Tensor input_, output_, input_grad_;
};

// NetworkBuilder::conv3d_max_pool: the backend's fused operation where it has one for these
// geometries, else conv3d then max_pool3d. Its parameters are its convolution's, named alike.
class ConvolutionMaxPool3d final : public Layer {
 public:
  ConvolutionMaxPool3d(Backend& backend, const std::string& name, int in_channels, int out_channels,
                       int kernel, ConvGeometry convolution, bool bias, PoolGeometry pooling);
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;
  std::vector<Parameter*> parameters() override { return conv_.parameters(); }

 private:
  Conv3dMaxPool operation(const Tensor& x);

  Backend& backend_;
  Conv conv_;  // the parameters, and the convolution where the backend does not fuse
  ConvGeometry convolution_;
  PoolGeometry pooling_;
  bool fused_;
  Tensor input_, output_, input_grad_;
  Tensor window_;                      // fused: each window's choice of maximum
  Tensor convolved_, convolved_grad_;  // not fused: the convolution's output and its gradient
};

// An elementwise activation of one parameter whose gradient is computed from its output: the
// leaky ReLU (y = x where x > 0, slope * x elsewhere; y has x's sign) and the scaled tanh
// (y = scale * tanh(x): a bounded regression output, CosmoFlow's 1.2 tanh).
class ActivationFromOutput final : public Layer {
 public:
  using Forward = void (Backend::*)(const Tensor& x, float parameter, Tensor& y);
  using Backward = void (Backend::*)(const Tensor& y, const Tensor& dy, float parameter,
                                     Tensor& dx);
  static std::unique_ptr<ActivationFromOutput> leaky_relu(Backend& backend, float slope) {
    return std::make_unique<ActivationFromOutput>(backend, &Backend::leaky_relu_forward,
                                                  &Backend::leaky_relu_backward, slope);
  }
  static std::unique_ptr<ActivationFromOutput> scaled_tanh(Backend& backend, float scale) {
    return std::make_unique<ActivationFromOutput>(backend, &Backend::scaled_tanh_forward,
                                                  &Backend::scaled_tanh_backward, scale);
  }

  ActivationFromOutput(Backend& backend, Forward forward, Backward backward, float parameter)
      : backend_(backend), forward_(forward), backward_(backward), parameter_(parameter) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;

 private:
  Backend& backend_;
  Forward forward_;
  Backward backward_;
  float parameter_;
  Tensor output_, input_grad_;
};

// (N, C, D, H, W) -> (N, features) in PyTorch's order (torch.flatten(x, 1)); the description
// states the features, checked at the first forward.
class Flatten final : public Layer {
 public:
  Flatten(Backend& backend, std::int64_t features) : backend_(backend), features_(features) {}
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;

 private:
  Backend& backend_;
  std::int64_t features_;
  Tensor output_, input_grad_;
  std::vector<std::int64_t> input_dims_;
};

// PyTorch's nn.Linear: y (N, O) = x (N, K) weight^T + bias, weight (O, K).
class Dense final : public Layer {
 public:
  Dense(Backend& backend, const std::string& name, int in_features, int out_features);
  const Tensor& forward(std::span<const Tensor* const> inputs, const ForwardPass&) override;
  void backward(const Tensor& dy, std::span<const bool> need, std::span<const Tensor*> grads,
                CrossRankSum*) override;
  std::vector<Parameter*> parameters() override { return {&weight_, &bias_}; }

 private:
  Backend& backend_;
  int in_features_, out_features_;
  Parameter weight_, bias_;
  Tensor input_, output_, input_grad_;
};

}  // namespace hardy::core::layers
