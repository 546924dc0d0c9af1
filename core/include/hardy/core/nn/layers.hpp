#pragma once
// The building blocks of hardy's models. Each layer owns its parameters, remembers what its
// backward pass needs from the forward pass, and keeps its output and gradient tensors between
// steps so that a training step allocates nothing once shapes are stable.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hardy/core/compute/backend.hpp"
#include "hardy/core/nn/parameter.hpp"

namespace hardy::core {

enum class NormKind { group, batch };
NormKind parse_norm_kind(const std::string& name);
std::string to_string(NormKind kind);

// Sums small host vectors over every rank of the data-parallel job (batch-norm statistics).
// The single-process implementation does nothing; comm/ provides the MPI one.
class CrossRankSum {
 public:
  virtual ~CrossRankSum() = default;
  virtual void sum(std::span<double> values) = 0;
};

// PyTorch's Conv2d (spatial_dims 2: weight (O, I / groups, K, K)) or Conv3d (3: a cubic kernel,
// the geometry the same along D, H and W).
class Conv {
 public:
  Conv(Backend& backend, std::string name, int in_channels, int out_channels, int kernel,
       ConvGeometry geometry, bool bias, int spatial_dims = 2);
  const Tensor& forward(const Tensor& x);
  // Computes parameter gradients; returns dx unless `need_input_grad` is false.
  const Tensor* backward(const Tensor& dy, bool need_input_grad);
  std::vector<Parameter*> parameters();
  int in_channels() const { return in_channels_; }
  int out_channels() const { return out_channels_; }

 private:
  Backend& backend_;
  int in_channels_, out_channels_, kernel_, spatial_dims_;
  ConvGeometry geometry_;
  Parameter weight_, bias_;
  bool has_bias_;
  Tensor input_, output_, input_grad_;
};

// PyTorch's ConvTranspose2d: weight (in, out, k, k); the output size is the caller's choice
// within what the geometry allows (it picks the output padding).
class ConvTranspose2d {
 public:
  ConvTranspose2d(Backend& backend, std::string name, int in_channels, int out_channels, int kernel,
                  ConvGeometry geometry, bool bias);
  const Tensor& forward(const Tensor& x, std::int64_t out_height, std::int64_t out_width);
  const Tensor* backward(const Tensor& dy, bool need_input_grad);
  std::vector<Parameter*> parameters();

 private:
  Backend& backend_;
  int in_channels_, out_channels_;
  ConvGeometry geometry_;
  Parameter weight_, bias_;
  bool has_bias_;
  Tensor input_, output_, input_grad_;
};

// Group or batch normalization with an optional fused ReLU.
class Norm {
 public:
  Norm(Backend& backend, std::string name, int channels, NormKind kind, int groups, float eps,
       bool relu);
  const Tensor& forward(const Tensor& x, bool training, CrossRankSum* cross_rank);
  const Tensor& backward(const Tensor& dy, CrossRankSum* cross_rank);
  std::vector<Parameter*> parameters();
  // Running statistics (batch normalization only), saved in checkpoints.
  std::vector<std::pair<std::string, Tensor*>> buffers();

 private:
  Backend& backend_;
  std::string name_;
  int channels_;
  NormKind kind_;
  int groups_;
  float eps_;
  bool relu_;
  bool training_ = true;
  double count_ = 0;  // global elements per channel in the last batch-norm forward
  Parameter gamma_, beta_;
  Tensor running_mean_, running_var_;
  Tensor input_, output_, input_grad_, mean_, second_stat_;  // second_stat: rstd (GN) or var (BN)
  Tensor global_dgamma_, global_dbeta_;
};

// conv (no bias) -> norm -> relu: the unit every DeepLab stage is made of.
class ConvNormRelu {
 public:
  ConvNormRelu(Backend& backend, const std::string& name, int in_channels, int out_channels,
               int kernel, ConvGeometry geometry, NormKind norm, int groups, float eps);
  const Tensor& forward(const Tensor& x, bool training, CrossRankSum* cross_rank);
  const Tensor* backward(const Tensor& dy, bool need_input_grad, CrossRankSum* cross_rank);
  std::vector<Parameter*> parameters();
  std::vector<std::pair<std::string, Tensor*>> buffers() { return norm_.buffers(); }
  int out_channels() const { return conv_.out_channels(); }

 private:
  Conv conv_;
  Norm norm_;
};

// A parameter and its gradient, allocated by `backend` (4-D ones as OIHW weights, others flat).
Parameter make_parameter(Backend& backend, std::string name, std::vector<std::int64_t> dims,
                         bool weight_decay);

// The largest group count <= wanted that divides channels (group norm needs an exact split).
int group_count(int channels, int wanted);

}  // namespace hardy::core
