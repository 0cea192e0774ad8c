// embedding.cu - CUDA embedding: index validation, a row gather, and two scatter-adds for the backward: the
// deterministic one (default: a stable radix sort of the indices, then one thread per (distinct row, column)
// sums that row's occurrences in position order - the CPU kernel's order, so the results are bitwise equal)
// and the atomic one (faster for huge batches, summation order not fixed). An index outside [0, vocab) is
// never read or written through: its output row is zeros and its gradient goes to no row; first_bad_index
// reports it (runtime/tensor/device_checks.h raises it later, on the host).
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cpu/index_check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
__global__ void first_bad_index_kernel(const int64_t* indices, int64_t n, int64_t vocab,
                                       unsigned long long* first_bad) {
  DDP_CUDA_KERNEL_LOOP(i, n) {
    if (!cpu::index_in_range(indices[i], vocab)) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

template <class T>
__global__ void embedding_forward_kernel(const T* weight, const int64_t* indices, int64_t vocab, T* out,
                                         int64_t n, int64_t cols) {
  DDP_CUDA_KERNEL_LOOP(i, n * cols) {
    const int64_t row = i / cols, c = i - row * cols, id = indices[row];
    out[i] = cpu::index_in_range(id, vocab) ? weight[id * cols + c] : T(0);
  }
}

// keys[i] = indices[i], or vocab for an index outside [0, vocab) (summed into no row); pos[i] = i
__global__ void keys_and_positions_kernel(const int64_t* indices, int64_t n, int64_t vocab, uint32_t* keys,
                                          int32_t* pos) {
  DDP_CUDA_KERNEL_LOOP(i, n) {
    keys[i] = cpu::embedding_sort_key(indices[i], vocab);
    pos[i] = static_cast<int32_t>(i);
  }
}

// keys sorted (stably: equal keys keep ascending positions). The thread at the first occurrence r of a key
// sums column c over that key's run in position order: 0 + dout[p0] + dout[p1] + ..., like the CPU loop.
// The run of key vocab (bad indices) is skipped.
template <class T>
__global__ void segment_sum_kernel(const uint32_t* keys, const int32_t* pos, const T* dout, T* dweight,
                                   int64_t n, int64_t vocab, int64_t cols) {
  DDP_CUDA_KERNEL_LOOP(i, n * cols) {
    const int64_t r = i / cols, c = i - r * cols;
    const uint32_t key = keys[r];
    if (static_cast<int64_t>(key) >= vocab || (r > 0 && keys[r - 1] == key)) continue;
    T acc = T(0);
    for (int64_t j = r; j < n && keys[j] == key; ++j)
      acc = acc + dout[static_cast<int64_t>(pos[j]) * cols + c];
    dweight[static_cast<int64_t>(key) * cols + c] = acc;
  }
}

template <class T>
__global__ void embedding_backward_atomic_kernel(const T* dout, const int64_t* indices, T* dweight, int64_t n,
                                                 int64_t vocab, int64_t cols) {
  DDP_CUDA_KERNEL_LOOP(i, n * cols) {
    const int64_t row = i / cols, c = i - row * cols, id = indices[row];
    if (cpu::index_in_range(id, vocab)) atomicAdd(dweight + id * cols + c, dout[i]);
  }
}
}  // namespace

void first_bad_index(const int64_t* indices, int64_t n, int64_t vocab, unsigned long long* first_bad,
                     cudaStream_t stream) {
  if (n == 0) return;
  first_bad_index_kernel<<<grid_for(n), kBlock, 0, stream>>>(indices, n, vocab, first_bad);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void embedding_forward(const T* weight, const int64_t* indices, int64_t vocab, T* out, int64_t n,
                       int64_t cols, cudaStream_t stream) {
  if (n * cols == 0) return;
  embedding_forward_kernel<T>
      <<<grid_for(n * cols), kBlock, 0, stream>>>(weight, indices, vocab, out, n, cols);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void embedding_backward_atomic(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                               int64_t cols, cudaStream_t stream) {
  DDP_CUDA_CHECK(cudaMemsetAsync(dweight, 0, static_cast<size_t>(vocab * cols) * sizeof(T), stream));
  if (n * cols == 0) return;
  embedding_backward_atomic_kernel<T>
      <<<grid_for(n * cols), kBlock, 0, stream>>>(dout, indices, dweight, n, vocab, cols);
  DDP_CUDA_CHECK_LAUNCH();
}

template <class T>
void embedding_backward(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                        int64_t cols, cudaStream_t stream) {
  DDP_CUDA_CHECK(cudaMemsetAsync(dweight, 0, static_cast<size_t>(vocab * cols) * sizeof(T), stream));
  if (n * cols == 0) return;
  DDP_CHECK(n < (int64_t(1) << 31) && vocab < (int64_t(1) << 32), "embedding backward on CUDA: ", n,
            " indices into ", vocab,
            " rows; the deterministic kernel takes fewer than 2^31 indices and fewer than "
            "2^32 rows (split the batch)");
  const int end_bit = cpu::embedding_sort_bits(vocab);
  const int items = static_cast<int>(n);
  size_t sort_bytes = 0;
  DDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), items, 0, end_bit, stream));
  // One stream-ordered scratch block: keys in/out, positions in/out, then cub's temporary storage.
  const size_t arr = (static_cast<size_t>(n) * 4 + 255) / 256 * 256;
  char* scratch = nullptr;
  DDP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&scratch), 4 * arr + sort_bytes, stream));
  auto* keys_in = reinterpret_cast<uint32_t*>(scratch);
  auto* keys_out = reinterpret_cast<uint32_t*>(scratch + arr);
  auto* pos_in = reinterpret_cast<int32_t*>(scratch + 2 * arr);
  auto* pos_out = reinterpret_cast<int32_t*>(scratch + 3 * arr);
  keys_and_positions_kernel<<<grid_for(n), kBlock, 0, stream>>>(indices, n, vocab, keys_in, pos_in);
  DDP_CUDA_CHECK_LAUNCH();
  DDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch + 4 * arr, sort_bytes, keys_in, keys_out, pos_in,
                                                 pos_out, items, 0, end_bit, stream));
  segment_sum_kernel<T>
      <<<grid_for(n * cols), kBlock, 0, stream>>>(keys_out, pos_out, dout, dweight, n, vocab, cols);
  DDP_CUDA_CHECK_LAUNCH();
  DDP_CUDA_CHECK(cudaFreeAsync(scratch, stream));
}

template void embedding_forward<float>(const float*, const int64_t*, int64_t, float*, int64_t, int64_t,
                                       cudaStream_t);
template void embedding_forward<double>(const double*, const int64_t*, int64_t, double*, int64_t, int64_t,
                                        cudaStream_t);
template void embedding_backward<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t,
                                        cudaStream_t);
template void embedding_backward<double>(const double*, const int64_t*, double*, int64_t, int64_t, int64_t,
                                         cudaStream_t);
template void embedding_backward_atomic<float>(const float*, const int64_t*, float*, int64_t, int64_t,
                                               int64_t, cudaStream_t);
template void embedding_backward_atomic<double>(const double*, const int64_t*, double*, int64_t, int64_t,
                                                int64_t, cudaStream_t);

}  // namespace ddp::kernels::cuda
