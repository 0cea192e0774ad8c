// embedding.h - CUDA embedding gather and scatter-adds (float32, float64), launched on `stream`.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// first_bad[0] = min(first_bad[0], the smallest position of an index outside [0, vocab)) by atomicMin: the
// caller sets it to all bits (kernels/cpu/index_check.h, kNoBadPosition) before the first kernel that reports
// into it; it is not reset here, so a slot of runtime/tensor/device_checks.h keeps its first error.
void first_bad_index(const int64_t* indices, int64_t n, int64_t vocab, unsigned long long* first_bad,
                     cudaStream_t stream);
// out[i, :] = weight[indices[i], :] (zeros for an out-of-range index, which first_bad_index reports).
template <class T>
void embedding_forward(const T* weight, const int64_t* indices, int64_t vocab, T* out, int64_t n,
                       int64_t cols, cudaStream_t stream);
// dweight = 0, then dweight[indices[i], :] += dout[i, :] for i in increasing order: deterministic and bitwise
// equal to kernels/cpu's embedding_backward (a stable radix sort of the indices, then a per-row sum in
// position order). An index outside [0, vocab) adds to no row (first_bad_index reported it); vocab < 2^32.
// Scratch memory is stream-ordered.
template <class T>
void embedding_backward(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                        int64_t cols, cudaStream_t stream);
// The same sum with atomic adds: the summation order of repeated indices is not fixed (run to run the
// result may differ in the last bits); bad indices add to no row. Not used by the ops; kept for comparison
// in the GPU benchmarks.
template <class T>
void embedding_backward_atomic(const T* dout, const int64_t* indices, T* dweight, int64_t n, int64_t vocab,
                               int64_t cols, cudaStream_t stream);

}  // namespace ddp::kernels::cuda
