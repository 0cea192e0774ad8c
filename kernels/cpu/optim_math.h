// optim_math.h - the per-element SGD and AdamW updates, written once for the CPU and the CUDA kernels: g++
// compiles them for the CPU tests, nvcc for the single-tensor (kernels/cuda/optim.cu) and multi-tensor
// (kernels/cuda/multi_tensor.cu) kernels. They follow kernels/cpu/optim.cpp's vector loop operation for
// operation: every multiply-add there is Highway's MulAdd (one rounding on FMA targets), so here it is an
// explicit fused multiply-add, and every other operation stands alone - nothing is left for a compiler to
// contract - so the CPU (AVX2/AVX-512), these functions on the host and the GPU compute the same bits.
// The constants are formed in double and rounded once to T (sgd_constants, adamw_constants), as the CPU
// kernels and PyTorch do.
#pragma once
#include <cmath>

#include "kernels/cpu/host_device.h"

namespace ddp::kernels::cpu {

// a * b + c with one rounding, on the host and the device.
DDP_HOST_DEVICE inline float fused_multiply_add(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
DDP_HOST_DEVICE inline double fused_multiply_add(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// The correctly rounded square root (nvcc's default -prec-sqrt=true; the CPU's sqrtps/sqrtpd).
DDP_HOST_DEVICE inline float correctly_rounded_sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
DDP_HOST_DEVICE inline double correctly_rounded_sqrt(double x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// SGD's step constants, each formed in double and rounded once to T.
template <class T>
struct SgdConstants {
  T neg_lr, momentum, one_minus_dampening, weight_decay;
  bool has_weight_decay, nesterov;
};
template <class T>
inline SgdConstants<T> sgd_constants(double lr, double momentum, double dampening, double weight_decay,
                                     bool nesterov) {
  return {static_cast<T>(-lr),          static_cast<T>(momentum), static_cast<T>(1.0 - dampening),
          static_cast<T>(weight_decay), weight_decay != 0,        nesterov};
}

// One element of PyTorch's SGD: d = g + wd * w; with a momentum buffer buf = first ? d : momentum * buf +
// (1 - dampening) * d and d = nesterov ? d + momentum * buf : buf; returns w - lr * d.
template <class T>
DDP_HOST_DEVICE inline T sgd_update(T w, T g, T& buf, bool has_buf, bool first,
                                          const SgdConstants<T>& c) {
  T d = c.has_weight_decay ? fused_multiply_add(c.weight_decay, w, g) : g;
  if (has_buf) {
    buf = first ? d : fused_multiply_add(c.momentum, buf, c.one_minus_dampening * d);
    d = c.nesterov ? fused_multiply_add(c.momentum, buf, d) : buf;
  }
  return fused_multiply_add(c.neg_lr, d, w);
}

// AdamW's constants shared by every parameter of a step, each formed in double and rounded once to T.
template <class T>
struct AdamWConstants {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
};
template <class T>
inline AdamWConstants<T> adamw_constants(double lr, double beta1, double beta2, double eps,
                                         double weight_decay) {
  return {static_cast<T>(1.0 - lr * weight_decay),
          static_cast<T>(beta1),
          static_cast<T>(1.0 - beta1),
          static_cast<T>(beta2),
          static_cast<T>(1.0 - beta2),
          static_cast<T>(eps)};
}
// The two that depend on a parameter's own step count t (its bias corrections bc = 1 - beta^t).
template <class T>
struct AdamWBiasCorrection {
  T neg_step_size;  // -lr / bc1
  T sqrt_bc2;       // sqrt(bc2)
};
template <class T>
inline AdamWBiasCorrection<T> adamw_bias_correction(double lr, double bias_correction1,
                                                    double bias_correction2) {
  return {static_cast<T>(-lr / bias_correction1), static_cast<T>(std::sqrt(bias_correction2))};
}

// One element of PyTorch's AdamW: w *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
// returns w - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps).
template <class T>
DDP_HOST_DEVICE inline T adamw_update(T w, T g, T& m, T& v, const AdamWConstants<T>& c,
                                            const AdamWBiasCorrection<T>& bc) {
  w = w * c.decay;
  m = fused_multiply_add(c.beta1, m, c.one_minus_beta1 * g);
  v = fused_multiply_add(c.beta2, v, (c.one_minus_beta2 * g) * g);
  const T denom = correctly_rounded_sqrt(v) / bc.sqrt_bc2 + c.eps;
  return fused_multiply_add(bc.neg_step_size, m / denom, w);
}

}  // namespace ddp::kernels::cpu
