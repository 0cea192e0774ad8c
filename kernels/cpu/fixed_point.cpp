// fixed_point.cpp - quantize to 64-bit fixed point under block exponents, and back (see fixed_point.h).
// The block maxima and the conversion back are vectorized with Google Highway (compiled per instruction set,
// chosen at run time; AVX2 has no int64 -> double instruction: Highway's exact emulation), a block's last
// n % lanes elements taking the scalar formula, which gives the same bits (one rounding to nearest even);
// the quantization is a scalar loop (see quantize()). Split over the rank's
// threads in whole blocks: every element is independent, so the split never changes a bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/fixed_point.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/fixed_point.h"
#include "kernels/cpu/parallel.h"

#ifndef DDP_FIXED_POINT_ONCE  // this file is compiled once per instruction set: define these once
#define DDP_FIXED_POINT_ONCE
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace ddp::kernels::cpu {
namespace {
// Round to nearest, ties to even (the default rounding mode), as one instruction where there is one.
inline int64_t round_to_int64(double v) {
#if defined(__x86_64__)
  return _mm_cvtsd_si64(_mm_set_sd(v));
#else
  return std::llrint(v);
#endif
}
}  // namespace
}  // namespace ddp::kernels::cpu

#endif  // DDP_FIXED_POINT_ONCE

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// x[0, n) as doubles, N lanes at a time: load(i) gives lanes i..i+N-1.
template <class T, class D64>
HWY_INLINE hn::Vec<D64> load_as_double(D64 d64, const T* x) {
  if constexpr (sizeof(T) == sizeof(double)) {
    return hn::LoadU(d64, x);
  } else {
    const hn::Rebind<float, D64> d32;
    return hn::PromoteTo(d64, hn::LoadU(d32, x));
  }
}

// The largest |x| of x[0, n) (0 for none) and whether all are finite.
template <class T>
void BlockMaxAbs(const T* x, int64_t n, double* max_abs, bool* finite) {
  const hn::ScalableTag<double> d64;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d64));
  auto vmax = hn::Zero(d64);
  bool ok = true;
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = load_as_double(d64, x + i);
    ok = ok && hn::AllTrue(d64, hn::IsFinite(v));
    vmax = hn::Max(vmax, hn::Abs(v));
  }
  double m = hn::GetLane(hn::MaxOfLanes(d64, vmax));
  for (; i < n; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    ok = ok && a <= std::numeric_limits<double>::max();
    m = std::max(m, a);
  }
  *max_abs = m;
  *finite = ok;
}

// out[i] = T(double(acc[i]) * factor) over [0, n).
template <class T>
void DequantizeRange(const int64_t* acc, int64_t n, double factor, T* out) {
  const hn::ScalableTag<double> d64;
  const hn::RebindToSigned<decltype(d64)> di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d64));
  const auto vf = hn::Set(d64, factor);
  int64_t i = 0;
  (void)N, (void)vf, (void)di;
  if constexpr (sizeof(T) == sizeof(double)) {
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::ConvertTo(d64, hn::LoadU(di, acc + i)), vf), d64, out + i);
  } else {
#if HWY_TARGET != HWY_SCALAR  // the scalar target's DemoteTo saturates to +-FLT_MAX; C++ gives +-inf
    const hn::Rebind<float, decltype(d64)> d32;
    for (; i + N <= n; i += N)
      hn::StoreU(hn::DemoteTo(d32, hn::Mul(hn::ConvertTo(d64, hn::LoadU(di, acc + i)), vf)), d32, out + i);
#endif
  }
  for (; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(acc[i]) * factor);
}

void BlockMaxAbsF32(const float* x, int64_t n, double* m, bool* f) { BlockMaxAbs(x, n, m, f); }
void BlockMaxAbsF64(const double* x, int64_t n, double* m, bool* f) { BlockMaxAbs(x, n, m, f); }
void DequantizeF32(const int64_t* a, int64_t n, double f, float* o) { DequantizeRange(a, n, f, o); }
void DequantizeF64(const int64_t* a, int64_t n, double f, double* o) { DequantizeRange(a, n, f, o); }

}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(BlockMaxAbsF32);
HWY_EXPORT(BlockMaxAbsF64);
HWY_EXPORT(DequantizeF32);
HWY_EXPORT(DequantizeF64);

