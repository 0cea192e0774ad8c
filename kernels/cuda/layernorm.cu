// layernorm.cu - CUDA layer norm: forward and dx with one warp per row up to kWarpRowCols columns (warp
// shuffles, no block barriers), one block per row beyond (two-pass mean/variance either way); dweight/dbias
// with one block per 32 columns and row chunk (column_sum_plan.h: enough blocks for every SM), the chunks
// then added in chunk order (deterministic, no atomics). bf16 compute: y written as bf16 (rounded once) and
// dy read as bf16 (widened exactly), the arithmetic float32.
#include "kernels/cuda/column_sum_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/softmax.cuh"
#include "kernels/cuda/store_as.cuh"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
template <class T, class Y>
__global__ void layernorm_forward_kernel(const T* x, const T* weight, const T* bias, Y* y, T* mean, T* rstd,
                                         int64_t rows, int64_t cols, double eps) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    Y* yr = y + r * cols;
    T s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    const T m = block_allreduce(s, SumOp(), smem) / static_cast<T>(cols);
    T v = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) v += (xr[c] - m) * (xr[c] - m);
    const T var = block_allreduce(v, SumOp(), smem) / static_cast<T>(cols);
    const T rs = T(1) / dev_sqrt(var + static_cast<T>(eps));
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      store_as(yr + c, (xr[c] - m) * rs * weight[c] + bias[c]);
    if (threadIdx.x == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

constexpr int64_t kWarpRowCols = 4096;  // rows up to this long get one warp each (128 elements per lane)
constexpr int kWarpRowBlock = 256;      // 8 rows per block

// Blocks for `rows` rows at one warp per row (the kernels loop over rows with a grid stride).
inline int warp_row_grid(int64_t rows) {
  constexpr int64_t kRowsPerBlock = kWarpRowBlock / 32;
  return row_grid((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// One warp per row, the same arithmetic as layernorm_forward_kernel: the row's sum, then its squared
// deviations, then y. One block per row spent 34 us on GPT-2 small's 8192 x 768 rows on the H200 (1.5 TB/s;
// ncu, 2026-12-04): two block barriers per pass and 3 values per thread.
template <class T, class Y>
__global__ void layernorm_forward_warp_kernel(const T* x, const T* weight, const T* bias, Y* y, T* mean,
                                              T* rstd, int64_t rows, int64_t cols, double eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
       r += warps) {
    const T* xr = x + r * cols;
    Y* yr = y + r * cols;
    T s = 0;
    for (int64_t c = lane; c < cols; c += 32) s += xr[c];
    const T m = warp_allreduce(s, SumOp()) / static_cast<T>(cols);
    T v = 0;
    for (int64_t c = lane; c < cols; c += 32) v += (xr[c] - m) * (xr[c] - m);
    const T var = warp_allreduce(v, SumOp()) / static_cast<T>(cols);
    const T rs = T(1) / dev_sqrt(var + static_cast<T>(eps));
    for (int64_t c = lane; c < cols; c += 32) store_as(yr + c, (xr[c] - m) * rs * weight[c] + bias[c]);
    if (lane == 0) {
      mean[r] = m;
      rstd[r] = rs;
    }
  }
}

// One warp per row, the same arithmetic as layernorm_dx_kernel.
template <class T, class DY>
__global__ void layernorm_dx_warp_kernel(const DY* dy, const T* x, const T* weight, const T* mean,
                                         const T* rstd, T* dx, int64_t rows, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows;
       r += warps) {
    const T* xr = x + r * cols;
    const DY* dyr = dy + r * cols;
    const T m = mean[r], rs = rstd[r];
    T sg = 0, sgx = 0;
    for (int64_t c = lane; c < cols; c += 32) {
      const T g = widen_to<T>(dyr[c]) * weight[c];
      sg += g;
      sgx += g * (xr[c] - m) * rs;
    }
    const T mean_g = warp_allreduce(sg, SumOp()) / static_cast<T>(cols);
    const T mean_gx = warp_allreduce(sgx, SumOp()) / static_cast<T>(cols);
    T* dxr = dx + r * cols;
    for (int64_t c = lane; c < cols; c += 32)
      dxr[c] = rs * (widen_to<T>(dyr[c]) * weight[c] - mean_g - (xr[c] - m) * rs * mean_gx);
  }
}

template <class T, class DY>
__global__ void layernorm_dx_kernel(const DY* dy, const T* x, const T* weight, const T* mean, const T* rstd,
                                    T* dx, int64_t rows, int64_t cols) {
  __shared__ T smem[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const DY* dyr = dy + r * cols;
    const T m = mean[r], rs = rstd[r];
    T sg = 0, sgx = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T g = widen_to<T>(dyr[c]) * weight[c];
      sg += g;
      sgx += g * (xr[c] - m) * rs;
    }
    const T mean_g = block_allreduce(sg, SumOp(), smem) / static_cast<T>(cols);
    const T mean_gx = block_allreduce(sgx, SumOp(), smem) / static_cast<T>(cols);
    T* dxr = dx + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      dxr[c] = rs * (widen_to<T>(dyr[c]) * weight[c] - mean_g - (xr[c] - m) * rs * mean_gx);
  }
}

constexpr int kColTile = 32, kRowLanes = 8;
static_assert(kColTile == kColumnTile && kRowLanes == kRowLanesPerBlock, "column_sum_plan.h's block shape");
// block (32, 8): threadIdx.x picks a column of the tile, threadIdx.y strides over the rows [begin, end) of
// one chunk (column_sum_plan.h; one chunk: all rows). Writes the chunk's sums to dweight/dbias + chunk * cols
// (the results themselves when there is one chunk, else the scratch rows the total pass adds up).
template <class T, class DY>
__global__ void layernorm_dparams_kernel(const DY* dy, const T* x, const T* mean, const T* rstd, T* dweight,
                                         T* dbias, int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  __shared__ T sw[kRowLanes][kColTile];
  __shared__ T sb[kRowLanes][kColTile];
  const int64_t c = blockIdx.x * int64_t(kColTile) + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk,
                end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  T aw = 0, ab = 0;
  if (c < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += kRowLanes) {
      const T g = widen_to<T>(dy[r * cols + c]);
      aw += g * (x[r * cols + c] - mean[r]) * rstd[r];
      ab += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 1; k < kRowLanes; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    if (dweight) dweight[chunk * cols + c] = aw;
    if (dbias) dbias[chunk * cols + c] = ab;
  }
}

// The chunks' sums added in chunk order (the same order every run).
template <class T>
__global__ void layernorm_dparams_total_kernel(const T* partial_w, const T* partial_b, int64_t chunks,
                                               int64_t cols, T* dweight, T* dbias) {
  DDP_CUDA_KERNEL_LOOP(c, cols) {
    T w = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      w += partial_w[k * cols + c];
      b += partial_b[k * cols + c];
    }
    if (dweight) dweight[c] = w;
    if (dbias) dbias[c] = b;
  }
}

}  // namespace

