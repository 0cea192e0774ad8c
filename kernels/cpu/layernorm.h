// layernorm.h - CPU kernels for layer normalization over the last dimension:
//   y = (x - mean) * rstd * weight + bias,  rstd = 1 / sqrt(var + eps)  (biased variance, like PyTorch).
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// x, y: (rows, cols); weight, bias: (cols); writes mean, rstd: (rows) for backward.
template <class T>
void layernorm_forward(const T* x, const T* weight, const T* bias, T* y, T* mean, T* rstd, int64_t rows,
                       int64_t cols, double eps);
// With xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  dweight = sum_rows(dy * xhat),  dbias = sum_rows(dy).
// dy, x, dx: (rows, cols); weight, dweight, dbias: (cols); any of dx, dweight, dbias may be null.
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* weight, const T* mean, const T* rstd, T* dx,
                        T* dweight, T* dbias, int64_t rows, int64_t cols);

}  // namespace ddp::kernels::cpu
