// pool.h - differentiable 2-D max and average pooling (square window), NCHW layout, like
// torch.nn.functional.max_pool2d / avg_pool2d with ceil_mode=False (and count_include_pad=True for avg).
#pragma once
#include "runtime/tensor/tensor.h"

namespace ddp::ops {

// x: (N, C, H, W) -> (N, C, Ho, Wo), Ho = (H + 2*padding - kernel) / stride + 1 (Wo alike). stride
// 0 means stride = kernel; padding <= kernel / 2 (padded cells never win a max and count as zeros
// in an average). Max-pool ties go to the first maximum in row-major window order; backward routes
// each gradient to that position.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride = 0, int64_t padding = 0);

}  // namespace ddp::ops
