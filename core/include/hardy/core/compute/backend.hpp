#pragma once
// The kernel interface every training layer is written against. A backend owns where tensors
// live and how each operation runs; the model, optimizers and trainer never touch a kernel
// library directly. Implementations describe an operation once per shape (oneDNN primitive
// descriptors, cuDNN algorithm choices), cache it, and execute it many times.
//
// Describe, check, execute (the split of oneDNN's primitive API): the public operations of
// Backend are non-virtual. Each takes its operands (the long ones as a small argument struct,
// written with designated initialisers at the call site), checks them once against the
// backend's OperandRules, and then calls the matching protected do_* hook, which an
// implementation overrides and which may assume valid operands. So every backend rejects a bad
// operand with the same message (naming the operation, the operand's role, the tensor and what
// was expected), and a backend holds kernel code only.
//
// Conventions, shared by every implementation:
// - Activations are 4-D (N, C, H, W) in the backend's activation_layout(); the volumetric
//   operations (conv3d, max_pool3d) take 5-D (N, C, D, H, W) ones in the same layout (channels
//   last: NDHWC), and the dense layers 2-D (N, K) ones. The 4-D operations refuse 5-D tensors
//   and the other way round.
// - Convolution weights are (O, I / groups, KH, KW), biases (O); transposed convolution weights
//   are (I, O, KH, KW) (PyTorch's ConvTranspose2d); 3-D convolution weights (O, I, KD, KH, KW);
//   dense weights (O, K) (PyTorch's nn.Linear); normalization parameters (C).
// - Backward operations *overwrite* their outputs (dx, dw, ...); callers accumulate with axpy.
// - All reductions that a data-parallel job must combine across ranks are exposed as separate
//   "local statistics" calls so that the caller can allreduce them in between.
#include <cstdint>
#include <memory>
#include <optional>
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
  // Input and output channels split into this many groups, each convolved with its own
  // O / groups filters of I / groups channels; groups == I is a depthwise convolution.
  int groups = 1;
  // A transposed convolution (PyTorch's ConvTranspose2d), as ATen's convolution takes it: set by
  // Backend::conv2d_transpose_* for the do_convolution_* hooks, refused by conv2d_* and conv3d_*.
  bool transposed = false;
};

// Spatial output size of a convolution, as in PyTorch.
int conv_output_size(int input, int kernel, const ConvGeometry& geometry);

// A max pooling window, the same along every spatial dimension. Padding counts as -infinity
// (PyTorch's MaxPool3d, ceil_mode=False) and may be at most kernel / 2.
struct PoolGeometry {
  int kernel = 2;
  int stride = 2;
  int padding = 0;
};

// Spatial output size of a pooling: (input + 2 * padding - kernel) / stride + 1, as in PyTorch.
int pool_output_size(int input, const PoolGeometry& geometry);

// What a backend accepts, stated once by the backend and checked by Backend's public operations.
struct OperandRules {
  Device device;                    // where the backend computes
  std::string_view device_name;     // "host" or "device", for messages
  std::string_view elsewhere_hint;  // why a tensor on another device is refused
  // Besides f32, the types activations (and axpy/scale operands) may have.
  bool bf16_activations;
  bool f16_activations;
  bool copy_converts_float_types;  // copy() converts between f32, bf16 and f16
  bool oihw_weights_only;          // convolution weights must be laid out (O, I, KH, KW) (nchw)
};

// Smallest spatial output size of a transposed convolution, as in PyTorch without output
// padding: (input - 1) * stride - 2 * padding + dilation * (kernel - 1) + 1. The output may be
// up to stride - 1 larger (PyTorch's output_padding), so that it inverts any conv2d's size.
int conv_transpose_output_size(int input, int kernel, const ConvGeometry& geometry);

// ---- operation arguments: the inputs and settings of the operations with many of them ----
// They hold references: build them in the call, e.g.
//   backend.group_norm_forward({.x = x, .gamma = gamma, .beta = beta, .groups = 8, .eps = 1e-5f},
//                              y, mean, rstd);

// y = gamma * (x - mean) * rstd + beta per (sample, group) [then relu].
struct GroupNormForward {
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  int groups;
  float eps;
  bool fuse_relu = false;
};

// y is read only with fuse_relu (the relu mask).
struct GroupNormBackward {
  const Tensor& x;
  const Tensor& y;
  const Tensor& dy;
  const Tensor& gamma;
  const Tensor& mean;  // as written by group_norm_forward
  const Tensor& rstd;
  int groups;
  bool fuse_relu = false;
};

