// flash_attention_tile.h - the per-tile arithmetic of the CUDA flash attention
// (kernels/cuda/flash_attention.cu) as inline functions that nvcc compiles for host and device and g++
// compiles for the host, so that the CPU test tests/ops_nn/test_flash_attention_tiles.cpp runs the same tiled
// algorithm, with the same tile sizes and these same functions, block by block and lane by lane, and compares
// it with kernels/cpu/attention.
//
// Work split (both sides): a row (one query in the forward and dQ passes, one key in the dK/dV pass) belongs
// to kLanes threads of one warp; lane l owns the head dimensions d = l + kLanes * r (r < kDpt, d < hs) of
// that row's vectors, held in registers. A dot product is each lane's partial sum over its dimensions
// (lane_dot) followed by a butterfly sum over the kLanes lanes (on the GPU __shfl_xor_sync, here
// lanes_butterfly_sum: the same pairs in the same order, so every lane ends with the same bits). Key and
// value tiles (forward, dQ) or query and dO tiles (dK/dV) sit in shared memory as (tile, hs) row-major
// blocks.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/cpu/host_device.h"
// Loops over a tile or over a lane's dimensions unroll on the GPU, so that the small arrays stay in
// registers. The device pass's preprocessor (the host compiler, with -Wall) would call the pragma unknown:
// silenced for this header only.
#if defined(__CUDA_ARCH__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#define DDP_FLASH_UNROLL _Pragma("unroll")
#else
#define DDP_FLASH_UNROLL
#endif

namespace ddp::kernels::cuda::flash {

constexpr int kLanes = 8;          // threads per row
constexpr int kMaxHeadSize = 128;  // 16 dimensions per lane at most
// Rows per query tile = keys per key tile (equal, so the diagonal tiles are the only masked ones), both
// dtypes: 128 threads a block; K and V tiles of 2 * 16 * 128 * 8 B = 32 KiB at most. Tiles of 32 rows took
// the float32 forward to 255 registers a thread (ptxas -v), a quarter of the occupancy.
constexpr int kTile = 16;

// Dimensions each lane holds for head size hs (a compile-time choice: 4, 8 or 16). hs <= kMaxHeadSize.
inline int dims_per_lane(int64_t hs) { return hs <= 4 * kLanes ? 4 : hs <= 8 * kLanes ? 8 : 16; }

template <class S>
DDP_HOST_DEVICE inline S flash_exp(S x) {
#if defined(__CUDA_ARCH__)
  return exp(x);  // the float overload is expf
#else
  return std::exp(x);
#endif
}
template <class S>
DDP_HOST_DEVICE inline S flash_log(S x) {
#if defined(__CUDA_ARCH__)
  return log(x);
#else
  return std::log(x);
#endif
}

// ---- tile geometry ----
DDP_HOST_DEVICE inline int64_t num_tiles(int64_t T, int tile) { return (T + tile - 1) / tile; }
// Query i sees key j when j <= i; rows past the end of the sequence (padding of the last tile) see nothing.
DDP_HOST_DEVICE inline bool visible(int64_t i, int64_t j, int64_t T) { return j <= i && i < T; }
// With equal tile sizes, query tile qt reads key tiles 0..qt; every key tile after qt lies above the diagonal
// and is skipped without being loaded. Key tile kt is read by query tiles kt..num_tiles-1.
DDP_HOST_DEVICE inline int64_t last_key_tile(int64_t qt) { return qt; }
DDP_HOST_DEVICE inline int64_t first_query_tile(int64_t kt) { return kt; }
// The row a thread works on: tile rows past the end repeat the last row (computed, never written), so that
// every lane of every warp takes part in the shuffles.
DDP_HOST_DEVICE inline int64_t clamped_row(int64_t tile_index, int tile, int row_in_tile, int64_t T) {
  const int64_t r = tile_index * tile + row_in_tile;
  return r < T ? r : T - 1;
}

// ---- a lane's share of a row ----
DDP_HOST_DEVICE inline int lane_dim(int lane, int r) { return lane + kLanes * r; }

// x <- this lane's dimensions of row (zeros past hs).
template <class S, int kDpt>
DDP_HOST_DEVICE inline void lane_load(const S* row, int hs, int lane, S (&x)[kDpt]) {
  DDP_FLASH_UNROLL
  for (int r = 0; r < kDpt; ++r) {
    const int d = lane_dim(lane, r);
    x[r] = d < hs ? row[d] : S(0);
  }
}
// row[d] <- scale * x for this lane's dimensions.
template <class S, int kDpt>
DDP_HOST_DEVICE inline void lane_store(const S (&x)[kDpt], S scale, int hs, int lane, S* row) {
  DDP_FLASH_UNROLL
  for (int r = 0; r < kDpt; ++r) {
    const int d = lane_dim(lane, r);
    if (d < hs) row[d] = scale * x[r];
  }
}
// This lane's partial sum of x . row.
template <class S, int kDpt>
DDP_HOST_DEVICE inline S lane_dot(const S (&x)[kDpt], const S* row, int hs, int lane) {
  S acc = 0;
  DDP_FLASH_UNROLL
  for (int r = 0; r < kDpt; ++r) {
    const int d = lane_dim(lane, r);
    if (d < hs) acc += x[r] * row[d];
  }
  return acc;
}
// acc += c * row on this lane's dimensions.
template <class S, int kDpt>
DDP_HOST_DEVICE inline void lane_axpy(S c, const S* row, int hs, int lane, S (&acc)[kDpt]) {
  DDP_FLASH_UNROLL
  for (int r = 0; r < kDpt; ++r) {
    const int d = lane_dim(lane, r);
    if (d < hs) acc[r] += c * row[d];
  }
}
// The host's picture of the GPU's butterfly: v[l] <- v[l] + v[l ^ offset] for offset = kLanes/2, ..., 1 (on
// the GPU each lane adds the value __shfl_xor_sync brings). a + b == b + a exactly, so all lanes end equal.
template <class S>
inline S lanes_butterfly_sum(S (&v)[kLanes]) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    S next[kLanes];
    for (int l = 0; l < kLanes; ++l) next[l] = v[l] + v[l ^ offset];
    for (int l = 0; l < kLanes; ++l) v[l] = next[l];
  }
  return v[0];
}