template <class T, class Y>
void layernorm_forward(const T* x, const T* weight, const T* bias, Y* y, T* mean, T* rstd,
                              int64_t rows, int64_t cols, double eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  if (cols <= kWarpRowCols) {
    layernorm_forward_warp_kernel<T, Y>
        <<<warp_row_grid(rows), kWarpRowBlock, 0, stream>>>(x, weight, bias, y, mean, rstd, rows, cols, eps);
  } else {
    layernorm_forward_kernel<T, Y>
        <<<row_grid(rows), row_block(cols), 0, stream>>>(x, weight, bias, y, mean, rstd, rows, cols, eps);
  }
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T, class DY>
void layernorm_backward(const DY* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                               T* dweight, T* dbias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (cols == 0) return;
  if (dx && rows > 0) {
    if (cols <= kWarpRowCols) {
      layernorm_dx_warp_kernel<T, DY>
          <<<warp_row_grid(rows), kWarpRowBlock, 0, stream>>>(dy, x, weight, mean, rstd, dx, rows, cols);
    } else {
      layernorm_dx_kernel<T, DY>
          <<<row_grid(rows), row_block(cols), 0, stream>>>(dy, x, weight, mean, rstd, dx, rows, cols);
    }
    DDP_CUDA_CHECK_LAUNCH();
  }
  if (dweight || dbias) {
    const ColumnSumPlan plan = plan_column_sum(1, rows, cols, multiprocessor_count());
    if (plan.chunks == 1) {
      layernorm_dparams_kernel<T, DY>
          <<<dim3(static_cast<unsigned>(plan.col_tiles), 1), dim3(kColTile, kRowLanes), 0, stream>>>(
              dy, x, mean, rstd, dweight, dbias, rows, cols, rows);
      DDP_CUDA_CHECK_LAUNCH();
      return;
    }
    // Both partial sums (also when only one of dweight/dbias is wanted: the kernel computes both anyway).
    StreamScratch partial(static_cast<size_t>(2 * plan.chunks * cols) * sizeof(T));
    T* pw = static_cast<T*>(partial.ptr);
    T* pb = pw + plan.chunks * cols;
    layernorm_dparams_kernel<T, DY>
        <<<dim3(static_cast<unsigned>(plan.col_tiles), static_cast<unsigned>(plan.chunks)),
           dim3(kColTile, kRowLanes), 0, stream>>>(dy, x, mean, rstd, pw, pb, rows, cols,
                                                   plan.rows_per_chunk);
    DDP_CUDA_CHECK_LAUNCH();
    layernorm_dparams_total_kernel<T>
        <<<grid_for(cols), kBlock, 0, stream>>>(pw, pb, plan.chunks, cols, dweight, dbias);
    DDP_CUDA_CHECK_LAUNCH();
  }
}
template void layernorm_forward<float, float>(const float*, const float*, const float*, float*, float*, float*,
                                              int64_t, int64_t, double, cudaStream_t);
template void layernorm_forward<double, double>(const double*, const double*, const double*, double*, double*,
                                                double*, int64_t, int64_t, double, cudaStream_t);
template void layernorm_forward<float, BFloat16>(const float*, const float*, const float*, BFloat16*, float*,
                                                 float*, int64_t, int64_t, double, cudaStream_t);
template void layernorm_backward<float, float>(const float*, const float*, const float*, const float*,
                                               const float*, float*, float*, float*, int64_t, int64_t,
                                               cudaStream_t);
template void layernorm_backward<double, double>(const double*, const double*, const double*, const double*,
                                                 const double*, double*, double*, double*, int64_t, int64_t,
                                                 cudaStream_t);
template void layernorm_backward<float, BFloat16>(const BFloat16*, const float*, const float*, const float*,
                                                  const float*, float*, float*, float*, int64_t, int64_t,
                                                  cudaStream_t);

}  // namespace ddp::kernels::cuda
