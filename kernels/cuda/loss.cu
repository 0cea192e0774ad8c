// loss.cu - CUDA cross-entropy (one block per row: its log-sum-exp in one pass, the loss; then one block sums
// the rows in a fixed order, so the loss is deterministic; float32, float64, and bf16 logits with float32
// arithmetic, eight to a 16-byte load) and MSE (one-block reduction, elementwise backward).
#include <cuda_bf16.h>

#include "kernels/cpu/index_check.h"
#include "kernels/cuda/column_sum_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/store_as.cuh"
#include "kernels/cuda/softmax.cuh"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
constexpr int kReduceBlock = 1024;

// Eight elements per 16-byte access: bf16 rows whose length is a multiple of 8 (a vocabulary padded to 64)
// from a 16-byte aligned start. float32 and float64 logits keep one element per access.
template <class In>
bool eight_per_load(const In* p, int64_t row_stride) {
  return row_stride % 8 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// A row whose target is in range and not ignored: it adds to the loss and gets a gradient.
__device__ inline bool counts(int64_t t, int64_t cols, bool has_ignore, int64_t ignore_index) {
  return !(has_ignore && t == ignore_index) && cpu::index_in_range(t, cols);
}

// Logits are read as the float type T the row's arithmetic runs in with widen_to (bf16: its bits as a
// float32's top half, exact), and a gradient goes back into the logits' type with store_as (bf16: rounded to
// nearest even once).
// Elements per load: eight bf16 in 16 bytes, else one.
template <class In>
constexpr int kPerLoad = sizeof(In) == 2 ? 8 : 1;

// V logits from xr[c0], c0 a multiple of V: one element (V = 1), or eight bf16 in one 16-byte load (V = 8:
// the rows are 16-byte aligned, cross_entropy_forward checks).
template <int V, class T, class In>
__device__ inline void load_chunk(const In* xr, int64_t c0, T (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = widen_to<T>(xr[c0]);
  } else {
    static_assert(V == 8 && sizeof(In) == 2, "eight bf16 per 16-byte load");
    const uint4 raw = *reinterpret_cast<const uint4*>(xr + c0);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // little-endian: element 2i is the low half
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
}
template <int V, class T, class In>
__device__ inline void store_chunk(In* dr, int64_t c0, const T (&v)[V]) {
  if constexpr (V == 1) {
    store_as(dr + c0, v[0]);
  } else {
    alignas(16) In b[V];
#pragma unroll
    for (int i = 0; i < V; ++i) store_as(b + i, v[i]);
    *reinterpret_cast<uint4*>(dr + c0) = *reinterpret_cast<const uint4*>(b);
  }
}

// One pass over each row (an online log-sum-exp: each thread keeps its running max m and its sum s of
// exp(x - m), rescaling s when m grows; the block then rescales every thread's s to the block's max). Two
// passes (the max, then the sums) ran at 1.2 TB/s on GPT-2 small's 8192 x 50304 float32 logits on the H200
// (1.34 ms; ncu, 2026-12-04): the second pass missed the cache. Padding columns [cols, row_stride) are not
// read, but for the tail of a V-element load (ignored). In: the logits' type; T: the arithmetic's.
template <class In, class T, int V>
__global__ void cross_entropy_rows_kernel(const In* logits, const int64_t* targets, int64_t rows,
                                          int64_t cols, int64_t row_stride, bool has_ignore,
                                          int64_t ignore_index, T* lse, T* row_loss,
                                          unsigned long long* first_bad) {
  __shared__ T smem[32];
  const T neg_inf = -INFINITY;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const In* xr = logits + r * row_stride;
    T m = neg_inf, s = 0;
    for (int64_t c0 = static_cast<int64_t>(threadIdx.x) * V; c0 < cols;
         c0 += static_cast<int64_t>(blockDim.x) * V) {
      T v[V];
      load_chunk<V>(xr, c0, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (V > 1 && c0 + j >= cols) break;
        const T x = v[j];
        if (x > m) {
          s = s * dev_exp(m - x) + T(1);  // exp(-inf) = 0 on the first finite value
          m = x;
        } else if (m != neg_inf) {
          s += dev_exp(x - m);  // a NaN x makes s NaN, as the two-pass sum did
        }
      }
    }
    const T block_max = block_allreduce(m, MaxOp(), smem);
    const T scaled = m == neg_inf ? T(0) : s * dev_exp(m - block_max);
    const T total = block_allreduce(scaled, SumOp(), smem);
    if (threadIdx.x == 0) {
      const T l = block_max + dev_log(total);
      const int64_t t = targets[r];
      const bool valid = counts(t, cols, has_ignore, ignore_index);
      if (cpu::target_is_bad(t, cols, has_ignore, ignore_index))
        atomicMin(first_bad, static_cast<unsigned long long>(r));
      lse[r] = l;
      row_loss[r] = valid ? l - widen_to<T>(xr[t]) : T(0);
    }
  }
}

template <class T>
__global__ void cross_entropy_reduce_kernel(const T* row_loss, const int64_t* targets, int64_t rows,
                                            int64_t cols, bool has_ignore, int64_t ignore_index, bool mean,
                                            T* loss, int64_t* count) {
  __shared__ double smem[32];
  double s = 0, n = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    if (!counts(targets[r], cols, has_ignore, ignore_index)) continue;
    s += static_cast<double>(row_loss[r]);
    n += 1;
  }
  s = block_allreduce(s, SumOp(), smem);
  n = block_allreduce(n, SumOp(), smem);
  if (threadIdx.x == 0) {
    count[0] = static_cast<int64_t>(n);
    loss[0] = static_cast<T>(mean ? s / n : s);  // 0 / 0 = NaN when every row is ignored
  }
}

