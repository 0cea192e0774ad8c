// softmax.cu - CUDA softmax / log-softmax forward and backward: one block per row, block all-reduces for the
// row max and sums (numerically stable: exp(x - max)).
#include "kernels/cuda/softmax.cuh"
#include "kernels/cuda/softmax.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T, bool kLog>
__global__ void softmax_forward_kernel(const T* x, T* y, int64_t rows, int64_t cols) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T m = xr[0];
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = xr[c] > m ? xr[c] : m;
    m = block_allreduce(m, MaxOp(), smem);
    T s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += dev_exp(xr[c] - m);
    s = block_allreduce(s, SumOp(), smem);
    if (kLog) {
      const T shift = m + dev_log(s);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] - shift;
    } else {
      const T inv = T(1) / s;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = dev_exp(xr[c] - m) * inv;
    }
  }
}

template <class T, bool kLog>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    T s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += kLog ? dyr[c] : yr[c] * dyr[c];
    s = block_allreduce(s, SumOp(), smem);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      dxr[c] = kLog ? dyr[c] - dev_exp(yr[c]) * s : yr[c] * (dyr[c] - s);
  }
}

template <class T, bool kLog>
void launch_forward(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  softmax_forward_kernel<T, kLog><<<row_grid(rows), row_block(cols), 0, stream>>>(x, y, rows, cols);
  DDP_CUDA_CHECK_LAUNCH();
}
template <class T, bool kLog>
void launch_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  softmax_backward_kernel<T, kLog><<<row_grid(rows), row_block(cols), 0, stream>>>(y, dy, dx, rows, cols);
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace

template <class T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_forward<T, false>(x, y, rows, cols, stream);
}
template <class T>
void log_softmax_forward(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_forward<T, true>(x, y, rows, cols, stream);
}
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_backward<T, false>(y, dy, dx, rows, cols, stream);
}
template <class T>
void log_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream) {
  launch_backward<T, true>(y, dy, dx, rows, cols, stream);
}

#define DDP_INSTANTIATE(T)                                                                   \
  template void softmax_forward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);            \
  template void log_softmax_forward<T>(const T*, T*, int64_t, int64_t, cudaStream_t);        \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t); \
  template void log_softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);
DDP_INSTANTIATE(float)
DDP_INSTANTIATE(double)
#undef DDP_INSTANTIATE

}  // namespace ddp::kernels::cuda
