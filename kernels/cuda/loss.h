// loss.h - CUDA fused cross-entropy (float32, float64, bf16 logits) and MSE (float32, float64). Same math as
// kernels/cpu/loss.h; the loss, the count of non-ignored rows and the first bad target stay on the device (no
// host sync inside).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/core/dtype.h"

namespace ddp::kernels::cuda {

// logits: (rows, row_stride) of which the first cols columns are the classes (row_stride > cols: a padded
// vocabulary; the other columns are read by nothing and get zero gradient), targets: (rows). Writes lse:
// (rows), row_loss: (rows) scratch, loss: (1) the mean (NaN when no row counts) or the sum, count: (1) the
// number of non-ignored rows, and first_bad: (1) min(first_bad, the smallest row whose target is outside
// [0, cols) and not the ignore index) by atomicMin - the caller sets it to all bits before
// (kernels/cpu/index_check.h); such rows are left out of the loss, never read through, and get zero gradient.
// In, T: float, float / double, double / BFloat16, float - bfloat16 logits (the GPT's classifier under bf16
// compute, runtime/ops/mixed_precision.h) with the same math in float32 on their exact values; lse, row_loss,
// loss and dloss are then float32 and dlogits bfloat16 (the float32 gradient rounded to nearest even once).
// bf16 rows 16-byte aligned with row_stride % 8 == 0 are read (and written) eight elements at a time.
template <class In, class T>
void cross_entropy_forward(const In* logits, const int64_t* targets, int64_t rows, int64_t cols,
                           int64_t row_stride, bool has_ignore, int64_t ignore_index, bool mean, T* lse,
                           T* row_loss, T* loss, int64_t* count, unsigned long long* first_bad,
                           cudaStream_t stream);
// dlogits = dloss[0] / (count ? count[0] : 1) * (exp(logits - lse) - onehot); ignored and bad rows get 0.
// dlogits may be logits.
template <class In, class T>
void cross_entropy_backward(const In* logits, const int64_t* targets, const T* lse, const T* dloss,
                            const int64_t* count, int64_t rows, int64_t cols, int64_t row_stride,
                            bool has_ignore, int64_t ignore_index, In* dlogits, cudaStream_t stream);

// loss[0] = mean((pred - target)^2) over n elements.
template <class T>
void mse_forward(const T* pred, const T* target, int64_t n, T* loss, cudaStream_t stream);
// dpred = 2 (pred - target) dloss[0] / n; dtarget = -dpred; either may be null.
template <class T>
void mse_backward(const T* pred, const T* target, const T* dloss, int64_t n, T* dpred, T* dtarget,
                  cudaStream_t stream);

}  // namespace ddp::kernels::cuda
