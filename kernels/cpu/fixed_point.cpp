// fixed_point.cpp - quantize to 64-bit fixed point under block exponents, and back (see fixed_point.h).
// Plain loops: one multiply and one rounding conversion per element, memory-bound; split over the rank's
// threads in whole blocks (every element is independent, so the split never changes a bit).
#include "kernels/cpu/fixed_point.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/parallel.h"

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

// Tiny doubles (below 2^-900) share this exponent, so that 2^shift never overflows a double.
constexpr int32_t kSmallestExponent = -900;

inline int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

}  // namespace

int32_t block_shift(int32_t exponent, int headroom) {
  if (exponent == kNoExponent || exponent == kNonFinite) return 0;
  return kFixedPointBits - headroom - exponent;
}

template <class T>
void block_exponents(const T* x, int64_t n, int64_t block, int32_t* exps) {
  const int64_t blocks = blocks_of(n, block);
  parallel_for(blocks, 1, std::max<int64_t>(1, kParallelMinStreaming / block), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      T m = 0;
      bool finite = true;
      for (int64_t i = lo; i < hi; ++i) {
        const T a = std::fabs(x[i]);
        finite = finite && a <= std::numeric_limits<T>::max();  // false for NaN and infinities
        m = std::max(m, a);
      }
      int32_t e = kNoExponent;
      if (!finite) {
        e = kNonFinite;
      } else if (m > 0) {
        int fe = 0;
        (void)std::frexp(static_cast<double>(m), &fe);  // m = f * 2^fe, 0.5 <= f < 1: m < 2^fe
        e = std::max(fe, kSmallestExponent);  // still |x| < 2^e; keeps 2^shift inside double's range
      }
      exps[b] = std::max(exps[b], e);
    }
  });
}

template <class T>
void quantize_add(const T* x, int64_t n, int64_t block, const int32_t* exps, int headroom, int64_t* acc,
                  bool first) {
  const int64_t blocks = blocks_of(n, block);
  parallel_for(blocks, 1, std::max<int64_t>(1, kParallelMinStreaming / block), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      if (exps[b] == kNoExponent || exps[b] == kNonFinite) {  // all zero, or NaN'd afterwards
        if (first) std::fill(acc + lo, acc + hi, int64_t{0});
        continue;
      }
      const double scale = std::ldexp(1.0, block_shift(exps[b], headroom));
      if (first)
        for (int64_t i = lo; i < hi; ++i) acc[i] = round_to_int64(static_cast<double>(x[i]) * scale);
      else
        for (int64_t i = lo; i < hi; ++i) acc[i] += round_to_int64(static_cast<double>(x[i]) * scale);
    }
  });
}

template <class T>
void dequantize_mean(const int64_t* acc, int64_t n, int64_t block, const int32_t* exps, int headroom,
                     int64_t count, T* out) {
  const int64_t blocks = blocks_of(n, block);
  const double divisor = static_cast<double>(count);
  parallel_for(blocks, 1, std::max<int64_t>(1, kParallelMinStreaming / block), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      if (exps[b] == kNonFinite) {
        std::fill(out + lo, out + hi, std::numeric_limits<T>::quiet_NaN());
        continue;
      }
      const double factor = std::ldexp(1.0, -block_shift(exps[b], headroom)) / divisor;
      for (int64_t i = lo; i < hi; ++i) out[i] = static_cast<T>(static_cast<double>(acc[i]) * factor);
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