namespace {

// Tiny doubles (below 2^-900) share this exponent, so that 2^shift never overflows a double.
constexpr int32_t kSmallestExponent = -900;

inline int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

void max_abs(const float* x, int64_t n, double* m, bool* f) { HWY_DYNAMIC_DISPATCH(BlockMaxAbsF32)(x, n, m, f); }
void max_abs(const double* x, int64_t n, double* m, bool* f) { HWY_DYNAMIC_DISPATCH(BlockMaxAbsF64)(x, n, m, f); }
// acc[i] (+)= round(x[i] * scale): a scalar loop. x86's one-instruction double -> int64 rounding beats
// Highway's AVX2 emulation of the vector conversion here (2.2-2.3 vs 2.9-3.0 ms for 1.86M floats; both at
// the copy bandwidth of the 12 bytes per element it moves), so only the other two passes are vectorized.
template <class T>
void quantize(const T* x, int64_t n, double scale, int64_t* acc, bool first) {
  if (first)
    for (int64_t i = 0; i < n; ++i) acc[i] = round_to_int64(static_cast<double>(x[i]) * scale);
  else
    for (int64_t i = 0; i < n; ++i) acc[i] += round_to_int64(static_cast<double>(x[i]) * scale);
}
void dequantize(const int64_t* a, int64_t n, double f, float* o) { HWY_DYNAMIC_DISPATCH(DequantizeF32)(a, n, f, o); }
void dequantize(const int64_t* a, int64_t n, double f, double* o) { HWY_DYNAMIC_DISPATCH(DequantizeF64)(a, n, f, o); }

// body(block_begin, block_end) over the blocks, split over the pool in whole blocks.
template <class F>
void over_blocks(int64_t n, int64_t block, F&& body) {
  parallel_for(blocks_of(n, block), 1, std::max<int64_t>(1, kParallelMinStreaming / block), body);
}

}  // namespace

int32_t block_shift(int32_t exponent, int headroom) {
  if (exponent == kNoExponent || exponent == kNonFinite) return 0;
  return kFixedPointBits - headroom - exponent;
}

template <class T>
void block_exponents(const T* x, int64_t n, int64_t block, int32_t* exps) {
  over_blocks(n, block, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      double m = 0;
      bool finite = true;
      max_abs(x + lo, hi - lo, &m, &finite);
      int32_t e = kNoExponent;
      if (!finite) {
        e = kNonFinite;
      } else if (m > 0) {
        int fe = 0;
        (void)std::frexp(m, &fe);              // m = f * 2^fe, 0.5 <= f < 1: m < 2^fe
        e = std::max(fe, kSmallestExponent);  // still |x| < 2^e; keeps 2^shift inside double's range
      }
      exps[b] = std::max(exps[b], e);
    }
  });
}

template <class T>
void quantize_add(const T* x, int64_t n, int64_t block, const int32_t* exps, int headroom, int64_t* acc,
                  bool first) {
  over_blocks(n, block, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      if (exps[b] == kNoExponent || exps[b] == kNonFinite) {  // all zero, or NaN'd afterwards
        if (first) std::fill(acc + lo, acc + hi, int64_t{0});
        continue;
      }
      quantize(x + lo, hi - lo, std::ldexp(1.0, block_shift(exps[b], headroom)), acc + lo, first);
    }
  });
}

template <class T>
void dequantize_mean(const int64_t* acc, int64_t n, int64_t block, const int32_t* exps, int headroom,
                     int64_t count, T* out) {
  const double divisor = static_cast<double>(count);
  over_blocks(n, block, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      if (exps[b] == kNonFinite) {
        std::fill(out + lo, out + hi, std::numeric_limits<T>::quiet_NaN());
        continue;
      }
      dequantize(acc + lo, hi - lo, std::ldexp(1.0, -block_shift(exps[b], headroom)) / divisor, out + lo);
    }
  });
}

template void block_exponents<float>(const float*, int64_t, int64_t, int32_t*);
template void block_exponents<double>(const double*, int64_t, int64_t, int32_t*);
template void quantize_add<float>(const float*, int64_t, int64_t, const int32_t*, int, int64_t*, bool);
template void quantize_add<double>(const double*, int64_t, int64_t, const int32_t*, int, int64_t*, bool);
template void dequantize_mean<float>(const int64_t*, int64_t, int64_t, const int32_t*, int, int64_t, float*);
template void dequantize_mean<double>(const int64_t*, int64_t, int64_t, const int32_t*, int, int64_t, double*);

}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
