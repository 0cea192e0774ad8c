// pool.cu - pooling kernels: one thread per output pixel forward, one thread per input pixel backward
// (each input gathers from the outputs whose windows cover it: no atomics, same result every run).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/pool.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {

// The outputs [lo, hi) along one axis whose windows cover input position `in`.
struct OutRange {
  int64_t lo, hi;
};
__device__ inline OutRange covering_outputs(int64_t in, int64_t out_size, const PoolGeometry& g) {
  const int64_t shifted = in + g.padding;
  const int64_t lo = shifted < g.kernel ? 0 : (shifted - g.kernel) / g.stride + 1;
  const int64_t hi = min(shifted / g.stride + 1, out_size);
  return {lo, hi};
}

template <class T>
__global__ void max_pool_forward_kernel(const T* x, T* y, int32_t* argmax, PoolGeometry g) {
  const int64_t n = g.planes * g.out_h * g.out_w;
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const int64_t ow = i % g.out_w, oh = (i / g.out_w) % g.out_h, p = i / (g.out_w * g.out_h);
    const T* plane = x + p * g.in_h * g.in_w;
    const int64_t h0 = oh * g.stride - g.padding, w0 = ow * g.stride - g.padding;
    const int64_t hb = max(h0, int64_t(0)), he = min(h0 + g.kernel, g.in_h);
    const int64_t wb = max(w0, int64_t(0)), we = min(w0 + g.kernel, g.in_w);
    T best = -INFINITY;
    int64_t best_at = hb * g.in_w + wb;
    for (int64_t ih = hb; ih < he; ++ih)
      for (int64_t iw = wb; iw < we; ++iw) {
        const T v = plane[ih * g.in_w + iw];
        if (v > best || isnan(v)) {  // strict: the first of equal maxima stays (same rule as the CPU)
          best = v;
          best_at = ih * g.in_w + iw;
        }
      }
    y[i] = best;
    argmax[i] = static_cast<int32_t>(best_at);
  }
}

template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const int32_t* argmax, T* dx, PoolGeometry g) {
  const int64_t n = g.planes * g.in_h * g.in_w;
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const int64_t iw = i % g.in_w, ih = (i / g.in_w) % g.in_h, p = i / (g.in_w * g.in_h);
    const int32_t here = static_cast<int32_t>(ih * g.in_w + iw);
    const OutRange rh = covering_outputs(ih, g.out_h, g), rw = covering_outputs(iw, g.out_w, g);
    const int64_t base = p * g.out_h * g.out_w;
    T acc = 0;
    for (int64_t oh = rh.lo; oh < rh.hi; ++oh)
      for (int64_t ow = rw.lo; ow < rw.hi; ++ow) {
        const int64_t o = base + oh * g.out_w + ow;
        if (argmax[o] == here) acc += dy[o];
      }
    dx[i] = acc;
  }
}

template <class T>
__global__ void avg_pool_forward_kernel(const T* x, T* y, PoolGeometry g) {
  const int64_t n = g.planes * g.out_h * g.out_w;
  const T inv_area = T(1) / T(g.kernel * g.kernel);
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const int64_t ow = i % g.out_w, oh = (i / g.out_w) % g.out_h, p = i / (g.out_w * g.out_h);
    const T* plane = x + p * g.in_h * g.in_w;
    const int64_t h0 = oh * g.stride - g.padding, w0 = ow * g.stride - g.padding;
    const int64_t hb = max(h0, int64_t(0)), he = min(h0 + g.kernel, g.in_h);
    const int64_t wb = max(w0, int64_t(0)), we = min(w0 + g.kernel, g.in_w);
    T sum = 0;
    for (int64_t ih = hb; ih < he; ++ih)
      for (int64_t iw = wb; iw < we; ++iw) sum += plane[ih * g.in_w + iw];
    y[i] = sum * inv_area;
  }
}

template <class T>
__global__ void avg_pool_backward_kernel(const T* dy, T* dx, PoolGeometry g) {
  const int64_t n = g.planes * g.in_h * g.in_w;
  const T inv_area = T(1) / T(g.kernel * g.kernel);
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const int64_t iw = i % g.in_w, ih = (i / g.in_w) % g.in_h, p = i / (g.in_w * g.in_h);
    const OutRange rh = covering_outputs(ih, g.out_h, g), rw = covering_outputs(iw, g.out_w, g);
    const T* dyp = dy + p * g.out_h * g.out_w;
    T acc = 0;
    for (int64_t oh = rh.lo; oh < rh.hi; ++oh)
      for (int64_t ow = rw.lo; ow < rw.hi; ++ow) acc += dyp[oh * g.out_w + ow];
    dx[i] = acc * inv_area;
  }
}

}  // namespace

template <class T>
void max_pool2d_forward(const T* x, T* y, int32_t* argmax, const PoolGeometry& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.out_h * g.out_w;
  if (n == 0) return;
  max_pool_forward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(x, y, argmax, g);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void max_pool2d_backward(const T* dy, const int32_t* argmax, T* dx, const PoolGeometry& g,
                         cudaStream_t stream) {
  const int64_t n = g.planes * g.in_h * g.in_w;
  if (n == 0) return;
  max_pool_backward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(dy, argmax, dx, g);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void avg_pool2d_forward(const T* x, T* y, const PoolGeometry& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.out_h * g.out_w;
  if (n == 0) return;
  avg_pool_forward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(x, y, g);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void avg_pool2d_backward(const T* dy, T* dx, const PoolGeometry& g, cudaStream_t stream) {
  const int64_t n = g.planes * g.in_h * g.in_w;
  if (n == 0) return;
  avg_pool_backward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(dy, dx, g);
  DDP_CUDA_CHECK_LAUNCH();
}

#define DDP_INSTANTIATE_POOL(T)                                                                          \
  template void max_pool2d_forward<T>(const T*, T*, int32_t*, const PoolGeometry&, cudaStream_t);        \
  template void max_pool2d_backward<T>(const T*, const int32_t*, T*, const PoolGeometry&, cudaStream_t); \
  template void avg_pool2d_forward<T>(const T*, T*, const PoolGeometry&, cudaStream_t);                  \
  template void avg_pool2d_backward<T>(const T*, T*, const PoolGeometry&, cudaStream_t);
DDP_INSTANTIATE_POOL(float)
DDP_INSTANTIATE_POOL(double)
#undef DDP_INSTANTIATE_POOL

}  // namespace ddp::kernels::cuda