// y = gamma * (x - mean) / sqrt(variance + eps) + beta [then relu].
struct BatchNormApply {
  const Tensor& x;
  const Tensor& mean;
  const Tensor& variance;
  const Tensor& gamma;
  const Tensor& beta;
  float eps;
  bool fuse_relu = false;
};

// y is read only with fuse_relu (the relu mask).
struct BatchNormBackwardStatistics {
  const Tensor& x;
  const Tensor& y;
  const Tensor& dy;
  const Tensor& mean;
  const Tensor& variance;
  float eps;
  bool fuse_relu = false;
};

// dgamma and dbeta are the globally summed ones; count is the global number of elements per
// channel (N_global * H * W).
struct BatchNormBackwardData {
  const Tensor& x;
  const Tensor& y;
  const Tensor& dy;
  const Tensor& mean;
  const Tensor& variance;
  const Tensor& gamma;
  const Tensor& dgamma;
  const Tensor& dbeta;
  float eps;
  bool fuse_relu = false;
  double count;
};

// labels: i32 (N, 1, H, W); class_weights: one per channel of logits.
struct SoftmaxCrossEntropy {
  const Tensor& logits;
  const Tensor& labels;
  std::span<const float> class_weights;
  float grad_scale;
};

// v = momentum * v + (g + weight_decay * p);  p -= lr * (nesterov ? g' + momentum * v : v)
struct SgdStep {
  float lr;
  float momentum;
  float weight_decay;
  bool nesterov = false;
};

// Adam (Kingma & Ba) with L2 weight decay added to the gradient; step counts from 1.
struct AdamStep {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  long step;
};

// Inverted dropout of x (or, backward, of its gradient): an element is kept with probability
// 1 - rate and scaled by 1 / (1 - rate), or zeroed. Whether it is kept is a counter-based hash
// of (seed, sample_keys[n], the element's index in the sample's logical (C, ...) order: (C, H, W)
// for 4-D, (C, D, H, W) for 5-D, (F) for a 2-D (N, F) tensor), so that the mask depends neither
// on the layout, the backend, the batch split nor the thread count: a rollback or a rebalance
// that recomputes a sample's step gets the same mask.
// A 3-D convolution whose output only a max pooling reads (CosmoFlow's blocks), as one
// operation: conv3d_max_pool_*.
struct Conv3dMaxPool {
  const Tensor& x;
  const Tensor& weight;
  const Tensor* bias;  // null without a bias
  ConvGeometry convolution;
  PoolGeometry pooling;
};

struct Dropout {
  const Tensor& x;
  float rate;  // in [0, 1)
  std::uint64_t seed;
  std::span<const std::uint64_t> sample_keys;  // one per sample of x (x.dim(0))
};

// Mean-squared-error regression loss: prediction (N, K) in the activation dtype (f32, or bf16 /
// f16 on a GPU), target (N, K) f32 on the backend's device or on the host. A NaN target is left
// out (a skipped sample's, as kIgnoreLabel leaves out a pixel): it adds no loss and no gradient.
struct MseLoss {
  const Tensor& prediction;
  const Tensor& target;
  float grad_scale;
};

class Backend;

// A batch's copy into a backend's tensors that runs beside the backend's kernels: started on the
// thread that queues them (Backend::start_upload), filled from another (the next step's input,
// loaded while this step computes), handed back to the first. On a GPU the copies run on a
// stream of their own, ordered after the work queued before the start and before the work
// queued after hand_over(), with no host wait on either side; on the CPU, whose copies and
// kernels share the cores, hand_over() makes them.
class InputUpload {
 public:
  virtual ~InputUpload() = default;
  InputUpload(const InputUpload&) = delete;
  InputUpload& operator=(const InputUpload&) = delete;
  // From one thread (any): queues host `src` into the backend's `dst`, converted as
  // Backend::copy converts. `src` must stay unchanged until hand_over() returns; `dst` must not
  // be used by work queued after the start until hand_over().
  void copy(const Tensor& src, Tensor& dst);
  // From the same thread: a batch whose samples lie apart, one host tensor of dims (1, dst's
  // other dims) per sample of `dst`, all of one dtype and layout, copied as copy() would copy
  // them stacked into one tensor, float types converted (on the host where the backend has no
  // device of its own). Each must stay unchanged until finish() returns. From page-locked memory
  // (Backend::empty_host) a GPU copies each straight to the device: the loaders' buffers go
  // there as they are, without being gathered into one host batch first.
  void copy_samples(std::span<const Tensor* const> samples, Tensor& dst);
  // From the same thread, after the copies: waits until they are done on the device and returns
  // the device's seconds for them (measured with events; 0 where nothing runs apart).
  virtual double finish() = 0;
  // From the thread that queues the backend's work, after finish(): later work sees the copies.
  virtual void hand_over() = 0;

