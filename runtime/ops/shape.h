// shape.h - differentiable shape ops. Tensors are always contiguous, so reshape-like ops (reshape, flatten,
// unsqueeze, squeeze) and slices that stay contiguous (along dim 0, or when every leading dimension is 1) are
// free views of the same storage; transpose, permute, concat, split and other slices copy.
// They move bytes, so they work for every dtype (gradients only flow through floating ones).
#pragma once
#include <vector>

#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// A view with a new shape of the same element count; one dimension may be -1 (inferred).
Tensor reshape(const Tensor& x, const Shape& shape);
// Merges dimensions start_dim..end_dim (inclusive; negative counts from the end) into one.
// e.g. x: (B, C, H, W), flatten(x, 1) -> (B, C*H*W)
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
// Inserts a size-1 dimension at position dim (in [-(x.dim()+1), x.dim()]).
Tensor unsqueeze(const Tensor& x, int64_t dim);
// Removes dimension dim, which must have size 1.
Tensor squeeze(const Tensor& x, int64_t dim);

// Swaps two dimensions (a copy). e.g. x: (B, T, H, D), transpose(x, 1, 2) -> (B, H, T, D)
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
// Reorders dimensions: output dimension i is input dimension dims[i] (a copy).
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);

// Joins tensors of equal shape except along dim. e.g. (B, 2), (B, 3) along 1 -> (B, 5)
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);
// Cuts x along dim into pieces of the given sizes (they must add up to x.size(dim)).
// e.g. qkv: (B, T, 3C), split(qkv, {C, C, C}, 2) -> three (B, T, C)
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// Elements [begin, end) along dim (negative begin/end count from the end of that dimension).
Tensor slice(const Tensor& x, int64_t dim, int64_t begin, int64_t end);

}  // namespace ddp::ops
