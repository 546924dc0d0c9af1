#pragma once
// hardy's own CUDA kernels, as host functions that validate nothing (CudaBackend checks the
// tensors first), enqueue on `stream` and check the launch. Pointers are device pointers.
// `type` is the element type of the activation operands: f32, bf16 or f16. Defined in
// elementwise.cu (memory, point-wise, loss, optimizers), spatial.cu (normalization,
// channel reductions, resampling, pooling) and depthwise.cu (depthwise 3x3 convolutions).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "hardy/core/compute/tensor.hpp"

namespace hardy::core::cuda {

using Index = std::int64_t;

// ---- memory and conversions (elementwise.cu) ----
// dst = src converted from src_type to dst_type, and permuted between NHWC and NCHW when the
// flags differ (4-D shape N, C, H, W; pass N = count, C = H = W = 1 for a flat conversion).
// Float types convert among themselves; i32 and u8 only permute.
void convert_permute(const void* src, DType src_type, bool src_nhwc, void* dst, DType dst_type,
                     bool dst_nhwc, Index n, Index c, Index h, Index w, cudaStream_t stream);
void fill(void* data, DType type, float value, Index count, cudaStream_t stream);
// (O, I, KH, KW) f32 weights <-> (O, KH, KW, I) in `type` (cuDNN's NHWC filter layout).
void weights_to_ohwi(const float* oihw, void* ohwi, DType type, Index o, Index i, Index kh,
                     Index kw, cudaStream_t stream);
void weights_from_ohwi(const void* ohwi, DType type, float* oihw, Index o, Index i, Index kh,
                       Index kw, cudaStream_t stream);

// ---- point-wise ----
void add_channel_bias(void* y, DType type, const float* bias, Index rows, Index channels,
                      cudaStream_t stream);
void relu_forward(const void* x, void* y, DType type, Index count, cudaStream_t stream);
void relu_backward(const void* y, const void* dy, void* dx, DType type, Index count,
                   cudaStream_t stream);
void axpy(float alpha, const void* x, void* y, DType type, Index count, cudaStream_t stream);
void scale(void* x, DType type, float alpha, Index count, cudaStream_t stream);
void leaky_relu_forward(const void* x, void* y, DType type, float slope, Index count,
                        cudaStream_t stream);
// dx = dy where y > 0, slope * dy elsewhere.
void leaky_relu_backward(const void* y, const void* dy, void* dx, DType type, float slope,
                         Index count, cudaStream_t stream);
// y = scale * tanh(x); backward from y: dx = dy * scale * (1 - (y / scale)^2).
void scaled_tanh_forward(const void* x, void* y, DType type, float scale, Index count,
                         cudaStream_t stream);
void scaled_tanh_backward(const void* y, const void* dy, void* dx, DType type, float scale,
                          Index count, cudaStream_t stream);
// y = x * scale where compute/dropout_mask.hpp keeps the element, else 0, over a 4-D (N, C, H, W)
// tensor in NHWC (nhwc) or NCHW order (5-D and 2-D tensors pass their spatial size as h, w = 1);
// sample_states: one per sample (dropout::sample_state). x may be y.
void apply_dropout(const void* x, void* y, DType type, bool nhwc, Index n, Index c, Index h,
                   Index w, const std::uint64_t* sample_states, std::uint32_t threshold,
                   float scale, cudaStream_t stream);

// ---- reductions to the host: partial sums per block, summed on the host in block order ----
// Returns the number of partials written (at most max_reduction_blocks).
inline constexpr int max_reduction_blocks = 1024;
int sum_squares_partials(const void* x, DType type, Index count, double* partials,
                         cudaStream_t stream);
// The MSE loss: per-block partial sums of (prediction - target)^2 (returns their number) and
// dprediction = 2 * grad_scale * (prediction - target); target f32.
int mse_loss(const void* prediction, DType type, const float* target, Index count, float grad_scale,
             void* dprediction, double* partials, cudaStream_t stream);
// Sets *flag (device int, zeroed by the caller) to 1 when any element is Inf or NaN.
void find_non_finite(const void* x, DType type, Index count, int* flag, cudaStream_t stream);

// ---- optimizers (f32) ----
void sgd_update(float* param, const float* grad, float* velocity, Index count, float lr,
                float momentum, float weight_decay, bool nesterov, cudaStream_t stream);
void adam_update(float* param, const float* grad, float* m, float* v, Index count, float step_size,
                 float inverse_sqrt_bias_correction2, float beta1, float beta2, float eps,
                 float weight_decay, cudaStream_t stream);

// ---- loss (NHWC: each pixel's class scores are contiguous) ----
// Writes per-block partial sums of the weighted negative log-likelihood (returns their number)
// and dlogits; a label outside [0, classes) leaves the smallest such pixel index in
// *first_bad_pixel (device, initialised to UINT64_MAX by the caller) and its label in
// *first_bad_label (untouched when every label is good).
int softmax_cross_entropy(const void* logits, DType type, const std::int32_t* labels,
                          const float* class_weights, Index pixels, int classes, float grad_scale,
                          void* dlogits, double* partials, unsigned long long* first_bad_pixel,
                          std::int32_t* first_bad_label, cudaStream_t stream);
void argmax_channels(const void* logits, DType type, std::int32_t* labels, Index pixels,
                     int classes, cudaStream_t stream);

// ---- channel slices (concat forward, split backward) ----
inline constexpr int max_slices_per_launch = 8;
struct ChannelSlices {
  void* data[max_slices_per_launch];
  Index channels[max_slices_per_launch];
  Index first_channel[max_slices_per_launch];
  int count;
};
// to_whole: copy each slice into its channel window of `whole` (rows x whole_channels);
// otherwise copy the windows out into the slices.
void copy_channel_slices(void* whole, Index rows, Index whole_channels, const ChannelSlices& slices,
                         int element_size, bool to_whole, cudaStream_t stream);

// ---- channel reductions (spatial.cu) ----
// Sums over the rows of `batches` consecutive (rows x channels) blocks of an NHWC tensor, per
// batch and channel, into out[batch][2][channel] (double). What is summed:
enum class ChannelSum {
  values,              // [0]: x
  values_and_squares,  // [0]: x, [1]: x * x
  // [0]: x - s, [1]: (x - s)^2, s the batch's first row of the channel: sums of squares about
  // a value inside the data's range, from which the centred variance follows exactly enough in
  // one pass (group_norm_statistics).
  shifted_values_and_squares,
  backward,  // [0]: dy' * (x - mean) * rstd, [1]: dy' (dy' = dy masked by y > 0)
};
struct ChannelSumInput {
  const void* x = nullptr;
  const void* dy = nullptr;  // backward only
  const void* y = nullptr;   // backward with relu_mask only
  bool relu_mask = false;
  // Statistics for backward, indexed batch * stat_batch_stride +
  // channel / channels_per_stat (group norm: stride groups, C / groups; batch norm: 0, 1).
  const float* mean = nullptr;
  const float* rstd = nullptr;
  Index stat_batch_stride = 0;
  Index channels_per_stat = 1;
};
// Scratch floats channel_sums needs for its partial sums.
Index channel_sums_scratch(Index batches, Index rows, Index channels);
void channel_sums(ChannelSum what, const ChannelSumInput& input, DType type, Index batches,
                  Index rows, Index channels, float* scratch, double* out, cudaStream_t stream);

// dst[i] = scale * src[i * src_stride] (double -> float), for reduction results.
void doubles_to_floats(const double* src, Index src_stride, float* dst, Index count, double scale,
                       cudaStream_t stream);

// ---- group normalization ----
// From the per (sample, channel) shifted sums of channel_sums (shifted_values_and_squares) and
// the shifts (x's first pixel of each sample and channel): mean[n][g] and
// rstd[n][g] = 1 / sqrt(var + eps), combining the channels of a group with Chan et al.'s
// pairwise formula in double.
void group_norm_statistics(const double* sums, const void* x, DType type, Index batch, Index pixels,
                           Index channels, Index groups, float eps, float* mean, float* rstd,
                           cudaStream_t stream);
void group_norm_apply(const void* x, DType type, const float* gamma, const float* beta,
                      const float* mean, const float* rstd, Index batch, Index pixels,
                      Index channels, Index groups, bool relu, void* y, cudaStream_t stream);
// From the backward sums s[n][0][c] = sum dy' xhat, s[n][1][c] = sum dy': dgamma, dbeta and,
// per (sample, group), sum(gamma dy') and sum(gamma dy' xhat) into group_terms[n][g][2].
void group_norm_backward_terms(const double* sums, const float* gamma, Index batch, Index channels,
                               Index groups, float* dgamma, float* dbeta, double* group_terms,
                               cudaStream_t stream);
void group_norm_backward_data(const void* x, const void* y, const void* dy, DType type, bool relu,
                              const float* gamma, const float* mean, const float* rstd,
                              const double* group_terms, Index batch, Index pixels, Index channels,
                              Index groups, double group_size, void* dx, cudaStream_t stream);

// ---- batch normalization ----
void rstd_from_variance(const float* variance, float eps, Index channels, float* rstd,
                        cudaStream_t stream);
void batch_norm_apply(const void* x, DType type, const float* mean, const float* variance,
                      const float* gamma, const float* beta, float eps, bool relu, Index rows,
                      Index channels, void* y, cudaStream_t stream);
// dx = gamma rstd (dy' - dbeta / count - xhat dgamma / count).
void batch_norm_backward_data(const void* x, const void* y, const void* dy, DType type, bool relu,
                              const float* mean, const float* variance, const float* gamma,
                              const float* dgamma, const float* dbeta, float eps, double count,
                              Index rows, Index channels, float* coefficients, void* dx,
                              cudaStream_t stream);

// ---- pooling ----
// y[n][c] = sums[n][0][c] / pixels, written in `type`.
void global_avg_pool_finish(const double* sums, Index batch, Index channels, double pixels, void* y,
                            DType type, cudaStream_t stream);
void global_avg_pool_backward(const void* dy, DType type, Index batch, Index pixels, Index channels,
                              void* dx, cudaStream_t stream);

// ---- 3-D max pooling (volume.cu), NDHWC: the first maximum of a window in (d, h, w) order ----
struct PoolShape3 {
  Index n, c, d, h, w, od, oh, ow;
  int kernel, stride, padding;
};
void max_pool3d_forward(const void* x, DType type, const PoolShape3& shape, void* y,
                        cudaStream_t stream);
// Each dx element gathers dy from the windows whose maximum it is, in a fixed order (no atomics).
void max_pool3d_backward(const void* x, const void* dy, DType type, const PoolShape3& shape,
                         void* dx, cudaStream_t stream);

// ---- bilinear resampling (half-pixel centres, PyTorch's align_corners=False) ----
// Per output coordinate o: the two source taps and weights; per input coordinate i: the range
// [lo, hi] of outputs that read it (hi < lo when none). Built on the host, kept on the device.
struct LinearTaps {
  const int* first;
  const int* second;
  const float* first_weight;
  const float* second_weight;
  const int* lo;
  const int* hi;
};
void upsample_bilinear_forward(const void* x, DType type, Index batch, Index channels, Index in_h,
                               Index in_w, Index out_h, Index out_w, const LinearTaps& rows,
                               const LinearTaps& columns, void* y, cudaStream_t stream);
// Separable transpose: along W into `along_w` (batch * out_h * in_w * channels floats), then
// along H into dx; each output element is a gather in a fixed order (no atomics).
void upsample_bilinear_backward(const void* dy, DType type, Index batch, Index channels, Index in_h,
                                Index in_w, Index out_h, Index out_w, const LinearTaps& rows,
                                const LinearTaps& columns, float* along_w, void* dx,
                                cudaStream_t stream);

// ---- depthwise convolutions (depthwise.cu) ----
// x (N, H, W, C) and y (N, OH, OW, C) NHWC in `type`; weights the f32 (C, 1, K, K) master copy
// or its gradient, K = depthwise_kernel; the output size is conv_output_size's.
inline constexpr int depthwise_kernel = 3;
struct DepthwiseShape {
  Index n, c, h, w, oh, ow;
  int stride, padding, dilation;
};
void depthwise_forward(const void* x, const float* weight, void* y, DType type,
                       const DepthwiseShape& s, cudaStream_t stream);
void depthwise_backward_data(const void* dy, const float* weight, void* dx, DType type,
                             const DepthwiseShape& s, cudaStream_t stream);
// Scratch floats depthwise_backward_weights needs for its per-chunk partial sums.
Index depthwise_backward_weights_scratch(const DepthwiseShape& s);
// Writes (does not add to) dweight.
void depthwise_backward_weights(const void* x, const void* dy, float* dweight, DType type,
                                const DepthwiseShape& s, float* scratch, cudaStream_t stream);

}  // namespace hardy::core::cuda
