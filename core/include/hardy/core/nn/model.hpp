#pragma once
// A compact DeepLabv3+ (Chen et al., 2018) for climate segmentation: a strided-convolution
// encoder down to output stride 8 with an atrous last stage, atrous spatial pyramid pooling
// (parallel dilated convolutions plus an image-pooling branch), and a decoder that fuses the
// upsampled pyramid output with low-level encoder features at stride 4 before upsampling to the
// input size. Fully convolutional: any input whose height and width divide by 8.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hardy/core/nn/layers.hpp"

namespace hardy::core {

struct ModelConfig {
  int input_channels = 16;
  int num_classes = 3;
  int width = 16;          // channels of the first encoder stage; later stages double it
  int depth = 1;           // 3x3 convolution blocks per encoder stage
  int aspp_channels = 32;  // channels of every pyramid branch
  std::vector<int> aspp_rates{2, 4, 6};
  int low_level_channels = 16;  // the decoder's projection of the stride-4 features
  int decoder_channels = 32;
  NormKind norm = NormKind::group;
  int groups = 8;
  float norm_eps = 1e-5f;

  static constexpr int output_stride = 8;
  void validate() const;  // throws InvalidArgument naming the bad field
};

class DeepLabV3Plus {
 public:
  DeepLabV3Plus(Backend& backend, ModelConfig config);
  ~DeepLabV3Plus();

  // Deterministic initialisation from a seed: Kaiming-normal convolution weights, zero biases,
  // unit normalization scales.
  void initialize(std::uint64_t seed);

  // x: (N, input_channels, H, W) in the backend's activation layout; returns logits
  // (N, num_classes, H, W). `cross_rank` sums batch-norm statistics over ranks (may be null).
  const Tensor& forward(const Tensor& x, bool training, CrossRankSum* cross_rank = nullptr);

  // Back-propagates dlogits and overwrites every parameter's gradient. `on_grad_ready(i)` is
  // called as soon as parameters()[i].grad is final, so that its allreduce can start while the
  // rest of the backward pass runs.
  void backward(const Tensor& dlogits, const std::function<void(std::size_t)>& on_grad_ready = {},
                CrossRankSum* cross_rank = nullptr);

  // All trainable parameters, in a fixed order (the order of construction).
  const std::vector<Parameter*>& parameters() const { return parameters_; }
  // Non-trainable state (batch-norm running statistics).
  std::vector<std::pair<std::string, Tensor*>> buffers();
  std::size_t parameter_count() const;
  const ModelConfig& config() const { return config_; }
  Backend& backend() { return backend_; }

 private:
  struct Layers;
  Backend& backend_;
  ModelConfig config_;
  std::unique_ptr<Layers> layers_;
  std::vector<Parameter*> parameters_;
};

}  // namespace hardy::core
