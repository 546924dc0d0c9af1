#pragma once
// The kernel interface every training layer is written against. A backend owns where tensors
// live and how each operation runs; the model, optimizers and trainer never touch a kernel
// library directly. Implementations describe an operation once per shape (oneDNN primitive
// descriptors, cuDNN algorithm choices), cache it, and execute it many times.
//
// Conventions, shared by every implementation:
// - Activations are 4-D (N, C, H, W) in the backend's activation_layout().
// - Convolution weights are (O, I, KH, KW), biases (O); normalization parameters (C).
// - Backward operations *overwrite* their outputs (dx, dw, ...); callers accumulate with axpy.
// - All reductions that a data-parallel job must combine across ranks are exposed as separate
//   "local statistics" calls so that the caller can allreduce them in between.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hardy/core/compute/tensor.hpp"

namespace hardy::core {

struct ConvGeometry {
  int stride = 1;
  int padding = 0;
  int dilation = 1;  // 1 is a dense kernel (PyTorch's convention)
};

// Spatial output size of a convolution, as in PyTorch.
int conv_output_size(int input, int kernel, const ConvGeometry& geometry);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Layout activation_layout() const = 0;
  virtual Device device() const = 0;
  // The dtype activations (4-D tensors and their gradients) are kept in: f32 on the CPU, bf16
  // or f16 on a GPU in mixed precision (parameters, gradients and statistics stay f32).
  virtual DType activation_dtype() const { return DType::f32; }

  // ---- memory ----
  virtual Tensor empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) = 0;
  // Copies between tensors of equal dims and dtype; converts between layouts (nchw <-> nhwc)
  // and between host and device.
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  virtual void fill(Tensor& t, float value) = 0;
  // Waits until all queued work is done (a no-op on the CPU).
  virtual void synchronize() {}

  // ---- convolution ----
  virtual void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              const ConvGeometry& geometry, Tensor& y) = 0;
  virtual void conv2d_backward_data(const Tensor& dy, const Tensor& weight,
                                    const ConvGeometry& geometry, Tensor& dx) = 0;
  // dbias may be null when the convolution has no bias.
  virtual void conv2d_backward_weights(const Tensor& x, const Tensor& dy,
                                       const ConvGeometry& geometry, Tensor& dweight,
                                       Tensor* dbias) = 0;

  // ---- group normalization (per sample, so independent of how a batch is split) ----
  // mean and rstd are (N, groups) f32 scratch written by forward and read by backward.
  // With fuse_relu, y = relu(gn(x)) and backward takes the mask from y.
  virtual void group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  int groups, float eps, bool fuse_relu, Tensor& y, Tensor& mean,
                                  Tensor& rstd) = 0;
  virtual void group_norm_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                   const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                                   int groups, bool fuse_relu, Tensor& dx, Tensor& dgamma,
                                   Tensor& dbeta) = 0;

  // ---- batch normalization, split so that statistics can be summed across ranks ----
  // Per-channel sums over (N, H, W): sum and sum of squares, each (C) f32.
  virtual void batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) = 0;
  // y = gamma * (x - mean) / sqrt(var + eps) + beta [then relu]; used for training (batch
  // statistics) and inference (running statistics) alike.
  virtual void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& variance,
                                const Tensor& gamma, const Tensor& beta, float eps, bool fuse_relu,
                                Tensor& y) = 0;
  // Local per-channel sums for backward: sum(dy') and sum(dy' * xhat), where dy' is dy masked by
  // the fused relu (taken from y). Written into dbeta and dgamma, which are exactly the
  // parameter gradients once summed across ranks.
  virtual void batch_norm_backward_statistics(const Tensor& x, const Tensor& y, const Tensor& dy,
                                              const Tensor& mean, const Tensor& variance, float eps,
                                              bool fuse_relu, Tensor& dgamma, Tensor& dbeta) = 0;
  // dx from the globally summed dgamma/dbeta; count is the global number of elements per
  // channel (N_global * H * W).
  virtual void batch_norm_backward_data(const Tensor& x, const Tensor& y, const Tensor& dy,
                                        const Tensor& mean, const Tensor& variance,
                                        const Tensor& gamma, const Tensor& dgamma,
                                        const Tensor& dbeta, float eps, bool fuse_relu,
                                        double count, Tensor& dx) = 0;

  // ---- activations and shape operations ----
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  // Bilinear resize to y's spatial size, half-pixel centres (PyTorch align_corners=False).
  virtual void upsample_bilinear_forward(const Tensor& x, Tensor& y) = 0;
  virtual void upsample_bilinear_backward(const Tensor& dy, Tensor& dx) = 0;
  // Concatenates along channels; backward splits dy into slices of the inputs' channel counts.
  virtual void concat_channels(std::span<const Tensor* const> inputs, Tensor& y) = 0;
  virtual void split_channels(const Tensor& dy, std::span<Tensor* const> outputs) = 0;
  // (N, C, H, W) -> (N, C, 1, 1) mean; backward spreads dy evenly.
  virtual void global_avg_pool_forward(const Tensor& x, Tensor& y) = 0;
  virtual void global_avg_pool_backward(const Tensor& dy, Tensor& dx) = 0;

  // ---- loss ----
  // Per-pixel softmax cross-entropy over channels against i32 labels (N, 1, H, W), each pixel
  // weighted by class_weights[label]. Returns the weighted sum of negative log-likelihoods over
  // all local pixels, and writes dlogits = grad_scale * d(sum)/d(logits). A data-parallel caller
  // passes grad_scale = 1 / (global batch * H * W) so that the gradient does not depend on how
  // the batch is split.
  virtual double softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                       std::span<const float> class_weights, float grad_scale,
                                       Tensor& dlogits) = 0;
  // Per-pixel argmax over channels into i32 (N, 1, H, W).
  virtual void argmax_channels(const Tensor& logits, Tensor& labels) = 0;

  // ---- element-wise operations for optimizers and gradient handling (flat f32) ----
  virtual void axpy(float alpha, const Tensor& x, Tensor& y) = 0;  // y += alpha * x
  virtual void scale(Tensor& x, float alpha) = 0;                  // x *= alpha
  virtual double sum_squares(const Tensor& x) = 0;
  // v = momentum * v + (g + weight_decay * p);  p -= lr * (nesterov ? g' + momentum * v : v)
  virtual void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, float lr,
                          float momentum, float weight_decay, bool nesterov) = 0;
  // Adam (Kingma & Ba) with L2 weight decay added to the gradient; step counts from 1.
  virtual void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, float lr,
                           float beta1, float beta2, float eps, float weight_decay, long step) = 0;
  // True when any element is Inf or NaN (loss-scaling overflow check).
  virtual bool has_non_finite(const Tensor& x) = 0;
};

// "cpu" (oneDNN, always built) or "cuda" (when built with HARDY_CUDA). Throws InvalidArgument
// naming the known backends otherwise.
std::unique_ptr<Backend> make_backend(std::string_view name);
std::vector<std::string> available_backends();

}  // namespace hardy::core
