// optim.h - fused optimizer updates on the CPU: one vectorized pass over parameter, gradient and state per
// call (the CUDA kernels of the same names live in kernels/cuda/optim.h). The scalar constants (1 - beta,
// 1 - lr * weight_decay, lr / bias_correction1, ...) are computed in double and rounded once to T, as PyTorch
// does, so a float32 step is not biased by constants formed in float.
#pragma once
#include <cstdint>

namespace ddp::kernels::cpu {

// PyTorch's SGD: d = g + wd * w; with momentum buf = first ? d : momentum * buf + (1 - dampening) * d and
// d = nesterov ? d + momentum * buf : buf; then w -= lr * d. momentum_buf may be null when momentum == 0.
template <class T>
void sgd_step(T* param, const T* grad, T* momentum_buf, int64_t n, double lr, double momentum,
              double dampening, double weight_decay, bool nesterov, bool first_step);

// PyTorch's AdamW: w *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// w -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), with bc1/bc2 the bias corrections 1 - beta^t.
template <class T>
void adamw_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n, double lr, double beta1,
                double beta2, double eps, double weight_decay, double bias_correction1,
                double bias_correction2);

}  // namespace ddp::kernels::cpu