 protected:
  explicit InputUpload(const OperandRules& rules) : rules_(rules) {}
  virtual void do_copy(const Tensor& src, Tensor& dst) = 0;
  virtual void do_copy_samples(std::span<const Tensor* const> samples, Tensor& dst) = 0;

 private:
  const OperandRules& rules_;
};

// A sum that queued work computes (a loss), read when it is wanted. On a GPU its copy to the host
// is queued behind that work, so that a training step reads its loss once its backward pass is
// queued as well, not between forward and backward (where the device would idle while the host
// queues the backward's first kernels). Ready at once where the work ran on the calling thread
// (the CPU). An error the work found (a label out of range) is thrown by value(), every time.
class PendingSum {
 public:
  class Source {
   public:
    virtual ~Source() = default;
    // Waits for the work and returns the sum (or throws what the work found).
    virtual double read() = 0;
  };
  PendingSum() = default;  // 0, ready
  static PendingSum ready(double value);
  explicit PendingSum(std::unique_ptr<Source> source) : source_(std::move(source)) {}
  // From any thread, once: later calls return the same value without waiting.
  double value();

 private:
  std::unique_ptr<Source> source_;
  double value_ = 0;
};

// The device's time over a stretch of the work queued on a backend (Backend::start_device_span),
// from events queued with that work: reading it after the stretch is done costs no wait inside
// the stretch. It spans the device's clock from the stretch's start reaching the device to its
// last work finishing, idle gaps included: where the host queues work more slowly than the device
// runs it, the span approaches the host's time.
class DeviceSpan {
 public:
  virtual ~DeviceSpan() = default;
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;
  // From the thread that queues the backend's work: the stretch ends with the work queued so far.
  virtual void end() = 0;
  // From any thread, after end(): waits for the stretch to finish on the device and returns its
  // seconds.
  virtual double seconds() = 0;

 protected:
  DeviceSpan() = default;
};

class Backend {
 public:
  explicit Backend(const OperandRules& rules) : rules_(rules) {}
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual std::string_view name() const = 0;
  virtual Layout activation_layout() const = 0;
  virtual Device device() const = 0;
  // The dtype activations (4-D tensors and their gradients) are kept in: f32, or bf16 (CPU and
  // GPU) or f16 (GPU) in mixed precision (parameters, gradients and statistics stay f32).
  virtual DType activation_dtype() const { return DType::f32; }
  // What the operations below accept (a decorator takes over its inner backend's rules).
  const OperandRules& operand_rules() const { return rules_; }

  // ---- memory ----
  Tensor empty(std::vector<std::int64_t> dims, DType dtype, Layout layout);
  // Copies between tensors of equal dims and dtype; converts between layouts (nchw <-> nhwc),
  // between host and device, and (where the rules say so) between f32, bf16 and f16.
  void copy(const Tensor& src, Tensor& dst);
  // The same for many pairs, src[i] into dst[i], with one wait for the device at the end
  // instead of one per copy into the host.
  void copy(std::span<const Tensor* const> src, std::span<Tensor* const> dst);
  // A host tensor (zero-filled) in the memory this backend's copies reach fastest: page-locked
  // on a GPU, so that copies to and from it run as DMA without a bounce; ordinary host memory on
  // the CPU.
  Tensor empty_host(std::vector<std::int64_t> dims, DType dtype, Layout layout);
  void fill(Tensor& t, float value);
  // From the thread that queues this backend's work: an upload whose copies wait for the work
  // queued so far (which may still read their destinations). One at a time on a GPU.
  std::unique_ptr<InputUpload> start_upload() { return do_start_upload(); }
  // Waits until all queued work is done (a no-op on the CPU).
  void synchronize() { do_synchronize(); }
  // From the thread that queues this backend's work: a span that starts with the work queued
  // next. Null on a backend without a device of its own (the CPU), whose operations run on the
  // calling thread: the host's clock times them.
  std::unique_ptr<DeviceSpan> start_device_span() { return do_start_device_span(); }

