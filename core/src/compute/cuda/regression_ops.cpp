// CudaBackend's operations for regression networks (CosmoFlow) besides convolutions and dense
// layers (cuda/convolution.cpp): 3-D max pooling, leaky relu, scaled tanh and the MSE loss, each
// queued as hardy's own kernels (kernels.hpp) on the backend's stream.
#include <algorithm>
#include <numeric>

#include "compute/cuda/cuda_support.hpp"

namespace hardy::core {

using namespace cuda;  // the backend's internal helpers, declared in cuda_support.hpp

namespace {

// x (N, C, D, H, W) and y (N, C, OD, OH, OW), NDHWC, checked by Backend (check_pool3d).
PoolShape3 pool_shape(const Tensor& x, const Tensor& y, const PoolGeometry& g) {
  return {.n = x.dim(0),
          .c = x.dim(1),
          .d = x.dim(2),
          .h = x.dim(3),
          .w = x.dim(4),
          .od = y.dim(2),
          .oh = y.dim(3),
          .ow = y.dim(4),
          .kernel = g.kernel,
          .stride = g.stride,
          .padding = g.padding};
}

}  // namespace

void CudaBackend::do_max_pool3d_forward(const Tensor& x, const PoolGeometry& geometry, Tensor& y) {
  cuda::max_pool3d_forward(x.raw(), x.dtype(), pool_shape(x, y, geometry), y.raw(), impl_->s());
}

void CudaBackend::do_max_pool3d_backward(const Tensor& x, const Tensor& dy,
                                         const PoolGeometry& geometry, Tensor& dx) {
  cuda::max_pool3d_backward(x.raw(), dy.raw(), x.dtype(), pool_shape(x, dy, geometry), dx.raw(),
                            impl_->s());
}

void CudaBackend::do_leaky_relu_forward(const Tensor& x, float slope, Tensor& y) {
  cuda::leaky_relu_forward(x.raw(), y.raw(), x.dtype(), slope, x.numel(), impl_->s());
}

void CudaBackend::do_leaky_relu_backward(const Tensor& y, const Tensor& dy, float slope,
                                         Tensor& dx) {
  cuda::leaky_relu_backward(y.raw(), dy.raw(), dx.raw(), y.dtype(), slope, y.numel(), impl_->s());
}

void CudaBackend::do_scaled_tanh_forward(const Tensor& x, float scale, Tensor& y) {
  cuda::scaled_tanh_forward(x.raw(), y.raw(), x.dtype(), scale, x.numel(), impl_->s());
}

void CudaBackend::do_scaled_tanh_backward(const Tensor& y, const Tensor& dy, float scale,
                                          Tensor& dx) {
  cuda::scaled_tanh_backward(y.raw(), dy.raw(), dx.raw(), y.dtype(), scale, y.numel(), impl_->s());
}

// The loss's per-block partial sums come back to the host in one copy queued behind the kernel,
// read when the caller asks (PendingSum), added in block order (the same sum on every run). A
// host target (read from a data file) is uploaded first.
PendingSum CudaBackend::do_mse_loss(const MseLoss& args, Tensor& dprediction) {
  const Index count = args.prediction.numel();
  const float* target = args.target.data<float>();
  if (args.target.device() == Device::host) {
    float* staged =
        impl_->staging.get_as<float>(static_cast<std::size_t>(std::max<Index>(count, 1)));
    // From pageable memory, as the loss's class weights: the copy has read it on return.
    impl_->copy_async(staged, target, static_cast<std::size_t>(count) * sizeof(float),
                      cudaMemcpyHostToDevice);
    target = staged;
  }
  auto* partials = impl_->small.get_as<double>(max_reduction_blocks);
  const int blocks = cuda::mse_loss(args.prediction.raw(), args.prediction.dtype(), target, count,
                                    args.grad_scale, dprediction.raw(), partials, impl_->s());
  std::shared_ptr<cuda::ResultSlot> slot = impl_->results->take();
  impl_->copy_async(slot->memory.as<double>(), partials,
                    static_cast<std::size_t>(blocks) * sizeof(double), cudaMemcpyDeviceToHost);
  slot->arrived.record(impl_->s());
  return cuda::pending_partials_sum(impl_->device, std::move(slot), blocks, std::nullopt);
}

}  // namespace hardy::core
