// dropout.h - CUDA dropout with the counter-based mask of kernels/cpu/dropout.h (bit-identical to the CPU).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// y[i] = keep(key, offset + i) ? x[i] * scale : 0.  x, y: (n); y may alias x.
template <class T>
void dropout_apply(const T* x, T* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold, T scale,
                   cudaStream_t stream);

}  // namespace ddp::kernels::cuda
