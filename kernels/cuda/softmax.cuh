// softmax.cuh - device helpers shared by the row-wise CUDA kernels (softmax, cross-entropy, layer norm,
// attention): exp/log overloads, warp- and block-wide all-reduces, and the block size for one row per block.
#pragma once
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace ddp::kernels::cuda {

__device__ inline float dev_exp(float x) { return expf(x); }
__device__ inline double dev_exp(double x) { return exp(x); }
__device__ inline float dev_log(float x) { return logf(x); }
__device__ inline double dev_log(double x) { return log(x); }
__device__ inline float dev_sqrt(float x) { return sqrtf(x); }
__device__ inline double dev_sqrt(double x) { return sqrt(x); }

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

// Every lane of the warp gets op over all 32 lanes' v (a butterfly: every lane ends with the same value).
template <class T, class Op>
__device__ T warp_allreduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Every thread of the block gets op over all threads' v. blockDim.x must be a multiple of 32 (<= 1024);
// smem holds 32 values. Safe to call repeatedly with the same smem (it synchronises before reuse).
template <class T, class Op>
__device__ T block_allreduce(T v, Op op, T* smem) {
  v = warp_allreduce(v, op);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();  // a previous call may still be reading smem
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  T r = smem[0];
  for (int w = 1; w < nwarps; ++w) r = op(r, smem[w]);
  return r;
}

// Threads per block for kernels that give each row of `cols` elements one block.
inline int row_block(int64_t cols) {
  if (cols <= 32) return 32;
  if (cols <= 64) return 64;
  if (cols <= 128) return 128;
  if (cols <= 2048) return 256;
  if (cols <= 8192) return 512;
  return 1024;
}
// Blocks for `rows` rows (kernels loop over rows with a block stride, so any count works).
inline int row_grid(int64_t rows) { return static_cast<int>(rows < 1 ? 1 : rows > INT_MAX ? INT_MAX : rows); }

}  // namespace ddp::kernels::cuda
