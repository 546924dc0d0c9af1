#pragma once
// The CUDA backend: cuDNN convolutions (NHWC and NDHWC, tensor-op math in bf16 or fp16 with fp32
// accumulation; also grouped and transposed), cuBLAS GEMMs for 1x1 convolutions and dense layers,
// and hardy's own kernels for normalization, resampling, pooling, activations, dropout, the
// losses and optimizer updates. Only the CUDA
// build (HARDY_HAVE_CUDA) has it; make_backend("cuda") returns one configured from the environment
// (CudaOptions).
//
// Precision contract (mixed precision as in PyTorch AMP, with fp32 master weights):
// - Parameters, their gradients, optimizer state and normalization statistics are f32 device
//   tensors, always; convolution weights stay (O, I, KH, KW) and are converted on the device to
//   the (O, KH, KW, I) layout and the activation type that cuDNN's NHWC kernels take.
// - Activations (4-D, NHWC) are f32, bf16 or f16; all activation operands of one call share a
//   dtype. activation_dtype() is the dtype this backend wants the model to use for them.
// - Convolutions run in the activations' type with fp32 accumulation; reductions (normalization
//   statistics, the loss, norms) accumulate in fp32 per thread and in double across threads, in
//   an order fixed by the shape, so a result does not change from run to run.
// - copy() converts between f32, bf16 and f16 (and between layouts and host and device), which
//   is how host f32 batches become bf16 activations.
//
// All work is queued on one stream (stream()); functions that return a host value (the loss,
// sum_squares, has_non_finite) and copies into host tensors wait for it.
#ifndef HARDY_HAVE_CUDA
#error \
    "hardy/core/compute/cuda_backend.hpp needs a build with the CUDA backend (HARDY_CUDA=ON or AUTO)"
#endif
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "hardy/core/compute/backend.hpp"

namespace hardy::core {

struct CudaOptions {
  // f32, bf16 or f16.
  DType activation_dtype = DType::bf16;
  // -1: the node-local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, MPI_LOCALRANKID,
  // LOCAL_RANK) modulo the number of visible devices, else device 0.
  int device = -1;
  // f32 activations only: let cuDNN and cuBLAS use TF32 tensor cores. Off, f32 convolutions
  // are exact fp32 (CUDNN_FMA_MATH), the setting the CPU comparison tests use.
  bool allow_tf32 = false;
  // The largest cuDNN workspace an algorithm may use (the pool holds the largest chosen one).
  std::size_t workspace_limit_bytes = std::size_t{1} << 30;
  // true: time every algorithm once per shape (cudnnFind*Ex, like cudnn.benchmark in PyTorch);
  // false: take cuDNN's heuristic ranking (cudnnGet*_v7) without running anything.
  bool benchmark_algorithms = true;

  // From HARDY_CUDA_PRECISION (bf16 | fp16 | fp32), HARDY_CUDA_DEVICE, HARDY_CUDA_TF32 (0/1),
  // HARDY_CUDNN_WORKSPACE_MIB and HARDY_CUDNN_ALGORITHMS (benchmark | heuristic); throws
  // InvalidArgument for a value it does not understand.
  static CudaOptions from_environment();
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaOptions options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  Layout activation_layout() const override { return Layout::nhwc; }
  Device device() const override { return Device::cuda; }
  // The dtype the model should allocate activations in (CudaOptions::activation_dtype).
  DType activation_dtype() const override;

  const CudaOptions& options() const;
  int device_index() const;
  // "NVIDIA H200 (sm_90, 139.8 GiB, 132 SMs)"
  std::string device_description() const;
  // The stream all of this backend's work runs on, for code that joins it (NCCL).
  cudaStream_t stream() const;
  // Number of cached cuDNN convolution plans (descriptors and chosen algorithm), one per shape
  // and pass (cuBLAS 1x1 convolutions need none); tests use it to check that repeating a shape
  // searches nothing again.
  std::size_t cached_convolution_count() const;

  // The cuDNN/cuBLAS handles, caches and scratch memory; defined in core/src/compute/cuda.
  struct Impl;

