// optim.cpp - the fused SGD and AdamW updates, vectorized with Google Highway (compiled per instruction set,
// chosen at run time). Each element is read and written once: parameter, gradient and state stream through
// the vector registers together.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optim.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <cmath>
#include <cstdint>

#include "kernels/cpu/optim.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {

// The loop over whole vectors plus a tail through zero-padded buffers; body(d, i, count) handles elements
// [i, i + lanes) where the tail pointers index the buffers.
template <class T>
void Sgd(T* w, const T* g, T* buf, int64_t n, double lr_d, double mom_d, double damp_d, double wd_d,
         bool nesterov, bool first) {
  const hn::ScalableTag<T> d;
  const auto neg_lr = hn::Set(d, static_cast<T>(-lr_d));
  const auto mom = hn::Set(d, static_cast<T>(mom_d));
  const auto one_minus_damp = hn::Set(d, static_cast<T>(1.0 - damp_d));
  const auto wd = hn::Set(d, static_cast<T>(wd_d));
  const bool has_wd = wd_d != 0, has_buf = buf != nullptr;
  auto body = [&](auto vw, auto vg, auto& vb) HWY_ATTR {
    auto dv = has_wd ? hn::MulAdd(wd, vw, vg) : vg;
    if (has_buf) {
      vb = first ? dv : hn::MulAdd(mom, vb, hn::Mul(one_minus_damp, dv));
      dv = nesterov ? hn::MulAdd(mom, vb, dv) : vb;
    }
    return hn::MulAdd(neg_lr, dv, vw);
  };
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto vb = has_buf && !first ? hn::LoadU(d, buf + i) : hn::Zero(d);
    hn::StoreU(body(hn::LoadU(d, w + i), hn::LoadU(d, g + i), vb), d, w + i);
    if (has_buf) hn::StoreU(vb, d, buf + i);
  }
  if (i < n) {
    alignas(64) T bw[kMaxVectorBytes / sizeof(T)] = {}, bg[kMaxVectorBytes / sizeof(T)] = {},
                                       bb[kMaxVectorBytes / sizeof(T)] = {};
    const size_t rest = static_cast<size_t>(n - i) * sizeof(T);
    std::memcpy(bw, w + i, rest);
    std::memcpy(bg, g + i, rest);
    if (has_buf && !first) std::memcpy(bb, buf + i, rest);
    auto vb = hn::Load(d, bb);
    hn::Store(body(hn::Load(d, bw), hn::Load(d, bg), vb), d, bw);
    hn::Store(vb, d, bb);
    std::memcpy(w + i, bw, rest);
    if (has_buf) std::memcpy(buf + i, bb, rest);
  }
}

template <class T>
void AdamW(T* w, const T* g, T* m, T* v, int64_t n, double lr, double b1_d, double b2_d, double eps_d,
           double wd_d, double bc1, double bc2) {
  const hn::ScalableTag<T> d;
  // Every constant formed in double, then rounded once (PyTorch passes them as double Scalars).
  const auto decay = hn::Set(d, static_cast<T>(1.0 - lr * wd_d));
  const auto b1 = hn::Set(d, static_cast<T>(b1_d)), one_minus_b1 = hn::Set(d, static_cast<T>(1.0 - b1_d));
  const auto b2 = hn::Set(d, static_cast<T>(b2_d)), one_minus_b2 = hn::Set(d, static_cast<T>(1.0 - b2_d));
  const auto eps = hn::Set(d, static_cast<T>(eps_d));
  const auto neg_step = hn::Set(d, static_cast<T>(-lr / bc1));
  const auto sqrt_bc2 = hn::Set(d, static_cast<T>(std::sqrt(bc2)));
  auto body = [&](auto vw, auto vg, auto& vm, auto& vv) HWY_ATTR {
    vw = hn::Mul(vw, decay);
    vm = hn::MulAdd(b1, vm, hn::Mul(one_minus_b1, vg));
    vv = hn::MulAdd(b2, vv, hn::Mul(hn::Mul(one_minus_b2, vg), vg));
    const auto denom = hn::Add(hn::Div(hn::Sqrt(vv), sqrt_bc2), eps);
    return hn::MulAdd(neg_step, hn::Div(vm, denom), vw);
  };
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto vm = hn::LoadU(d, m + i), vv = hn::LoadU(d, v + i);
    hn::StoreU(body(hn::LoadU(d, w + i), hn::LoadU(d, g + i), vm, vv), d, w + i);
    hn::StoreU(vm, d, m + i);
    hn::StoreU(vv, d, v + i);
  }
  if (i < n) {
    alignas(64) T bw[kMaxVectorBytes / sizeof(T)] = {}, bg[kMaxVectorBytes / sizeof(T)] = {},
                                       bm[kMaxVectorBytes / sizeof(T)] = {},
                                       bv[kMaxVectorBytes / sizeof(T)] = {};
    const size_t rest = static_cast<size_t>(n - i) * sizeof(T);
    std::memcpy(bw, w + i, rest);
    std::memcpy(bg, g + i, rest);
    std::memcpy(bm, m + i, rest);
    std::memcpy(bv, v + i, rest);
    auto vm = hn::Load(d, bm), vv = hn::Load(d, bv);
    hn::Store(body(hn::Load(d, bw), hn::Load(d, bg), vm, vv), d, bw);
    hn::Store(vm, d, bm);
    hn::Store(vv, d, bv);
    std::memcpy(w + i, bw, rest);
    std::memcpy(m + i, bm, rest);
    std::memcpy(v + i, bv, rest);
  }
}
}  // namespace

