// batchnorm.cu - batch normalization kernels. Statistics and backward sums: one block per channel
// walking its N planes of H*W values (fixed reduction order, so results repeat bit for bit);
// apply: one thread per element.
#include "kernels/cuda/batchnorm.h"
#include "kernels/cuda/common.cuh"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {

constexpr int kReduceBlock = 256;  // a multiple of the warp size; block_sum relies on it

// Sum of v over the block, returned to every thread. `scratch` holds one value per warp.
template <class T>
__device__ T block_sum(T v, T* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  for (int w = 0; w < kReduceBlock / 32; ++w) total += scratch[w];
  return total;
}

// Calls f(value index) for every element of channel c: index = (n * C + c) * S + i.
template <class F>
__device__ void for_channel(const BatchNormGeometry& g, int64_t c, F f) {
  for (int64_t j = threadIdx.x; j < g.count(); j += blockDim.x) {
    const int64_t n = j / g.spatial, i = j % g.spatial;
    f((n * g.channels + c) * g.spatial + i);
  }
}

template <class T>
__global__ void stats_kernel(const T* x, BatchNormGeometry g, double eps, double momentum, T* mean, T* invstd,
                             T* running_mean, T* running_var) {
  __shared__ T scratch[kReduceBlock / 32];
  const int64_t c = blockIdx.x;
  const T count = static_cast<T>(g.count());
  T part = 0;
  for_channel(g, c, [&](int64_t k) { part += x[k]; });
  const T m = block_sum(part, scratch) / count;
  part = 0;
  for_channel(g, c, [&](int64_t k) {
    const T d = x[k] - m;
    part += d * d;
  });
  const T sq = block_sum(part, scratch);
  if (threadIdx.x == 0) {
    mean[c] = m;
    invstd[c] = T(1) / sqrt(sq / count + static_cast<T>(eps));
    const T mom = static_cast<T>(momentum);
    if (running_mean) running_mean[c] = (T(1) - mom) * running_mean[c] + mom * m;
    if (running_var) running_var[c] = (T(1) - mom) * running_var[c] + mom * sq / (count - T(1));
  }
}

template <class T>
__global__ void running_invstd_kernel(const T* running_var, int64_t channels, double eps, T* invstd) {
  DDP_CUDA_KERNEL_LOOP(c, channels) invstd[c] = T(1) / sqrt(running_var[c] + static_cast<T>(eps));
}

template <class T>
__global__ void apply_kernel(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                             BatchNormGeometry g) {
  const int64_t n = g.batch * g.channels * g.spatial;
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const int64_t c = (i / g.spatial) % g.channels;
    const T w = weight ? weight[c] : T(1), b = bias ? bias[c] : T(0);
    y[i] = (x[i] - mean[c]) * invstd[c] * w + b;
  }
}

template <class T>
__global__ void backward_kernel(const T* dy, const T* x, const T* mean, const T* invstd, const T* weight,
                                T* dx, T* dweight, T* dbias, BatchNormGeometry g, bool training) {
  __shared__ T scratch[kReduceBlock / 32];
  const int64_t c = blockIdx.x;
  const T m = mean[c], istd = invstd[c], count = static_cast<T>(g.count());
  T part_dy = 0, part_dy_xc = 0;
  for_channel(g, c, [&](int64_t k) {
    part_dy += dy[k];
    part_dy_xc += dy[k] * (x[k] - m);
  });
  const T sum_dy = block_sum(part_dy, scratch);
  const T sum_dy_xhat = block_sum(part_dy_xc, scratch) * istd;
  if (threadIdx.x == 0) {
    if (dbias) dbias[c] = sum_dy;
    if (dweight) dweight[c] = sum_dy_xhat;
  }
  if (!dx) return;
  const T scale = (weight ? weight[c] : T(1)) * istd;
  const T dy_shift = training ? sum_dy / count : T(0);
  const T xc_coef = training ? istd * sum_dy_xhat / count : T(0);
  for_channel(g, c, [&](int64_t k) { dx[k] = scale * (dy[k] - dy_shift - (x[k] - m) * xc_coef); });
}

}  // namespace

template <class T>
void batch_norm_stats(const T* x, const BatchNormGeometry& g, double eps, double momentum, T* mean, T* invstd,
                      T* running_mean, T* running_var, cudaStream_t stream) {
  if (g.channels == 0) return;
  stats_kernel<T><<<static_cast<unsigned>(g.channels), kReduceBlock, 0, stream>>>(
      x, g, eps, momentum, mean, invstd, running_mean, running_var);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void batch_norm_running_invstd(const T* running_var, int64_t channels, double eps, T* invstd,
                               cudaStream_t stream) {
  if (channels == 0) return;
  running_invstd_kernel<T><<<grid_for(channels), kBlock, 0, stream>>>(running_var, channels, eps, invstd);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void batch_norm_apply(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                      const BatchNormGeometry& g, cudaStream_t stream) {
  const int64_t n = g.batch * g.channels * g.spatial;
  if (n == 0) return;
  apply_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(x, mean, invstd, weight, bias, y, g);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void batch_norm_backward(const T* dy, const T* x, const T* mean, const T* invstd, const T* weight, T* dx,
                         T* dweight, T* dbias, const BatchNormGeometry& g, bool training,
                         cudaStream_t stream) {
  if (g.channels == 0) return;
  backward_kernel<T><<<static_cast<unsigned>(g.channels), kReduceBlock, 0, stream>>>(
      dy, x, mean, invstd, weight, dx, dweight, dbias, g, training);
  DDP_CUDA_CHECK_LAUNCH();
}

#define DDP_INSTANTIATE_BATCHNORM(T)                                                                    \
  template void batch_norm_stats<T>(const T*, const BatchNormGeometry&, double, double, T*, T*, T*, T*, \
                                    cudaStream_t);                                                      \
  template void batch_norm_running_invstd<T>(const T*, int64_t, double, T*, cudaStream_t);              \
  template void batch_norm_apply<T>(const T*, const T*, const T*, const T*, const T*, T*,               \
                                    const BatchNormGeometry&, cudaStream_t);                            \
  template void batch_norm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*,    \
                                       const BatchNormGeometry&, bool, cudaStream_t);
DDP_INSTANTIATE_BATCHNORM(float)
DDP_INSTANTIATE_BATCHNORM(double)
#undef DDP_INSTANTIATE_BATCHNORM

}  // namespace ddp::kernels::cuda