// One block per row (grid-stride over rows), its threads over the columns: no per-element division to find
// the row, and the row's target and lse read once. dlogits may be the logits (loss.h): each chunk is read
// before the same thread writes it.
template <class In, class T, int V>
__global__ void cross_entropy_backward_kernel(const In* logits, const int64_t* targets, const T* lse,
                                              const T* dloss, const int64_t* count, int64_t rows,
                                              int64_t cols, int64_t row_stride, bool has_ignore,
                                              int64_t ignore_index, In* dlogits) {
  const T scale = dloss[0] / (count ? static_cast<T>(count[0]) : T(1));
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t t = targets[r];
    const In* xr = logits + r * row_stride;
    In* dr = dlogits + r * row_stride;
    const bool valid = counts(t, cols, has_ignore, ignore_index);  // else ignored, or a bad target (reported)
    const T l = valid ? lse[r] : T(0);
    // padding columns [cols, row_stride) are no classes: zero gradient
    for (int64_t c0 = static_cast<int64_t>(threadIdx.x) * V; c0 < row_stride;
         c0 += static_cast<int64_t>(blockDim.x) * V) {
      T v[V];
      if (valid && c0 < cols) load_chunk<V>(xr, c0, v);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t c = c0 + j;
        v[j] = valid && c < cols ? scale * (dev_exp(v[j] - l) - (c == t ? T(1) : T(0))) : T(0);
      }
      store_chunk<V>(dr, c0, v);
    }
  }
}

template <class T>
__global__ void mse_forward_kernel(const T* pred, const T* target, int64_t n, T* loss) {
  __shared__ double smem[32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = static_cast<double>(pred[i]) - static_cast<double>(target[i]);
    s += d * d;
  }
  s = block_allreduce(s, SumOp(), smem);
  if (threadIdx.x == 0) loss[0] = static_cast<T>(s / static_cast<double>(n));
}

template <class T>
__global__ void mse_backward_kernel(const T* pred, const T* target, const T* dloss, int64_t n, T* dpred,
                                    T* dtarget) {
  const T scale = T(2) * dloss[0] / static_cast<T>(n);
  DDP_CUDA_KERNEL_LOOP(i, n) {
    const T g = scale * (pred[i] - target[i]);
    if (dpred) dpred[i] = g;
    if (dtarget) dtarget[i] = -g;
  }
}

}  // namespace

