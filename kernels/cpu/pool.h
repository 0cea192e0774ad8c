// pool.h - 2-D max and average pooling on the CPU over raw NCHW pointers (square window, stride, zero
// padding). Max pooling saves the argmax of each window as an int32 index into its (H, W) plane; ties go to
// the first maximum in row-major window order (a NaN wins over numbers). Average pooling divides by
// kernel*kernel (padding counts, like PyTorch's count_include_pad=True). PoolGeometry is shared with
// kernels/cuda/pool.h.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

struct PoolGeometry {
  int64_t planes = 0;  // N * C: pooling treats every (n, c) plane alike
  int64_t in_h = 0, in_w = 0;
  int64_t kernel = 1, stride = 1, padding = 0;
  int64_t out_h = 0, out_w = 0;
};

// y (planes, Ho, Wo) = window maxima of x (planes, H, W); argmax (planes, Ho, Wo) = h*W + w of each maximum.
template <class T>
void max_pool2d_forward(const T* x, T* y, int32_t* argmax, const PoolGeometry& g);
// dx (planes, H, W) = dy routed to the saved argmax positions (overwritten; summed where windows overlap).
template <class T>
void max_pool2d_backward(const T* dy, const int32_t* argmax, T* dx, const PoolGeometry& g);

// y (planes, Ho, Wo) = window sums of x / (kernel*kernel).
template <class T>
void avg_pool2d_forward(const T* x, T* y, const PoolGeometry& g);
// dx (planes, H, W) = each dy spread evenly over its window's in-bounds pixels (overwritten).
template <class T>
void avg_pool2d_backward(const T* dy, T* dx, const PoolGeometry& g);

}  // namespace ddp::kernels::cpu