void SgdF32(float* w, const float* g, float* b, int64_t n, double lr, double mom, double damp, double wd,
            bool nesterov, bool first) {
  Sgd(w, g, b, n, lr, mom, damp, wd, nesterov, first);
}
void SgdF64(double* w, const double* g, double* b, int64_t n, double lr, double mom, double damp, double wd,
            bool nesterov, bool first) {
  Sgd(w, g, b, n, lr, mom, damp, wd, nesterov, first);
}
void AdamWF32(float* w, const float* g, float* m, float* v, int64_t n, double lr, double b1, double b2,
              double eps, double wd, double bc1, double bc2) {
  AdamW(w, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
}
void AdamWF64(double* w, const double* g, double* m, double* v, int64_t n, double lr, double b1, double b2,
              double eps, double wd, double bc1, double bc2) {
  AdamW(w, g, m, v, n, lr, b1, b2, eps, wd, bc1, bc2);
}

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(SgdF32);
HWY_EXPORT(SgdF64);
HWY_EXPORT(AdamWF32);
HWY_EXPORT(AdamWF64);

template <class T>
void sgd_step(T* param, const T* grad, T* momentum_buf, int64_t n, double lr, double momentum,
              double dampening, double weight_decay, bool nesterov, bool first_step) {
  if (momentum == 0) momentum_buf = nullptr;
  parallel_for(n, 64, kParallelMinStreaming, [&](int64_t b, int64_t e) {
    T* buf = momentum_buf ? momentum_buf + b : nullptr;
    if constexpr (sizeof(T) == 4) HWY_DYNAMIC_DISPATCH(SgdF32)
    (param + b, grad + b, buf, e - b, lr, momentum, dampening, weight_decay, nesterov, first_step);
    else HWY_DYNAMIC_DISPATCH(SgdF64)(param + b, grad + b, buf, e - b, lr, momentum, dampening, weight_decay,
                                      nesterov, first_step);
  });
}

template <class T>
void adamw_step(T* param, const T* grad, T* exp_avg, T* exp_avg_sq, int64_t n, double lr, double beta1,
                double beta2, double eps, double weight_decay, double bias_correction1,
                double bias_correction2) {
  parallel_for(n, 64, kParallelMinStreaming, [&](int64_t b, int64_t e) {
    if constexpr (sizeof(T) == 4) HWY_DYNAMIC_DISPATCH(AdamWF32)
    (param + b, grad + b, exp_avg + b, exp_avg_sq + b, e - b, lr, beta1, beta2, eps, weight_decay,
     bias_correction1, bias_correction2);
    else HWY_DYNAMIC_DISPATCH(AdamWF64)(param + b, grad + b, exp_avg + b, exp_avg_sq + b, e - b, lr, beta1,
                                        beta2, eps, weight_decay, bias_correction1, bias_correction2);
  });
}

template void sgd_step<float>(float*, const float*, float*, int64_t, double, double, double, double, bool,
                              bool);
template void sgd_step<double>(double*, const double*, double*, int64_t, double, double, double, double, bool,
                               bool);
template void adamw_step<float>(float*, const float*, float*, float*, int64_t, double, double, double, double,
                                double, double, double);
template void adamw_step<double>(double*, const double*, double*, double*, int64_t, double, double, double,
                                 double, double, double, double);
}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