template <class In, class T>
void cross_entropy_forward(const In* logits, const int64_t* targets, int64_t rows, int64_t cols,
                           int64_t row_stride, bool has_ignore, int64_t ignore_index, bool mean, T* lse,
                           T* row_loss, T* loss, int64_t* count, unsigned long long* first_bad,
                           cudaStream_t stream) {
  constexpr int V = kPerLoad<In>;
  if (rows > 0) {
    if (V > 1 && eight_per_load(logits, row_stride)) {
      cross_entropy_rows_kernel<In, T, V><<<row_grid(rows), row_block((cols + V - 1) / V), 0, stream>>>(
          logits, targets, rows, cols, row_stride, has_ignore, ignore_index, lse, row_loss, first_bad);
    } else {
      cross_entropy_rows_kernel<In, T, 1><<<row_grid(rows), row_block(cols), 0, stream>>>(
          logits, targets, rows, cols, row_stride, has_ignore, ignore_index, lse, row_loss, first_bad);
    }
    DDP_CUDA_CHECK_LAUNCH();
  }
  cross_entropy_reduce_kernel<T><<<1, kReduceBlock, 0, stream>>>(row_loss, targets, rows, cols, has_ignore,
                                                                 ignore_index, mean, loss, count);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class In, class T>
void cross_entropy_backward(const In* logits, const int64_t* targets, const T* lse, const T* dloss,
                            const int64_t* count, int64_t rows, int64_t cols, int64_t row_stride,
                            bool has_ignore, int64_t ignore_index, In* dlogits, cudaStream_t stream) {
  if (rows * row_stride == 0) return;
  constexpr int V = kPerLoad<In>;
  if (V > 1 && eight_per_load(logits, row_stride) && eight_per_load(dlogits, row_stride)) {
    cross_entropy_backward_kernel<In, T, V><<<row_grid(rows), kBlock, 0, stream>>>(
        logits, targets, lse, dloss, count, rows, cols, row_stride, has_ignore, ignore_index, dlogits);
  } else {
    cross_entropy_backward_kernel<In, T, 1><<<row_grid(rows), kBlock, 0, stream>>>(
        logits, targets, lse, dloss, count, rows, cols, row_stride, has_ignore, ignore_index, dlogits);
  }
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void mse_forward(const T* pred, const T* target, int64_t n, T* loss, cudaStream_t stream) {
  mse_forward_kernel<T><<<1, kReduceBlock, 0, stream>>>(pred, target, n, loss);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void mse_backward(const T* pred, const T* target, const T* dloss, int64_t n, T* dpred, T* dtarget,
                  cudaStream_t stream) {
  if (n == 0) return;
  mse_backward_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(pred, target, dloss, n, dpred, dtarget);
  DDP_CUDA_CHECK_LAUNCH();
}

#define DDP_INSTANTIATE_CE(In, T)                                                                              \
  template void cross_entropy_forward<In, T>(const In*, const int64_t*, int64_t, int64_t, int64_t, bool, int64_t, \
                                             bool, T*, T*, T*, int64_t*, unsigned long long*, cudaStream_t);     \
  template void cross_entropy_backward<In, T>(const In*, const int64_t*, const T*, const T*, const int64_t*,     \
                                              int64_t, int64_t, int64_t, bool, int64_t, In*, cudaStream_t);
DDP_INSTANTIATE_CE(float, float)
DDP_INSTANTIATE_CE(double, double)
DDP_INSTANTIATE_CE(BFloat16, float)
#undef DDP_INSTANTIATE_CE
#define DDP_INSTANTIATE_MSE(T)                                               \
  template void mse_forward<T>(const T*, const T*, int64_t, T*, cudaStream_t); \
  template void mse_backward<T>(const T*, const T*, const T*, int64_t, T*, T*, cudaStream_t);
DDP_INSTANTIATE_MSE(float)
DDP_INSTANTIATE_MSE(double)
#undef DDP_INSTANTIATE_MSE

}  // namespace ddp::kernels::cuda
