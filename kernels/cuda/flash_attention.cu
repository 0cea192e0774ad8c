// flash_attention.cu - CUDA causal self-attention tiled over query and key blocks, no (T, T) buffer.
// Forward: one block per (batch * head, query tile); K and V tiles go through shared memory and each query
// row keeps an online softmax (running max m, running sum l, rescaled output) in registers; tiles above the
// diagonal are never loaded. Backward, deterministic (no atomics): a pre-pass D = rowsum(dy * y); one block
// per (batch * head, key tile) accumulates dK and dV over the query tiles at or below the diagonal; one block
// per (batch * head, query tile) accumulates dQ over the key tiles. Both recompute p = exp(s - lse) tile by
// tile, so the scores cost twice, the price of writing each gradient row from one block. The per-tile
// arithmetic is in flash_attention_tile.h (tested on the CPU by tests/ops_nn/test_flash_attention_tiles.cpp).
#include <climits>
#include <cmath>

#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_tile.h"
#include "runtime/core/cuda_check.h"
#include "runtime/core/error.h"

namespace ddp::kernels::cuda {
namespace {
using flash::kLanes;
using flash::kTile;

// The butterfly sum of v over the kLanes lanes of this row; every lane gets the same value
// (flash::lanes_butterfly_sum is the same pairing on the host).
template <class S>
__device__ inline S lanes_sum(S v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset, kLanes);
  return v;
}

// tile (kTile, hs) <- rows r0.. of a strided (T, hs) view (zeros past T); the whole block takes part.
template <class S>
__device__ inline void load_tile(const S* base, int64_t row_stride, int64_t r0, int64_t T, int hs, S* tile) {
  for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
    const int rr = e / hs, d = e - rr * hs;
    const int64_t r = r0 + rr;
    tile[e] = r < T ? base[r * row_stride + d] : S(0);
  }
}

extern __shared__ __align__(16) unsigned char flash_smem[];

// Grid (B * nh, query tiles); block kTile * kLanes threads. Shared: K and V tiles, 2 * kTile * hs elements.
template <class S, int kDpt>
__global__ void __launch_bounds__(flash::kTile* kLanes)
    flash_forward_kernel(const S* qkv, S* y, S* lse, int64_t T, int64_t C, int64_t nh, S scale) {
  const int hs = static_cast<int>(C / nh);
  S* k_tile = reinterpret_cast<S*>(flash_smem);
  S* v_tile = k_tile + kTile * hs;
  const int64_t bh = blockIdx.x, b = bh / nh, h = bh - b * nh, ld = 3 * C;
  const int64_t qt = gridDim.y - 1 - blockIdx.y;  // the longest rows start first
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t i = flash::clamped_row(qt, kTile, row, T);
  const S* q_base = qkv + b * T * ld + h * hs;
  S q[kDpt], o[kDpt];
  flash::lane_load(q_base + i * ld, hs, lane, q);
#pragma unroll
  for (int r = 0; r < kDpt; ++r) o[r] = S(0);
  S m = -INFINITY, l = S(0);
  for (int64_t kt = 0; kt <= flash::last_key_tile(qt); ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();  // the previous tile has been read by every thread
    load_tile<S>(q_base + C, ld, k0, T, hs, k_tile);
    load_tile<S>(q_base + 2 * C, ld, k0, T, hs, v_tile);
    __syncthreads();
    S s[kTile];
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj)
      s[jj] = lanes_sum(flash::lane_dot(q, k_tile + jj * hs, hs, lane)) * scale;
    flash::forward_tile_update<S, kDpt>(s, v_tile, hs, lane, i, k0, T, m, l, o);
  }
  const S row_lse = flash::forward_finish(m, l, o);
  if (qt * kTile + row < T) {
    flash::lane_store(o, S(1), hs, lane, y + (b * T + i) * C + h * hs);
    if (lane == 0) lse[bh * T + i] = row_lse;
  }
}

// D[bh, i] = dy_i . y_i for head h. Grid (B * nh, query tiles), block kTile * kLanes.
template <class S, int kDpt>
__global__ void __launch_bounds__(flash::kTile* kLanes)
    flash_backward_rowdot_kernel(const S* dy, const S* y, S* D, int64_t T, int64_t C, int64_t nh) {
  const int hs = static_cast<int>(C / nh);
  const int64_t bh = blockIdx.x, b = bh / nh, h = bh - b * nh, qt = blockIdx.y;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t i = flash::clamped_row(qt, kTile, row, T);
  const int64_t off = (b * T + i) * C + h * hs;
  S g[kDpt];
  flash::lane_load(dy + off, hs, lane, g);
  const S d = lanes_sum(flash::lane_dot(g, y + off, hs, lane));
  if (qt * kTile + row < T && lane == 0) D[bh * T + i] = d;
}

