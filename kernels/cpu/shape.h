// shape.h - data movement for the shape ops on the CPU: dimension permutation (transpose, permute) and
// strided block copies (concat, split, slice). Element-size generic: they move bytes, so they serve every
// dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp::kernels::cpu {

using Dims = std::vector<int64_t>;

// A permutation simplified for the kernels: output dimensions with size-1 ones dropped and neighbours that
// are also neighbours in the input merged (so a (B, T, C) -> (T, B, C) permute has 2-3 dimensions, not more).
struct PermutePlan {
  Dims size;       // output sizes
  Dims in_stride;  // the input stride (elements) of each output dimension
};
PermutePlan plan_permute(const Dims& shape, const Dims& perm);

// out = x with its dimensions reordered: out dimension i is input dimension perm[i]; out is contiguous with
// shape (shape[perm[0]], shape[perm[1]], ...). elem_size is 1, 2, 4 or 8 bytes.
void permute(const void* x, const Dims& shape, const Dims& perm, void* out, size_t elem_size);

// For r in [0, rows): copy width_bytes from src + r * src_pitch to dst + r * dst_pitch (all in bytes).
void copy_blocks(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch, int64_t rows,
                 int64_t width_bytes);

}  // namespace ddp::kernels::cpu
