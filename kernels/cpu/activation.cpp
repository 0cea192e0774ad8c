// activation.cpp - the CPU activation kernels, vectorized with Google Highway: this file is compiled once per
// instruction set (SSSE3, SSE4, AVX2, AVX-512, and the scalar fallback) and HWY_DYNAMIC_DISPATCH picks the
// best one the running CPU supports. float32 log is simd-inl.h's LogFastF32 (1.5 ulp, all IEEE
// cases), float64 log Highway's contrib/math (documented within 1-4 ulp); exp is simd-inl.h's ExpFast (2 ulp;
// subnormal results flushed to 0, exact on AVX-512); tanh is TanhBase2F32 (3e-7 relative) in float32, TanhFast in float64;
// float32 gelu forward takes its exp in base 2 (Exp2ClampedF32).
//
// GELU is computed in its sigmoid form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715
// x^3), which needs one exp and has no cancellation for large negative x.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/activation.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"
#include "kernels/cpu/simd-inl.h"

#include <cstdint>
#include <limits>

#include "kernels/cpu/activation.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;
constexpr double kLog2EDouble = 1.4426950408889634;

template <class T>
void ReluForward(const T* x, T* y, int64_t n) {
  MapUnary(hn::ScalableTag<T>(), x, y, n, [](auto d, auto v) HWY_ATTR { return hn::Max(v, hn::Zero(d)); });
}
template <class T>
void ReluBackward(const T* g, const T* x, T* dx, int64_t n) {
  MapBinary(hn::ScalableTag<T>(), g, x, dx, n, [](auto d, auto vg, auto vx) HWY_ATTR {
    return hn::IfThenElseZero(hn::Gt(vx, hn::Zero(d)), vg);
  });
}

// y = x * sigmoid(2u) = x / (1 + exp(-2u)); float64: exp overflowing to +inf (x < about -9.3) gives -0.
// float32: exp(-2u) = 2^z with log2(e) folded into the constants of z and simd-inl.h's Exp2ClampedF32
// (fewer FMAs than ExpFast; z rounded to float is the same error ExpFast sees); 2^z is capped at 2^127.5,
// so below x = -9.2 the result is x / (1 + 2^127.5), under 6e-39 |x| in magnitude, not -0.
template <class T>
void GeluForward(const T* x, T* y, int64_t n) {
  if constexpr (sizeof(T) == 4) {
    MapUnary(hn::ScalableTag<float>(), x, y, n, [](auto d, auto v) HWY_ATTR {
      const auto c = hn::Set(d, static_cast<float>(-2 * kSqrt2OverPi * kLog2EDouble));
      const auto c3 = hn::Set(d, static_cast<float>(-2 * kSqrt2OverPi * kGeluCubic * kLog2EDouble));
      const auto z = hn::Mul(v, hn::MulAdd(c3, hn::Mul(v, v), c));  // -2u log2(e)
      return hn::Div(v, hn::Add(hn::Set(d, 1.0f), Exp2ClampedF32(d, z)));
    });
    return;
  }
  MapUnary(hn::ScalableTag<T>(), x, y, n, [](auto d, auto v) HWY_ATTR {
    const auto c = hn::Set(d, static_cast<T>(-2 * kSqrt2OverPi));
    const auto c3 = hn::Set(d, static_cast<T>(-2 * kSqrt2OverPi * kGeluCubic));
    const auto nz = hn::Mul(v, hn::MulAdd(c3, hn::Mul(v, v), c));  // -2u
    return hn::Div(v, hn::Add(hn::Set(d, T(1)), ExpFast(d, nz)));
  });
}
// d/dx [x s(2u)] = s + x s (1 - s) d(2u)/dx with s (1 - s) = e s^2, e = exp(-2u) (no cancellation of 1 - s
// near s = 1); d(2u)/dx = c + 3 c3 x^2. e is kept finite (float32: Exp2ClampedF32, at most 2^127.5;
// float64: argument <= 700) so e * s is never inf * 0.
template <class T>
void GeluBackward(const T* g, const T* x, T* dx, int64_t n) {
  MapBinary(hn::ScalableTag<T>(), g, x, dx, n, [](auto d, auto vg, auto v) HWY_ATTR {
    const auto c = hn::Set(d, static_cast<T>(2 * kSqrt2OverPi));
    const auto c3 = hn::Set(d, static_cast<T>(2 * kSqrt2OverPi * kGeluCubic));
    const auto c3x3 = hn::Set(d, static_cast<T>(3 * 2 * kSqrt2OverPi * kGeluCubic));
    const auto one = hn::Set(d, T(1));
    const auto v2 = hn::Mul(v, v);
    hn::Vec<decltype(d)> e;
    if constexpr (sizeof(T) == 4) {  // 2^(-2u log2(e)), log2(e) folded into u's constants; at most 2^127.5
      const auto cl = hn::Set(d, static_cast<float>(-2 * kSqrt2OverPi * kLog2EDouble));
      const auto c3l = hn::Set(d, static_cast<float>(-2 * kSqrt2OverPi * kGeluCubic * kLog2EDouble));
      e = Exp2ClampedF32(d, hn::Mul(v, hn::MulAdd(c3l, v2, cl)));
    } else {
      e = ExpFast(d, hn::Min(hn::Neg(hn::Mul(v, hn::MulAdd(c3, v2, c))), hn::Set(d, T(700))));
    }
    const auto s = hn::Div(one, hn::Add(one, e));
    const auto dz = hn::MulAdd(c3x3, v2, c);
    // g s (1 + x dz e s)
    return hn::Mul(hn::Mul(vg, s), hn::MulAdd(hn::Mul(v, dz), hn::Mul(e, s), one));
  });
}