// ---- forward: online softmax of one query row over one key tile ----
// On entry s[jj] is the scaled score of key k0 + jj for query i (row sums already over all lanes). Masked
// keys drop out; (m, l) become the running max and the running sum of exp(score - m); this lane's o is
// rescaled by exp(m_old - m_new) and gains sum_j p_j v_j. Every tile the kernel visits holds at least one
// visible key (key k0
// <= i), so m_new is finite; on the first tile m_old = -inf and the rescale factor is exactly 0.
template <class S, int kDpt>
DDP_HOST_DEVICE inline void forward_tile_update(S (&s)[kTile], const S* v_tile, int hs, int lane, int64_t i,
                                             int64_t k0, int64_t T, S& m, S& l, S (&o)[kDpt]) {
  S m_new = m;
  DDP_FLASH_UNROLL
  for (int jj = 0; jj < kTile; ++jj)
    if (visible(i, k0 + jj, T) && s[jj] > m_new) m_new = s[jj];
  const S rescale = flash_exp(m - m_new);
  S tile_sum = 0;
  DDP_FLASH_UNROLL
  for (int jj = 0; jj < kTile; ++jj) {
    s[jj] = visible(i, k0 + jj, T) ? flash_exp(s[jj] - m_new) : S(0);  // s becomes p
    tile_sum += s[jj];
  }
  l = rescale * l + tile_sum;
  DDP_FLASH_UNROLL
  for (int r = 0; r < kDpt; ++r) o[r] *= rescale;
  DDP_FLASH_UNROLL
  for (int jj = 0; jj < kTile; ++jj) lane_axpy(s[jj], v_tile + jj * hs, hs, lane, o);
  m = m_new;
}
// After the last tile: o <- o / l and the row's log-sum-exp of the scores, m + log(l).
template <class S, int kDpt>
DDP_HOST_DEVICE inline S forward_finish(S m, S l, S (&o)[kDpt]) {
  const S inv = S(1) / l;
  DDP_FLASH_UNROLL
  for (int r = 0; r < kDpt; ++r) o[r] *= inv;
  return m + flash_log(l);
}

// ---- backward: the probabilities again, tile by tile ----
// p_ij = exp(s_ij - lse_i) from the saved log-sum-exp; 0 for a masked pair.
template <class S>
DDP_HOST_DEVICE inline S recomputed_prob(S s, S lse, int64_t i, int64_t j, int64_t T) {
  return visible(i, j, T) ? flash_exp(s - lse) : S(0);
}
// dS_ij = p_ij (dP_ij - D_i), with dP_ij = dO_i . v_j and D_i = dO_i . O_i (= sum_j p_ij dP_ij).
template <class S>
DDP_HOST_DEVICE inline S score_grad(S p, S dp, S D) {
  return p * (dp - D);
}

// dK/dV pass, key row j meets query i (qk = q_i . k_j and dp = dy_i . v_j already summed over the lanes):
// dv_j += p_ij dy_i and dk_j += dS_ij q_i on this lane's dimensions (dk is scaled by 1/sqrt(hs) once, at the
// end).
template <class S, int kDpt>
DDP_HOST_DEVICE inline void key_row_update(S qk, S dp, S scale, S lse_i, S D_i, int64_t i, int64_t j, int64_t T,
                                        const S* q_row, const S* dy_row, int hs, int lane, S (&dk)[kDpt],
                                        S (&dv)[kDpt]) {
  const S p = recomputed_prob(qk * scale, lse_i, i, j, T);
  lane_axpy(p, dy_row, hs, lane, dv);
  lane_axpy(score_grad(p, dp, D_i), q_row, hs, lane, dk);
}
// dQ pass, query row i meets key j: dq_i += dS_ij k_j (scaled at the end, like dk).
template <class S, int kDpt>
DDP_HOST_DEVICE inline void query_row_update(S qk, S dp, S scale, S lse_i, S D_i, int64_t i, int64_t j,
                                          int64_t T, const S* k_row, int hs, int lane, S (&dq)[kDpt]) {
  const S p = recomputed_prob(qk * scale, lse_i, i, j, T);
  lane_axpy(score_grad(p, dp, D_i), k_row, hs, lane, dq);
}

}  // namespace ddp::kernels::cuda::flash

#if defined(__CUDA_ARCH__)
#pragma GCC diagnostic pop
#endif