  // ---- convolution ----
  void conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                      const ConvGeometry& geometry, Tensor& y);
  void conv2d_backward_data(const Tensor& dy, const Tensor& weight, const ConvGeometry& geometry,
                            Tensor& dx);
  // dbias may be null when the convolution has no bias.
  void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeometry& geometry,
                               Tensor& dweight, Tensor* dbias);
  // Transposed convolution (the gradient of conv2d with respect to its input), PyTorch's
  // ConvTranspose2d: weight (I, O, KH, KW) where I = x's channels, bias (O); groups must be 1.
  // y's size picks the output padding: y.h must lie in [conv_transpose_output_size(x.h, KH),
  // that + stride - 1], and likewise y.w.
  void conv2d_transpose_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                const ConvGeometry& geometry, Tensor& y);
  void conv2d_transpose_backward_data(const Tensor& dy, const Tensor& weight,
                                      const ConvGeometry& geometry, Tensor& dx);
  // dbias may be null when the transposed convolution has no bias.
  void conv2d_transpose_backward_weights(const Tensor& x, const Tensor& dy,
                                         const ConvGeometry& geometry, Tensor& dweight,
                                         Tensor* dbias);

  // ---- volumetric (3-D) convolution: 5-D activations (N, C, D, H, W) in activation_layout() ----
  // weight (O, I, KD, KH, KW) f32, row-major (nchw or flat); bias (O). The geometry applies to
  // all three spatial dimensions; groups must be 1. y is (N, O, OD, OH, OW) with each output
  // size conv_output_size(input, kernel, geometry).
  void conv3d_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                      const ConvGeometry& geometry, Tensor& y);
  void conv3d_backward_data(const Tensor& dy, const Tensor& weight, const ConvGeometry& geometry,
                            Tensor& dx);
  // dbias may be null when the convolution has no bias.
  void conv3d_backward_weights(const Tensor& x, const Tensor& dy, const ConvGeometry& geometry,
                               Tensor& dweight, Tensor* dbias);

  // ---- volumetric max pooling (5-D activations) ----
  // y (N, C, OD, OH, OW) with each output size pool_output_size(input, geometry). Ties go to the
  // first maximum of a window in (d, h, w) order, on every backend (and as in PyTorch).
  void max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y);
  // dx: dy routed to each window's maximum in x (summed where windows overlap).
  void max_pool3d_backward(const Tensor& x, const Tensor& dy, const PoolGeometry& geometry,
                           Tensor& dx);

  // ---- a volumetric convolution read only by a max pooling, as one operation ----
  // Where the backend fuses the two, the convolution's output is never kept whole: the CPU
  // backend computes it a few planes at a time and pools them while they are in cache, which
  // saves writing and reading it (at CosmoFlow's 128^3, 537 MB per pass in bf16) and its memory.
  // Whether conv3d_max_pool_* run on this backend for these geometries; where they do not, the
  // caller runs conv3d_* and max_pool3d_*, which compute the same values.
  virtual bool fuses_conv3d_max_pool(const ConvGeometry& convolution,
                                     const PoolGeometry& pooling) const;
  // y = max_pool3d(conv3d(x, weight, bias)); window (u8, y's dims and layout) records for each
  // pooled value which voxel of its window held the maximum, numbered (kd * K + kh) * K + kw:
  // the first maximum in (d, h, w) order, as max_pool3d takes it; 255 where none exceeded
  // -infinity.
  void conv3d_max_pool_forward(const Conv3dMaxPool& op, Tensor& y, Tensor& window);
  // From dy (y's gradient) and the forward's window: dweight, dbias (null without a bias) and,
  // unless null, dx (x's dims).
  void conv3d_max_pool_backward(const Conv3dMaxPool& op, const Tensor& dy, const Tensor& window,
                                Tensor* dx, Tensor& dweight, Tensor* dbias);

  // ---- dense (fully connected) layers, PyTorch's nn.Linear ----
  // y (N, O) = x (N, K) weight^T + bias: x and y 2-D activations (activation dtype), weight
  // (O, K) f32, bias (O) f32.
  void dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y);
  // dx (N, K) = dy (N, O) weight.
  void dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx);
  // dweight (O, K) = dy^T x, dbias (O) = the sum of dy over the batch; dbias may be null.
  void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias);

  // ---- group normalization (per sample, so independent of how a batch is split) ----
  // mean and rstd are (N, groups) f32 scratch written by forward and read by backward.
  // With fuse_relu, y = relu(gn(x)) and backward takes the mask from y.
  void group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean, Tensor& rstd);
  void group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                           Tensor& dbeta);

  // ---- batch normalization, split so that statistics can be summed across ranks ----
  // Per-channel sums over (N, H, W): sum and sum of squares, each (C) f32.
  void batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares);
  // Used for training (batch statistics) and inference (running statistics) alike.
  void batch_norm_apply(const BatchNormApply& args, Tensor& y);
  // Local per-channel sums for backward: sum(dy') and sum(dy' * xhat), where dy' is dy masked by
  // the fused relu (taken from y). Written into dbeta and dgamma, which are exactly the
  // parameter gradients once summed across ranks.
  void batch_norm_backward_statistics(const BatchNormBackwardStatistics& args, Tensor& dgamma,
                                      Tensor& dbeta);
  // dx from the globally summed dgamma/dbeta.
  void batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx);

  // ---- activations and shape operations ----
  void relu_forward(const Tensor& x, Tensor& y);
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
  // Bilinear resize to y's spatial size, half-pixel centres (PyTorch align_corners=False).
  void upsample_bilinear_forward(const Tensor& x, Tensor& y);
  void upsample_bilinear_backward(const Tensor& dy, Tensor& dx);
  // Concatenates along channels; backward splits dy into slices of the inputs' channel counts.
  void concat_channels(std::span<const Tensor* const> inputs, Tensor& y);
  void split_channels(const Tensor& dy, std::span<Tensor* const> outputs);
  // (N, C, H, W) -> (N, C, 1, 1) mean; backward spreads dy evenly.
  void global_avg_pool_forward(const Tensor& x, Tensor& y);
  void global_avg_pool_backward(const Tensor& dy, Tensor& dx);
  // Leaky relu: y = x for x > 0, slope * x otherwise (slope >= 0), on float tensors of any shape.
  void leaky_relu_forward(const Tensor& x, float slope, Tensor& y);
  // dx = dy where y > 0, slope * dy elsewhere. Pass the forward output (or its input: with
  // slope >= 0 they have the same sign) as y.
  void leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope, Tensor& dx);
  // y = scale * tanh(x) (scale != 0), on float tensors of any shape.
  void scaled_tanh_forward(const Tensor& x, float scale, Tensor& y);
  // dx = dy * scale * (1 - tanh(x)^2), computed from the forward output y.
  void scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx);
  // (N, C, ...) in any layout -> (N, C * ...) in PyTorch's logical order (torch.flatten(x, 1)),
  // so that a following dense layer's (O, C * D * H * W) weights are PyTorch's. x: a 4-D or 5-D
  // float tensor; y: 2-D with x's dtype. A copy, converted from channels-last where x is.
  void flatten_forward(const Tensor& x, Tensor& y);
  // The inverse: dy (N, C * ...) -> dx (N, C, ...) in dx's layout.
  void flatten_backward(const Tensor& dy, Tensor& dx);
  // y = x * keep / (1 - rate) (struct Dropout). x and y: float tensors of equal dims, dtype and
  // layout with a leading batch dimension: 2-D (N, F), 4-D or 5-D, nchw as well as nhwc (the mask
  // is the same in both).
  void dropout_forward(const Dropout& args, Tensor& y);
  // dx = dy * keep / (1 - rate), with the mask of dropout_forward for the same arguments;
  // args.x only gives the shape (dy and dx have its dims).
  void dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx);

  // ---- loss ----
  // Per-pixel softmax cross-entropy over channels, each pixel weighted by
  // class_weights[label]. Returns the weighted sum of negative log-likelihoods over all local
  // pixels, and writes dlogits = grad_scale * d(sum)/d(logits). A data-parallel caller passes
  // grad_scale = 1 / (global batch * H * W) so that the gradient does not depend on how the
  // batch is split.
  double softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits);
  // The same with the sum read later (PendingSum): dlogits is written by the queued work, as by
  // any other operation.
  PendingSum queue_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits);
  // Per-pixel argmax over channels into i32 (N, 1, H, W).
  void argmax_channels(const Tensor& logits, Tensor& labels);
  // Sum of squared errors over every local element of prediction against target; writes
  // dprediction = grad_scale * d(sum)/d(prediction) = grad_scale * 2 * (prediction - target)
  // (dims and dtype of prediction). A data-parallel caller passes grad_scale = 1 / (global batch
  // * K) so that the gradient is that of the mean over the global batch, however it is split.
  double mse_loss(const MseLoss& args, Tensor& dprediction);
  PendingSum queue_mse_loss(const MseLoss& args, Tensor& dprediction);

  // ---- element-wise operations for optimizers and gradient handling (flat f32) ----
  void axpy(float alpha, const Tensor& x, Tensor& y);  // y += alpha * x
  void scale(Tensor& x, float alpha);                  // x *= alpha
  double sum_squares(const Tensor& x);
  void sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity, const SgdStep& step);
  void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamStep& step);
  // True when any element is Inf or NaN (loss-scaling overflow check). The span form checks
  // many tensors (a model's gradients) with one wait for the device, not one per tensor.
  bool has_non_finite(const Tensor& x);
  bool has_non_finite(std::span<const Tensor* const> tensors);

 protected:
  // The implementation of each public operation, called with checked operands. A decorator
  // (ForwardingBackend) overrides them to wrap another backend's.
  virtual Tensor do_empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) = 0;
  virtual void do_copy(const Tensor& src, Tensor& dst) = 0;
  virtual void do_copy_many(std::span<const Tensor* const> src, std::span<Tensor* const> dst) {
    for (std::size_t i = 0; i < src.size(); ++i) do_copy(*src[i], *dst[i]);
  }
  virtual Tensor do_empty_host(std::vector<std::int64_t> dims, DType dtype, Layout layout) {
    return Tensor::host(std::move(dims), dtype, layout);
  }
  virtual void do_fill(Tensor& t, float value) = 0;
  // Copies made by hand_over() on the calling thread (a backend without a device of its own).
  virtual std::unique_ptr<InputUpload> do_start_upload();
  virtual void do_synchronize() {}
  virtual std::unique_ptr<DeviceSpan> do_start_device_span() { return nullptr; }

  // conv2d_*, conv3d_* and conv2d_transpose_*: a convolution of 4-D or 5-D activations (the rank
  // says which), or a transposed one (geometry.transposed: weight (I, O, KH, KW), the roles of x
  // and y as in conv2d_transpose_*).
  virtual void do_convolution_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                      const ConvGeometry& geometry, Tensor& y) = 0;
  virtual void do_convolution_backward_data(const Tensor& dy, const Tensor& weight,
                                            const ConvGeometry& geometry, Tensor& dx) = 0;
  virtual void do_convolution_backward_weights(const Tensor& x, const Tensor& dy,
                                               const ConvGeometry& geometry, Tensor& dweight,
                                               Tensor* dbias) = 0;

  virtual void do_max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y) = 0;
  virtual void do_max_pool3d_backward(const Tensor& x, const Tensor& dy,
                                      const PoolGeometry& geometry, Tensor& dx) = 0;
  // Called only where fuses_conv3d_max_pool() holds; refuse by default.
  virtual void do_conv3d_max_pool_forward(const Conv3dMaxPool& op, Tensor& y, Tensor& window);
  virtual void do_conv3d_max_pool_backward(const Conv3dMaxPool& op, const Tensor& dy,
                                           const Tensor& window, Tensor* dx, Tensor& dweight,
                                           Tensor* dbias);
  virtual void do_dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                                Tensor& y) = 0;
  virtual void do_dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) = 0;
  virtual void do_dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                         Tensor* dbias) = 0;

  virtual void do_group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean,
                                     Tensor& rstd) = 0;
  virtual void do_group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                                      Tensor& dbeta) = 0;

  virtual void do_batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) = 0;
  virtual void do_batch_norm_apply(const BatchNormApply& args, Tensor& y) = 0;
  virtual void do_batch_norm_backward_statistics(const BatchNormBackwardStatistics& args,
                                                 Tensor& dgamma, Tensor& dbeta) = 0;
  virtual void do_batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx) = 0;

  virtual void do_relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  virtual void do_upsample_bilinear_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_upsample_bilinear_backward(const Tensor& dy, Tensor& dx) = 0;
  virtual void do_concat_channels(std::span<const Tensor* const> inputs, Tensor& y) = 0;
  virtual void do_split_channels(const Tensor& dy, std::span<Tensor* const> outputs) = 0;
  virtual void do_global_avg_pool_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) = 0;
  virtual void do_leaky_relu_forward(const Tensor& x, float slope, Tensor& y) = 0;
  virtual void do_leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope,
                                      Tensor& dx) = 0;
  virtual void do_scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) = 0;
  virtual void do_scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale,
                                       Tensor& dx) = 0;
  virtual void do_dropout_forward(const Dropout& args, Tensor& y) = 0;
  virtual void do_dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx) = 0;

  virtual PendingSum do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) = 0;
  virtual void do_argmax_channels(const Tensor& logits, Tensor& labels) = 0;
  virtual PendingSum do_mse_loss(const MseLoss& args, Tensor& dprediction) = 0;

  virtual void do_axpy(float alpha, const Tensor& x, Tensor& y) = 0;
  virtual void do_scale(Tensor& x, float alpha) = 0;
  virtual double do_sum_squares(const Tensor& x) = 0;
  virtual void do_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity,
                             const SgdStep& step) = 0;
  virtual void do_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                              const AdamStep& step) = 0;
  virtual bool do_has_non_finite(std::span<const Tensor* const> tensors) = 0;

 private:
  // Calls another backend's hooks directly: its operands were checked by the decorator's own
  // public operation, against the same rules.
  friend class ForwardingBackend;

  // Which public convolution: conv2d_*, conv3d_* or conv2d_transpose_*.
  enum class ConvFamily { planar, volumetric, transposed };
  // The checks of that family's pass, then do_convolution_* (the geometry marked transposed for
  // the transposed family).
  void checked_convolution_forward(ConvFamily family, const Tensor& x, const Tensor& weight,
                                   const Tensor* bias, const ConvGeometry& geometry, Tensor& y);
  void checked_convolution_backward_data(ConvFamily family, const Tensor& dy, const Tensor& weight,
                                         const ConvGeometry& geometry, Tensor& dx);
  void checked_convolution_backward_weights(ConvFamily family, const Tensor& x, const Tensor& dy,
                                            const ConvGeometry& geometry, Tensor& dweight,
                                            Tensor* dbias);

  OperandRules rules_;
};