template <class T>
void TanhForward(const T* x, T* y, int64_t n) {
  MapUnary(hn::ScalableTag<T>(), x, y, n, [](auto d, auto v) HWY_ATTR {
    if constexpr (sizeof(T) == 4)
      return TanhBase2F32(d, v);  // NaN propagates (see there)
    else
      return hn::IfThenElse(hn::IsNaN(v), v, TanhFast(d, v));
  });
}
template <class T>
void TanhBackward(const T* g, const T* y, T* dx, int64_t n) {
  MapBinary(hn::ScalableTag<T>(), g, y, dx, n, [](auto d, auto vg, auto vy) HWY_ATTR {
    return hn::Mul(vg, hn::NegMulAdd(vy, vy, hn::Set(d, T(1))));
  });
}

template <class T>
void SigmoidForward(const T* x, T* y, int64_t n) {
  MapUnary(hn::ScalableTag<T>(), x, y, n, [](auto d, auto v) HWY_ATTR { return Sigmoid(d, v); });
}
template <class T>
void SigmoidBackward(const T* g, const T* y, T* dx, int64_t n) {
  MapBinary(hn::ScalableTag<T>(), g, y, dx, n, [](auto d, auto vg, auto vy) HWY_ATTR {
    return hn::Mul(hn::Mul(vg, vy), hn::Sub(hn::Set(d, T(1)), vy));
  });
}

// exp with overflow to +inf and NaN passing through (ExpFast: results below 2^-125 are 0, or on AVX-512 the
// subnormal value).
template <class T>
void ExpForward(const T* x, T* y, int64_t n) {
  MapUnary(hn::ScalableTag<T>(), x, y, n, [](auto d, auto v) HWY_ATTR {
    if (sizeof(T) == 4 && DDP_SIMD_CLAMP_KEEPS_NAN) return ExpFast(d, v);  // NaN stays NaN
    return hn::IfThenElse(hn::IsNaN(v), v, ExpFast(d, v));
  });
}
template <class T>
void ExpBackward(const T* g, const T* y, T* dx, int64_t n) {
  MapBinary(hn::ScalableTag<T>(), g, y, dx, n,
            [](auto, auto vg, auto vy) HWY_ATTR { return hn::Mul(vg, vy); });
}

// log with the IEEE edge cases: log(0) = -inf, log(x < 0) = NaN, log(+inf) = +inf, NaN passes through
// (float32: LogFastF32 handles them itself).
template <class T>
void LogForward(const T* x, T* y, int64_t n) {
  if constexpr (sizeof(T) == 4) {
    LogArrayF32(x, y, n);
    return;
  }
  MapUnary(hn::ScalableTag<T>(), x, y, n, [](auto d, auto v) HWY_ATTR {
    const auto zero = hn::Zero(d);
    const auto inf = hn::Set(d, std::numeric_limits<T>::infinity());
    const auto positive = hn::And(hn::Gt(v, zero), hn::Lt(v, inf));
    const auto l = hn::Log(d, hn::IfThenElse(positive, v, hn::Set(d, T(1))));
    auto r = hn::IfThenElse(positive, l, hn::Set(d, std::numeric_limits<T>::quiet_NaN()));
    r = hn::IfThenElse(hn::Eq(v, zero), hn::Neg(inf), r);
    r = hn::IfThenElse(hn::Eq(v, inf), inf, r);
    return hn::IfThenElse(hn::IsNaN(v), v, r);
  });
}
template <class T>
void LogBackward(const T* g, const T* x, T* dx, int64_t n) {
  MapBinary(hn::ScalableTag<T>(), g, x, dx, n,
            [](auto, auto vg, auto vx) HWY_ATTR { return hn::Div(vg, vx); });
}
}  // namespace

