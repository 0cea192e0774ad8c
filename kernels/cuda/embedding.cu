// embedding.cu - CUDA embedding: index validation, a row gather and an atomic scatter-add, all grid-stride.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"
#include "runtime/core/cuda_check.h"

namespace ddp::kernels::cuda {
namespace {
__global__ void first_bad_index_kernel(const int64_t* indices, int64_t n, int64_t vocab,
                                       unsigned long long* first_bad) {
  DDP_CUDA_KERNEL_LOOP(i, n) {
    if (indices[i] < 0 || indices[i] >= vocab) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

template <class T>
__global__ void embedding_forward_kernel(const T* weight, const int64_t* indices, int64_t vocab, T* out,
                                         int64_t n, int64_t cols) {
  DDP_CUDA_KERNEL_LOOP(i, n * cols) {
    const int64_t row = i / cols, c = i - row * cols, id = indices[row];
    out[i] = (id >= 0 && id < vocab) ? weight[id * cols + c] : T(0);
  }
}

template <class T>
__global__ void embedding_backward_kernel(const T* dout, const int64_t* indices, T* dweight, int64_t n,
                                          int64_t cols) {
  DDP_CUDA_KERNEL_LOOP(i, n * cols) {
    const int64_t row = i / cols, c = i - row * cols;
    atomicAdd(dweight + indices[row] * cols + c, dout[i]);
  }
}
}  // namespace

void first_bad_index(const int64_t* indices, int64_t n, int64_t vocab, unsigned long long* first_bad,
                     cudaStream_t stream) {
  DDP_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xFF, sizeof(unsigned long long), stream));
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
void embedding_backward(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                        int64_t cols, cudaStream_t stream) {
  DDP_CUDA_CHECK(cudaMemsetAsync(dweight, 0, static_cast<size_t>(vocab * cols) * sizeof(T), stream));
  if (n * cols == 0) return;
  embedding_backward_kernel<T><<<grid_for(n * cols), kBlock, 0, stream>>>(dout, indices, dweight, n, cols);
  DDP_CUDA_CHECK_LAUNCH();
}

template void embedding_forward<float>(const float*, const int64_t*, int64_t, float*, int64_t, int64_t,
                                       cudaStream_t);
template void embedding_forward<double>(const double*, const int64_t*, int64_t, double*, int64_t, int64_t,
                                        cudaStream_t);
template void embedding_backward<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t,
                                        cudaStream_t);
template void embedding_backward<double>(const double*, const int64_t*, double*, int64_t, int64_t, int64_t,
                                         cudaStream_t);

}  // namespace ddp::kernels::cuda
