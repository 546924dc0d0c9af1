// 3-D max pooling on NDHWC tensors. cuDNN has Nd pooling, but hardy's own kernels take the same
// element of a tied window as the CPU backend and PyTorch (the first maximum in (d, h, w) order),
// which matters in bf16, where ties are common. Backward is a gather: each dx element visits the
// few windows that contain it and takes dy from those whose maximum it is, so the result does not
// depend on scheduling.
#include "device_math.cuh"

namespace hardy::core::cuda {

namespace {

// The first maximum of output (n, od, oh, ow)'s window in channel c: the input pixel index
// ((n * D + id) * H + ih) * W + iw, or -1 if the window has no element.
template <class T>
__device__ Index window_argmax(const T* x, const PoolShape3& s, Index n, Index c, Index od,
                               Index oh, Index ow) {
  float best = -INFINITY;
  Index where = -1;
  for (int kd = 0; kd < s.kernel; ++kd) {
    const Index id = od * s.stride - s.padding + kd;
    if (id < 0 || id >= s.d) continue;
    for (int kh = 0; kh < s.kernel; ++kh) {
      const Index ih = oh * s.stride - s.padding + kh;
      if (ih < 0 || ih >= s.h) continue;
      for (int kw = 0; kw < s.kernel; ++kw) {
        const Index iw = ow * s.stride - s.padding + kw;
        if (iw < 0 || iw >= s.w) continue;
        const Index pixel = ((n * s.d + id) * s.h + ih) * s.w + iw;
        const float value = to_float(x[pixel * s.c + c]);
        if (value > best) {
          best = value;
          where = pixel;
        }
      }
    }
  }
  return where;
}

template <class T>
__global__ void max_pool3d_forward_kernel(const T* x, PoolShape3 s, T* y) {
  const Index count = s.n * s.od * s.oh * s.ow * s.c;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const Index c = i % s.c, pixel = i / s.c;
    const Index ow = pixel % s.ow, oh = pixel / s.ow % s.oh, od = pixel / (s.ow * s.oh) % s.od;
    const Index n = pixel / (s.ow * s.oh * s.od);
    const Index where = window_argmax(x, s, n, c, od, oh, ow);
    y[i] = where >= 0 ? x[where * s.c + c] : from_float<T>(-INFINITY);
  }
}

// The outputs along one dimension whose window holds input coordinate i: o * stride - padding
// <= i <= o * stride - padding + kernel - 1, within [0, outputs).
__device__ void covering_outputs(Index i, Index outputs, const PoolShape3& s, Index& first,
                                 Index& last) {
  const Index shifted = i + s.padding;
  const Index low = shifted - s.kernel + 1;
  first = low <= 0 ? 0 : (low + s.stride - 1) / s.stride;
  last = min(shifted / s.stride, outputs - 1);
}

template <class T>
__global__ void max_pool3d_backward_kernel(const T* x, const T* dy, PoolShape3 s, T* dx) {
  const Index count = s.n * s.d * s.h * s.w * s.c;
  HARDY_GRID_STRIDE_LOOP(i, count) {
    const Index c = i % s.c, pixel = i / s.c;
    const Index w = pixel % s.w, h = pixel / s.w % s.h, d = pixel / (s.w * s.h) % s.d;
    const Index n = pixel / (s.w * s.h * s.d);
    Index d0, d1, h0, h1, w0, w1;
    covering_outputs(d, s.od, s, d0, d1);
    covering_outputs(h, s.oh, s, h0, h1);
    covering_outputs(w, s.ow, s, w0, w1);
    float sum = 0.0f;
    for (Index od = d0; od <= d1; ++od)
      for (Index oh = h0; oh <= h1; ++oh)
        for (Index ow = w0; ow <= w1; ++ow)
          if (window_argmax(x, s, n, c, od, oh, ow) == pixel)
            sum += to_float(dy[(((n * s.od + od) * s.oh + oh) * s.ow + ow) * s.c + c]);
    dx[i] = from_float<T>(sum);
  }
}

}  // namespace

void max_pool3d_forward(const void* x, DType type, const PoolShape3& shape, void* y,
                        cudaStream_t stream) {
  const Index count = shape.n * shape.od * shape.oh * shape.ow * shape.c;
  launch_per_element(type, count, "max_pool3d_forward", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    max_pool3d_forward_kernel<<<blocks, threads_per_block, 0, stream>>>(static_cast<const T*>(x),
                                                                        shape, static_cast<T*>(y));
  });
}

void max_pool3d_backward(const void* x, const void* dy, DType type, const PoolShape3& shape,
                         void* dx, cudaStream_t stream) {
  const Index count = shape.n * shape.d * shape.h * shape.w * shape.c;
  launch_per_element(type, count, "max_pool3d_backward", [&](auto tag, unsigned int blocks) {
    using T = decltype(tag);
    max_pool3d_backward_kernel<<<blocks, threads_per_block, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), shape, static_cast<T*>(dx));
  });
}

}  // namespace hardy::core::cuda