// dK, dV of one key tile. Grid (B * nh, key tiles), block kTile * kLanes. Shared: Q and dy tiles and the
// tile's lse and D, 2 * kTile * (hs + 1) elements.
template <class S, int kDpt>
__global__ void __launch_bounds__(flash::kTile* kLanes)
    flash_backward_dkdv_kernel(const S* dy, const S* qkv, const S* lse, const S* D, S* dqkv, int64_t T,
                               int64_t C, int64_t nh, S scale) {
  const int hs = static_cast<int>(C / nh);
  S* q_tile = reinterpret_cast<S*>(flash_smem);
  S* dy_tile = q_tile + kTile * hs;
  S* lse_tile = dy_tile + kTile * hs;
  S* D_tile = lse_tile + kTile;
  const int64_t bh = blockIdx.x, b = bh / nh, h = bh - b * nh, ld = 3 * C;
  const int64_t kt = blockIdx.y;  // key tile 0 has the most query tiles and starts first
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t j = flash::clamped_row(kt, kTile, row, T);
  const S* q_base = qkv + b * T * ld + h * hs;
  const S* dy_base = dy + b * T * C + h * hs;
  S k[kDpt], v[kDpt], dk[kDpt], dv[kDpt];
  flash::lane_load(q_base + C + j * ld, hs, lane, k);
  flash::lane_load(q_base + 2 * C + j * ld, hs, lane, v);
#pragma unroll
  for (int r = 0; r < kDpt; ++r) dk[r] = dv[r] = S(0);
  const int64_t n_tiles = flash::num_tiles(T, kTile);
  for (int64_t qt = flash::first_query_tile(kt); qt < n_tiles; ++qt) {
    const int64_t i0 = qt * kTile;
    __syncthreads();
    load_tile<S>(q_base, ld, i0, T, hs, q_tile);
    load_tile<S>(dy_base, C, i0, T, hs, dy_tile);
    for (int e = threadIdx.x; e < kTile; e += blockDim.x) {
      const int64_t i = i0 + e;
      lse_tile[e] = i < T ? lse[bh * T + i] : S(0);
      D_tile[e] = i < T ? D[bh * T + i] : S(0);
    }
    __syncthreads();
    for (int ii = 0; ii < kTile; ++ii) {
      const S qk = lanes_sum(flash::lane_dot(k, q_tile + ii * hs, hs, lane));
      const S dp = lanes_sum(flash::lane_dot(v, dy_tile + ii * hs, hs, lane));
      flash::key_row_update(qk, dp, scale, lse_tile[ii], D_tile[ii], i0 + ii, j, T, q_tile + ii * hs,
                            dy_tile + ii * hs, hs, lane, dk, dv);
    }
  }
  if (kt * kTile + row < T) {
    S* out = dqkv + (b * T + j) * ld + h * hs;
    flash::lane_store(dk, scale, hs, lane, out + C);
    flash::lane_store(dv, S(1), hs, lane, out + 2 * C);
  }
}

// dQ of one query tile. Grid (B * nh, query tiles), block kTile * kLanes. Shared: K and V tiles.
template <class S, int kDpt>
__global__ void __launch_bounds__(flash::kTile* kLanes)
    flash_backward_dq_kernel(const S* dy, const S* qkv, const S* lse, const S* D, S* dqkv, int64_t T,
                             int64_t C, int64_t nh, S scale) {
  const int hs = static_cast<int>(C / nh);
  S* k_tile = reinterpret_cast<S*>(flash_smem);
  S* v_tile = k_tile + kTile * hs;
  const int64_t bh = blockIdx.x, b = bh / nh, h = bh - b * nh, ld = 3 * C;
  const int64_t qt = gridDim.y - 1 - blockIdx.y;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int64_t i = flash::clamped_row(qt, kTile, row, T);
  const S* q_base = qkv + b * T * ld + h * hs;
  S q[kDpt], g[kDpt], dq[kDpt];
  flash::lane_load(q_base + i * ld, hs, lane, q);
  flash::lane_load(dy + (b * T + i) * C + h * hs, hs, lane, g);
#pragma unroll
  for (int r = 0; r < kDpt; ++r) dq[r] = S(0);
  const S row_lse = lse[bh * T + i], row_D = D[bh * T + i];
  for (int64_t kt = 0; kt <= flash::last_key_tile(qt); ++kt) {
    const int64_t k0 = kt * kTile;
    __syncthreads();
    load_tile<S>(q_base + C, ld, k0, T, hs, k_tile);
    load_tile<S>(q_base + 2 * C, ld, k0, T, hs, v_tile);
    __syncthreads();
    for (int jj = 0; jj < kTile; ++jj) {
      const S qk = lanes_sum(flash::lane_dot(q, k_tile + jj * hs, hs, lane));
      const S dp = lanes_sum(flash::lane_dot(g, v_tile + jj * hs, hs, lane));
      flash::query_row_update(qk, dp, scale, row_lse, row_D, i, k0 + jj, T, k_tile + jj * hs, hs, lane, dq);
    }
  }
  if (qt * kTile + row < T) flash::lane_store(dq, scale, hs, lane, dqkv + (b * T + i) * ld + h * hs);
}

template <class S>
S attention_scale(int64_t hs) {
  return static_cast<S>(1.0 / std::sqrt(static_cast<double>(hs)));
}