// Non-template entry points per element type, the names HWY_EXPORT tables are built from.
#define DDP_ACT_ENTRY(Name)                                                     \
  void Name##F32(const float* a, float* y, int64_t n) { Name<float>(a, y, n); } \
  void Name##F64(const double* a, double* y, int64_t n) { Name<double>(a, y, n); }
#define DDP_ACT_ENTRY2(Name)                                                                         \
  void Name##F32(const float* g, const float* s, float* dx, int64_t n) { Name<float>(g, s, dx, n); } \
  void Name##F64(const double* g, const double* s, double* dx, int64_t n) { Name<double>(g, s, dx, n); }
DDP_ACT_ENTRY(ReluForward)
DDP_ACT_ENTRY2(ReluBackward)
DDP_ACT_ENTRY(GeluForward)
DDP_ACT_ENTRY2(GeluBackward)
DDP_ACT_ENTRY(TanhForward)
DDP_ACT_ENTRY2(TanhBackward)
DDP_ACT_ENTRY(SigmoidForward)
DDP_ACT_ENTRY2(SigmoidBackward)
DDP_ACT_ENTRY(ExpForward)
DDP_ACT_ENTRY2(ExpBackward)
DDP_ACT_ENTRY(LogForward)
DDP_ACT_ENTRY2(LogBackward)
#undef DDP_ACT_ENTRY
#undef DDP_ACT_ENTRY2

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {

// The public templates forward to the entry of the instruction set chosen at run time.
#define DDP_ACT_DISPATCH(Public, Name)                                    \
  HWY_EXPORT(Name##F32);                                                  \
  HWY_EXPORT(Name##F64);                                                  \
  template <class T>                                                      \
  void Public(const T* x, T* y, int64_t n) {                              \
    parallel_for(n, 64, kParallelMinElements, [&](int64_t b, int64_t e) { \
      if constexpr (sizeof(T) == 4)                                       \
        HWY_DYNAMIC_DISPATCH(Name##F32)(x + b, y + b, e - b);             \
      else                                                                \
        HWY_DYNAMIC_DISPATCH(Name##F64)(x + b, y + b, e - b);             \
    });                                                                   \
  }                                                                       \
  template void Public<float>(const float*, float*, int64_t);             \
  template void Public<double>(const double*, double*, int64_t);
#define DDP_ACT_DISPATCH2(Public, Name)                                     \
  HWY_EXPORT(Name##F32);                                                    \
  HWY_EXPORT(Name##F64);                                                    \
  template <class T>                                                        \
  void Public(const T* g, const T* s, T* dx, int64_t n) {                   \
    parallel_for(n, 64, kParallelMinElements, [&](int64_t b, int64_t e) {   \
      if constexpr (sizeof(T) == 4)                                         \
        HWY_DYNAMIC_DISPATCH(Name##F32)(g + b, s + b, dx + b, e - b);       \
      else                                                                  \
        HWY_DYNAMIC_DISPATCH(Name##F64)(g + b, s + b, dx + b, e - b);       \
    });                                                                     \
  }                                                                         \
  template void Public<float>(const float*, const float*, float*, int64_t); \
  template void Public<double>(const double*, const double*, double*, int64_t);
DDP_ACT_DISPATCH(relu_forward, ReluForward)
DDP_ACT_DISPATCH2(relu_backward, ReluBackward)
DDP_ACT_DISPATCH(gelu_forward, GeluForward)
DDP_ACT_DISPATCH2(gelu_backward, GeluBackward)
DDP_ACT_DISPATCH(tanh_forward, TanhForward)
DDP_ACT_DISPATCH2(tanh_backward, TanhBackward)
DDP_ACT_DISPATCH(sigmoid_forward, SigmoidForward)
DDP_ACT_DISPATCH2(sigmoid_backward, SigmoidBackward)
DDP_ACT_DISPATCH(exp_forward, ExpForward)
DDP_ACT_DISPATCH2(exp_backward, ExpBackward)
DDP_ACT_DISPATCH(log_forward, LogForward)
DDP_ACT_DISPATCH2(log_backward, LogBackward)
#undef DDP_ACT_DISPATCH
#undef DDP_ACT_DISPATCH2

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
