// column_sum_plan.h - how the CUDA column sums (bias gradients: reduce.cu's sum over the middle axis of
// (outer, r, inner); layer norm's dweight/dbias: layernorm.cu) spread over the GPU, and the per-thread sum
// they run. A (8192, 768) gradient summed over its 8192 rows is 24 tiles of 32 columns: 24 blocks on a 132-SM
// H200, each thread walking 1024 rows. The plan cuts the rows into chunks (grid: tiles x outer x chunks)
// until there are about 4 blocks per SM; each chunk's sums go to a scratch row, and a second pass adds the
// chunks in chunk order - the same order every run (no atomics). One chunk: the single pass as before.
//
// Plain C++ (no CUDA types): the CPU tests check the plan and run the kernels' summation order on the host
// (tests/ops_core/test_column_sum_plan.cpp), the same functions the kernels call.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/host_device.h"
#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

constexpr int64_t kColumnTile = 32;       // columns per block (threadIdx.x)
constexpr int64_t kRowLanesPerBlock = 8;  // rows in flight per block (threadIdx.y)
constexpr int64_t kMinRowsPerChunk = 64;  // below this a chunk's partial sum is not worth its scratch row
constexpr int64_t kMaxChunks = 1024;

struct ColumnSumPlan {
  int64_t col_tiles = 0;       // ceil(inner / 32)
  int64_t chunks = 1;          // row chunks per (outer) slice
  int64_t rows_per_chunk = 0;  // the last chunk may be shorter; none is empty
};

// For x of shape (outer, r, inner) summed over r on a GPU with `sm_count` multiprocessors.
inline ColumnSumPlan plan_column_sum(int64_t outer, int64_t r, int64_t inner, int sm_count) {
  ColumnSumPlan p;
  p.col_tiles = (inner + kColumnTile - 1) / kColumnTile;
  p.rows_per_chunk = r;
  if (outer <= 0 || r <= 0 || inner <= 0) return p;
  const int64_t target_blocks = 4 * std::max(1, sm_count);
  const int64_t blocks = p.col_tiles * outer;
  if (blocks >= target_blocks) return p;
  const int64_t wanted = (target_blocks + blocks - 1) / blocks;
  const int64_t most = std::max<int64_t>(1, r / kMinRowsPerChunk);
  const int64_t chunks = std::min({wanted, most, kMaxChunks});
  p.rows_per_chunk = (r + chunks - 1) / chunks;
  p.chunks = (r + p.rows_per_chunk - 1) / p.rows_per_chunk;  // no empty chunk
  return p;
}

// One element as the accumulator type: a plain cast, and for bf16 its bits as a float32's top half (exact).
template <class Acc, class In>
DDP_HOST_DEVICE inline Acc widen_to(In v) {
  return static_cast<Acc>(v);
}
template <class Acc>
DDP_HOST_DEVICE inline Acc widen_to(BFloat16 v) {
  const uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return static_cast<Acc>(f);
}

// One thread's share of a chunk: rows begin + lane, begin + lane + lanes, ... below end, of column j of the
// slice that starts at x (row length inner). Acc is the accumulator type (double in reduce.cu).
template <class Acc, class In>
DDP_HOST_DEVICE inline Acc column_lane_sum(const In* x, int64_t inner, int64_t j, int64_t begin, int64_t end,
                                           int64_t lane, int64_t lanes) {
  Acc acc = 0;
  for (int64_t k = begin + lane; k < end; k += lanes) acc += widen_to<Acc>(x[k * inner + j]);
  return acc;
}

}  // namespace ddp::kernels::cuda