// The grid of every pass: (B * nh, tiles of T), with a clear error where CUDA's limits would be passed.
template <class S>
dim3 flash_grid(int64_t B, int64_t T, int64_t C, int64_t n_head) {
  DDP_CHECK(n_head > 0 && C % n_head == 0, "flash attention: n_head = ", n_head, " must divide C = ", C);
  DDP_CHECK(flash_attention_supports(C / n_head), "flash attention: head size ", C / n_head,
            " is not supported (1..", flash::kMaxHeadSize,
            "); use the materialising kernels (kernels/cuda/attention.h)");
  const int64_t tiles = flash::num_tiles(T, flash::kTile);
  DDP_CHECK(B * n_head <= INT_MAX && tiles <= 65535, "flash attention: B * n_head = ", B * n_head,
            " and T = ", T, " give a grid of (", B * n_head, ", ", tiles, ") blocks; CUDA allows (", INT_MAX,
            ", 65535): split the batch or shorten the sequence");
  return dim3(static_cast<unsigned>(B * n_head), static_cast<unsigned>(tiles));
}

template <class S, int kDpt>
void forward_with(const S* qkv, S* y, S* lse, int64_t B, int64_t T, int64_t C, int64_t nh,
                  cudaStream_t stream) {
  const int64_t hs = C / nh;
  const size_t smem = 2 * kTile * hs * sizeof(S);
  flash_forward_kernel<S, kDpt><<<flash_grid<S>(B, T, C, nh), kTile * kLanes, smem, stream>>>(
      qkv, y, lse, T, C, nh, attention_scale<S>(hs));
  DDP_CUDA_CHECK_LAUNCH();
}

template <class S, int kDpt>
void backward_with(const S* dy, const S* qkv, const S* y, const S* lse, S* dqkv, S* D, int64_t B, int64_t T,
                   int64_t C, int64_t nh, cudaStream_t stream) {
  const int64_t hs = C / nh;
  const dim3 grid = flash_grid<S>(B, T, C, nh);
  const S scale = attention_scale<S>(hs);
  flash_backward_rowdot_kernel<S, kDpt><<<grid, kTile * kLanes, 0, stream>>>(dy, y, D, T, C, nh);
  DDP_CUDA_CHECK_LAUNCH();
  const size_t dkdv_smem = 2 * kTile * (hs + 1) * sizeof(S);
  flash_backward_dkdv_kernel<S, kDpt>
      <<<grid, kTile * kLanes, dkdv_smem, stream>>>(dy, qkv, lse, D, dqkv, T, C, nh, scale);
  DDP_CUDA_CHECK_LAUNCH();
  const size_t dq_smem = 2 * kTile * hs * sizeof(S);
  flash_backward_dq_kernel<S, kDpt>
      <<<grid, kTile * kLanes, dq_smem, stream>>>(dy, qkv, lse, D, dqkv, T, C, nh, scale);
  DDP_CUDA_CHECK_LAUNCH();
}
}  // namespace

bool flash_attention_supports(int64_t head_size) {
  return head_size >= 1 && head_size <= flash::kMaxHeadSize;
}

template <class S>
void flash_attention_forward(const S* qkv, S* y, S* lse, int64_t B, int64_t T, int64_t C, int64_t n_head,
                             cudaStream_t stream) {
  if (B * T * C == 0) return;
  switch (flash::dims_per_lane(C / n_head)) {
    case 4:
      return forward_with<S, 4>(qkv, y, lse, B, T, C, n_head, stream);
    case 8:
      return forward_with<S, 8>(qkv, y, lse, B, T, C, n_head, stream);
    default:
      return forward_with<S, 16>(qkv, y, lse, B, T, C, n_head, stream);
  }
}

template <class S>
void flash_attention_backward(const S* dy, const S* qkv, const S* y, const S* lse, S* dqkv, S* scratch,
                              int64_t B, int64_t T, int64_t C, int64_t n_head, cudaStream_t stream) {
  if (B * T * C == 0) return;
  switch (flash::dims_per_lane(C / n_head)) {
    case 4:
      return backward_with<S, 4>(dy, qkv, y, lse, dqkv, scratch, B, T, C, n_head, stream);
    case 8:
      return backward_with<S, 8>(dy, qkv, y, lse, dqkv, scratch, B, T, C, n_head, stream);
    default:
      return backward_with<S, 16>(dy, qkv, y, lse, dqkv, scratch, B, T, C, n_head, stream);
  }
}

template void flash_attention_forward<float>(const float*, float*, float*, int64_t, int64_t, int64_t, int64_t,
                                             cudaStream_t);
template void flash_attention_forward<double>(const double*, double*, double*, int64_t, int64_t, int64_t,
                                              int64_t, cudaStream_t);
template void flash_attention_backward<float>(const float*, const float*, const float*, const float*, float*,
                                              float*, int64_t, int64_t, int64_t, int64_t, cudaStream_t);
template void flash_attention_backward<double>(const double*, const double*, const double*, const double*,
                                               double*, double*, int64_t, int64_t, int64_t, int64_t,
                                               cudaStream_t);

}  // namespace ddp::kernels::cuda
