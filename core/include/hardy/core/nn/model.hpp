#pragma once
// The networks hardy trains, chosen by ModelConfig::architecture and described once each in
// core/src/nn/architectures/ with a NetworkBuilder (network.hpp):
// - compact: a compact DeepLabv3+ (Chen et al., 2018) for climate segmentation, a strided
//   encoder down to output stride 8 with an atrous last stage, atrous spatial pyramid pooling
//   with an image-pooling branch, and a decoder that fuses the pyramid's output with the
//   stride-4 features (the default; fast enough for the demo and the tests);
// - deepcam: MLPerf HPC DeepCAM's DeepLabv3+ on a modified aligned Xception at output stride
//   16, as published (56,454,720 parameters): separable convolutions, batch norm across ranks,
//   ASPP at rates 6, 12, 18 with image pooling, a decoder of transposed convolutions;
// - tiramisu: the FC-DenseNet of the 2018 Gordon Bell climate run (Kurth et al.): dense blocks
//   of 5x5 convolutions, ReLU and dropout, transitions down by strided 1x1 convolutions and up by
//   transposed convolutions, skip connections between the two paths;
// - cosmoflow: MLPerf HPC CosmoFlow's 3-D network (Mathuriya et al., SC18), as published
//   (8,907,556 parameters at 128^3): five blocks of 3x3x3 convolution, leaky ReLU and 2x2x2 max
//   pooling, then three dense layers regressing 4 cosmological parameters (1.2 tanh).
// The segmentation networks are fully convolutional: any input whose height and width divide
// by input_multiple(). cosmoflow takes cubes of its configured volume.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "hardy/core/nn/network.hpp"

namespace hardy::core {

enum class Architecture { compact, deepcam, tiramisu, cosmoflow };
Architecture parse_architecture(const std::string& name);
std::string to_string(Architecture architecture);

struct ModelConfig {
  Architecture architecture = Architecture::compact;
  int input_channels = 16;
  int num_classes = 3;

  // compact DeepLabv3+
  int width = 16;          // channels of the first encoder stage; later stages double it
  int depth = 1;           // 3x3 convolution blocks per encoder stage
  int aspp_channels = 32;  // channels of every pyramid branch
  std::vector<int> aspp_rates{2, 4, 6};
  int low_level_channels = 16;  // the decoder's projection of the stride-4 features
  int decoder_channels = 32;
  NormKind norm = NormKind::group;
  int groups = 8;
  float norm_eps = 1e-5f;

  // tiramisu (the Gordon Bell run's settings: --blocks 2 2 2 4 5 --growth 32 --filter-sz 5)
  std::vector<int> dense_layers{2, 2, 2, 4, 5};  // per block down, the last is the bottleneck;
                                                 // the up path mirrors the down path
  int growth = 32;                               // feature maps each dense layer adds
  int first_channels = 64;                       // of the first convolution
  int dense_kernel = 5;                          // of every dense layer's convolution
  float dropout = 0.2f;                          // after every layer, and on the logits

  // cosmoflow (num_classes is its number of regression targets, 4; input_channels 4)
  int volume = 128;  // the input cube's edge; the first dense layer's size follows from it

  // Regression (cosmoflow: targets, MSE) rather than segmentation (classes per pixel).
  bool regression() const { return architecture == Architecture::cosmoflow; }
  bool volumetric() const { return architecture == Architecture::cosmoflow; }

  void validate() const;  // throws InvalidArgument naming the bad field
  // Height and width (or the volume) must divide by this (the network's total downsampling).
  int input_multiple() const;
  // The fields that make a checkpoint of this network loadable, one "model.key=value" line each
  // (part of the run's resume identity).
  std::string identity() const;
};

// The network's shape as the Python tools read it (bench/step/torch_networks.py build_model):
// "architecture", the input channels and classes, and that network's own fields.
nlohmann::json to_json(const ModelConfig& config);

// A network built from its architecture's description.
class Model {
 public:
  Model(Backend& backend, ModelConfig config);
  ~Model();

  // Deterministic initialisation from a seed: weights as their description says (Kaiming-normal,
  // or Glorot-uniform for cosmoflow), zero biases, unit normalization scales.
  void initialize(std::uint64_t seed);

  // x: (N, input_channels, H, W) in the backend's activation layout; returns logits
  // (N, num_classes, H, W). `cross_rank` sums batch-norm statistics over ranks (may be null);
  // `dropout` makes dropout's masks a function of the step and the samples (training only).
  const Tensor& forward(const Tensor& x, bool training, CrossRankSum* cross_rank = nullptr,
                        DropoutKeys dropout = {});

  // Back-propagates dlogits and overwrites every parameter's gradient. `on_grad_ready(i)` is
  // called as soon as parameters()[i].grad is final, so that its allreduce can start while the
  // rest of the backward pass runs.
  void backward(const Tensor& dlogits, const std::function<void(std::size_t)>& on_grad_ready = {},
                CrossRankSum* cross_rank = nullptr);

  // All trainable parameters, in a fixed order (the order of the description).
  const std::vector<Parameter*>& parameters() const { return network_.parameters(); }
  // Non-trainable state (batch-norm running statistics).
  std::vector<std::pair<std::string, Tensor*>> buffers() { return network_.buffers(); }
  std::size_t parameter_count() const;
  const ModelConfig& config() const { return config_; }
  Backend& backend() { return backend_; }

 private:
  Backend& backend_;
  ModelConfig config_;
  Network network_;
  const Tensor* logits_ = nullptr;
};

}  // namespace hardy::core
