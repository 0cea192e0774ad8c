// dropout.cpp - CPU dropout: the counter-based mask of dropout.h applied to a flat array. The loop is plain
// C++ compiled once per instruction set through Highway's foreach_target (the compiler vectorizes the 64-bit
// hash with AVX-512DQ's vpmullq or AVX2 emulation), and HWY_DYNAMIC_DISPATCH picks the build for this CPU.
// Integer arithmetic only, so every instruction set gives the same mask bit for bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/dropout.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include <algorithm>

#include "kernels/cpu/dropout.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace {
// The hash input key + (offset + i + 1) * golden (dropout.h) is stepped by one addition of golden per
// element (arithmetic mod 2^64, so the same value): the vectorized loop then runs one 64-bit add per lane
// instead of a third 64-bit multiply (vpmullq, the loop's bottleneck) next to the two of the mixer.
template <class T>
void DropoutApply(const T* x, T* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold, T scale) {
  uint64_t z = key + (offset + 1) * kDropoutGolden;
  constexpr int64_t kBlock = 1024 / sizeof(T);
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    for (int64_t p = b + 4 * kBlock; p < e + 4 * kBlock; p += 64 / sizeof(T)) __builtin_prefetch(x + p, 0, 0);
    for (int64_t i = b; i < e; ++i) {
      const T v = x[i] * scale;  // computed unconditionally so the select vectorizes
      y[i] = dropout_mix64(z) >= threshold ? v : T(0);
      z += kDropoutGolden;
    }
  }
}
}  // namespace
void DropoutApplyF32(const float* x, float* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold,
                     float scale) {
  DropoutApply(x, y, n, key, offset, threshold, scale);
}
void DropoutApplyF64(const double* x, double* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold,
                     double scale) {
  DropoutApply(x, y, n, key, offset, threshold, scale);
}
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(DropoutApplyF32);
HWY_EXPORT(DropoutApplyF64);

template <class T>
void dropout_apply(const T* x, T* y, int64_t n, uint64_t key, uint64_t offset, uint64_t threshold, T scale) {
  parallel_for(n, 64, kParallelMinStreaming, [&](int64_t b, int64_t e) {
    const uint64_t off = offset + static_cast<uint64_t>(b);  // the mask bit of element i depends on i only
    if constexpr (sizeof(T) == 4)
      HWY_DYNAMIC_DISPATCH(DropoutApplyF32)(x + b, y + b, e - b, key, off, threshold, scale);
    else
      HWY_DYNAMIC_DISPATCH(DropoutApplyF64)(x + b, y + b, e - b, key, off, threshold, scale);
  });
}

template void dropout_apply<float>(const float*, float*, int64_t, uint64_t, uint64_t, uint64_t, float);
template void dropout_apply<double>(const double*, double*, int64_t, uint64_t, uint64_t, uint64_t, double);
}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
