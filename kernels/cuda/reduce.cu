// reduce.cu - reduction kernels: block-wide tree sums in double for contiguous rows (two passes when there
// are few long rows, e.g. a sum of everything), a 32x8 tiled column sum for (outer, r, inner > 1) (two passes
// over row chunks when the tiles alone would leave SMs idle: column_sum_plan.h), and an
// index-mapping broadcast kernel for the backward. Temporaries come from the stream-ordered pool.
#include <memory>

#include "kernels/cpu/reduce.h"
#include "kernels/cuda/column_sum_plan.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.h"
#include "runtime/core/cuda/stream.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
constexpr int kMaxGroups = 16;

// Sum of the block's `v` values (blockDim.x threads, shared must hold blockDim.x doubles); valid in thread 0.
__device__ double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  return shared[0];
}

// out[o * parts + p] = scale * sum of part p of row o (rows of length r; `parts` blocks per row).
template <class In, class Out>
__global__ void row_sum_kernel(const In* x, int64_t outer, int64_t r, int parts, Out* out, double scale) {
  __shared__ double shared[kBlock];
  const int64_t chunk = (r + parts - 1) / parts;
  for (int64_t job = blockIdx.x; job < outer * parts; job += gridDim.x) {
    const int64_t o = job / parts, p = job % parts;
    const int64_t begin = p * chunk, end = begin + chunk < r ? begin + chunk : r;
    const In* row = x + o * r;
    double acc = 0;
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) acc += widen_to<double>(row[k]);
    const double total = block_sum(acc, shared);
    if (threadIdx.x == 0) out[job] = static_cast<Out>(total * scale);
    __syncthreads();  // shared is reused by the next job
  }
}

// out[o, j] = scale * sum_k x[o, k, j]: block (32, 8) covers 32 columns, its 8 rows of threads split k.
template <class In, class Out>
__global__ void column_sum_kernel(const In* x, int64_t outer, int64_t r, int64_t inner, Out* out,
                                  double scale) {
  __shared__ double shared[8][33];
  const int64_t j = blockIdx.x * 32 + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    const double acc =
        j < inner ? column_lane_sum<double>(x + o * r * inner, inner, j, 0, r, threadIdx.y, kRowLanesPerBlock) : 0;
    shared[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < inner) {
      double s = 0;
      for (int t = 0; t < 8; ++t) s += shared[t][threadIdx.x];
      out[o * inner + j] = static_cast<Out>(s * scale);
    }
    __syncthreads();
  }
}

// The chunked first pass (column_sum_plan.h): partial[(o * chunks + c) * inner + j] = sum of x[o, k, j] over
// the rows k of chunk c, summed as column_sum_kernel sums a whole slice.
template <class In>
__global__ void column_chunk_sum_kernel(const In* x, int64_t outer, int64_t r, int64_t inner, int64_t chunks,
                                        int64_t rows_per_chunk, double* partial) {
  __shared__ double shared[8][33];
  const int64_t j = blockIdx.x * 32 + threadIdx.x;
  for (int64_t job = blockIdx.y; job < outer * chunks; job += gridDim.y) {
    const int64_t o = job / chunks, c = job - o * chunks;
    const int64_t begin = c * rows_per_chunk, end = begin + rows_per_chunk < r ? begin + rows_per_chunk : r;
    const double acc = j < inner ? column_lane_sum<double>(x + o * r * inner, inner, j, begin, end, threadIdx.y,
                                                           kRowLanesPerBlock)
                                 : 0;
    shared[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < inner) {
      double s = 0;
      for (int t = 0; t < 8; ++t) s += shared[t][threadIdx.x];
      partial[job * inner + j] = s;
    }
    __syncthreads();
  }
}

// The second pass: out[o, j] = scale * (the chunks' partial sums added in chunk order).
template <class Out>
__global__ void column_chunks_total_kernel(const double* partial, int64_t outer, int64_t chunks, int64_t inner,
                                           Out* out, double scale) {
  DDP_CUDA_KERNEL_LOOP(i, outer * inner) {
    const int64_t o = i / inner, j = i - o * inner;
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[(o * chunks + c) * inner + j];
    out[i] = static_cast<Out>(s * scale);
  }
}

struct ExpandPlan {
  int n = 0;
  int64_t size[kMaxGroups];
  int64_t gstride[kMaxGroups];  // stride in g, 0 along reduced groups
};

template <class T>
__global__ void expand_kernel(const T* g, ExpandPlan p, int64_t total, T* out, T scale) {
  DDP_CUDA_KERNEL_LOOP(i, total) {
    int64_t rest = i, goff = 0;
    for (int d = p.n - 1; d >= 0; --d) {
      goff += (rest % p.size[d]) * p.gstride[d];
      rest /= p.size[d];
    }
    out[i] = g[goff] * scale;
  }
}

}  // namespace

