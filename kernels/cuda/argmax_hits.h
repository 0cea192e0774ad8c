// argmax_hits.h - on the GPU, how many rows of a (rows, cols) score matrix have their largest score at the row's
// label, added to a device float64 counter (exact: a count below 2^53), so evaluation reads its accuracy once at
// the end instead of copying the logits to the host per batch. Same choice of column as kernels/cpu/argmax_hits
// (the first largest; rows with a NaN and labels outside [0, cols) never count), one warp per row.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ddp::kernels::cuda {

// hits[0] += the number of rows i with argmax(scores[i, :]) == labels[i].
template <class T>
void count_argmax_hits(const T* scores, const int64_t* labels, int64_t rows, int64_t cols, double* hits,
                       cudaStream_t stream);

}  // namespace ddp::kernels::cuda
