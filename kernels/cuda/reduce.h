// reduce.h - sums over chosen dimensions on the GPU (accumulating in double) and their broadcast backward;
// same names and meanings as kernels/cpu/reduce.h, launched on ddp::cuda::current_stream().
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace ddp::kernels::cuda {

using Dims = std::vector<int64_t>;

// out[o, j] = scale * sum_r x[o, r, j] for x (outer, r, inner) -> out (outer, inner).
template <class In, class Out>
void sum_middle(const In* x, int64_t outer, int64_t r, int64_t inner, Out* out, double scale);
// out = scale * sum of x over the reduced dimensions (kept dimensions in order).
template <class T>
void sum_dims(const T* x, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale);
// out (shape) = scale * g broadcast along the reduced dimensions.
template <class T>
void expand_dims(const T* g, const Dims& shape, const std::vector<bool>& reduced, T* out, double scale);

}  // namespace ddp::kernels::cuda
