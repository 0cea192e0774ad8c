// shape.h - data movement for the shape ops on the GPU; same names and meanings as kernels/cpu/shape.h
// (element-size generic), on ddp::cuda::current_stream().
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp::kernels::cuda {

using Dims = std::vector<int64_t>;

// out = x with dimensions reordered (out dimension i is input dimension perm[i]); elem_size 1, 2, 4 or 8.
void permute(const void* x, const Dims& shape, const Dims& perm, void* out, size_t elem_size);
// For r in [0, rows): copy width_bytes from src + r * src_pitch to dst + r * dst_pitch (device memory).
void copy_blocks(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch, int64_t rows,
                 int64_t width_bytes);

}  // namespace ddp::kernels::cuda
