// embedding.h - CUDA embedding gather and scatter-add (float32, float64), launched on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// first_bad[0] = the smallest position of an index outside [0, vocab), all bits set when none.
void first_bad_index(const int64_t* indices, int64_t n, int64_t vocab, unsigned long long* first_bad,
                     cudaStream_t stream);
// out[i, :] = weight[indices[i], :] (zeros for an out-of-range index, which first_bad_index reports).
template <class T>
void embedding_forward(const T* weight, const int64_t* indices, int64_t vocab, T* out, int64_t n,
                       int64_t cols, cudaStream_t stream);
// dweight = 0, then dweight[indices[i], :] += dout[i, :] (atomic adds: the summation order of
// repeated indices is not fixed).
template <class T>
void embedding_backward(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                        int64_t cols, cudaStream_t stream);

}  // namespace ddp::kernels::cuda