template <class In, class Out>
void sum_middle(const In* x, int64_t outer, int64_t r, int64_t inner, Out* out, double scale) {
  if (outer == 0 || inner == 0) return;
  cudaStream_t stream = ddp::cuda::current_stream();
  if (inner == 1) {
    // Few long rows: split each row over several blocks, then sum the partial sums.
    const int parts = (outer < 64 && r >= 16 * kBlock)
                          ? static_cast<int>(std::min<int64_t>(256, (r + 8 * kBlock - 1) / (8 * kBlock)))
                          : 1;
    const int grid = static_cast<int>(std::min<int64_t>(outer * parts, 65535));
    if (parts == 1) {
      row_sum_kernel<In, Out><<<grid, kBlock, 0, stream>>>(x, outer, r, 1, out, scale);
      DDP_CUDA_CHECK_LAUNCH();
      return;
    }
    StreamScratch partial(static_cast<size_t>(outer * parts) * sizeof(double));
    double* pp = static_cast<double*>(partial.ptr);
    row_sum_kernel<In, double><<<grid, kBlock, 0, stream>>>(x, outer, r, parts, pp, 1.0);
    DDP_CUDA_CHECK_LAUNCH();
    row_sum_kernel<double, Out>
        <<<static_cast<int>(outer), kBlock, 0, stream>>>(pp, outer, parts, 1, out, scale);
    DDP_CUDA_CHECK_LAUNCH();
    return;
  }
  const ColumnSumPlan plan = plan_column_sum(outer, r, inner, multiprocessor_count());
  const dim3 block(32, 8);
  DDP_CHECK(plan.col_tiles <= 2147483647, "cuda sum: inner size ", inner, " too large");
  if (plan.chunks == 1) {
    const dim3 grid(static_cast<unsigned>(plan.col_tiles), static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
    column_sum_kernel<In, Out><<<grid, block, 0, stream>>>(x, outer, r, inner, out, scale);
    DDP_CUDA_CHECK_LAUNCH();
    return;
  }
  StreamScratch partial(static_cast<size_t>(outer * plan.chunks * inner) * sizeof(double));
  double* pp = static_cast<double*>(partial.ptr);
  const dim3 grid(static_cast<unsigned>(plan.col_tiles),
                  static_cast<unsigned>(std::min<int64_t>(outer * plan.chunks, 65535)));
  column_chunk_sum_kernel<In>
      <<<grid, block, 0, stream>>>(x, outer, r, inner, plan.chunks, plan.rows_per_chunk, pp);
  DDP_CUDA_CHECK_LAUNCH();
  column_chunks_total_kernel<Out><<<grid_for(outer * inner), kBlock, 0, stream>>>(pp, outer, plan.chunks, inner,
                                                                                  out, scale);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void sum_dims(const T* x, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale) {
  std::vector<cpu::DimGroup> groups = cpu::group_dims(shape, reduced);
  int num_reduced = 0;
  int64_t total = 1;
  for (const cpu::DimGroup& g : groups) {
    num_reduced += g.reduced ? 1 : 0;
    total *= g.size;
  }
  if (num_reduced == 0) {  // nothing summed: a scaled copy
    sum_middle(x, total, 1, 1, out, scale);
    return;
  }
  // Innermost reduced run first; intermediates in double scratch buffers.
  std::unique_ptr<StreamScratch> cur;
  while (true) {
    int last = static_cast<int>(groups.size()) - 1;
    while (!groups[last].reduced) --last;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < last; ++i) outer *= groups[i].size;
    for (int i = last + 1; i < static_cast<int>(groups.size()); ++i) inner *= groups[i].size;
    const int64_t r = groups[last].size;
    groups.erase(groups.begin() + last);
    if (--num_reduced == 0) {
      if (!cur)
        sum_middle(x, outer, r, inner, out, scale);
      else
        sum_middle(static_cast<const double*>(cur->ptr), outer, r, inner, out, scale);
      return;
    }
    auto next = std::make_unique<StreamScratch>(static_cast<size_t>(outer * inner) * sizeof(double));
    if (!cur)
      sum_middle(x, outer, r, inner, static_cast<double*>(next->ptr), 1.0);
    else
      sum_middle(static_cast<const double*>(cur->ptr), outer, r, inner, static_cast<double*>(next->ptr), 1.0);
    cur = std::move(next);
  }
}

template <class T>
void expand_dims(const T* g, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale) {
  const std::vector<cpu::DimGroup> groups = cpu::group_dims(shape, reduced);
  DDP_CHECK(groups.size() <= static_cast<size_t>(kMaxGroups), "cuda sum backward: shape has more than ",
            kMaxGroups, " alternating reduced/kept dimension runs");
  ExpandPlan p;
  p.n = static_cast<int>(groups.size());
  int64_t total = 1, st = 1;
  for (int i = p.n - 1; i >= 0; --i) {
    p.size[i] = groups[i].size;
    p.gstride[i] = groups[i].reduced ? 0 : st;
    if (!groups[i].reduced) st *= groups[i].size;
    total *= groups[i].size;
  }
  if (total == 0) return;
  expand_kernel<<<grid_for(total), kBlock, 0, ddp::cuda::current_stream()>>>(g, p, total, out,
                                                                             static_cast<T>(scale));
  DDP_CUDA_CHECK_LAUNCH();
}

template void sum_middle<float, float>(const float*, int64_t, int64_t, int64_t, float*, double);
template void sum_middle<BFloat16, float>(const BFloat16*, int64_t, int64_t, int64_t, float*, double);
template void sum_middle<double, double>(const double*, int64_t, int64_t, int64_t, double*, double);
template void sum_middle<float, double>(const float*, int64_t, int64_t, int64_t, double*, double);
template void sum_middle<double, float>(const double*, int64_t, int64_t, int64_t, float*, double);
template void sum_dims<float>(const float*, const Dims&, const std::vector<bool>&, float*, double);
template void sum_dims<double>(const double*, const Dims&, const std::vector<bool>&, double*, double);
template void expand_dims<float>(const float*, const Dims&, const std::vector<bool>&, float*, double);
template void expand_dims<double>(const double*, const Dims&, const std::vector<bool>&, double*, double);

}  // namespace ddp::kernels::cuda
