// convert.cpp - the vectorized dtype conversions of convert.h. Whole vectors go through Highway's
// PromoteTo / DemoteTo and integer bit operations; the last n % lanes elements take the scalar formula,
// which gives the same bits (the conversions are exact, or one rounding rule).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/convert.cpp"
#include "hwy/foreach_target.h"  // must come before highway.h

#include "hwy/highway.h"

#include <cstdint>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"

HWY_BEFORE_NAMESPACE();
namespace ddp::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void F32ToF64(const float* x, double* y, int64_t n) {
  const hn::ScalableTag<double> d64;
  const hn::Rebind<float, decltype(d64)> d32;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d64));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(d64, hn::LoadU(d32, x + i)), d64, y + i);
  for (; i < n; ++i) y[i] = static_cast<double>(x[i]);
}
void F64ToF32(const double* x, float* y, int64_t n) {
  const hn::ScalableTag<double> d64;
  const hn::Rebind<float, decltype(d64)> d32;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d64));
  int64_t i = 0;
  (void)d32, (void)N;
#if HWY_TARGET != HWY_SCALAR  // the scalar target's DemoteTo saturates to +-FLT_MAX; C++ gives +-inf
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(d32, hn::LoadU(d64, x + i)), d32, y + i);
#endif
  for (; i < n; ++i) y[i] = static_cast<float>(x[i]);
}
void Bf16ToF32(const uint16_t* x, float* y, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, x + i)))), df, y + i);
  for (; i < n; ++i) y[i] = BFloat16{x[i]}.to_float();
}
// Round to nearest even: bits + 0x7fff + (bit 16), upper half; NaN: upper half with the quiet bit set.
void F32ToBf16(const float* x, uint16_t* y, int64_t n) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto abs_mask = hn::Set(di, 0x7fffffff), inf_bits = hn::Set(di, 0x7f800000);
  const auto one = hn::Set(du, 1u), round = hn::Set(du, 0x7fffu), quiet = hn::Set(du, 0x40u);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto u = hn::BitCast(du, hn::LoadU(df, x + i));
    const auto hi = hn::ShiftRight<16>(u);  // unsigned: a logical shift
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(round, hn::And(hi, one))));
    const auto is_nan = hn::Gt(hn::And(hn::BitCast(di, u), abs_mask), inf_bits);  // both sides >= 0
    const auto bits = hn::IfThenElse(is_nan, hn::BitCast(di, hn::Or(hi, quiet)), hn::BitCast(di, rounded));
    hn::StoreU(hn::DemoteTo(du16, bits), du16, y + i);  // values <= 0xffff: no saturation
  }
  for (; i < n; ++i) y[i] = BFloat16::from_float(x[i]).bits;
}
}  // namespace ddp::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ddp::kernels::cpu {
HWY_EXPORT(F32ToF64);
HWY_EXPORT(F64ToF32);
HWY_EXPORT(Bf16ToF32);
HWY_EXPORT(F32ToBf16);

bool convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  auto split = [n](auto&& body) { parallel_for(n, 64, kParallelMinElements, body); };
  if (st == DType::F32 && dt == DType::F64) {
    auto x = static_cast<const float*>(src);
    auto y = static_cast<double*>(dst);
    split([&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(F32ToF64)(x + b, y + b, e - b); });
  } else if (st == DType::F64 && dt == DType::F32) {
    auto x = static_cast<const double*>(src);
    auto y = static_cast<float*>(dst);
    split([&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(F64ToF32)(x + b, y + b, e - b); });
  } else if (st == DType::BF16 && dt == DType::F32) {
    auto x = static_cast<const uint16_t*>(src);
    auto y = static_cast<float*>(dst);
    split([&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(Bf16ToF32)(x + b, y + b, e - b); });
  } else if (st == DType::F32 && dt == DType::BF16) {
    auto x = static_cast<const float*>(src);
    auto y = static_cast<uint16_t*>(dst);
    split([&](int64_t b, int64_t e) { HWY_DYNAMIC_DISPATCH(F32ToBf16)(x + b, y + b, e - b); });
  } else {
    return false;
  }
  return true;
}
}  // namespace ddp::kernels::cpu
#endif  // HWY_ONCE
