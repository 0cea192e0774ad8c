// argmax_hits.cu - one warp per row finds the row's first largest score with kernels/cpu/argmax_hits.h's
// better_of (each lane over a strided run of columns, then a shuffle tree), and the block adds its hits to the
// device counter once.
#include "kernels/cpu/argmax_hits.h"
#include "kernels/cuda/argmax_hits.h"
#include "kernels/cuda/common.cuh"

namespace ddp::kernels::cuda {
namespace {
constexpr int kWarpsPerBlock = 8;

template <class T>
__global__ void argmax_hits_kernel(const T* scores, const int64_t* labels, int64_t rows, int64_t cols,
                                   double* hits) {
  __shared__ int block_hits;
  if (threadIdx.x == 0) block_hits = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32; row < rows;
       row += warps) {
    const T* r = scores + row * cols;
    // Lane l's run: columns l, l + 32, ...; a lane without a column (cols < 32) stays empty (col = -1) and
    // never wins. Lanes interleave columns, so ties rely on better_of's lower-column rule.
    cpu::ScoreAt<T> best{T(0), -1, false};
    for (int64_t j = lane; j < cols; j += 32) {
      const cpu::ScoreAt<T> here{r[j], j, r[j] != r[j]};
      best = best.col < 0 ? here : cpu::better_of(best, here);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      cpu::ScoreAt<T> other;
      other.score = __shfl_down_sync(0xffffffffu, best.score, offset);
      other.col = __shfl_down_sync(0xffffffffu, best.col, offset);
      other.nan = __shfl_down_sync(0xffffffffu, best.nan, offset);
      if (other.col >= 0) best = best.col < 0 ? other : cpu::better_of(best, other);
    }
    if (lane == 0 && best.col >= 0 && !best.nan && best.col == labels[row]) atomicAdd(&block_hits, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0 && block_hits > 0) atomicAdd(hits, static_cast<double>(block_hits));
}
}  // namespace

template <class T>
void count_argmax_hits(const T* scores, const int64_t* labels, int64_t rows, int64_t cols, double* hits,
                       cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 65535));
  argmax_hits_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(scores, labels, rows, cols, hits);
  DDP_CUDA_CHECK_LAUNCH();
}

template void count_argmax_hits<float>(const float*, const int64_t*, int64_t, int64_t, double*, cudaStream_t);
template void count_argmax_hits<double>(const double*, const int64_t*, int64_t, int64_t, double*, cudaStream_t);

}  // namespace ddp::kernels::cuda