// The precision a run trains in (hardy train --precision): f32 throughout, or mixed precision with
// bf16 or fp16 activations (parameters, gradients, optimizer state and statistics stay f32, so a
// checkpoint is the same in every precision).
enum class Precision { f32, bf16, fp16 };
std::string_view to_string(Precision precision);  // "f32", "bf16", "fp16"
// "f32" (or "fp32"), "bf16", "fp16" (or "f16"); throws InvalidArgument naming the accepted ones.
Precision parse_precision(std::string_view text);
DType activation_dtype(Precision precision);
// The precision a backend trains in when none is asked for: f32 on the CPU; on a GPU what
// HARDY_CUDA_PRECISION says (the fallback for scripts written before --precision), else bf16.
// Throws InvalidArgument for a value of HARDY_CUDA_PRECISION it does not know.
Precision default_precision(std::string_view backend_name);
// Why `backend_name` cannot train in `precision` on this machine (fp16 on the CPU; bf16 on a CPU
// without native bf16 instructions, naming what oneDNN found), or nullopt when it can.
std::optional<std::string> precision_unsupported(std::string_view backend_name,
                                                 Precision precision);

// "cpu" (oneDNN, always built) or "cuda" (when built with HARDY_CUDA). Throws InvalidArgument
// naming the known backends otherwise. Without a precision the CPU trains in f32 and a GPU in
// what HARDY_CUDA_PRECISION says (bf16 when unset); the CPU refuses fp16, and bf16 on a CPU that
// lacks native bf16 instructions (InvalidArgument, naming what it lacks).
std::unique_ptr<Backend> make_backend(std::string_view name,
                                      std::optional<Precision> precision = std::nullopt);
std::vector<std::string> available_backends();

// Returns t, reallocated through the backend if its dims or dtype differ. Without a dtype,
// 4-D and 5-D tensors (activations and their gradients) get the backend's activation_dtype()
// and activation_layout(), all others f32 (flat).
Tensor& ensure_tensor(Backend& backend, Tensor& t, const std::vector<std::int64_t>& dims,
                      std::optional<DType> dtype = std::nullopt);

}  // namespace hardy::core