 protected:
  // Backend's hooks, called with operands already checked against the cuda backend's rules
  // (device tensors; activations f32, bf16 or f16; OIHW f32 weights).
  Tensor do_empty(std::vector<std::int64_t> dims, DType dtype, Layout layout) override;
  void do_copy(const Tensor& src, Tensor& dst) override;
  void do_copy_many(std::span<const Tensor* const> src, std::span<Tensor* const> dst) override;
  Tensor do_empty_host(std::vector<std::int64_t> dims, DType dtype, Layout layout) override;
  void do_fill(Tensor& t, float value) override;
  std::unique_ptr<InputUpload> do_start_upload() override;
  void do_synchronize() override;
  std::unique_ptr<DeviceSpan> do_start_device_span() override;

  void do_convolution_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                              const ConvGeometry& geometry, Tensor& y) override;
  void do_convolution_backward_data(const Tensor& dy, const Tensor& weight,
                                    const ConvGeometry& geometry, Tensor& dx) override;
  void do_convolution_backward_weights(const Tensor& x, const Tensor& dy,
                                       const ConvGeometry& geometry, Tensor& dweight,
                                       Tensor* dbias) override;

  void do_max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y) override;
  void do_max_pool3d_backward(const Tensor& x, const Tensor& dy, const PoolGeometry& geometry,
                              Tensor& dx) override;
  void do_dense_forward(const Tensor& x, const Tensor& weight, const Tensor* bias,
                        Tensor& y) override;
  void do_dense_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override;
  void do_dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight,
                                 Tensor* dbias) override;

  void do_group_norm_forward(const GroupNormForward& args, Tensor& y, Tensor& mean,
                             Tensor& rstd) override;
  void do_group_norm_backward(const GroupNormBackward& args, Tensor& dx, Tensor& dgamma,
                              Tensor& dbeta) override;

  void do_batch_norm_statistics(const Tensor& x, Tensor& sum, Tensor& sum_squares) override;
  void do_batch_norm_apply(const BatchNormApply& args, Tensor& y) override;
  void do_batch_norm_backward_statistics(const BatchNormBackwardStatistics& args, Tensor& dgamma,
                                         Tensor& dbeta) override;
  void do_batch_norm_backward_data(const BatchNormBackwardData& args, Tensor& dx) override;

  void do_relu_forward(const Tensor& x, Tensor& y) override;
  void do_relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void do_upsample_bilinear_forward(const Tensor& x, Tensor& y) override;
  void do_upsample_bilinear_backward(const Tensor& dy, Tensor& dx) override;
  void do_concat_channels(std::span<const Tensor* const> inputs, Tensor& y) override;
  void do_split_channels(const Tensor& dy, std::span<Tensor* const> outputs) override;
  void do_global_avg_pool_forward(const Tensor& x, Tensor& y) override;
  void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) override;
  void do_leaky_relu_forward(const Tensor& x, float slope, Tensor& y) override;
  void do_leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope, Tensor& dx) override;
  void do_scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) override;
  void do_scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale, Tensor& dx) override;
  void do_dropout_forward(const Dropout& args, Tensor& y) override;
  void do_dropout_backward(const Dropout& args, const Tensor& dy, Tensor& dx) override;

  PendingSum do_softmax_cross_entropy(const SoftmaxCrossEntropy& args, Tensor& dlogits) override;
  void do_argmax_channels(const Tensor& logits, Tensor& labels) override;
  PendingSum do_mse_loss(const MseLoss& args, Tensor& dprediction) override;

  // axpy and scale also take bf16/f16 tensors (the model accumulates activation gradients).
  void do_axpy(float alpha, const Tensor& x, Tensor& y) override;
  void do_scale(Tensor& x, float alpha) override;
  double do_sum_squares(const Tensor& x) override;
  void do_sgd_update(Tensor& param, const Tensor& grad, Tensor& velocity,
                     const SgdStep& step) override;
  void do_adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamStep& step) override;
  bool do_has_non_finite(std::span<const Tensor* const> tensors) override;

 private:
  std::unique_ptr<Impl> impl_;
};

// make_backend("cuda"): a CudaBackend with CudaOptions::from_environment(), its activation dtype
// replaced by `activation_dtype` where one is given (hardy train --precision wins over
// HARDY_CUDA_PRECISION, which stays as the fallback for scripts that set it).
std::unique_ptr<Backend> make_cuda_backend(std::optional<DType> activation_dtype = std::nullopt);

}  // namespace hardy::core
